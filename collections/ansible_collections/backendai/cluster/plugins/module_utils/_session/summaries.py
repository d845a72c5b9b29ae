# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parts of a session's view that do not depend on the backend. Pure.

:func:`plan_summary` (the plan as module results show it), :func:`wait_progress` (where a wait for
the containers stands) and :func:`broken_summary` (which containers are broken, and why). Both
backends build their session views with them (``_nomad.job_view``, ``_local.local_backend``).
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import BROKEN, RESTARTING, UNPLACED


def plan_summary(plan: SessionPlan, with_env: bool = False) -> t.Dict[str, t.Any]:
    """A plain, secret-free view of the plan, for module results and playbook output."""
    containers = []
    for c in plan.containers:
        item: t.Dict[str, t.Any] = {
            "hostname": c.hostname, "role": c.role, "idx": c.idx, "rank": c.rank, "local_rank": c.local_rank,
            "agent": c.agent, "datacenter": c.datacenter, "kernel_id": c.kernel_id, "image": c.image,
            "resources": {"cpu": c.resources.cpu, "memory": c.resources.memory, "gpu": c.resources.gpu},
        }
        if with_env and plan.placed:
            item["env"] = container_env(plan, c)
        containers.append(item)
    return {
        "name": plan.spec.name,
        "status": plan.status,
        "reason": plan.reason,
        "session_id": plan.session_id,
        "mode": plan.mode,
        "network_mode": plan.network_mode,
        "cluster_size": len(plan.containers),
        "replicas": plan.replicas,
        "agents": list(plan.agents_used),
        "containers": containers,
    }


def wait_progress(containers: t.Sequence[t.Mapping[str, t.Any]], batch: bool = False) -> t.Dict[str, t.Any]:
    """Where a wait for the containers stands, for people watching it: ``done`` once every container
    runs (a batch session's may also have completed), ``failed`` names the containers that stopped
    for good (failed, lost, or a local container that exited), ``waiting`` the rest that do not run
    yet, and ``summary`` says it in one line, e.g. ``1 of 3 containers running; waiting for sub1
    (pending on n1), sub2 (unplaced)``."""
    running: t.List[str] = []
    waiting: t.List[str] = []
    failed: t.List[str] = []
    notes: t.Dict[str, str] = {}
    for c in containers:
        name = str(c.get("hostname") or "")
        status = str(c.get("status") or "pending")
        code = c.get("exit_code")
        if status == "running" or (batch and (status == "complete" or (status == "exited" and code == 0))):
            running.append(name)
            continue
        where = " on %s" % c["agent"] if c.get("agent") and status != UNPLACED else ""
        extra = ""
        if code is not None and status in ("failed", "exited", "complete", RESTARTING):
            extra = ", exit code %s" % code
        if status == RESTARTING and c.get("restarts"):
            extra += ", %s restarts" % c["restarts"]
        notes[name] = "%s (%s%s%s)" % (name, status, where, extra)
        (failed if status in ("failed", "lost", "exited", "complete") else waiting).append(name)
    parts = ["%d of %d containers running" % (len(running), len(containers))]
    if failed:
        parts.append("stopped: " + ", ".join(notes[n] for n in failed))
    if waiting:
        parts.append("waiting for " + ", ".join(notes[n] for n in waiting))
    return {"total": len(containers), "running": len(running), "waiting": waiting, "failed": failed,
            "done": bool(containers) and not waiting and not failed, "summary": "; ".join(parts)}


def broken_summary(containers: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """Which containers are broken and why, one line (empty when none is): what DEGRADED/ERROR mean here."""
    parts = []
    for c in containers:
        if c.get("status") in BROKEN:
            where = " on %s" % c["agent"] if c.get("agent") else ""
            code = ", exit code %s" % c["exit_code"] if c.get("exit_code") is not None else ""
            why = ": %s" % c["reason"] if c.get("reason") else ""
            parts.append("%s %s%s%s%s" % (c.get("hostname"), c.get("status"), where, code, why))
    return "; ".join(parts)
