# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network namespaces and the processes in them, as the local backend makes and removes them.

Every container of a local session is an engine container that joins a named network namespace (``ip netns``) made
here before the CNI plugin attaches it to the session network (``--network ns:/run/netns/NAME``); a local agent is
one too. :func:`socket_in_netns` makes a socket inside one (the bring-up's probes of the containers' sshd behind
local agents); :func:`kill_session_processes` ends whatever still runs for a session at teardown: processes in its
namespaces and processes tagged with its state directory (``_local.state.owner_env``: the relay that publishes
main1, a CNI plugin a killed creator left running).
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.run import ip_batch
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import OWNER_ENV

NETNS_DIR = "/run/netns"
#: setns(2)'s namespace type of a network namespace (linux/sched.h).
CLONE_NEWNET = 0x40000000
_LIBC: t.List[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


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
    if _libc().setns(fd, CLONE_NEWNET) != 0:
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
