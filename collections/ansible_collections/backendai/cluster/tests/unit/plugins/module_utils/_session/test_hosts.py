# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session's hosts file: what the local runtime writes (``hosts_text``) is what the hosts script a Nomad task
runs (``HOSTS_SCRIPT``, run here with ``sh``) makes of the same file and peers, and running it again changes nothing.
No root needed (the bind mounts of the file are tested in tests/local_runtime)."""

from __future__ import annotations

import subprocess
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.hosts import HOSTS_SCRIPT, hosts_text, peers_text

BASE = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
PEERS = {"main1": "10.200.0.2", "sub1": "10.200.0.3", "sub2": "10.200.0.4"}


def _script(tmp_path: t.Any, hosts: str, peers: t.Mapping[str, str]) -> str:
    (tmp_path / "hosts").write_text(hosts)
    (tmp_path / "peers").write_text(peers_text(peers))
    subprocess.run(["sh", "-c", HOSTS_SCRIPT, "hosts.sh", str(tmp_path / "peers"), str(tmp_path / "hosts")], check=True)
    return (tmp_path / "hosts").read_text()


def test_hosts_text_is_what_the_script_writes(tmp_path: t.Any) -> None:
    written = hosts_text(BASE, PEERS)
    assert written == _script(tmp_path, BASE, PEERS)
    assert written.startswith(BASE) and written.count("10.200.0.3 sub1\n") == 1
    assert _script(tmp_path, written, PEERS) == written  # the script on the file the runtime wrote: no change
    moved = dict(PEERS, sub1="10.200.0.9")
    assert _script(tmp_path, written, moved) == hosts_text(BASE, moved)
