# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A toy scheduler: feasibility and bin-packing of one task group's allocations on the test's nodes, after
``scheduler/feasible/feasible.go`` (constraints with ``${node.*}``, ``${attr.*}``, ``${meta.*}`` targets, the
``version``/``semver`` operands, drivers, network modes) and ``scheduler/rank.go`` (cpu, memory, disk and
device capacity, minus reserved resources and live allocations), and the reconciler's outcome of a new job
version (``scheduler/reconcile.go``: stop, in-place or destructive update, place), with the ``AllocMetric``
of a group it could not place (``nomad/structs/structs.go``).

Datacenters, node pool, node status/eligibility/drain filter nodes; a node has ``cni/backendai`` (the
network the overlay_agent role installs) unless ``cni_networks`` says otherwise; nodes are tried in name
order, the first that fits wins.

A group's host volumes (``Volumes`` of type ``host``) follow ``scheduler/feasible/feasible.go``
``HostVolumeChecker`` for static host volumes: a node is feasible only if it declares every requested
``Source`` in its ``HostVolumes``, and one it declares read-only serves only a request with ``ReadOnly``; an
infeasible node counts as filtered by "missing compatible host volumes" (``FilterConstraintHostVolumes``).
Not modelled there: ``per_alloc`` (Nomad appends ``[<index>]`` to the source), dynamic host volumes of Nomad
1.10 (their namespace, state, capabilities and ``sticky`` claims), CSI volumes (ignored, as the checker does),
and the ``host_volume`` ACL policy checked at job registration.

What it does not model: scoring (binpack/spread scores, affinities, spreads), ``~>`` and the looser
pre-release matching of ``version``, ``distinct_hosts``/``distinct_property`` (always true), preemption,
canaries and rolling updates (every change lands at once), rescheduling of lost allocations (the jobs
this collection renders are pinned to a node), and unblocking a blocked evaluation when capacity frees
(a new register does).
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import re
import typing as t

from .state import ModelState

DEFAULT_TASK_CPU = 100
DEFAULT_TASK_MEMORY = 300
DEFAULT_DISK_MB = 300
#: A scheduled allocation: (node, [allocated device {"Vendor", "Type", "Name", "DeviceIDs"}]).
Placement = t.Tuple[t.Dict[str, t.Any], t.List[t.Dict[str, t.Any]]]

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_VERSION_TERM = re.compile(r"^\s*(=|!=|<=|>=|<|>)?\s*(\S+)\s*$")
#: A constraint target that interpolates a node property (``${node.unique.name}``, ``${attr.x}``, ``${meta.x}``).
_INTERPOLATED = re.compile(r"\$\{([^}]+)\}")
#: ``${node.*}`` targets and the node field each reads (``node.region`` is the model's region).
_NODE_FIELDS = {"node.unique.name": "Name", "node.unique.id": "ID", "node.datacenter": "Datacenter",
                "node.class": "NodeClass", "node.pool": "NodePool"}


def _pinned_name(constraints: t.Sequence[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """The node name an ``${node.unique.name} = <literal>`` constraint pins to, or None."""
    for c in constraints:
        right = str(c.get("RTarget") or "")
        if (c.get("LTarget") == "${node.unique.name}" and (c.get("Operand") or "=") in ("=", "==", "is")
                and "${" not in right):
            return right
    return None


@functools.lru_cache(maxsize=1024)  # pure: the scheduler asks the same (version, constraint) for every node
def version_matches(version: str, constraint: str, strict: bool = True) -> bool:
    """Nomad's ``version``/``semver`` constraint operands (``scheduler/feasible/feasible.go``: checkVersionMatch with
    hashicorp/go-version constraints): every comma-separated term must hold; a pre-release sorts before its release.
    Not modelled: ``~>``, and the looser pre-release matching of ``version`` (both are treated like ``semver``)."""
    m = _VERSION.match(version.strip())
    if not m:
        return False

    def key(match: t.Match[str]) -> t.Tuple[t.Tuple[int, ...], int, str]:
        nums = tuple(int(x) for x in match.group(1).split("."))
        nums = nums + (0,) * (3 - len(nums))
        return nums, 0 if match.group(2) else 1, match.group(2) or ""

    have = key(m)
    for term in constraint.split(","):
        tm = _VERSION_TERM.match(term)
        want = _VERSION.match(tm.group(2)) if tm else None
        if not tm or not want:
            return False
        op, other = tm.group(1) or "=", key(want)
        ok = {"=": have == other, "!=": have != other, "<": have < other, "<=": have <= other,
              ">": have > other, ">=": have >= other}[op]
        if not ok:
            return False
    return True



class SchedulerModel(ModelState):
    """Placement of task groups on the model's nodes."""

    def node_value(self, node: t.Mapping[str, t.Any], target: str) -> t.Optional[str]:
        m = _INTERPOLATED.fullmatch(target or "")
        if not m:
            return target
        name = m.group(1)
        if name in _NODE_FIELDS:
            return node[_NODE_FIELDS[name]]
        if name == "node.region":
            return self.region
        if name.startswith("attr."):
            return node["Attributes"].get(name[5:])
        if name.startswith("meta."):
            return node["Meta"].get(name[5:])
        return None

    def constraint_ok(self, node: t.Mapping[str, t.Any], c: t.Mapping[str, t.Any]) -> bool:
        left = self.node_value(node, c.get("LTarget", ""))
        right = self.node_value(node, c.get("RTarget", ""))
        op = c.get("Operand") or "="
        if op in ("=", "==", "is"):
            return left is not None and left == right
        if op in ("!=", "not"):
            return left != right
        if op == "regexp":
            return left is not None and re.search(right or "", left) is not None
        if op == "is_set":
            return left is not None
        if op == "is_not_set":
            return left is None
        if op in ("set_contains", "set_contains_all"):
            have = {s.strip() for s in (left or "").split(",")}
            return all(s.strip() in have for s in (right or "").split(","))
        if op == "set_contains_any":
            have = {s.strip() for s in (left or "").split(",")}
            return any(s.strip() in have for s in (right or "").split(","))
        if op == "distinct_hosts":
            return True
        if op in ("version", "semver"):
            return left is not None and right is not None and version_matches(left, right, strict=op == "semver")
        return False

    @staticmethod
    def host_volumes_ok(node: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any]) -> bool:
        """HostVolumeChecker.nodeIsFeasibleForRequest for static host volumes: each host volume request's
        ``Source`` declared by the node, and a read-write request not served by a read-only declaration."""
        declared = node.get("HostVolumes") or {}
        for req in (group.get("Volumes") or {}).values():
            if (req or {}).get("Type") != "host":
                continue  # CSI volumes are another checker's
            volume = declared.get(req.get("Source") or "")
            if volume is None or (volume.get("ReadOnly") and not req.get("ReadOnly")):
                return False
        return True

    @staticmethod
    def group_demand(group: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        cpu = memory = 0
        devices: t.List[t.Tuple[str, int]] = []
        for task in group.get("Tasks") or []:
            res = task.get("Resources") or {}
            cpu += res.get("CPU") if res.get("CPU") is not None else DEFAULT_TASK_CPU
            memory += res.get("MemoryMB") if res.get("MemoryMB") is not None else DEFAULT_TASK_MEMORY
            for dev in res.get("Devices") or []:
                devices.append((dev.get("Name") or "", int(dev.get("Count") if dev.get("Count") is not None else 1)))
        disk = ((group.get("EphemeralDisk") or {}).get("SizeMB")) or DEFAULT_DISK_MB
        return {"cpu": cpu, "memory": memory, "disk": disk, "devices": devices}

    @staticmethod
    def device_matches(request: str, dev: t.Mapping[str, t.Any]) -> bool:
        parts = request.split("/")
        if len(parts) == 1:
            return parts[0] == dev["Type"]
        if len(parts) == 2:
            return parts[0] == dev["Vendor"] and parts[1] == dev["Type"]
        return parts[0] == dev["Vendor"] and parts[1] == dev["Type"] and parts[2] == dev["Name"]

    def node_free(self, node: t.Mapping[str, t.Any], ignore: t.Set[str]) -> t.Dict[str, t.Any]:
        res, reserved = node["NodeResources"], node["ReservedResources"]
        free = {"cpu": res["Cpu"]["CpuShares"] - reserved["Cpu"]["CpuShares"],
                "memory": res["Memory"]["MemoryMB"] - reserved["Memory"]["MemoryMB"],
                "disk": res["Disk"]["DiskMB"] - reserved["Disk"]["DiskMB"], "device_ids": {}}
        used_ids: t.Set[str] = set()
        for alloc in self.allocs.values():
            if alloc["NodeID"] != node["ID"] or alloc["ID"] in ignore or not self.live(alloc):
                continue
            free["cpu"] -= alloc["Demand"]["cpu"]
            free["memory"] -= alloc["Demand"]["memory"]
            free["disk"] -= alloc["Demand"]["disk"]
            used_ids.update(alloc["DeviceIDs"])
        for dev in res.get("Devices") or []:
            free["device_ids"][(dev["Vendor"], dev["Type"], dev["Name"])] = [
                i["ID"] for i in dev["Instances"] if i["Healthy"] and i["ID"] not in used_ids]
        return free

    def schedule(self, job: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any], count: int, ignore: t.Set[str],
                  extra_used: t.Optional[t.Dict[str, t.Dict[str, t.Any]]] = None
                  ) -> t.Tuple[t.List[Placement], t.Optional[t.Dict[str, t.Any]]]:
        """Place ``count`` allocations: ([(node, devices)], metric or None). ``extra_used`` accumulates across calls.

        A group pinned to one node by name (an ``=`` constraint on ``${node.unique.name}`` with a literal, as every
        group this collection renders is) can only be feasible on nodes of that name: those are tried first, alone,
        and the whole scan (which also gives the metric of a failure) runs only when they do not take the group.
        The outcome is the same; the double answers a register in time independent of the number of nodes."""
        extra_used = extra_used if extra_used is not None else {}
        pinned = _pinned_name(list(job.get("Constraints") or []) + list(group.get("Constraints") or []))
        if pinned is not None:
            tried = {node_id: dict(used, device_ids=set(used["device_ids"])) for node_id, used in extra_used.items()}
            candidates = [n for n in self.nodes.values() if n["Name"] == pinned]
            placements, metric = self._schedule_on(candidates, job, group, count, ignore, tried)
            if metric is None:
                extra_used.clear()
                extra_used.update(tried)
                return placements, None
        return self._schedule_on(sorted(self.nodes.values(), key=lambda n: n["Name"]), job, group, count, ignore,
                                 extra_used)

    def _schedule_on(self, nodes: t.List[t.Dict[str, t.Any]], job: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any],
                     count: int, ignore: t.Set[str], extra_used: t.Dict[str, t.Dict[str, t.Any]]
                     ) -> t.Tuple[t.List[Placement], t.Optional[t.Dict[str, t.Any]]]:
        """:meth:`schedule` on ``nodes`` (in that order)."""
        demand = self.group_demand(group)
        metric: t.Dict[str, t.Any] = {"NodesEvaluated": 0, "NodesFiltered": 0, "NodesInPool": 0, "NodesAvailable": {},
                                      "ClassFiltered": None, "ConstraintFiltered": None, "NodesExhausted": 0,
                                      "ClassExhausted": None, "DimensionExhausted": None, "QuotaExhausted": None,
                                      "ResourcesExhausted": None, "Scores": None, "ScoreMetaData": None,
                                      "AllocationTime": 1000, "CoalescedFailures": 0}
        constraints = list(job.get("Constraints") or []) + list(group.get("Constraints") or [])
        for task in group.get("Tasks") or []:
            constraints.extend(task.get("Constraints") or [])
        mode = ((group.get("Networks") or [{}])[0] or {}).get("Mode") or "host"
        feasible = []
        for node in nodes:
            pool = job.get("NodePool") or "default"
            if node["Status"] != "ready" or node["SchedulingEligibility"] != "eligible" or node["Drain"]:
                continue
            if pool != "all" and node["NodePool"] != pool:
                continue
            if not any(fnmatch.fnmatchcase(node["Datacenter"], dc) for dc in job.get("Datacenters") or ["*"]):
                continue
            metric["NodesInPool"] += 1
            metric["NodesEvaluated"] += 1
            metric["NodesAvailable"][node["Datacenter"]] = metric["NodesAvailable"].get(node["Datacenter"], 0) + 1
            reason = None
            for c in constraints:
                if not self.constraint_ok(node, c):
                    reason = "%s %s %s" % (c.get("LTarget", ""), c.get("Operand") or "=", c.get("RTarget", ""))
                    break
            if reason is None:
                for task in group.get("Tasks") or []:
                    info = node["Drivers"].get(task.get("Driver") or "")
                    if not info or not info.get("Detected") or not info.get("Healthy"):
                        reason = "missing drivers"
                        break
            if reason is None and mode != "host":
                modes = {n.get("Mode") for n in node["NodeResources"]["Networks"]}
                if mode not in modes:
                    reason = "missing network"
            if reason is None and not self.host_volumes_ok(node, group):
                reason = "missing compatible host volumes"
            if reason is not None:
                metric["NodesFiltered"] += 1
                metric["ConstraintFiltered"] = metric["ConstraintFiltered"] or {}
                metric["ConstraintFiltered"][reason] = metric["ConstraintFiltered"].get(reason, 0) + 1
                continue
            feasible.append(node)
        placements: t.List[Placement] = []
        exhausted: t.Dict[str, int] = {}
        for _ in range(count):
            placed = None
            for node in feasible:
                free = self.node_free(node, ignore)
                used = extra_used.setdefault(node["ID"], {"cpu": 0, "memory": 0, "disk": 0, "device_ids": set()})
                short = None
                for dim in ("cpu", "memory", "disk"):
                    if free[dim] - used[dim] < demand[dim]:
                        short = dim
                        break
                picked: t.List[t.Dict[str, t.Any]] = []
                if short is None:
                    for name, wanted in demand["devices"]:
                        got = None
                        for (vendor, dtype, dname), ids in free["device_ids"].items():
                            dev = {"Vendor": vendor, "Type": dtype, "Name": dname}
                            avail = [i for i in ids if i not in used["device_ids"] and
                                     all(i not in p["DeviceIDs"] for p in picked)]
                            if self.device_matches(name, dev) and len(avail) >= wanted:
                                got = dict(dev, DeviceIDs=avail[:wanted])
                                break
                        if got is None:
                            short = "devices: no devices match request"
                            break
                        picked.append(got)
                if short is not None:
                    exhausted[short] = exhausted.get(short, 0) + 1
                    continue
                used["cpu"] += demand["cpu"]
                used["memory"] += demand["memory"]
                used["disk"] += demand["disk"]
                for p in picked:
                    used["device_ids"].update(p["DeviceIDs"])
                placed = (node, picked)
                break
            if placed is None:
                failures = count - len(placements)
                metric["NodesExhausted"] = sum(exhausted.values())
                metric["DimensionExhausted"] = exhausted or None
                metric["CoalescedFailures"] = failures - 1
                return placements, metric
            placements.append(placed)
        return placements, None

    def reconcile(self, rec: t.Dict[str, t.Any], changes: t.Mapping[str, str], eval_id: str) -> t.Dict[str, t.Any]:
        """Apply a new job version to the allocations (what the scheduler and clients would do)."""
        job = rec["job"]
        ns = job["Namespace"]
        groups = {g["Name"]: g for g in job.get("TaskGroups") or []}
        index = rec["ModifyIndex"]
        failed: t.Dict[str, t.Any] = {}
        for name, change in changes.items():
            current = [a for a in self.job_allocs(ns, job["ID"]) if a["TaskGroup"] == name and a["DesiredStatus"] == "run"]
            if change == "destroy" or change == "destructive":
                for alloc in current:
                    alloc["DesiredStatus"] = "stop"
                    alloc["DesiredDescription"] = "alloc is being updated due to job update" if change == "destructive" \
                        else "alloc not needed due to job update"
                    alloc["ModifyIndex"] = index
                current = []
            if change == "destroy":
                rec["Queued"].pop(name, None)
                continue
            group = groups[name]
            want = int(group.get("Count", 1))
            for alloc in current[want:]:
                alloc["DesiredStatus"] = "stop"
                alloc["DesiredDescription"] = "alloc not needed due to job update"
                alloc["ModifyIndex"] = index
            for alloc in current[:want]:
                alloc["JobVersion"] = rec["Version"]
                alloc["Job"] = job
                alloc["ModifyIndex"] = index
            missing = want - len(current[:want])
            ignore = {a["ID"] for a in current[want:]}
            # (no usage carried over between groups: the allocations made for earlier groups already count)
            placements, metric = self.schedule(job, group, missing, ignore)
            rec["Queued"][name] = missing - len(placements)
            if metric is not None:
                failed[name] = metric
            used_indexes = {a["Index"] for a in current[:want]}
            free_indexes = (i for i in itertools.count() if i not in used_indexes)
            for (node, devices), alloc_index in zip(placements, free_indexes):
                self.create_alloc(rec, group, alloc_index, node, devices, eval_id, index)
        return failed

