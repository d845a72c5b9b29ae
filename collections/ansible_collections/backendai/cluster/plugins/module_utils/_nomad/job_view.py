# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session view of a Nomad-backed session, from its job and allocations. Pure (no I/O).

Same shape as the local backend's (see ``_local.local_backend``): ``{name, backend, session_id, state,
mode, network_mode, containers: [{hostname, role, idx, agent, address, status, exit_code,
restarts, log_tail}], main1: {address, ssh_port, ssh_command}, progress}`` (see ``wait_progress``)
plus a few Nomad details (``job_id``, ``namespace``, ``alloc_id``, the secret's location). Nothing
secret is in it.

States: PENDING (some container has no allocation: Nomad could not place it yet), SCHEDULED
(allocations pending), RUNNING (all running), DEGRADED (some container failed, was lost or is
restarting while others are up; or some finished while others run), TERMINATED (every container
completed), ERROR (every container is down and at least one failed), STOPPED (the job is stopped, not
purged: ``state: stopped`` or ``nomad job stop``; ``state: present`` starts it again).
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import MANAGED_META_KEY, TASK_NAME, USER_META_KEYS

from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import apply_status, failure_reason
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import (
    BROKEN,
    LIVE,
    RESTARTING,
    UNPLACED,
    session_state,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import broken_summary, wait_progress

_EXIT_CODE = re.compile(r"[Ee]xit [Cc]ode:? *(-?\d+)")


def is_managed(job: t.Optional[t.Mapping[str, t.Any]]) -> bool:
    """Whether a job was made by this collection (its Meta names the session)."""
    if not job:
        return False
    meta = job.get("Meta") or {}
    return bool(meta.get(MANAGED_META_KEY)) and meta.get(MANAGED_META_KEY) == job.get("ID")


def current_allocations(stubs: t.Iterable[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Mapping[str, t.Any]]:
    """Task group -> its current allocation: the newest that should run, else the newest at all."""
    best: t.Dict[str, t.Mapping[str, t.Any]] = {}
    for alloc in stubs:
        group = alloc.get("TaskGroup") or ""
        key = (alloc.get("DesiredStatus") == "run", int(alloc.get("CreateIndex") or 0))
        held = best.get(group)
        if held is None or key > (held.get("DesiredStatus") == "run", int(held.get("CreateIndex") or 0)):
            best[group] = alloc
    return best


def _task_state(alloc: t.Mapping[str, t.Any]) -> t.Mapping[str, t.Any]:
    states = alloc.get("TaskStates") or {}
    if TASK_NAME in states:
        return states[TASK_NAME] or {}
    return next(iter(states.values()), None) or {}


def container_status(alloc: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """Nomad's ClientStatus, ``restarting`` while the task restarts, ``unplaced`` without allocation."""
    if alloc is None:
        return UNPLACED
    status = str(alloc.get("ClientStatus") or "pending")
    task = _task_state(alloc)
    if status in LIVE and int(task.get("Restarts") or 0) > 0 and task.get("State") != "running":
        return RESTARTING
    return status


def exit_code(alloc: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[int]:
    """The exit code of the task's last termination (the newest event that reports one), if it terminated."""
    if alloc is None:
        return None
    for event in reversed(_task_state(alloc).get("Events") or []):
        if event.get("Type") not in ("Terminated", "Killed", "Not Restarting"):
            continue
        details = event.get("Details") or {}
        for value in (event.get("ExitCode"), details.get("exit_code")):
            if value not in (None, ""):
                try:
                    return int(value)
                except (TypeError, ValueError):
                    pass
        match = _EXIT_CODE.search(str(event.get("DisplayMessage") or ""))
        if match:
            return int(match.group(1))
    return None


def container_reason(alloc: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """Why a container is not running as it should, in Nomad's words (empty when it is fine)."""
    if alloc is None:
        return "no allocation: Nomad could not place it"
    status = container_status(alloc)
    if status not in BROKEN:
        return ""
    for text in (alloc.get("ClientDescription"), alloc.get("DesiredDescription")):
        if text:
            return str(text)
    for event in reversed(_task_state(alloc).get("Events") or []):
        if event.get("DisplayMessage"):
            return str(event["DisplayMessage"])
    return ""


def failed_placement_reason(failed: t.Mapping[str, t.Any]) -> str:
    """Nomad's reason per task group it could not place, from an evaluation's ``FailedTGAllocs``
    (AllocMetric), e.g. ``sub1: resources exhausted on 2 of 2 nodes (memory: 2)``."""
    parts = []
    for group in sorted(failed):
        metric = failed[group] or {}
        if metric.get("reason"):
            parts.append("%s: %s" % (group, metric["reason"]))
            continue
        evaluated = int(metric.get("NodesEvaluated") or 0)
        notes = []
        if metric.get("NodesExhausted"):
            dims = ", ".join("%s: %s" % kv for kv in sorted((metric.get("DimensionExhausted") or {}).items()))
            shown = " (%s)" % dims if dims else ""
            notes.append("resources exhausted on %s of %d nodes%s" % (metric["NodesExhausted"], evaluated, shown))
        if metric.get("NodesFiltered"):
            why = ", ".join("%s: %s" % kv for kv in sorted((metric.get("ConstraintFiltered") or {}).items()))
            notes.append("%s of %d nodes filtered%s" % (metric["NodesFiltered"], evaluated, " (%s)" % why if why else ""))
        if not evaluated:
            notes.append("no node in the job's datacenters and node pool is ready")
        parts.append("%s: %s" % (group, "; ".join(notes) or "not placed"))
    return "; ".join(parts)


def _shared_network(full: t.Optional[t.Mapping[str, t.Any]]) -> t.Mapping[str, t.Any]:
    resources = (full or {}).get("AllocatedResources") or {}
    networks = ((resources.get("Shared") or {}).get("Networks")) or []
    return networks[0] if networks else {}


def container_address(full: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """The allocation's own address (its network namespace), else the host address it is bound to."""
    status = (full or {}).get("NetworkStatus") or {}
    return str(status.get("Address") or _shared_network(full).get("IP") or "")


def published_ports(full: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Port label -> {address, port (on the host), to (in the container)} from AllocatedResources."""
    network = _shared_network(full)
    host = str(network.get("IP") or "")
    out: t.Dict[str, t.Dict[str, t.Any]] = {}
    for port in list(network.get("DynamicPorts") or []) + list(network.get("ReservedPorts") or []):
        out[str(port.get("Label"))] = {"address": host, "port": int(port.get("Value") or 0), "to": int(port.get("To") or 0)}
    if not out:  # newer layout: AllocatedResources.Shared.Ports
        for port in ((full or {}).get("AllocatedResources") or {}).get("Shared", {}).get("Ports") or []:
            out[str(port.get("Label"))] = {"address": str(port.get("HostIP") or host), "port": int(port.get("Value") or 0),
                                           "to": int(port.get("To") or 0)}
    return out


def group_identity(group: t.Mapping[str, t.Any]) -> t.Tuple[str, str]:
    """A group's container role and index: its task's BACKENDAI_CLUSTER_ROLE and BACKENDAI_CLUSTER_IDX (the seeds'
    variables, always in the task's Env); jobs rendered before they left the group's ``Meta`` have them there too."""
    tasks = group.get("Tasks") or [{}]
    env, gmeta = tasks[0].get("Env") or {}, group.get("Meta") or {}
    return (str(env.get("BACKENDAI_CLUSTER_ROLE") or gmeta.get("BACKENDAI_CLUSTER_ROLE") or ""),
            str(env.get("BACKENDAI_CLUSTER_IDX") or gmeta.get("BACKENDAI_CLUSTER_IDX") or "0"))


def build_view(job: t.Mapping[str, t.Any], stubs: t.Sequence[t.Mapping[str, t.Any]],
               full: t.Mapping[str, t.Mapping[str, t.Any]], logs: t.Optional[t.Mapping[str, t.List[str]]] = None,
               secret: t.Optional[t.Mapping[str, t.Any]] = None,
               gangs: t.Optional[t.Mapping[str, t.Mapping[str, t.Any]]] = None) -> t.Dict[str, t.Any]:
    """The session view; ``full`` maps allocation ID -> full allocation, ``logs`` hostname -> log tail, ``gangs``
    hostname -> its supervisor's parsed status file under a failure policy (``_session.gang``)."""
    meta = job.get("Meta") or {}
    current = current_allocations(stubs)
    containers = []
    network_mode, underlay_encryption = "", ""
    for group in job.get("TaskGroups") or []:
        name = group.get("Name") or ""
        gmeta = group.get("Meta") or {}
        networks = group.get("Networks") or []
        if networks and not network_mode:
            network_mode = str(networks[0].get("Mode") or "")
            cni_args = (networks[0].get("CNI") or {}).get("Args") or {}
            # args version 3 says it (BAI_ENC); versions 1 and 2 had no underlay encryption
            underlay_encryption = str(cni_args.get("BAI_ENC") or ("none" if cni_args.get("BAI_V") else ""))
        alloc = current.get(name)
        alloc_full = full.get(alloc["ID"]) if alloc is not None else None
        task = _task_state(alloc) if alloc is not None else {}
        role, idx = group_identity(group)
        item: t.Dict[str, t.Any] = {
            "hostname": name,
            "role": role,
            "idx": int(idx) if str(idx).isdigit() else 0,
            "agent": (alloc or {}).get("NodeName") or gmeta.get("backendai_agent") or "",
            "address": container_address(alloc_full),
            "status": container_status(alloc),
            "exit_code": exit_code(alloc),
            "restarts": int(task.get("Restarts") or 0),
            "reason": container_reason(alloc),
            "alloc_id": (alloc or {}).get("ID") or "",
            "node_id": (alloc or {}).get("NodeID") or "",
        }
        if logs is not None:
            item["log_tail"] = list(logs.get(name) or [])
        containers.append(item)
    failure = apply_status(containers, gangs or {})
    statuses = [c["status"] for c in containers]
    view: t.Dict[str, t.Any] = {
        "name": job.get("ID"),
        "backend": "nomad",
        "job_id": job.get("ID"),
        "namespace": job.get("Namespace") or "default",
        "session_id": meta.get("BACKENDAI_SESSION_ID", ""),
        "state": session_state(statuses, paused=bool(job.get("Stop")),
                               healing=bool(failure) and failure["state"] == "restarting"),
        "mode": meta.get("BACKENDAI_CLUSTER_MODE", ""),
        "network_mode": network_mode,
        "underlay_encryption": underlay_encryption,
        "containers": containers,
        "reason": failure_reason(failure) or broken_summary(containers),
        "main1": _main1(job, current, full),
        "progress": wait_progress(containers, batch=job.get("Type") == "batch"),
    }
    if secret is not None:
        view["secret"] = dict(secret)
    if failure:
        view["failure"] = failure
    return view


def _main1(job: t.Mapping[str, t.Any], current: t.Mapping[str, t.Mapping[str, t.Any]],
           full: t.Mapping[str, t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    groups = job.get("TaskGroups") or []
    main = next((g for g in groups if group_identity(g)[0] == "main"), groups[0] if groups else {})
    alloc = current.get(main.get("Name") or "")
    alloc_full = full.get(alloc["ID"]) if alloc is not None else None
    ports = published_ports(alloc_full)
    ssh = ports.get("ssh") or {}
    address = ssh.get("address") or _shared_network(alloc_full).get("IP") or ""
    port = ssh.get("port") or 0
    out: t.Dict[str, t.Any] = {"hostname": main.get("Name") or "main1", "address": address, "ssh_port": port,
                               "ssh_command": "", "ports": ports}
    if address and port:
        # the session user (job Meta); a job made before there was one ran everything as root
        user = (job.get("Meta") or {}).get(USER_META_KEYS[0]) or "root"
        out["ssh_command"] = "ssh -p %d %s@%s" % (port, user, address)
    return out
