# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local runtime: real cluster sessions on this one machine, pure stdlib.

Public API::

    create_planned_session(plan, keys, agents, state_root) -> dict   (the local backend's way in)
    destroy_session(name, state_root, keep_logs=False) -> dict
    stop_session(name, state_root) -> dict   (state: stopped; a create after a destroy starts it again)
    session_status(name, state_root, log_lines=0) -> dict
    list_sessions(state_root) -> list[dict]

and ``LocalRuntimeError``.  Every container of the session is an engine (podman) container of the spec's image,
started as a task of the session's rendered Nomad job (``_local.task_start``: the same entrypoint, env, templates
and mounts as on Nomad) into a network namespace the CNI plugin attached to the session's network, with the
spec's resources as the engine's limits (``_local.engine``).  Each side effect is journaled before it is made
(``_local.bringup``); a failed create is rolled back and destroy replays the journal backwards
(``_local.teardown``), so a creator killed at any point leaves nothing that destroy cannot remove.

The network is the one every backend uses: the ``backendai`` CNI plugin with the agent's one
static config, admitted by signed parameters (``_local.agent_network``). Without ``agents`` this
machine is the agent; with ``agents`` (local agents made by ``_local.agents``, each container
placed on one of them) the containers sit behind those agents, joined across agents by the
session's VXLAN segment, and main1 is published by a relay (``_local.publish``).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (
    CNI_PATH,
    REQUIRED_PLUGINS,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local.gang_view import apply_gang_status
from ansible_collections.backendai.cluster.plugins.module_utils._local.run import run
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import local_container_status, session_state
from ansible_collections.backendai.cluster.plugins.module_utils._local.bringup import bring_up, engine_log_tail, public_info
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import OOM_MARKER, inspect_containers
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import EngineRun, NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._local.session import LocalSession, from_plan
from ansible_collections.backendai.cluster.plugins.module_utils._local.teardown import teardown
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import NAME_RE
from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_MOUNT_ROOTS, DEFAULT_STATE_ROOT
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    SANE_PATH,
    Journal,
    LocalRuntimeError,
    SessionPaths,
    flocked,
    read_json,
    read_text,
    session_names,
)

__all__ = ["LocalRuntimeError", "create_planned_session", "destroy_session",
           "list_sessions", "session_status", "stop_session"]

# executable -> Debian package that provides it (podman: ``_local.engine`` checks it, and runc where it is needed)
_TOOLS = {
    "ip": "iproute2",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "nsenter": "util-linux",
    "setsid": "util-linux",
    "sh": "dash",
}


# ---------------------------------------------------------------------------- checks


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LocalRuntimeError("the local runtime must run as root (it creates network namespaces, a bridge "
                                "and iptables rules); run it with become: true or sudo")


def _check_environment() -> None:
    _require_root()
    for plugin in REQUIRED_PLUGINS:
        path = os.path.join(CNI_PATH, plugin)
        if not os.access(path, os.X_OK):
            raise LocalRuntimeError("containernetworking-plugins is not installed: %s missing; install it with "
                                    "apt-get install containernetworking-plugins" % path)
    for tool, package in _TOOLS.items():
        if shutil.which(tool, path=SANE_PATH) is None:
            raise LocalRuntimeError("%s is not installed: %s missing from %s; install it with apt-get install %s"
                                    % (package, tool, SANE_PATH, package))


def create_planned_session(plan: SessionPlan, keys: SSHKeypair, agents: t.Optional[t.Mapping[str, t.Any]],
                           state_root: str = DEFAULT_STATE_ROOT,
                           mount_roots: t.Sequence[str] = DEFAULT_MOUNT_ROOTS,
                           task: t.Optional[NomadTask] = None) -> t.Dict[str, t.Any]:
    """Bring up a placed plan (``agents``: name -> local mapping of local agents, None for this machine): its images
    run on the engine as the tasks of its Nomad job (``task``: the job's renderer)."""
    if task is None:
        raise LocalRuntimeError("image %s runs on the container engine as the session's Nomad job does: this caller "
                                "gave no job renderer (use the session module)" % plan.containers[0].image)
    if not os.path.isfile(os.path.join(task.runtime_dir, "VERSION")):
        raise LocalRuntimeError("the session runtime bundle is not at %s (what every container mounts read-only, as on "
                                "a Nomad agent): run scripts/setup, or the overlay_agent role on this machine"
                                % task.runtime_dir)
    return _create(from_plan(plan, keys, agents, state_root, mount_roots), state_root, EngineRun(task.render(plan), task))


def _create(session: LocalSession, state_root: str, engine: EngineRun) -> t.Dict[str, t.Any]:
    _check_environment()
    state_root = os.path.abspath(os.path.expanduser(state_root))
    os.makedirs(state_root, mode=0o700, exist_ok=True)
    paths = SessionPaths(state_root, session.name)
    with flocked(state_root):
        try:
            os.mkdir(paths.root, 0o700)
        except FileExistsError:
            raise LocalRuntimeError("session %s already exists in %s; destroy it first"
                                    % (session.name, state_root)) from None
        lock_fd = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    journal = Journal(paths.journal)
    try:
        return bring_up(session, paths, journal, engine)
    except BaseException as exc:
        journal.close()
        errors = teardown(paths, Journal.replay(paths.journal), keep_logs=False)
        note = "rolled back" if not errors else "rollback incomplete, run destroy: " + "; ".join(errors)
        if isinstance(exc, LocalRuntimeError):
            raise LocalRuntimeError("%s (%s)" % (exc.message, note)) from exc
        if isinstance(exc, Exception):
            raise LocalRuntimeError("unexpected error: %r (%s)" % (exc, note)) from exc
        raise
    finally:
        journal.close()
        os.close(lock_fd)


def stop_session(name: str, state_root: str = DEFAULT_STATE_ROOT, keep: t.Sequence[str] = ()) -> t.Dict[str, t.Any]:
    """Stop the session to start it again later: what a destroy keeping the logs removes goes (containers, network
    namespaces, the session network and its slot); its logs, keys (``ssh/``), the names in ``keep`` (the caller's
    records) and a ``stopped`` mark stay. A create of the same name after :func:`destroy_session` brings it back
    (the local backend's start)."""
    return destroy_session(name, state_root, keep_logs=True, keep=(STOPPED_MARK, "ssh") + tuple(keep))


#: The mark of a stopped session in its state directory (its state is then STOPPED).
STOPPED_MARK = "stopped"


def destroy_session(name: str, state_root: str = DEFAULT_STATE_ROOT, keep_logs: bool = False,
                    keep: t.Sequence[str] = ()) -> t.Dict[str, t.Any]:
    """Idempotent; also cleans up after a create that was killed half-way. ``keep``: names in the state directory a
    stop keeps beside the logs (:func:`stop_session`; the first one, its mark, is written after the teardown)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise LocalRuntimeError("invalid session name %r" % (name,))
    _require_root()
    state_root = os.path.abspath(os.path.expanduser(state_root))
    paths = SessionPaths(state_root, name)
    t0 = time.monotonic()
    if not os.path.isdir(paths.root):
        return {"changed": False, "name": name, "state": "missing"}
    with flocked(state_root):  # orders us after a create's mkdir+lock
        try:
            fd = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return {"changed": False, "name": name, "state": "missing"}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for a create (or destroy) in progress
        try:
            same = os.stat(paths.root).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the create we waited for rolled back
            return {"changed": False, "name": name, "state": "missing"}
        has_journal = os.path.exists(paths.journal)
        stopped = os.path.exists(os.path.join(paths.root, STOPPED_MARK))
        if not has_journal and keep_logs and bool(keep) == stopped:  # (a stopped session removed keeping its logs
            # loses its keys and mark: it is TERMINATED then)
            return {"changed": False, "name": name, "state": "TERMINATED", "logs": paths.logs_dir}
        errors = teardown(paths, Journal.replay(paths.journal), keep_logs, keep)
        if errors:
            raise LocalRuntimeError("destroy of session %s incomplete (run it again): %s" % (name, "; ".join(errors)))
        if keep:
            with open(os.path.join(paths.root, keep[0]), "w", encoding="utf-8") as mark:
                mark.write("%d\n" % int(time.time()))
    finally:
        os.close(fd)
    result: t.Dict[str, t.Any] = {"changed": True, "name": name, "elapsed": round(time.monotonic() - t0, 3)}
    if keep_logs:
        result.update(state="TERMINATED", logs=paths.logs_dir)
    else:
        result.update(state="missing")
    return result


#: What the status of an engine container reads of podman's record of it (one ``podman container inspect`` for all the
#: session's containers: ``_local.engine.inspect_containers``).
ENGINE_STATE_FIELDS = "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}"


def _engine_container_status(paths: SessionPaths, c: t.Dict[str, t.Any], inspected: t.Optional[t.List[str]],
                             log_lines: int) -> t.Dict[str, t.Any]:
    """An engine container's status, from podman's record of it (``inspected``: its :data:`ENGINE_STATE_FIELDS`, None
    when podman has no such container), in the job model both backends share: running; complete or failed by the exit
    code of its first process (the command, or sshd in an interactive container); 137 with reason OOM when the
    kernel's OOM killer ended it at its memory limit."""
    host = c["hostname"]
    state, code, oom = (list(inspected) + ["", "", ""])[:3] if inspected is not None else ("gone", "", "")
    kept = (read_text(paths.exitcode(host)) or "").strip() if state == "gone" else ""
    if kept:  # removed by a destroy that kept the logs, and its exit code with them
        state, code = "exited", kept
    has_command = bool(c.get("has_command", True))
    exit_code = None
    if state == "running":
        status, reason = "running", ""
    elif state in ("created", "configured", "initialized"):
        status, reason = "pending", ""
    elif state == "gone":
        status, reason = "failed", "the engine container %s is gone (removed outside the session)" % c["engine"]
    else:
        exit_code = int(code) if code.lstrip("-").isdigit() else None
        if oom == "true" or (exit_code == 137 and os.path.exists(os.path.join(paths.container_dir(host), OOM_MARKER))):
            exit_code = 137
            status, reason = "failed", "OOM: the kernel killed the container at its memory limit (%s MB)" % (
                (c.get("resources") or {}).get("memory", "?"))
        elif has_command:
            status, reason = local_container_status(True, False, False, exit_code)
        else:
            status, reason = "failed", "sshd is gone (an interactive container lives as long as its sshd; exit code %s)" % code
    command = "none" if not has_command else ("exited" if exit_code is not None else "running" if status == "running" else "killed")
    out = {"hostname": host, "state": status, "command": command, "reason": reason, "exit_code": exit_code,
           "address": c.get("address"), "netns": c.get("netns"), "pid": c.get("pid"), "sshd_pid": None,
           "published": c.get("published"), "log": paths.log(host), "engine": c["engine"], "image": c.get("image")}
    if log_lines > 0:
        out["log_tail"] = engine_log_tail(paths.log(host), log_lines)
    return out


def _check_wireguard(info: t.Dict[str, t.Any], containers: t.List[t.Dict[str, t.Any]]) -> None:
    """An agent whose WireGuard interface is gone (its wireguard-go was killed: the interface goes with the process)
    has cut its containers off from the session's other agents: they are ``failed`` with that reason, so the session
    is DEGRADED (``state: present`` recreates it, and the plugin makes the interface again)."""
    lost = {}
    for agent, a in (info.get("agents") or {}).items():
        wg = a.get("wireguard")
        if wg and a.get("netns") and os.path.exists(netns_path(a["netns"])) and run(
                ["ip", "-n", a["netns"], "link", "show", "dev", wg], check=False).returncode != 0:
            lost[agent] = wg
    if not lost:
        return
    agent_of = {c["hostname"]: c.get("agent") for c in info["containers"]}
    for c in containers:
        agent = agent_of.get(c["hostname"])
        if agent in lost and c["state"] in ("running", "pending"):
            c["state"] = "failed"
            c["reason"] = ("the WireGuard interface %s of agent %s is gone (wireguard-go killed?): this container is cut "
                           "off from the session's other agents" % (lost[agent], agent))


def session_status(name: str, state_root: str = DEFAULT_STATE_ROOT, log_lines: int = 0) -> t.Dict[str, t.Any]:
    """The session's state by the rule both backends share (``_session.status.session_state``: RUNNING,
    DEGRADED, TERMINATED, ERROR, ...) from its containers' statuses; also CREATING (a creator is at
    work), DEGRADED with a message (the creator died half-way), TERMINATED (only kept logs), missing."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise LocalRuntimeError("invalid session name %r" % (name,))
    paths = SessionPaths(os.path.abspath(os.path.expanduser(state_root)), name)
    if not os.path.isdir(paths.root):
        return {"name": name, "exists": False, "state": "missing", "containers": []}
    info = read_json(paths.session_json)
    has_journal = os.path.exists(paths.journal)
    if not isinstance(info, dict):
        state = "TERMINATED"
        if has_journal:
            with flocked(paths.root, blocking=False) as fd:
                state = "CREATING" if fd is None else "DEGRADED"
        result = {"name": name, "exists": True, "state": state, "containers": [], "state_dir": paths.root}
        if state == "DEGRADED":
            result["message"] = "creation did not complete (creator killed?); destroy the session"
        return result
    conf = (info.get("engine") or {}).get("conf", "")
    engine_names = [c["engine"] for c in info["containers"]]
    inspected = inspect_containers(engine_names, conf, ENGINE_STATE_FIELDS) if engine_names and conf else {}
    containers = [_engine_container_status(paths, c, inspected.get(c["engine"]), log_lines) for c in info["containers"]]
    _check_wireguard(info, containers)
    failure = apply_gang_status(paths, containers)
    state = session_state([c["state"] for c in containers], stopped=not has_journal,
                          healing=bool(failure) and failure["state"] == "restarting",
                          paused=not has_journal and os.path.exists(os.path.join(paths.root, STOPPED_MARK)))
    public = public_info(info)
    public.update(exists=True, state=state, containers=containers)
    if failure:
        public["failure"] = failure
    return public


def list_sessions(state_root: str = DEFAULT_STATE_ROOT) -> t.List[t.Dict[str, t.Any]]:
    state_root = os.path.abspath(os.path.expanduser(state_root))
    out = []
    for name in session_names(state_root):
        if not NAME_RE.match(name):
            continue
        st = session_status(name, state_root)
        out.append({"name": name, "session_id": st.get("session_id"), "state": st["state"],
                    "containers": len(st.get("containers", [])), "published": st.get("published")})
    return out
