# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``max_run_time`` on the local backend, with real engine containers (docs/session-lifecycle.md): the containers'
supervisors keep the time with no controller outside the session; when it runs out every command is stopped and the
session ends ERROR with the reason; nothing is left after ``absent``."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

import images

from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")

TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
#: Runs until it is stopped (a training loop that would not end by itself).
FOREVER = 'echo "start $BACKENDAI_CLUSTER_HOST"; while :; do sleep 0.2; done'
LIMIT = 6


def test_a_session_that_runs_longer_than_max_run_time_ends_error_with_the_reason(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "max-run"
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": 2,
            "resources": {"cpu": 100, "memory": 64}, "command": ["sh", "-c", FOREVER], "max_run_time": LIMIT}
    b = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
    try:
        start = time.monotonic()
        first = b.present(spec)["session"]
        assert first["state"] == "RUNNING", first
        assert "failure" not in first, "under policy none the supervisor only keeps the time: nothing to show"
        deadline = start + LIMIT + 30
        while True:
            (view,) = b.info(name=name)
            if view["state"] != "RUNNING" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert view["state"] == "ERROR", view
        assert time.monotonic() - start >= LIMIT - 1, "ended before its time"
        assert view["reason"].startswith("max_run_time %ds exceeded: every command was stopped (first seen by " % LIMIT), \
            view["reason"]
        assert {c["status"] for c in view["containers"]} == {"failed"}, view["containers"]
        assert all(c["reason"].startswith("stopped: max_run_time %ds exceeded" % LIMIT) for c in view["containers"]), \
            view["containers"]
        assert view["failure"]["policy"] == "none" and view["failure"]["state"] == "failed"
        # an ERROR session is repaired by present: it runs again, with its time counted anew
        assert b.present(spec)["session"]["state"] == "RUNNING"
    finally:
        b.absent(name)
    helpers.assert_clean(before, state_root, [])
