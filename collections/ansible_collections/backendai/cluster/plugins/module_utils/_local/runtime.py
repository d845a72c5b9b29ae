# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The "local" backend: a real cluster session on this one machine, pure stdlib.

Public API::

    create_session(session, state_root) -> dict
    destroy_session(name, state_root, keep_logs=False) -> dict
    session_status(name, state_root, log_lines=0) -> dict
    list_sessions(state_root) -> list[dict]

and ``LocalRuntimeError``.  Every container of the session is a process tree with its own
network, UTS and mount namespaces, attached by the real CNI plugins to a bridge of the
session's own, and runs sshd on the session's ssh port (see the sibling ``_local_*``
modules).  Each side effect is journaled before it is made; a failed create is rolled back
and destroy replays the journal backwards, so a creator killed at any point leaves
nothing that destroy cannot remove.

The network is the one every backend uses: the ``backendai`` CNI plugin with the agent's one
static config, admitted by signed parameters (``_local_network``). Without ``agents`` this
machine is the agent; with ``agents`` (local agents made by ``_local_agents``, each container
placed on one of them) the containers sit behind those agents, joined across agents by the
session's VXLAN segment, and main1 is published by a relay (``_local_publish``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.backendai.cluster.plugins.module_utils._local import network as _local_network
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (
    CNI_PATH,
    REQUIRED_PLUGINS,
    prune_shared_chains,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.containers import (
    PRIVATE_DIRS,
    SSHD,
    ContainerSetup,
    add_netns,
    delete_netns,
    is_alive,
    kill_session_processes,
    launch,
    link_exists,
    netns_path,
    proc_stat,
    read_pid,
    render_container,
    socket_in_netns,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.publish import start_relay
from ansible_collections.backendai.cluster.plugins.module_utils._local.sshd import (
    free_local_port,
    sshd_config,
    user_ssh_config,
    wait_for_ssh,
    write_key_files,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.state import local_container_status, session_state
from ansible_collections.backendai.cluster.plugins.module_utils._local.session import from_plan, from_raw
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import NAME_RE
from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_STATE_ROOT
from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    SANE_PATH,
    Journal,
    LocalRuntimeError,
    SessionPaths,
    flocked,
    read_json,
    read_text,
    session_names,
    tail_lines,
)

__all__ = ["LocalRuntimeError", "create_planned_session", "create_session", "destroy_session",
           "list_sessions", "session_status"]

# executable -> Debian package that provides it
_TOOLS = {
    "ip": "iproute2",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "setsid": "util-linux",
    "mount": "mount",
    "ssh": "openssh-client",
    "env": "coreutils",
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
    if not os.access(SSHD, os.X_OK):
        raise LocalRuntimeError("openssh-server is not installed: %s missing; install it with "
                                "apt-get install openssh-server" % SSHD)
    if not os.path.isfile("/etc/ssh/ssh_config"):
        raise LocalRuntimeError("openssh-client is not installed: /etc/ssh/ssh_config missing; install it with "
                                "apt-get install openssh-client")
    for tool, package in _TOOLS.items():
        if shutil.which(tool, path=SANE_PATH) is None:
            raise LocalRuntimeError("%s is not installed: %s missing from %s; install it with apt-get install %s"
                                    % (package, tool, SANE_PATH, package))


# ---------------------------------------------------------------------------- create

def _names(paths: SessionPaths, spec: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(("%s\0%s\0%s" % (paths.state_root, spec["name"], spec["session_id"])).encode()
                            ).hexdigest()[:8]
    bridge, vxlan = _local_network.net.link_names(spec["session_id"])
    return {
        "digest": digest,
        "bridge": bridge,                          # made by the session network plugin
        "vxlan": vxlan,                            # (only when the session spans agents)
        "netns": {c["hostname"]: "bai-%s-%s" % (digest, c["hostname"]) for c in spec["containers"]},
    }


def _host_networks() -> list[ipaddress.IPv4Network]:
    proc = subprocess.run(["ip", "-j", "-4", "addr", "show"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={"PATH": SANE_PATH}, check=False)
    nets = []
    with contextlib.suppress(ValueError):
        for link in json.loads(proc.stdout or b"[]"):
            for a in link.get("addr_info", []):
                net = ipaddress.IPv4Interface("%s/%s" % (a["local"], a["prefixlen"])).network
                if not net.is_loopback:
                    nets.append(net)
    return nets


def _missing_dirs(targets: list[str]) -> list[str]:
    """Directories (parents first) to create on the host for the mount targets (those
    under a container's private /tmp or /run are made in there, by mount)."""
    out: list[str] = []
    for target in targets:
        if any(target == d or target.startswith(d + "/") for d in PRIVATE_DIRS):
            continue
        chain = []
        d = target
        while not os.path.exists(d) and d not in out:
            chain.append(d)
            d = os.path.dirname(d)
        out += [c for c in reversed(chain) if c not in out]
    return out


def create_session(session: dict[str, Any], state_root: str = DEFAULT_STATE_ROOT) -> dict[str, Any]:
    """Bring up a session given as a dict (see ``_local.session.from_raw``); on any failure everything
    made so far is undone."""
    return _create(from_raw(session), state_root)


def create_planned_session(plan: SessionPlan, keys: SSHKeypair, agents: Optional[Mapping[str, Any]],
                           state_root: str = DEFAULT_STATE_ROOT) -> dict[str, Any]:
    """Bring up a placed plan (``agents``: name -> local mapping of local agents, None for this machine)."""
    return _create(from_plan(plan, keys, agents), state_root)


def _create(spec: dict[str, Any], state_root: str) -> dict[str, Any]:
    _check_environment()
    state_root = os.path.abspath(os.path.expanduser(state_root))
    os.makedirs(state_root, mode=0o700, exist_ok=True)
    paths = SessionPaths(state_root, spec["name"])
    with flocked(state_root):
        try:
            os.mkdir(paths.root, 0o700)
        except FileExistsError:
            raise LocalRuntimeError("session %s already exists in %s; destroy it first"
                                    % (spec["name"], state_root)) from None
        lock_fd = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    journal = Journal(paths.journal)
    try:
        return _bring_up(spec, paths, journal)
    except BaseException as exc:
        journal.close()
        errors = _teardown(paths, Journal.replay(paths.journal), keep_logs=False)
        note = "rolled back" if not errors else "rollback incomplete, run destroy: " + "; ".join(errors)
        if isinstance(exc, LocalRuntimeError):
            raise LocalRuntimeError("%s (%s)" % (exc.message, note)) from exc
        if isinstance(exc, Exception):
            raise LocalRuntimeError("unexpected error: %r (%s)" % (exc, note)) from exc
        raise
    finally:
        journal.close()
        os.close(lock_fd)


def _bring_up(spec: dict[str, Any], paths: SessionPaths, journal: Journal) -> dict[str, Any]:
    t0 = time.monotonic()
    names = _names(paths, spec)
    hosts = [c["hostname"] for c in spec["containers"]]
    netns = [names["netns"][h] for h in hosts]
    targets = [m["target"] for m in spec["mounts"]]
    journal.record("begin", name=spec["name"], session_id=spec["session_id"], bridge=names["bridge"],
                   netns=netns, hosts=hosts, targets=targets)
    # Never journal (hence never undo) something that is not ours.
    if link_exists(names["bridge"]):
        raise LocalRuntimeError("bridge %s already exists (left over by another session?)" % names["bridge"])
    taken = [n for n in netns if os.path.exists(netns_path(n))]
    if taken:
        raise LocalRuntimeError("network namespace %s already exists (left over by another session?)"
                                % ", ".join(taken))
    published = _write_files(spec, paths, names)

    missing = _missing_dirs(targets)
    if missing:
        journal.record("mkdirs", paths=missing)
        for d in missing:
            os.mkdir(d, 0o755)

    journal.record("netns", names=netns)
    add_netns(netns, owner=paths.root)

    t_net = time.monotonic()
    # main1 is published by portmap on this machine, by a relay behind local agents
    mappings = {h: [{"hostPort": addr[1], "containerPort": spec["ssh"]["port"], "protocol": "tcp", "hostIP": addr[0]}]
                for h, addr in published.items()} if not spec["agents"] else {}
    addresses, network = _local_network.bring_up(spec, paths, names, mappings,
                                                 [] if spec["agents"] else _host_networks(), journal)
    t_net = time.monotonic() - t_net

    main = hosts[0]
    hosts_text = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    hosts_text += ["%s\t%s" % (addresses[h], h) for h in hosts]
    write_file(paths.hosts_file, "\n".join(hosts_text) + "\n", mode=0o644)
    if main in published:
        write_file(paths.user_ssh_config, user_ssh_config(paths, main, hosts[1:], published[main],
                                                          spec["ssh"]["port"]), mode=0o644)

    journal.record("containers", hosts=hosts)
    t_ready = time.monotonic()
    _start_containers(spec, paths, names, addresses, published, journal)
    t_ready = time.monotonic() - t_ready

    containers = []
    for c in spec["containers"]:
        host = c["hostname"]
        cdir = paths.container_dir(host)
        pid, sshd_pid = read_pid(os.path.join(cdir, "pid")), read_pid(os.path.join(cdir, "sshd.pid"))
        containers.append({
            "hostname": host, "role": c["role"], "idx": c["idx"], "agent": c["agent"], "netns": names["netns"][host],
            "address": addresses[host], "pid": pid, "sshd_pid": sshd_pid,
            "pid_starttime": _starttime(pid), "sshd_starttime": _starttime(sshd_pid),
            "has_command": bool(c["command"]), "log": paths.log(host), "system_log": paths.system_log(host),
            "published": "%s:%d" % published[host] if host in published else None,
        })
    info = {
        "name": spec["name"], "session_id": spec["session_id"], "state_dir": paths.root,
        "bridge": names["bridge"], "subnet": network["subnet"], "vni": network["vni"],
        "ssh_port": spec["ssh"]["port"],
        "ssh_config": paths.user_ssh_config if main in published else None,
        "published": containers[0]["published"], "containers": containers,
        "agents": {a: {"netns": v["netns"], "underlay_ip": v["underlay_ip"]} for a, v in spec["agents"].items()},
        "vxlan": names["vxlan"] if network["spans"] else None,
        "created_at": time.time(),
        "timings": {"network": round(t_net, 3), "containers_ready": round(t_ready, 3),
                    "total": round(time.monotonic() - t0, 3)},
    }
    write_file(paths.session_json, json.dumps(info, indent=1), mode=0o644, durable=True)
    write_file(paths.started, "%f\n" % time.time(), mode=0o644)  # the batch commands start now
    journal.record("ready")
    return dict(_public(info), changed=True, state="RUNNING")


def _write_files(spec: dict[str, Any], paths: SessionPaths, names: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Everything in the state dir a container needs (no journal: destroy removes the dir);
    returns the published address of each container that publishes its ssh port."""
    for d in (paths.logs_dir, paths.cni_dir):
        os.makedirs(d, mode=0o700, exist_ok=True)
    # No DNS on the private network: fail lookups at once instead of timing out.
    write_file(paths.resolv_conf, "# backendai.cluster local session: no DNS, peers are in /etc/hosts\n"
               "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n", mode=0o644)
    ssh = spec["ssh"]
    write_key_files(paths, ssh["private_key"], ssh["public_key"], ssh["port"])
    published: dict[str, tuple[str, int]] = {}
    for c in spec["containers"]:
        host = c["hostname"]
        cdir = paths.container_dir(host)
        os.makedirs(os.path.join(cdir, "run"), mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(paths.home_dir(host), ".ssh"), mode=0o700, exist_ok=True)
        write_file(os.path.join(cdir, "sshd_config"), sshd_config(paths, ssh["port"], c["env"]), mode=0o600)
        setup = ContainerSetup(host, names["netns"][host], c["env"], c["command"], spec["mounts"])
        for fname, text in render_container(paths, setup).items():
            write_file(os.path.join(cdir, fname), text, mode=0o600)
        if c["publish"]:
            published[host] = ("127.0.0.1", free_local_port())
    return published


def _start_containers(spec: dict[str, Any], paths: SessionPaths, names: dict[str, Any], addresses: dict[str, str],
                      published: dict[str, tuple[str, int]], journal: Journal) -> None:
    """Start every container and wait until each sshd (and each published port) answers."""
    hosts = [c["hostname"] for c in spec["containers"]]
    starters = [launch(paths, h, names["netns"][h]) for h in hosts]
    for host, proc in zip(hosts, starters):
        if proc.wait() != 0:
            raise LocalRuntimeError("could not start container %s: %s"
                                    % (host, "\n".join(tail_lines(paths.system_log(host), 10))))
    targets = {h: (addresses[h], spec["ssh"]["port"]) for h in hosts}
    make_socket = None
    if spec["agents"]:
        # Behind agents the containers are reachable only over the overlay: every sshd is probed
        # from main1's namespace (so across agents), and main1 is published by a relay.
        make_socket = _overlay_prober(netns_path(names["netns"][hosts[0]]))
        for host, addr in published.items():
            journal.record("relay", host=host, published="%s:%d" % addr)
            start_relay(paths, netns_path(names["netns"][host]), addr, spec["ssh"]["port"], paths.system_log(host))
    targets.update({"%s (published)" % h: addr for h, addr in published.items()})
    wait_for_ssh(targets, 20.0 + 0.25 * len(hosts), lambda: _check_started(paths, hosts), make_socket=make_socket)


def _overlay_prober(main_ns: str) -> Callable[[str], socket.socket]:
    """Sockets for wait_for_ssh: in main1's namespace for the containers, here for published ports."""
    def make_socket(key: str) -> socket.socket:
        if key.endswith(" (published)"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            return sock
        return socket_in_netns(main_ns)
    return make_socket


def _starttime(pid: int | None) -> int | None:
    stat = proc_stat(pid) if pid else None
    return stat[1] if stat else None


def _public(info: dict[str, Any]) -> dict[str, Any]:
    out = dict(info)
    out["containers"] = [{k: v for k, v in c.items() if not k.endswith("_starttime") and k != "has_command"}
                         for c in info["containers"]]
    return out


def _check_started(paths: SessionPaths, hosts: list[str]) -> None:
    for host in hosts:
        cdir = paths.container_dir(host)
        for pidfile, what in (("pid", "supervisor"), ("sshd.pid", "sshd")):
            pid = read_pid(os.path.join(cdir, pidfile))
            if pid is not None and not is_alive(pid):
                raise LocalRuntimeError("container %s: %s exited during start-up:\n%s" % (
                    host, what, "\n".join(tail_lines(paths.system_log(host), 15))))


# ---------------------------------------------------------------------------- destroy

def _teardown(paths: SessionPaths, entries: list[dict[str, Any]], keep_logs: bool) -> list[str]:
    """Undo the journal's side effects, newest first; remove the state dir if all went."""
    begin = next((e for e in entries if e["op"] == "begin"), None)
    # First every process of the session: containers, and whatever a killed creator left
    # running (a CNI plugin finishing its ADD after our DEL would leave its rules behind).
    errors = kill_session_processes(begin["netns"] if begin else [], paths.root)
    if errors:
        return errors
    for entry in reversed(entries):
        op = entry["op"]
        if op == "network":
            errors += _local_network.network_down(paths, entry)
        elif op == "slot" and not errors:  # only once the session's network is gone from every agent
            _local_network.release_slots(entry["slots_dir"], entry["owner"])
        elif op == "netns":
            errors += delete_netns(entry["names"])
        elif op == "mkdirs":
            errors += _remove_dirs(paths, entry["paths"])
    if errors:
        return errors
    if any(e["op"] == "network" for e in entries):
        # After our own network is gone: of concurrent destroys, the last one prunes.
        with contextlib.suppress(LocalRuntimeError):
            prune_shared_chains()
    if keep_logs:
        for name in os.listdir(paths.root):
            if name not in ("logs", "session.json"):
                path = os.path.join(paths.root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
    else:
        shutil.rmtree(paths.root)
    return []


def _other_sessions(paths: SessionPaths) -> list[str]:
    return [n for n in session_names(paths.state_root)
            if n != paths.name and os.path.exists(os.path.join(paths.state_root, n, "journal"))]


def _remove_dirs(paths: SessionPaths, created: list[str]) -> list[str]:
    """rmdir the mount targets this session created, unless another session mounts there
    (removing a mountpoint would detach it in that session's containers)."""
    in_use: list[str] = []
    for other in _other_sessions(paths):
        for e in Journal.replay(os.path.join(paths.state_root, other, "journal")):
            if e["op"] == "begin":
                in_use += e.get("targets", [])
    errors = []
    for d in reversed(created):
        if any(t == d or t.startswith(d.rstrip("/") + "/") for t in in_use):
            continue
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError as e:
            if os.path.isdir(d) and os.listdir(d):
                continue  # someone put files there: not ours to delete
            errors.append("rmdir %s: %s" % (d, e))
    return errors


def destroy_session(name: str, state_root: str = DEFAULT_STATE_ROOT, keep_logs: bool = False) -> dict[str, Any]:
    """Idempotent; also cleans up after a create that was killed half-way."""
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
        if not has_journal and keep_logs:
            return {"changed": False, "name": name, "state": "TERMINATED", "logs": paths.logs_dir}
        errors = _teardown(paths, Journal.replay(paths.journal), keep_logs)
        if errors:
            raise LocalRuntimeError("destroy of session %s incomplete (run it again): %s" % (name, "; ".join(errors)))
    finally:
        os.close(fd)
    result: dict[str, Any] = {"changed": True, "name": name, "elapsed": round(time.monotonic() - t0, 3)}
    if keep_logs:
        result.update(state="TERMINATED", logs=paths.logs_dir)
    else:
        result.update(state="missing")
    return result


# ---------------------------------------------------------------------------- status

def _container_status(paths: SessionPaths, c: dict[str, Any], log_lines: int) -> dict[str, Any]:
    """A container's status in the job model both backends share (see ``_session_state.local_container_status``)."""
    host = c["hostname"]
    supervisor = is_alive(c.get("pid"), c.get("pid_starttime"))
    sshd = is_alive(c.get("sshd_pid"), c.get("sshd_starttime"))
    code_text = (read_text(paths.exitcode(host)) or "").strip()
    exit_code = int(code_text) if code_text.lstrip("-").isdigit() else None
    has_command = bool(c.get("has_command", True))
    status, reason = local_container_status(has_command, supervisor, sshd, exit_code)
    if not has_command:
        command = "none"
    elif exit_code is not None:
        command = "exited"
    else:
        command = "running" if supervisor else "killed"
    out = {"hostname": host, "state": status, "command": command, "reason": reason,
           "exit_code": exit_code, "address": c.get("address"), "netns": c.get("netns"),
           "pid": c.get("pid"), "sshd_pid": c.get("sshd_pid"), "published": c.get("published"),
           "log": paths.log(host)}
    if log_lines > 0:
        out["log_tail"] = tail_lines(paths.log(host), log_lines)
    return out


def session_status(name: str, state_root: str = DEFAULT_STATE_ROOT, log_lines: int = 0) -> dict[str, Any]:
    """The session's state by the rule both backends share (``_session_state.session_state``: RUNNING,
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
    containers = [_container_status(paths, c, log_lines) for c in info["containers"]]
    state = session_state([c["state"] for c in containers], stopped=not has_journal)
    public = _public(info)
    public.update(exists=True, state=state, containers=containers)
    return public


def list_sessions(state_root: str = DEFAULT_STATE_ROOT) -> list[dict[str, Any]]:
    state_root = os.path.abspath(os.path.expanduser(state_root))
    out = []
    for name in session_names(state_root):
        if not NAME_RE.match(name):
            continue
        st = session_status(name, state_root)
        out.append({"name": name, "session_id": st.get("session_id"), "state": st["state"],
                    "containers": len(st.get("containers", [])), "published": st.get("published")})
    return out
