# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local backend shows of a session's failure policy: each container's gang status file
(``_session.gang.STATUS_FILE`` under its allocation directory, which the container's supervisor writes) read into
the container statuses and into one summary for the session (docs/failure-policy.md)."""

from __future__ import annotations

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths, read_text
from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import (
    FAILED,
    GAVE_UP,
    HEALING,
    STATUS_FILE,
    parse_status,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import RESTARTING

#: What the docker driver binds at /alloc, under each container's directory (``_local.bringup``).
ALLOC_SUBDIR = "alloc"


def apply_gang_status(paths: SessionPaths, containers: t.List[t.Dict[str, t.Any]]) -> t.Optional[t.Dict[str, t.Any]]:
    """Update ``containers`` (the runtime's statuses, by ``hostname``) with their gang status: ``restarts``,
    ``last_failure``, ``restarting`` while the gang brings the command back, and the failure that stopped a container
    the policy ended. Returns the session's ``failure`` summary (policy; state running, restarting, failed or
    gave_up; restarts; the first failure), or None when the session has no failure policy."""
    gangs = {}
    for c in containers:
        text = read_text(os.path.join(paths.container_dir(c["hostname"]), ALLOC_SUBDIR, STATUS_FILE))
        if text:
            gangs[c["hostname"]] = parse_status(text)
    if not gangs:
        return None
    # the first failure: as the container that had it tells it (it knows the reason), else the earliest told
    firsts = [g["first"] for g in gangs.values() if g.get("first")]
    own = [g["first"] for h, g in gangs.items() if g.get("first") and g["first"]["host"] == h]
    first = min(own or firsts, key=lambda f: f["time"]) if firsts else None
    states = {g.get("state") for g in gangs.values()}
    for c in containers:
        g = gangs.get(c["hostname"])
        if g is None:
            continue
        c["restarts"] = g.get("restarts", 0)
        c["last_failure"] = g.get("last")
        if c["state"] == "running" and g.get("state") in HEALING:
            c["state"] = RESTARTING
            c["reason"] = "the failure policy restarts the command (generation %s)" % g.get("generation", 0)
        elif c["state"] == "failed" and g.get("state") in (FAILED, GAVE_UP) and first:
            own = first["host"] == c["hostname"]
            c["reason"] = ("%s by the failure policy: %s" % ("gave up" if g.get("state") == GAVE_UP else "stopped",
                                                             first["reason"] if own else "%s: %s" % (first["host"], first["reason"])))
    state = GAVE_UP if GAVE_UP in states else FAILED if FAILED in states else (
        "restarting" if states & HEALING else "running")
    policy = next(iter(gangs.values())).get("policy", "")
    return {"policy": policy, "state": state, "restarts": max(g.get("generation", 0) if policy == "restart_all"
                                                              else g.get("restarts", 0) for g in gangs.values()),
            "first_failure": first}


def failure_reason(summary: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """One line for a session the policy ended: the first failure's container, exit code and reason ('' otherwise)."""
    if not summary or summary["state"] not in (FAILED, GAVE_UP) or not summary.get("first_failure"):
        return ""
    first = summary["first_failure"]
    code = ", exit code %d" % first["exit_code"] if first.get("exit_code") is not None else ""
    return "failure policy %s %s: %s%s: %s" % (summary["policy"], "gave up" if summary["state"] == GAVE_UP else "failed",
                                               first["host"], code, first["reason"])
