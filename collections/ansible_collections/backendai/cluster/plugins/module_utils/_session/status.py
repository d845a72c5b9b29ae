# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A session's state from its containers' statuses: the ONE rule both backends use. Pure.

Container statuses (Nomad's ClientStatus values, which the local backend reports too):
``pending``, ``running``, ``complete`` (the command ended with 0), ``failed`` (it ended otherwise,
or sshd of an interactive container died), ``lost`` (its node went down), plus ``restarting``
(the task restarts under its restart policy) and ``unplaced`` (no allocation: Nomad could not
place it).

======== ==================================================================================
State    Meaning
======== ==================================================================================
PENDING    no container yet, or some container could not be placed
SCHEDULED  placed, some container still starting (none broken)
RUNNING    every container runs
DEGRADED   some container failed, was lost or is restarting while others are up; or some
           completed while others still run
RESTARTING the session's failure policy is bringing its commands back (``_session.gang``): its
           containers stop their commands and wait for the whole gang (one that is gone included)
TERMINATED every container completed (exit 0), or the session was removed keeping its logs
ERROR      every container is down and at least one failed or was lost
STOPPED    stopped by ``state: stopped`` (or a Nomad job stop): no container runs, the session keeps
           its keys, ID and names, and ``state: present`` starts it again (docs/session-lifecycle.md)
======== ==================================================================================
"""

from __future__ import annotations

import typing as t

PENDING = "PENDING"
SCHEDULED = "SCHEDULED"
RUNNING = "RUNNING"
DEGRADED = "DEGRADED"
TERMINATED = "TERMINATED"
ERROR = "ERROR"
#: Stopped on purpose, to be started again (``state: stopped``; on Nomad a job stopped without purge).
STOPPED = "STOPPED"
#: The session state while the gang restarts its commands by its failure policy (``_session.gang``).
HEALING = "RESTARTING"

UNPLACED = "unplaced"
RESTARTING = "restarting"
#: Statuses of a container that is not doing its job and will not by itself.
BROKEN = frozenset(("failed", "lost", RESTARTING))
LIVE = frozenset(("running", "pending"))


def session_state(statuses: t.Sequence[str], stopped: bool = False, healing: bool = False, paused: bool = False) -> str:
    """The session state of its containers' statuses (``stopped``: its containers were removed keeping the logs;
    ``healing``: its gang restarts commands by the failure policy, so a ``restarting`` container is on its way back,
    not broken; ``paused``: stopped to be started again, STOPPED)."""
    if paused:
        return STOPPED
    if stopped:
        return TERMINATED
    if not statuses:
        return PENDING
    if healing and any(s in ("running", RESTARTING) for s in statuses):
        return HEALING
    broken = any(s in BROKEN for s in statuses)
    live = any(s in LIVE for s in statuses)
    if broken:
        return DEGRADED if live else ERROR
    if UNPLACED in statuses:
        return PENDING
    if all(s == "running" for s in statuses):
        return RUNNING
    if all(s == "complete" for s in statuses):
        return TERMINATED
    if "complete" in statuses and "running" in statuses:
        return DEGRADED
    return SCHEDULED


def needs_repair(statuses: t.Iterable[str]) -> bool:
    """Whether ``state: present`` brings containers back: some container is broken (failed, lost,
    restarting). A completed batch container is not: a TERMINATED session stays as it is."""
    return any(s in BROKEN for s in statuses)


def local_container_status(has_command: bool, supervisor_alive: bool, sshd_alive: bool,
                           exit_code: t.Optional[int]) -> t.Tuple[str, str]:
    """(status, reason) of a local container, in the job model of the Nomad task it stands for.

    A batch container (with a command) runs while its command runs, is ``complete`` when the
    command exited 0 and ``failed`` when it exited otherwise or was killed with its supervisor;
    there is no restart (the local runtime's restart policy is none). An interactive container
    (no command) runs while its sshd runs and is ``failed`` once sshd is gone.
    """
    if has_command:
        if exit_code is not None:
            return ("complete", "") if exit_code == 0 else ("failed", "the command exited with code %d" % exit_code)
        if supervisor_alive:
            return "running", ""
        return "failed", "the container's supervisor was killed before its command ended"
    if sshd_alive and supervisor_alive:
        return "running", ""
    return "failed", "sshd is gone (an interactive container lives as long as its sshd)"
