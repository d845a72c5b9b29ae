# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Publishing main1's sshd on this host's loopback when main1 sits behind a local agent.

A container behind a local agent is reachable only from inside that agent's overlay, so the
portmap plugin (which publishes on the agent's own addresses) cannot reach this host's
``127.0.0.1``. Instead a small relay publishes it: the listening socket is made here, in the
host's namespace, on ``127.0.0.1:<port>``; the relay process inherits it and runs inside main1's
network namespace, where it connects each accepted client to ``127.0.0.1:<ssh port>``. It is
started with the session's owner tag (``owner_env``), so destroy kills it with the containers.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    LocalRuntimeError,
    SessionPaths,
    owner_env,
)

RELAY = r"""
import socket, sys, threading
listener = socket.socket(fileno=int(sys.argv[1]))
port = int(sys.argv[2])
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def serve(client):
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()
while True:
    conn, _peer = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def start_relay(paths: SessionPaths, netns_file: str, published: t.Tuple[str, int], port: int, log: str) -> None:
    """Listen on ``published`` here and relay to ``127.0.0.1:port`` inside the namespace ``netns_file``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(published)
        listener.listen(128)
        fd = listener.fileno()
        os.set_inheritable(fd, True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                ["setsid", "-f", "nsenter", "--net=" + netns_file, "--", sys.executable, "-c", RELAY, str(fd), str(port)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/", env=owner_env(paths.root), pass_fds=(fd,))
        if proc.wait() != 0:
            raise LocalRuntimeError("could not start the relay publishing main1 on %s:%d" % published)
    except OSError as e:
        raise LocalRuntimeError("could not publish main1 on %s:%d: %s" % (published[0], published[1], e)) from None
    finally:
        listener.close()
