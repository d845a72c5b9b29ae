# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure policy (docs/failure-policy.md) on the local backend, with real engine containers: every container's
supervisor (the entrypoint both backends run) applies the spec's ``failure`` block to the gang by itself.

For each policy: a rank's command killed with -9, a command exiting with a ``fail_on_exit_codes`` code, a command
whose heartbeat stops, an engine container removed under the session; ``max_restarts`` ending in ``fail``; and
nothing of the session left after ``absent`` (the leak check).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

import pytest

import faults
import images

from ansible_collections.backendai.cluster.plugins.module_utils._local.bringup import engine_log_tail
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")

TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
#: A rank: says which start of the gang it is, then beats its heartbeat until it is stopped.
RANK = ('echo "start $BACKENDAI_CLUSTER_HOST $BACKENDAI_RESTART_COUNT"; '
        'while :; do touch "$BACKENDAI_HEARTBEAT_FILE"; sleep 0.2; done')


def documented(view: dict[str, Any]) -> None:
    """The view matches the session module's RETURN, key by key and type by type (tests/unit/plugins/modules/test_return_docs.py), and
    it has every key only a failure policy returns."""
    modules_tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit", "plugins", "modules")
    if modules_tests not in sys.path:  # (where the RETURN checks live: tests/unit/plugins/modules/test_return_docs.py)
        sys.path.insert(0, modules_tests)
    from test_return_docs import FAILURE_POLICY_KEYS, Results
    from ansible_collections.backendai.cluster.plugins.modules import session as session_module
    results = Results(session_module)
    results.add({"session": view, "changed": False}, "a session with a failure policy")
    assert not results.problems, results.problems
    assert set(FAILURE_POLICY_KEYS) <= results.seen, sorted(set(FAILURE_POLICY_KEYS) - results.seen)


def session(name: str, failure: dict[str, Any], size: int = 3, script: str = RANK) -> dict[str, Any]:
    return {"name": name, "image": images.image("test-busybox"), "cluster_size": size,
            "resources": {"cpu": 1000, "memory": 64}, "command": ["sh", "-c", script], "failure": failure}


def until(get: Callable[[], Any], ok: Callable[[Any], bool], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = get()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


class Gang:
    """A session of the test-busybox image, its backend and what the tests do to it."""

    def __init__(self, state_root: str, helpers: Any, spec: dict[str, Any]) -> None:
        self.backend = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
        self.name = spec["name"]
        self.paths = SessionPaths(os.path.abspath(state_root), self.name)
        self.spec = spec

    def view(self) -> dict[str, Any]:
        (view,) = self.backend.info(name=self.name)
        return view

    def until(self, wanted: str, timeout: float) -> dict[str, Any]:
        return until(self.view, lambda v: v["state"] == wanted, timeout)

    def engine(self, host: str) -> str:
        """The host's podman container (the session record names it)."""
        with open(self.paths.session_json, encoding="utf-8") as f:
            return {c["hostname"]: c["engine"] for c in json.load(f)["containers"]}[host]

    def starts(self, host: str) -> list[str]:
        """The 'start HOST N' lines the host's command printed (one per start of it)."""
        return [line for line in engine_log_tail(self.paths.log(host), 200) if line.startswith("start ")]

    def kill_command(self, host: str, signal: int = 9) -> None:
        """Kill the host's command (its process group leader, as the supervisor records it)."""
        faults.signal_command(self.engine(host), images.engine_conf(), signal)


@pytest.fixture
def gang(state_root: str, helpers: Any) -> Any:
    made: list[Gang] = []
    before = helpers.host_snapshot()

    def make(spec: dict[str, Any]) -> Gang:
        g = Gang(state_root, helpers, spec)
        made.append(g)
        first = g.backend.present(spec)["session"]
        assert first["state"] == "RUNNING", first
        return g
    yield make
    for g in made:
        g.backend.absent(g.name)
    helpers.assert_clean(before, state_root, [])


def test_restart_all_starts_every_rank_again_and_max_restarts_ends_in_fail(gang: Any) -> None:
    g = gang(session("fp-all", {"policy": "restart_all", "max_restarts": 1}))
    hosts = ["main1", "sub1", "sub2"]
    until(lambda: [g.starts(h) for h in hosts], lambda s: all(s), 20)
    g.kill_command("sub2")
    starts = until(lambda: [g.starts(h) for h in hosts], lambda s: all(len(x) == 2 for x in s), 20)
    assert starts == [["start %s 0" % h, "start %s 1" % h] for h in hosts], starts
    view = g.until("RUNNING", 10)
    assert view["failure"]["policy"] == "restart_all" and view["failure"]["restarts"] == 1, view
    last = {c["hostname"]: c.get("last_failure") for c in view["containers"]}
    assert {(f["host"], f["exit_code"]) for f in last.values()} == {("sub2", 137)}, last
    assert all(c["restarts"] == 1 for c in view["containers"]), view
    documented(view)
    # a second death within the window: max_restarts 1 is spent, the gang gives up and every container ends
    g.kill_command("main1")
    view = g.until("ERROR", 20)
    assert view["state"] == "ERROR", view
    assert view["failure"]["state"] == "gave_up", view
    assert view["reason"].startswith("failure policy restart_all gave up: main1, exit code 137: "), view["reason"]
    assert "after 1 restarts within 600s" in view["reason"], view["reason"]
    assert {c["status"] for c in view["containers"]} == {"failed"}, view
    documented(view)


def test_restart_one_restarts_only_the_failed_rank(gang: Any) -> None:
    g = gang(session("fp-one", {"policy": "restart_one"}))
    hosts = ["main1", "sub1", "sub2"]
    until(lambda: [g.starts(h) for h in hosts], lambda s: all(s), 20)
    g.kill_command("sub1")
    assert until(lambda: g.starts("sub1"), lambda s: len(s) == 2, 20) == ["start sub1 0", "start sub1 1"]
    # (the command prints its line as it starts; its supervisor's status file follows a moment later)
    restarts = {"main1": 0, "sub1": 1, "sub2": 0}
    view = until(g.view, lambda v: {c["hostname"]: c["restarts"] for c in v["containers"]} == restarts
                 and all(c.get("last_failure") for c in v["containers"]), 10)
    assert view["state"] == "RUNNING", view
    assert {c["hostname"]: c["restarts"] for c in view["containers"]} == restarts, view
    assert [g.starts(h) for h in ("main1", "sub2")] == [["start main1 0"], ["start sub2 0"]]
    assert view["failure"] == {"policy": "restart_one", "state": "running", "restarts": 1, "first_failure": None}, view
    # every container heard of it (a note from sub1)
    assert {c["last_failure"]["host"] for c in view["containers"]} == {"sub1"}, view


def test_an_exit_code_of_fail_on_exit_codes_fails_the_session_without_a_restart(gang: Any) -> None:
    script = 'if [ "$BACKENDAI_CLUSTER_HOST" = sub1 ]; then sleep 1; exit 3; fi; ' + RANK
    g = gang(session("fp-code", {"policy": "restart_all", "fail_on_exit_codes": [3]}, script=script))
    view = g.until("ERROR", 20)
    assert view["state"] == "ERROR", view
    assert view["reason"] == ("failure policy restart_all failed: sub1, exit code 3: the command exited with code 3 "
                              "(exit code 3 is in fail_on_exit_codes)"), view["reason"]
    assert {c["status"] for c in view["containers"]} == {"failed"}, view
    assert all(c["restarts"] == 0 for c in view["containers"]), view
    assert [g.starts(h) for h in ("main1", "sub2")] == [["start main1 0"], ["start sub2 0"]]


def test_a_hung_rank_fails_the_session_under_policy_fail(gang: Any) -> None:
    """sub2 stops touching its heartbeat file: after hang_timeout its command is stopped and, under fail, every
    container ends."""
    script = 'if [ "$BACKENDAI_CLUSTER_HOST" = sub2 ]; then echo "start sub2 0"; sleep 3600; fi; ' + RANK
    g = gang(session("fp-hang", {"policy": "fail", "hang_timeout": 5}, script=script))
    view = g.until("ERROR", 25)
    assert view["state"] == "ERROR", view
    assert view["reason"] == ("failure policy fail failed: sub2: the command hung: its heartbeat file was not touched "
                              "for 5s"), view["reason"]
    assert {c["status"] for c in view["containers"]} == {"failed"}, view


@pytest.mark.parametrize("policy", ["fail", "restart_all"])
def test_a_container_removed_under_the_session(gang: Any, policy: str) -> None:
    """sub2's engine container is removed: its watchers find it gone within seconds. Under fail every container
    ends at once; under restart_all the others stop their commands and wait for it (RESTARTING), and give up when
    it is not back within rejoin_timeout (nothing brings a removed local container back but present)."""
    g = gang(session("fp-gone-" + policy.replace("_", ""), {"policy": policy, "rejoin_timeout": 5}))
    until(lambda: [g.starts(h) for h in ("main1", "sub1", "sub2")], lambda s: all(s), 20)
    images.podman("rm", "--force", "--time", "0", g.engine("sub2"))
    if policy == "restart_all":
        view = g.until("RESTARTING", 10)
        assert view["state"] == "RESTARTING", (view["reason"], view["containers"])
        assert view["failure"]["state"] == "restarting", view
    # the session is ERROR from the first container that gave up; each of the others gives up on its own clock
    view = until(g.view, lambda v: v["state"] == "ERROR" and all(c["status"] == "failed" for c in v["containers"]), 20)
    assert view["state"] == "ERROR", view
    assert "sub2" in view["reason"] and ("does not answer" in view["reason"] or "no answer from sub2" in view["reason"]), \
        view["reason"]
    statuses = {c["hostname"]: c["status"] for c in view["containers"]}
    assert statuses == {"main1": "failed", "sub1": "failed", "sub2": "failed"}, view
