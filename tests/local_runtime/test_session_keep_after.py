# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``keep_after`` on the local backend, with real engine containers (docs/session-lifecycle.md): once every command
ended the session is TERMINATED, its containers stay up ``keep_after`` seconds (``ssh main1`` still works, the logs
are there), then the session's reaper removes it whole (containers, logs, network, state directory)."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytest

import images

from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")

TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
KEEP = 6


def test_a_finished_session_stays_keep_after_seconds_then_is_removed(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "keep-after"
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": 2,
            "resources": {"cpu": 100, "memory": 64}, "command": ["sh", "-c", "echo done $BACKENDAI_CLUSTER_HOST"],
            "keep_after": KEEP}
    b = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
    paths = SessionPaths(os.path.abspath(state_root), name)
    try:
        b.present(spec)
        deadline = time.monotonic() + 30
        while True:
            (view,) = b.info(name=name, log_lines=1)
            if view["state"] == "TERMINATED" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        finished = time.monotonic()
        assert view["state"] == "TERMINATED", view
        assert {(c["status"], c["exit_code"]) for c in view["containers"]} == {("complete", 0)}, view["containers"]
        # kept: the containers are up (their sshd answers), the logs are there
        config = os.path.join(paths.root, "ssh_config")
        got = subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "main1", "hostname"],
                             capture_output=True, text=True, timeout=30)
        assert (got.returncode, got.stdout.strip()) == (0, "main1"), got.stderr
        assert view["containers"][1]["log_tail"] == ["done sub1"], view["containers"][1]
        assert os.path.isdir(paths.root)
        # then removed, by nobody but the session's reaper
        while os.path.exists(paths.root) and time.monotonic() - finished < KEEP + 30:
            time.sleep(0.2)
        assert not os.path.exists(paths.root), "the session was not removed after keep_after"
        assert time.monotonic() - finished >= KEEP - 1.5, "removed before keep_after"
        assert b.info(name=name) == []
    finally:
        b.absent(name)
    helpers.assert_clean(before, state_root, [])


def test_absent_ends_the_reaper_of_a_session_that_still_runs(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "keep-absent"
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": 1,
            "resources": {"cpu": 100, "memory": 64}, "command": ["sh", "-c", "sleep 600"], "keep_after": 0}
    b = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
    paths = SessionPaths(os.path.abspath(state_root), name)
    b.present(spec)
    with open(os.path.join(paths.root, "reaper"), encoding="utf-8") as f:
        pid = int(f.read().split()[0])
    assert os.path.exists("/proc/%d" % pid)
    b.absent(name)
    assert not os.path.exists("/proc/%d/cmdline" % pid) or open("/proc/%d/stat" % pid).read().split(") ")[1][0] == "Z"
    helpers.assert_clean(before, state_root, [])
