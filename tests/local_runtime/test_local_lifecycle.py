# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One lifecycle for both backends, on real processes: a local batch session follows the Nomad job's
model (a container ends with its command; the session state comes from the rule the Nomad view uses),
and ``present`` brings a DEGRADED session back with the same keys and ID."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import nomad_backend as _backend_nomad
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"),
                                reason="the local backend needs root and the CNI plugins (scripts/setup)")

#: One poll of playbooks/tasks/wait_for_session.yml (its default wait_poll_interval).
POLL = _backend_nomad.DEFAULT_POLL_INTERVAL
FINISH = "finish"
COMMAND = ["sh", "-c", 'while [ ! -e "$HOME/%s" ]; do sleep 0.1; done; echo "$BACKENDAI_CLUSTER_HOST done"' % FINISH]


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the direct children of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="utf-8") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append((int(entry), cmd))
    return out


def view_until(state_root: str, name: str, wanted: str, timeout: float) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    while True:
        (view,) = LocalBackend(state_root).info(name=name, log_lines=2)
        if view["state"] == wanted or time.monotonic() - start > timeout:
            return view, time.monotonic() - start
        time.sleep(0.05)


def test_batch_session_lifecycle(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "life"
    spec = {"name": name, "image": "local", "cluster_size": 3, "resources": {"cpu": 100, "memory": 64}, "command": COMMAND}
    made = LocalBackend(state_root).present(spec)
    try:
        first = made["session"]
        assert first["state"] == "RUNNING", first
        paths = SessionPaths(os.path.abspath(state_root), name)
        # kill -9 of sub1's command (the child of its supervisor that runs the user command)
        (record,) = [c for c in _session_json(paths)["containers"] if c["hostname"] == "sub1"]
        deadline = time.monotonic() + 5  # the commands start once the whole session is up
        while not [pid for pid, cmd in children(record["pid"]) if FINISH in cmd] and time.monotonic() < deadline:
            time.sleep(0.02)
        (command_pid,) = [pid for pid, cmd in children(record["pid"]) if FINISH in cmd]
        os.kill(command_pid, signal.SIGKILL)
        view, took = view_until(state_root, name, "DEGRADED", POLL)
        assert view["state"] == "DEGRADED" and took <= POLL, (view["state"], took)
        statuses = {c["hostname"]: (c["status"], c["exit_code"]) for c in view["containers"]}
        assert statuses == {"main1": ("running", None), "sub1": ("failed", 137), "sub2": ("running", None)}
        assert view["reason"] == "sub1 failed on local, exit code 137: the command exited with code 137"
        assert "stopped: sub1 (failed on local, exit code 137)" in view["progress"]["summary"]
        # the container ended with its command: its sshd is gone too
        assert not os.path.exists("/proc/%d" % record["sshd_pid"]) or _is_zombie(record["sshd_pid"])
        # present on the DEGRADED session brings it back, same keys and session ID
        again = LocalBackend(state_root).present(spec)
        assert again["changed"] is True and again["session"]["state"] == "RUNNING"
        assert again["session"]["session_id"] == first["session_id"]
        # every command ends with 0: TERMINATED (and present leaves a finished batch session alone)
        for host in ("main1", "sub1", "sub2"):
            with open(os.path.join(paths.home_dir(host), FINISH), "w", encoding="utf-8"):
                pass
        view, took = view_until(state_root, name, "TERMINATED", 10)
        assert view["state"] == "TERMINATED", view
        assert {(c["status"], c["exit_code"]) for c in view["containers"]} == {("complete", 0)}
        assert view["containers"][1]["log_tail"] == ["sub1 done"]
        assert LocalBackend(state_root).present(spec)["changed"] is False
    finally:
        LocalBackend(state_root).absent(name)
    helpers.assert_clean(before, state_root, [])
    assert not os.path.exists(os.path.join(state_root, name))


def test_interactive_container_fails_when_its_sshd_dies(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "inter"
    spec = {"name": name, "image": "local", "cluster_size": 2, "resources": {"cpu": 100, "memory": 64}}
    made = LocalBackend(state_root).present(spec)
    try:
        assert made["session"]["state"] == "RUNNING"
        paths = SessionPaths(os.path.abspath(state_root), name)
        (record,) = [c for c in _session_json(paths)["containers"] if c["hostname"] == "sub1"]
        os.kill(record["sshd_pid"], signal.SIGKILL)
        view, took = view_until(state_root, name, "DEGRADED", POLL)
        assert view["state"] == "DEGRADED", view
        (sub1,) = [c for c in view["containers"] if c["hostname"] == "sub1"]
        assert sub1["status"] == "failed" and "sshd is gone" in sub1["reason"]
        assert LocalBackend(state_root).present(spec)["session"]["state"] == "RUNNING"
    finally:
        LocalBackend(state_root).absent(name)
    helpers.assert_clean(before, state_root, [])


def _session_json(paths: SessionPaths) -> dict[str, Any]:
    import json

    with open(paths.session_json, encoding="utf-8") as f:
        return json.load(f)


def _is_zombie(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
