# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Namespaces and the processes in them: what makes a local "container".

A container is a process tree in its own network namespace (a named ``ip netns``), UTS
namespace (its hostname), IPC namespace, PID namespace (with its own /proc: ``ps`` shows the container
only) and mount namespace (private /run and /tmp, the session user's account and its own home, /etc/hosts
and ssh client config, the session's mounts: ``_local.account``; a private minimal /dev with its own devpts
instance and /dev/shm, a read-only /sys of its own), in its cgroups (``_local.cgroups``).  ``_local.spawn`` makes the cgroups, namespaces, hostname and
mounts in one fork of the runtime and execs the container's first process, the PID namespace's init: a small
``sh`` supervisor (``init.sh``, with the container's own /proc and no_new_privs, inherited by all it starts) that
starts sshd (as root), runs the user command as the session user with exactly its environment, no
capabilities once the session is up, records the command's exit code and then ends the container (the kernel
kills whatever is left in the PID namespace when its init ends); without a command it waits for sshd.  The
init is never a child of the caller (an Ansible module exits long before its containers do).
"""
from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import socket
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.backendai.cluster.plugins.module_utils._local import account
from ansible_collections.backendai.cluster.plugins.module_utils._local.run import ip_batch
from ansible_collections.backendai.cluster.plugins.module_utils._local.spawn import (
    CLONE_NEWNET,
    INIT_SHELL,
    LINK_TYPE,
    MOVE_OPTION,
    NODE_TYPE,
    Container,
    MountCall,
    libc,
    mount_calls,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Mount, UserSpec
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    CONTAINER_STATE_DIR,
    OWNER_ENV,
    SANE_PATH,
    SessionPaths,
    owner_env,
    read_text,
)

NETNS_DIR = "/run/netns"
SSHD = "/usr/sbin/sshd"
MOUNTS_STAGE = "/run/backendai-cluster-mounts"
# Directories every container gets a private tmpfs on.
PRIVATE_DIRS = ("/tmp", "/run")
# Login records sshd would otherwise append to on the host.
LOGIN_RECORDS = ("/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog")
#: The devices of a container's own /dev: those an OCI runtime gives every container (runc's
#: ``libcontainer/specconv`` AllowedDevices: null, zero, full, random, urandom, tty), as (name, major, minor).
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))
#: ... and its links: ptmx to its own devpts instance's (runc's setupPtmx), the standard streams.
DEV_LINKS = (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))
# The user's command: no_new_privs and no capabilities at all (none it holds, none it could inherit or get
# back by exec'ing anything: the bounding set is empty), whichever user it runs as. setpriv options: the one
# setpriv that runs the command also switches the user (after the switch it could no longer drop the bounding
# set, before it it could no longer switch).
CONFINE_OPTIONS = "--no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all"


@dataclass
class ContainerSetup:
    """What init.sh needs to know about one container."""

    hostname: str
    netns: str
    env: t.Mapping[str, str]
    command: t.Sequence[str]
    mounts: t.Sequence[Mount] = ()
    #: The session user (``_local.account``).
    user: UserSpec = field(default_factory=UserSpec)
    cgroups: t.List[str] = field(default_factory=list)  # the container's cgroup directories, joined first
    shm_mb: int = 64  # size of its private /dev/shm (see _local.cgroups.shm_size_mb)


#: A local agent's name (``local_agents`` makes them, a session placed on them checks them): it names the agent's
#: network namespace and its links.
LOCAL_AGENT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def add_netns(names: t.List[str], owner: str) -> None:
    ip_batch(["netns add " + n for n in names], owner=owner, what="ip netns add")


def delete_netns(names: t.Iterable[str]) -> t.List[str]:
    present = [n for n in names if os.path.exists(netns_path(n))]
    if not present:
        return []
    proc = ip_batch(["netns delete " + n for n in present], force=True, check=False)
    left = [n for n in present if os.path.exists(netns_path(n))]
    if left:
        return ["ip netns delete %s failed: %s" % (", ".join(left), proc.stderr.decode().strip())]
    return []


def _setns(fd: int) -> None:
    if libc().setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def socket_in_netns(path: str) -> socket.socket:
    """A non-blocking TCP socket that lives in the network namespace ``path``.

    The calling thread enters the namespace (setns affects only the calling thread), makes the
    socket and returns to its own namespace; the socket keeps the namespace it was made in."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(own)
    finally:
        os.close(own)
    sock.setblocking(False)
    return sock


def link_exists(name: str) -> bool:
    return os.path.exists(os.path.join("/sys/class/net", name))


def mount_entries(paths: SessionPaths, setup: ContainerSetup) -> t.List[t.Tuple[str, str, str, str]]:
    """The container's mounts before its init starts, in order (fstab-style entries: source, target, type,
    options; ``_local.spawn`` makes them): a private /run staged beside the state it must show, moved over
    /run, then the rest (whose sources are seen through that /run)."""
    cdir = paths.container_dir(setup.hostname)
    staging = os.path.join(cdir, "run")
    stage = [
        ("tmpfs", staging, "tmpfs", "mode=0755,nosuid,nodev"),
        ("tmpfs", staging + "/sshd", "tmpfs", "mode=0755,nosuid,nodev,X-mount.mkdir"),
        (paths.root, staging + CONTAINER_STATE_DIR[len("/run"):], "none", "bind,X-mount.mkdir"),
    ]
    final = [
        ("tmpfs", "/tmp", "tmpfs", "mode=1777,nosuid,nodev"),
        (paths.in_container(paths.hosts_file), "/etc/hosts", "none", "bind"),
        (paths.in_container(os.path.join(paths.ssh_dir, "config")), "/etc/ssh/ssh_config", "none", "bind"),
    ]
    if os.path.isfile("/etc/resolv.conf") and not os.path.islink("/etc/resolv.conf"):
        # (a symlink into /run dangles under the private /run: lookups fail fast anyway)
        final.append((paths.in_container(paths.resolv_conf), "/etc/resolv.conf", "none", "bind"))
    # The session user and the container's own home, as a container has: the host's dotfiles (shell start-up
    # files, keys, ssh config that would win over ssh_config) stay out, and what is written to ~ goes with the session.
    final += account.user_mounts(setup.user, paths.in_container(paths.home_dir(setup.hostname)),
                                 paths.in_container(paths.passwd), paths.in_container(paths.group))
    final += [("/dev/null", f, "none", "bind") for f in LOGIN_RECORDS if os.path.isfile(f)]
    final += dev_entries()
    # Its own IPC namespace's shared memory; and its own sysfs, read-only (its network namespace's links;
    # the machine's cgroup tree is not in it: a process cannot move itself out of its cgroups).
    final.append(("container-shm", "/dev/shm", "tmpfs", "nosuid,nodev,mode=1777,size=%dm,X-mount.mkdir" % setup.shm_mb))
    final.append(("container-sysfs", "/sys", "sysfs", "ro,nosuid,nodev,noexec"))
    for i, mount in enumerate(setup.mounts):
        # Sources are bound before /tmp is covered, targets after: both may live under /tmp.
        ro = ",ro" if mount.read_only else ""
        stage.append((mount.source, "%s%s/%d" % (staging, MOUNTS_STAGE[len("/run"):], i),
                      "none", "bind%s,X-mount.mkdir" % ro))
        # X-mount.mkdir: targets under the private /tmp or /run exist only in here.
        final.append(("%s/%d" % (MOUNTS_STAGE, i), mount.target, "none", "bind%s,X-mount.mkdir" % ro))
    return stage + [(staging, "/run", "none", MOVE_OPTION)] + final


def dev_entries() -> t.List[t.Tuple[str, str, str, str]]:
    """The container's own minimal /dev (a tmpfs with DEVICES and DEV_LINKS) and its own devpts instance, with
    ``/dev/ptmx`` leading to that instance's ptmx: its terminals are its own, and the machine's (and every other
    session's) are not in it, so nobody in it can write to them whatever their owner (``ptmxmode=0666``: the
    instance's ptmx is usable; ``gid=5``: the tty group, as the machine's devpts gives terminals)."""
    out = [("container-dev", "/dev", "tmpfs", "mode=0755,nosuid,noexec,size=64k")]
    out += [("%d:%d" % (major, minor), "/dev/" + name, NODE_TYPE, "") for name, major, minor in DEVICES]
    out.append(("container-devpts", "/dev/pts", "devpts",
                "newinstance,ptmxmode=0666,mode=0620,gid=5,nosuid,noexec,X-mount.mkdir"))
    return out + [(target, "/dev/" + name, LINK_TYPE, "") for name, target in DEV_LINKS]


def proc_entries() -> t.List[t.Tuple[str, str, str, str]]:
    """The PID namespace's own /proc (over the machine's), with the kernel's knobs read-only: mounted by the
    container's init (a proc mount shows the PID namespace of the process that makes it), before its exec."""
    procs = [("container-proc", "/proc", "proc", "nosuid,nodev,noexec")]
    return procs + [(p, p, "none", "bind,ro,nosuid,nodev,noexec") for p in ("/proc/sys", "/proc/sysrq-trigger") if os.path.exists(p)]


def render_container(paths: SessionPaths, setup: ContainerSetup) -> t.Dict[str, str]:
    """The files (relative to the container dir) that make up a container's init."""
    inside = paths.in_container(paths.container_dir(setup.hostname))
    q = shlex.quote
    # Cgroups, namespaces, hostname, mounts and /proc are made before init.sh starts (_local.spawn), and
    # init.sh and all it starts run with no_new_privs (sshd and its logins can never gain privileges by exec).
    lines = [
        "# backendai.cluster local runtime: container %s of session %s" % (setup.hostname, paths.name),
        "set -eu",
        # env --default-signal: a background job of sh starts with SIGINT/SIGQUIT ignored.
        "env --default-signal %s -D -e -f %s &" % (SSHD, q(inside + "/sshd_config")),
        "S=$!",
        "set +e",
    ]
    if setup.command:
        # A batch container: its command starts once the whole session is up (the creator holds the start gate's
        # lock until then: a shared lock waits without polling; no `started` after it means the create failed),
        # and the container ends with it (sshd goes too): complete on exit 0, failed otherwise; no restart (see
        # docs/local-runtime.md).
        started = q(paths.in_container(paths.started))
        lines += [
            "flock -s %s true" % q(paths.in_container(paths.start_gate)),
            "[ -e %s ] || exit 75" % started,
        ]
        env = dict(setup.env)
        env.setdefault("PATH", SANE_PATH)
        env.setdefault("HOME", setup.user.home)
        exitcode = q(paths.in_container(paths.exitcode(setup.hostname)))
        assignments = " ".join(q("%s=%s" % kv) for kv in sorted(env.items()))
        lines += [
            "cd %s 2>/dev/null || cd /" % q(env["HOME"]),
            # as the session user (sshd switches to it for logins itself), confined: one setpriv does both
            "%s %s -- env -i --default-signal %s %s >> %s 2>&1 < /dev/null" % (
                account.switch_prefix(setup.user), CONFINE_OPTIONS, assignments, " ".join(q(a) for a in setup.command),
                q(paths.in_container(paths.log(setup.hostname)))),
            # sshd is stopped (and reaped) before the exit code is recorded: a status that reads the code never
            # sees a finished container whose sshd still takes logins.
            "R=$?",
            "kill $S 2>/dev/null",
            "wait $S",
            "echo $R > %s.tmp && mv -f %s.tmp %s" % (exitcode, exitcode, exitcode),
        ]
    # An interactive container lives as long as its sshd.
    lines.append("wait")
    return {"init.sh": "\n".join(lines) + "\n"}


def container_start(paths: SessionPaths, setup: ContainerSetup, proc_mounts: t.List[MountCall]) -> Container:
    """What ``_local.spawn`` needs to start the container (its init.sh rendered and written before; ``proc_mounts``:
    ``mount_calls(proc_entries())``, the same for every container of the session)."""
    cdir = paths.container_dir(setup.hostname)
    return Container(setup.hostname, netns_path(setup.netns), [os.path.join(d, "cgroup.procs") for d in setup.cgroups],
                     mount_calls(mount_entries(paths, setup)), proc_mounts, [INIT_SHELL, paths.in_container(os.path.join(cdir, "init.sh"))],
                     owner_env(paths.root), paths.system_log(setup.hostname))


def sshd_of(init_pid: int) -> t.Optional[int]:
    """The pid on this machine of the sshd a container's init started (its child named sshd), None if none
    runs. The init's children from ``/proc/<pid>/task/<pid>/children`` (CONFIG_PROC_CHILDREN), else by a
    scan of every process's parent."""
    children_file = "/proc/%d/task/%d/children" % (init_pid, init_pid)
    text = read_text(children_file)
    if text is not None:
        children = [int(p) for p in text.split()]
    else:
        children = []
        for entry in os.listdir("/proc"):
            stat = read_text("/proc/%s/stat" % entry) if entry.isdigit() else None
            if stat and stat.rpartition(")")[2].split()[1:2] == [str(init_pid)]:
                children.append(int(entry))
    for pid in children:
        if (read_text("/proc/%d/comm" % pid) or "").strip() == "sshd" and is_alive(pid):
            return pid
    return None


#: ``PF_EXITING`` in the flags of ``/proc/<pid>/stat`` (include/linux/sched.h): the process is in its exit. A PID
#: namespace's init killed from outside stays in it, neither running nor yet a zombie, until the kernel has ended
#: and reaped everything else in the namespace (``zap_pid_ns_processes``), its namespaces already released.
PF_EXITING = 0x4


def proc_stat(pid: int) -> t.Optional[t.Tuple[str, int, int]]:
    """(state letter, start time in clock ticks, flags) of a process, None if it does not exist."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[19]), int(fields[6])


def is_alive(pid: t.Optional[int], starttime: t.Optional[int] = None) -> bool:
    """Running (not a zombie, not in its exit) and, if given, the same process (start time) as recorded."""
    if not pid:
        return False
    stat = proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X") or stat[2] & PF_EXITING:
        return False
    return starttime is None or stat[1] == starttime


def _ns_key(path: str) -> t.Optional[t.Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def session_pids(netns_names: t.Iterable[str], owner: str) -> t.List[int]:
    """Live processes in one of the network namespaces, or started for the session (see
    owner_env(); e.g. CNI plugins or ``ip`` still running for a creator that was killed)."""
    keys = {k for k in (_ns_key(netns_path(n)) for n in netns_names) if k is not None}
    tag = ("%s=%s" % (OWNER_ENV, owner)).encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        if keys and _ns_key("/proc/%d/ns/net" % pid) in keys:
            found.append(pid)
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if tag in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            pass
    return [p for p in found if is_alive(p)]


def kill_session_processes(netns_names: t.Iterable[str], owner: str, timeout: float = 5.0) -> t.List[str]:
    """SIGKILL every process of the session until none is left; returns the errors."""
    names = list(netns_names)
    deadline = time.monotonic() + timeout
    while True:
        pids = session_pids(names, owner)
        if not pids:
            return []
        if time.monotonic() > deadline:
            return ["processes of the session survived SIGKILL: %s" % " ".join(map(str, pids))]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
