# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Allocations: what the toy scheduler places (:meth:`AllocsModel.create_alloc`), their client status over
time (``pending`` -> ``running`` after ``alloc_start_delay`` seconds, or what a test froze with
:meth:`AllocsModel.set_alloc_status`), task states and events (``nomad/structs/structs.go`` ``TaskState``,
``TaskEvent``), the ``Allocation.Stub`` (``AllocListStub``: no Job) and full ``Allocation`` views (with the embedded ``Job``, as
Nomad's ``Allocation`` has it: a session's every ADD that read it read the whole job) with ``AllocatedResources`` (shared
network with the dynamic ports it was given, devices per task), and task logs
(``/v1/client/fs/logs`` of ``command/agent/fs_endpoint.go``; the frames are
``client/lib/streamframer`` ``StreamFrame``s).

What it does not model: a client (nothing runs; task events are synthesised from the status, unless a test runs
the tasks and reports their starts and exits to ``tasks``), restarts (``Restarts`` is what a test set, or what
``tasks`` counted), reschedule trackers, deployments and canaries, log rotation (one file
per task and stream), streaming of ``follow=true``.
"""

from __future__ import annotations

import base64
import copy
import itertools
import time
import typing as t
import uuid

from .scheduler import DEFAULT_TASK_CPU, DEFAULT_TASK_MEMORY
from .state import ZERO_TIME, CodedError, ModelState, rfc3339


class AllocsModel(ModelState):
    def create_alloc(self, rec: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any], alloc_index: int,
                      node: t.Mapping[str, t.Any], devices: t.List[t.Dict[str, t.Any]], eval_id: str, index: int) -> None:
        job = rec["job"]
        alloc_id = str(uuid.uuid4())
        now = time.time_ns()
        ports = []
        taken = {p["Value"] for a in self.allocs.values() if a["NodeID"] == node["ID"] and self.live(a) for p in a["Ports"]}
        next_port = (p for p in itertools.count(node["NodeResources"]["MinDynamicPort"]) if p not in taken)
        ip = node["Attributes"].get("unique.network.ip-address", "")
        for net in group.get("Networks") or []:
            for port in net.get("DynamicPorts") or []:
                ports.append({"Label": port["Label"], "Value": next(next_port), "To": port.get("To", 0), "HostIP": ip})
            for port in net.get("ReservedPorts") or []:
                ports.append({"Label": port["Label"], "Value": port["Value"], "To": port.get("To", 0), "HostIP": ip})
        self.allocs[alloc_id] = {
            "ID": alloc_id, "Namespace": job["Namespace"], "EvalID": eval_id,
            "Name": "%s.%s[%d]" % (job["ID"], group["Name"], alloc_index), "Index": alloc_index,
            "NodeID": node["ID"], "NodeName": node["Name"], "JobID": job["ID"], "Job": job, "JobVersion": rec["Version"],
            "JobCreateIndex": rec["CreateIndex"],
            "TaskGroup": group["Name"], "Tasks": [task["Name"] for task in group.get("Tasks") or []],
            "TaskResources": {task["Name"]: task.get("Resources") or {} for task in group.get("Tasks") or []},
            "Demand": self.group_demand(group), "Devices": devices,
            "DeviceIDs": [i for d in devices for i in d["DeviceIDs"]], "Ports": ports, "NetworkMode":
                ((group.get("Networks") or [{}])[0] or {}).get("Mode") or "host",
            "DesiredStatus": "run", "DesiredDescription": "", "override": None, "created": time.monotonic(),
            "CreateTime": now, "ModifyTime": now, "CreateIndex": index, "ModifyIndex": index,
        }

    def live(self, alloc: t.Mapping[str, t.Any]) -> bool:
        return alloc["DesiredStatus"] == "run" and self.client_status(alloc) in ("pending", "running")

    def client_status(self, alloc: t.Mapping[str, t.Any]) -> str:
        if alloc["override"]:
            return alloc["override"]["ClientStatus"]
        if alloc["DesiredStatus"] != "run":
            return "complete"
        if self.alloc_start_delay is None:
            return "pending"
        return "running" if time.monotonic() - alloc["created"] >= self.alloc_start_delay else "pending"

    def task_states_of(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        status = self.client_status(alloc)
        override = alloc["override"] or {}
        if override.get("TaskStates"):  # what a task runner reported (``tasks``)
            return {task: dict(state, Events=list(state["Events"])) for task, state in override["TaskStates"].items()}
        created = rfc3339(alloc["CreateTime"])
        state = override.get("State") or {"pending": "pending", "running": "running"}.get(status, "dead")
        failed = override.get("Failed")
        if failed is None:
            failed = status in ("failed", "lost")
        events = [{"Type": "Received", "Time": alloc["CreateTime"], "DisplayMessage": "Task received by client",
                   "Details": {}, "FailsTask": False}]
        if state != "pending":
            events.append({"Type": "Started", "Time": alloc["CreateTime"], "DisplayMessage": "Task started by client",
                           "Details": {}, "FailsTask": False})
        if state == "dead" and status != "lost":  # a lost task's end is not seen by any client
            events.append({"Type": "Terminated" if failed else "Killed", "Time": alloc["CreateTime"],
                           "DisplayMessage": "Exit Code: %d" % (1 if failed else 0), "Details": {}, "FailsTask": bool(failed)})
        return {task: {"State": state, "Failed": bool(failed), "Restarts": int(override.get("Restarts") or 0),
                       "LastRestart": ZERO_TIME, "StartedAt": created if state != "pending" else ZERO_TIME,
                       "FinishedAt": created if state == "dead" else ZERO_TIME, "Events": events, "TaskHandle": None}
                for task in alloc["Tasks"]}

    def alloc_stub(self, alloc: t.Mapping[str, t.Any], task_states: bool = True) -> t.Dict[str, t.Any]:
        override = alloc["override"] or {}
        return {
            "ID": alloc["ID"], "EvalID": alloc["EvalID"], "Name": alloc["Name"], "Namespace": alloc["Namespace"],
            "NodeID": alloc["NodeID"], "NodeName": alloc["NodeName"], "JobID": alloc["JobID"], "JobType": alloc["Job"]["Type"],
            "JobVersion": alloc["JobVersion"], "TaskGroup": alloc["TaskGroup"], "AllocatedResources": None,
            "DesiredStatus": alloc["DesiredStatus"], "DesiredDescription": alloc["DesiredDescription"],
            "ClientStatus": self.client_status(alloc), "ClientDescription": override.get("Description", ""),
            "DesiredTransition": {"Migrate": None, "Reschedule": None, "ForceReschedule": None, "NoShutdownDelay": None},
            "TaskStates": self.task_states_of(alloc) if task_states else None, "DeploymentStatus": None, "FollowupEvalID": "",
            "NextAllocation": alloc.get("NextAllocation", ""),
            "RescheduleTracker": None, "PreemptedAllocations": None, "PreemptedByAllocation": "",
            "CreateIndex": alloc["CreateIndex"], "ModifyIndex": alloc["ModifyIndex"],
            "CreateTime": alloc["CreateTime"], "ModifyTime": alloc["ModifyTime"],
        }

    def alloc_full(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        full = self.alloc_stub(alloc)
        full.pop("JobType")
        full.update({
            "Job": self.alloc_job(alloc),
            "Resources": {"CPU": alloc["Demand"]["cpu"], "MemoryMB": alloc["Demand"]["memory"], "DiskMB": alloc["Demand"]["disk"]},
            "AllocatedResources": self.allocated_resources(alloc),
            "Metrics": {"NodesEvaluated": 1, "NodesFiltered": 0, "AllocationTime": 1000, "CoalescedFailures": 0},
            "DeploymentID": "", "AllocModifyIndex": alloc["ModifyIndex"], "NetworkStatus": None,
        })
        return full

    def alloc_job(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """``Allocation.Job`` (``nomad/structs/alloc.go``): the whole job the allocation was placed with, or updated in
        place to, with its server fields (its version, not necessarily the job's current one), as
        ``Alloc.GetAlloc`` returns it (``nomad/alloc_endpoint.go``; ``command/agent/alloc_endpoint.go`` ``allocGet``)."""
        rec = self.jobs.get((alloc["Namespace"], alloc["JobID"]))
        if rec is None:
            return copy.deepcopy(alloc["Job"])
        if rec["job"] is alloc["Job"]:  # the current version: one view for all its allocations
            return self._job_view_of_allocs(rec)
        job = self.job_view(rec)
        job.update({k: copy.deepcopy(v) for k, v in alloc["Job"].items()})
        job["Version"] = alloc["JobVersion"]
        return job

    def _job_view_of_allocs(self, rec: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """The job every allocation of it embeds, made once per job version and status (a session's view reads each
        of its allocations: a copy of a 300-group job per read made that quadratic). Handed out unchanged, to be
        serialised: a new version or status makes a new one."""
        key = (rec["job"]["Namespace"], rec["job"]["ID"], rec["ModifyIndex"], rec["Version"], self.job_status(rec))
        cache = self.__dict__.setdefault("_alloc_job_views", {})
        if key not in cache:
            if len(cache) > 64:
                cache.clear()
            cache[key] = self.job_view(rec)
        return cache[key]

    def allocated_resources(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        tasks = {}
        devices_left = list(alloc["Devices"])
        for name, res in alloc["TaskResources"].items():
            task_devices = []
            for req in res.get("Devices") or []:
                for dev in list(devices_left):
                    if self.device_matches(req.get("Name") or "", dev):
                        task_devices.append(copy.deepcopy(dev))
                        devices_left.remove(dev)
                        break
            tasks[name] = {
                "Cpu": {"CpuShares": res.get("CPU") if res.get("CPU") is not None else DEFAULT_TASK_CPU, "ReservedCores": None},
                "Memory": {"MemoryMB": res.get("MemoryMB") if res.get("MemoryMB") is not None else DEFAULT_TASK_MEMORY,
                           "MemoryMaxMB": res.get("MemoryMaxMB") or 0},
                "Networks": None, "Devices": task_devices or None,
            }
        ip = next((p["HostIP"] for p in alloc["Ports"]), "")
        shared_net = {"Mode": alloc["NetworkMode"], "IP": ip,
                      "DynamicPorts": [{"Label": p["Label"], "Value": p["Value"], "To": p["To"], "HostNetwork": "default"}
                                       for p in alloc["Ports"]] or None}
        return {"Tasks": tasks, "TaskLifecycles": {name: None for name in tasks},
                "Shared": {"Networks": [shared_net], "DiskMB": alloc["Demand"]["disk"], "Ports": copy.deepcopy(alloc["Ports"]) or None}}


    def set_alloc_status(self, alloc_id: str, client_status: str, task_state: t.Optional[str] = None,
                         failed: t.Optional[bool] = None, restarts: int = 0, description: str = "") -> None:
        """Freeze an allocation in ``client_status`` (pending/running/complete/failed/lost)."""
        with self.lock:
            alloc = self.allocs[alloc_id]
            alloc["override"] = {"ClientStatus": client_status, "State": task_state, "Failed": failed,
                                 "Restarts": restarts, "Description": description}
            alloc["ModifyIndex"] = self.next_index()
            alloc["ModifyTime"] = time.time_ns()

    def append_log(self, alloc_id: str, task: str, text: str, stream: str = "stdout") -> None:
        with self.lock:
            self.logs.setdefault((alloc_id, task, stream), bytearray()).extend(text.encode("utf-8"))

    def allocations_of(self, job_id: str, namespace: str = "default") -> t.List[t.Dict[str, t.Any]]:
        with self.lock:
            return [self.alloc_full(a) for a in self.job_allocs(namespace, job_id)]


    # Views the endpoints serve ------------------------------------------------------------------
    def job_allocations(self, namespace: str, job_id: str, all_allocs: bool = False) -> t.List[t.Dict[str, t.Any]]:
        """Without ``all_allocs``, only the allocations of the job registered under the ID now: Nomad's
        ``StateStore.AllocsByJob`` skips those whose job's CreateIndex is not the current job's (an earlier
        registration of the same ID, purged), unless asked for all (``anyCreateIndex``)."""
        rec = self.jobs.get((namespace, job_id))
        allocs = sorted((a for a in self.job_allocs(namespace, job_id) if all_allocs or rec is None
                         or a.get("JobCreateIndex", rec["CreateIndex"]) == rec["CreateIndex"]),
                        key=lambda a: (a["CreateIndex"], a["Name"]))
        return [self.alloc_stub(a) for a in allocs]

    def allocation(self, alloc_id: str) -> t.Dict[str, t.Any]:
        """Nomad looks allocations up by ID alone (ACL: the allocation's namespace)."""
        alloc = self.allocs.get(alloc_id)
        if alloc is None:
            raise CodedError(404, "alloc not found")
        return self.alloc_full(alloc)

    def alloc_stubs(self, namespace: str, task_states: bool, resources: bool, prefix: str = ""
                    ) -> t.List[t.Tuple[t.Tuple[int, str], t.Dict[str, t.Any]]]:
        """Every allocation of ``namespace`` (``*``: all) whose ID starts with ``prefix`` as ((CreateIndex, ID), stub),
        in that order."""
        allocs = sorted((a for a in self.allocs.values() if (namespace == "*" or a["Namespace"] == namespace)
                         and a["ID"].startswith(prefix)),
                        key=lambda a: (a["CreateIndex"], a["ID"]))
        out = []
        for alloc in allocs:
            stub = self.alloc_stub(alloc, task_states=task_states)
            if resources:
                stub["AllocatedResources"] = self.allocated_resources(alloc)
            out.append(((alloc["CreateIndex"], alloc["ID"]), stub))
        return out

    def alloc_tasks(self, alloc_id: str) -> t.List[str]:
        alloc = self.allocs.get(alloc_id)
        if alloc is None:
            raise CodedError(404, 'Unknown allocation "%s"' % alloc_id)
        return list(alloc["Tasks"])

    def log_frame(self, alloc_id: str, task: str, stream: str, origin: str, offset: int, plain: bool) -> t.Any:
        """The bytes from ``offset`` (from the end if ``origin`` is ``end``): raw if ``plain``, else a StreamFrame
        (``{"File", "Offset", "Data"}``, ``{}`` when there is nothing to send)."""
        data = bytes(self.logs.get((alloc_id, task, stream), b""))
        start = max(0, len(data) - offset) if origin == "end" else min(len(data), max(0, offset))
        chunk = data[start:]
        if plain:
            return chunk
        return {"File": "alloc/logs/%s.%s.0" % (task, stream), "Offset": len(data),
                "Data": base64.b64encode(chunk).decode("ascii")} if chunk else {}
