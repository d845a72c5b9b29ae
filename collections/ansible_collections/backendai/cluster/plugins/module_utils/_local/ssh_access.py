# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How this machine reaches a local session over ssh: the session's key files in its state directory, the user's
``ssh_config`` (main1 on its published port, the others through it), a free port to publish on, and the wait until
every container's sshd answers.

One keypair per session serves as every container's host key and as the authorized key (the job's entrypoint puts
it in the user's ``~/.ssh`` inside each container); ``known_hosts`` pins it for every host name (``* <pubkey>``), so
the client runs with StrictHostKeyChecking=yes and never prompts.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    LocalRuntimeError,
    SessionPaths,
)

_CLIENT_OPTIONS = (
    "IdentitiesOnly yes",
    "GlobalKnownHostsFile /dev/null",
    "StrictHostKeyChecking yes",
    "UpdateHostKeys no",
    "CheckHostIP no",
    "BatchMode yes",
    "LogLevel ERROR",
)


#: What the state directory's ``ssh/`` holds (:func:`key_files`): the key pair (the host's client key for the state
#: directory's ssh_config) and the known_hosts that ssh_config names.
STATE_KEY_FILES = ("id_cluster", "id_cluster.pub", "known_hosts")


def key_files(private_key: str, public_key: str) -> t.Dict[str, t.Tuple[str, int]]:
    """The session's key files of the state directory (:data:`STATE_KEY_FILES`), name -> (text, mode): the key pair
    and ``known_hosts`` pinning the key for every host name."""
    pub = public_key.strip() + "\n"
    return {"id_cluster": (private_key.strip() + "\n", 0o600), "id_cluster.pub": (pub, 0o644),
            "known_hosts": ("* " + pub, 0o644)}


def user_ssh_config(paths: SessionPaths, main: str, subs: t.List[str], published: t.Tuple[str, int],
                    port: int, user: str) -> str:
    """``ssh -F <state>/ssh_config main1`` from the host; subs are reached through main1."""
    lines = ["# backendai.cluster local session %s" % paths.name,
             "Host " + main, "    HostName " + published[0], "    Port %d" % published[1]]
    if subs:
        lines += ["Host " + " ".join(subs), "    Port %d" % port, "    ProxyJump " + main]
    lines += ["Host " + " ".join([main] + subs),
              "    User " + user,
              "    IdentityFile " + paths.private_key,
              "    UserKnownHostsFile " + os.path.join(paths.ssh_dir, "known_hosts")]
    lines += ["    " + o for o in _CLIENT_OPTIONS]
    return "\n".join(lines) + "\n"


def free_local_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_ssh(targets: t.Dict[str, t.Tuple[str, int]], timeout: float, check: t.Callable[[], t.Optional[t.Set[str]]],
                 check_interval: float = 0.05, attempt_timeout: float = 1.0,
                 make_socket: t.Optional[t.Callable[[str], socket.socket]] = None,
                 ready: t.Optional[t.Callable[[str], bool]] = None, retry_interval: float = 0.01) -> float:
    """Connect to every target until each sends an SSH banner; returns the seconds taken.

    ``check`` is called periodically and may raise (e.g. a container's supervisor died), or return the targets no
    longer to wait for (a batch container whose command ended).
    An attempt that gets no answer within ``attempt_timeout`` (a lost SYN) is retried; one that is
    refused or closed, after ``retry_interval``.
    ``make_socket(key)`` makes the (non-blocking) socket of a target, e.g. in another network
    namespace; by default a plain one of this process. ``ready(key)``: whether a target is worth a
    connection yet (its container started); by default every target is, from the start.
    """
    start = time.monotonic()
    deadline = start + timeout
    pending = dict(targets)
    retry_at = dict.fromkeys(pending, 0.0)
    active: t.Dict[str, t.Tuple[socket.socket, bytearray, float]] = {}
    sel = selectors.DefaultSelector()
    next_check = start + check_interval

    def drop(key: str, retry: bool) -> None:
        sock = active.pop(key)[0]
        sel.unregister(sock)
        sock.close()
        if retry:
            retry_at[key] = time.monotonic() + retry_interval

    try:
        while pending:
            now = time.monotonic()
            if now >= next_check:
                for key in set(check() or ()) & set(pending):
                    del pending[key]
                    if key in active:
                        drop(key, retry=False)
                next_check = now + check_interval
            if now > deadline:
                raise LocalRuntimeError("sshd did not accept connections within %.0f s on: %s" % (
                    timeout, ", ".join("%s (%s:%d)" % ((k,) + pending[k]) for k in sorted(pending))))
            for key in [k for k, a in active.items() if now - a[2] > attempt_timeout]:
                drop(key, retry=True)
            for key, addr in pending.items():
                if key not in active and retry_at[key] <= now and (ready is None or ready(key)):
                    if make_socket is None:
                        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        sock.setblocking(False)
                    else:
                        sock = make_socket(key)
                    err = sock.connect_ex(addr)
                    if err not in (0, errno.EINPROGRESS):
                        sock.close()
                        retry_at[key] = now + retry_interval
                        continue
                    active[key] = (sock, bytearray(), now)
                    sel.register(sock, selectors.EVENT_READ, key)
            for sk, _events in sel.select(timeout=0.01):
                key = sk.data
                sock, buf = active[key][:2]
                try:
                    data = sock.recv(64)
                except BlockingIOError:
                    continue
                except OSError:
                    drop(key, retry=True)
                    continue
                if not data:
                    drop(key, retry=True)
                    continue
                buf += data
                if len(buf) >= 4:
                    ok = bytes(buf[:4]) == b"SSH-"
                    drop(key, retry=not ok)
                    if ok:
                        del pending[key]
    finally:
        for sock, _buf, _started in active.values():
            sock.close()
        sel.close()
    return time.monotonic() - start
