# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A torch-style ``env://`` rendezvous across a real local session, using only the injected variables.

The session's batch command is tests/support/rendezvous.py's RENDEZVOUS (what torch's ``env://`` init does, with
plain sockets), so the test passes only if the names resolve, the port is reachable inside the session
network and the ranks are right.
"""

from __future__ import annotations

import os
import time
import typing as t
import uuid

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend

import local_session_dict  # the example image and the Nomad job's renderer
from rendezvous import RENDEZVOUS

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"),
                                reason="the local backend needs root and the CNI plugins (scripts/setup)")
pytestmark = [pytest.mark.machine, needs_root]


def test_env_rendezvous_finds_main1(tmp_path: t.Any) -> None:
    state = str(tmp_path / "state")
    name = "rdv-" + uuid.uuid4().hex[:8]
    spec = {"name": name, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": 4, "master_port": 29500,
            "resources": {"cpu": 800, "memory": 128}, "command": ["python3", "-c", RENDEZVOUS]}
    try:
        LocalBackend(state, task=local_session_dict.TASK).present(spec)
        deadline = time.monotonic() + 30
        while True:
            (view,) = LocalBackend(state, task=local_session_dict.TASK).info(name=name, log_lines=5)
            codes = {c["hostname"]: c["exit_code"] for c in view["containers"]}
            if all(code is not None for code in codes.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        tails = {c["hostname"]: c["log_tail"] for c in view["containers"]}
        assert codes == {"main1": 0, "sub1": 0, "sub2": 0, "sub3": 0}, tails
        assert tails["main1"][-1:] == ["rendezvous complete: [1, 2, 3]"]
        assert tails["sub2"][-1:] == ["rank 2 joined main1"]
    finally:
        assert LocalBackend(state, task=local_session_dict.TASK).absent(name)["changed"]
