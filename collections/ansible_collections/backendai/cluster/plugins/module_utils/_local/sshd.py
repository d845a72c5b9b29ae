# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SSH of the local runtime: key files, sshd and client configs, readiness polling.

One keypair per session serves as every container's host key and as the authorized
key; known_hosts pins it for every host name (``* <pubkey>``), so clients run with
StrictHostKeyChecking=yes and never prompt.  A container's environment reaches ssh
shells through sshd's ``SetEnv``.  sshd runs as root and lets in only the session user
(``AllowUsers``), never root unless the spec's user is root; the user's keys are in its
``~/.ssh`` (``_local.account.make_home`` makes it; the bring-up writes :func:`key_files` there).
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
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import ROOT_USER

_CLIENT_OPTIONS = (
    "IdentitiesOnly yes",
    "GlobalKnownHostsFile /dev/null",
    "StrictHostKeyChecking yes",
    "UpdateHostKeys no",
    "CheckHostIP no",
    "BatchMode yes",
    "LogLevel ERROR",
)


#: What the state directory's ``ssh/`` holds of the session's key files (:func:`key_files`): the key pair (the
#: containers' host key, and the host's client key for the state directory's ssh_config) and the known_hosts
#: that ssh_config names. Logins use the user's own ``~/.ssh``, which holds them all.
STATE_KEY_FILES = ("id_cluster", "id_cluster.pub", "known_hosts")


def key_files(private_key: str, public_key: str) -> t.Dict[str, t.Tuple[str, int]]:
    """The session's key files, name -> (text, mode): the key pair, ``authorized_keys`` (the private key and it
    0600: what sshd's StrictModes wants) and ``known_hosts`` pinning the key for every host name."""
    pub = public_key.strip() + "\n"
    return {"id_cluster": (private_key.strip() + "\n", 0o600), "id_cluster.pub": (pub, 0o644),
            "authorized_keys": (pub, 0o600), "known_hosts": ("* " + pub, 0o644)}


def client_config(port: int, user: str, home: str) -> str:
    """The ssh client config of the containers (bound over /etc/ssh/ssh_config): the user's own copies of the keys,
    by absolute path (root entering a container with nsenter logs in as the user too)."""
    client = ["Host *", "    Port %d" % port, "    User " + user, "    IdentityFile %s/.ssh/id_cluster" % home,
              "    UserKnownHostsFile %s/.ssh/known_hosts" % home]
    return "\n".join(client + ["    " + o for o in _CLIENT_OPTIONS]) + "\n"


def _setenv_token(name: str, value: str) -> str:
    # sshd_config tokens: double quotes group, backslash escapes '"' and '\'.
    return '"%s=%s"' % (name, value.replace("\\", "\\\\").replace('"', '\\"'))


def sshd_config(paths: SessionPaths, port: int, env: t.Dict[str, str], user: str) -> str:
    ssh_dir = paths.in_container(paths.ssh_dir)
    lines = [
        "# backendai.cluster local runtime",
        "Port %d" % port,
        "AddressFamily inet",
        "ListenAddress 0.0.0.0",
        "HostKey %s/id_cluster" % ssh_dir,
        # the user's own ~/.ssh/authorized_keys (0600, owned by it: StrictModes holds)
        "AuthorizedKeysFile .ssh/authorized_keys",
        "PermitRootLogin %s" % ("prohibit-password" if user == ROOT_USER else "no"),
        "AllowUsers " + user,
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes yes",
        "PidFile none",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "AllowTcpForwarding yes",
        "X11Forwarding no",
        "MaxStartups 100:30:200",
        "Subsystem sftp internal-sftp",
    ]
    if env:
        lines.append("SetEnv " + " ".join(_setenv_token(k, v) for k, v in sorted(env.items())))
    return "\n".join(lines) + "\n"


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


def wait_for_ssh(targets: t.Dict[str, t.Tuple[str, int]], timeout: float, check: t.Callable[[], None],
                 check_interval: float = 0.05, attempt_timeout: float = 1.0,
                 make_socket: t.Optional[t.Callable[[str], socket.socket]] = None,
                 ready: t.Optional[t.Callable[[str], bool]] = None, retry_interval: float = 0.01) -> float:
    """Connect to every target until each sends an SSH banner; returns the seconds taken.

    ``check`` is called periodically and may raise (e.g. a container's supervisor died).
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
                check()
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
