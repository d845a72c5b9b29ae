# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A session's lifecycle on the local backend, with real engine containers (docs/session-lifecycle.md).

``state: stopped`` removes the containers, their network namespaces and the session network (the CPU and memory are
back) and keeps the state directory's keys and record; ``present`` starts the session again with the same keys,
session ID and names, and ``ssh sub1`` from main1 works again. ``max_run_time``: the containers' supervisors keep the
time with no controller outside the session; when it runs out every command is stopped and the session ends ERROR with
the reason. ``keep_after``: once every command ended the session is TERMINATED, its containers stay up ``keep_after``
seconds (``ssh main1`` still works, the logs are there), then the session's reaper removes it whole. Nothing is left
after any of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

import images
from local_session_dict import TASK

from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")
#: Runs until it is stopped (a training loop that would not end by itself).
FOREVER = 'echo "start $BACKENDAI_CLUSTER_HOST"; while :; do sleep 0.2; done'
#: The session's max_run_time and keep_after (s): short, the product takes them as the spec's (the checks below bound
#: them from below: ended or removed no earlier than their time).
LIMIT = 3
KEEP = 3


def ssh(state_root: str, name: str, *cmd: str) -> subprocess.CompletedProcess:
    config = os.path.join(state_root, name, "ssh_config")
    return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *cmd],
                          capture_output=True, text=True, timeout=60)


def busybox(name: str, size: int, command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A session of the busybox image; 1000 MHz a container: an ssh hop into a container of 100 MHz (a CPU quota of 41 ms in
    each 1 s period) waited 2-4 s for the next periods (sshd's start and key exchange take more)."""
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": size,
            "resources": {"cpu": 1000, "memory": 64}}
    if command:
        spec["command"] = command
    spec.update(extra)
    return spec


def view_until(b: LocalBackend, name: str, done: Any, timeout: float) -> dict[str, Any]:
    """The session's view once ``done(state)``, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        (view,) = b.info(name=name, log_lines=1)
        if done(view["state"]) or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


class Local:
    """The local backend of the test's state root and the sessions the test names (removed after it)."""

    def __init__(self, state_root: str, helpers: Any) -> None:
        self.backend = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
        self.state_root = state_root
        self.names: list[str] = []

    def paths(self, name: str) -> SessionPaths:
        self.names.append(name)
        return SessionPaths(os.path.abspath(self.state_root), name)


@pytest.fixture
def local(state_root: str, helpers: Any) -> Any:
    """A backend; after the test its sessions are removed and nothing of them may be left on the machine."""
    before = helpers.host_snapshot()
    made = Local(state_root, helpers)
    try:
        yield made
    finally:
        for name in made.names:
            made.backend.absent(name)
    helpers.assert_clean(before, state_root, [])


def containers(paths: SessionPaths) -> dict[str, dict[str, Any]]:
    with open(paths.session_json, encoding="utf-8") as f:
        return {c["hostname"]: c for c in json.load(f)["containers"]}


# ------------------------------------------------------------------ stopped, and started again

def test_stop_frees_the_containers_and_a_start_keeps_keys_id_and_names(local: Local) -> None:
    name = "stop-start"
    spec = busybox(name, 2)
    b, state_root, paths = local.backend, local.state_root, local.paths(name)
    first = b.present(spec)["session"]
    assert first["state"] == "RUNNING", first
    got = ssh(state_root, name, "main1", "ssh sub1 hostname")
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    with open(paths.private_key, encoding="utf-8") as f:
        key = f.read()
    running = containers(paths)
    engines = [c["engine"] for c in running.values()]
    namespaces = [c["netns"] for c in running.values() if c.get("netns")]
    assert engines and namespaces

    stopped = b.stop(name=name)
    assert stopped["changed"] is True and stopped["session"]["state"] == "STOPPED", stopped["session"]
    assert stopped["session"]["session_id"] == first["session_id"]
    for engine in engines:  # the engine containers are gone (their cgroups, CPU and memory with them)
        assert images.podman("container", "exists", engine, check=False).returncode == 1, engine
    for ns in namespaces:
        assert not os.path.exists(netns_path(ns)), ns
    assert not os.path.exists(paths.journal)
    (view,) = b.info(name=name)
    assert view["state"] == "STOPPED" and [c["hostname"] for c in view["containers"]] == ["main1", "sub1"]
    assert b.stop(name=name)["changed"] is False

    started = b.present(spec)
    assert started["changed"] is True and started["created"] is False
    view = started["session"]
    assert view["state"] == "RUNNING" and view["session_id"] == first["session_id"], view
    assert [c["hostname"] for c in view["containers"]] == ["main1", "sub1"]
    with open(paths.private_key, encoding="utf-8") as f:
        assert f.read() == key, "the start keeps the session keypair"
    got = ssh(state_root, name, "main1", "ssh sub1 hostname")
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    assert b.present(spec)["changed"] is False


def test_stopping_a_missing_session_fails(local: Local) -> None:
    with pytest.raises(Exception, match="session nothere does not exist"):
        local.backend.stop(name="nothere")


# ------------------------------------------------------------------ max_run_time

def test_a_session_that_runs_longer_than_max_run_time_ends_error_with_the_reason(local: Local) -> None:
    name = "max-run"
    spec = busybox(name, 2, ["sh", "-c", FOREVER], max_run_time=LIMIT)
    b = local.backend
    local.paths(name)
    start = time.monotonic()
    first = b.present(spec)["session"]
    assert first["state"] == "RUNNING", first
    assert "failure" not in first, "under policy none the supervisor only keeps the time: nothing to show"
    view = view_until(b, name, lambda state: state == "ERROR", LIMIT + 30)  # (DEGRADED while the first ended)
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


# ------------------------------------------------------------------ keep_after

def test_a_finished_session_stays_keep_after_seconds_then_is_removed(local: Local) -> None:
    name = "keep-after"
    spec = busybox(name, 2, ["sh", "-c", "echo done $BACKENDAI_CLUSTER_HOST"], keep_after=KEEP)
    b, state_root, paths = local.backend, local.state_root, local.paths(name)
    b.present(spec)
    view = view_until(b, name, lambda state: state == "TERMINATED", 30)
    finished = time.monotonic()
    assert view["state"] == "TERMINATED", view
    assert {(c["status"], c["exit_code"]) for c in view["containers"]} == {("complete", 0)}, view["containers"]
    # kept: the containers are up (their sshd answers), the logs are there
    got = ssh(state_root, name, "main1", "hostname")
    assert (got.returncode, got.stdout.strip()) == (0, "main1"), got.stderr
    assert view["containers"][1]["log_tail"] == ["done sub1"], view["containers"][1]
    assert os.path.isdir(paths.root)
    # then removed, by nobody but the session's reaper
    while os.path.exists(paths.root) and time.monotonic() - finished < KEEP + 30:
        time.sleep(0.2)
    assert not os.path.exists(paths.root), "the session was not removed after keep_after"
    assert time.monotonic() - finished >= KEEP - 1.5, "removed before keep_after"
    assert b.info(name=name) == []


def test_absent_ends_the_reaper_of_a_session_that_still_runs(local: Local) -> None:
    name = "keep-absent"
    spec = busybox(name, 1, ["sh", "-c", "sleep 600"], keep_after=0)
    b, paths = local.backend, local.paths(name)
    b.present(spec)
    with open(os.path.join(paths.root, "reaper"), encoding="utf-8") as f:
        pid = int(f.read().split()[0])
    assert os.path.exists("/proc/%d" % pid)
    b.absent(name)
    assert not os.path.exists("/proc/%d/cmdline" % pid) or \
        open("/proc/%d/stat" % pid, encoding="utf-8").read().rpartition(") ")[2][0] == "Z", "the reaper still runs"
