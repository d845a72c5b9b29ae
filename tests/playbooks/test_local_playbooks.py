# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local backend through the playbooks a user runs: create, status, ssh, update, destroy.

These bring real sessions up on this machine (engine containers of the example image in network namespaces the CNI
plugin makes) and check that nothing is left afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import typing as t
import uuid

import pytest

import leaks
import local_session_dict  # the example image (scripts/setup builds it)
from repo_helpers import play_stats, run_playbook, task_results

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"),
                                reason="the local backend needs root and the CNI plugins (scripts/setup)")
pytestmark = [pytest.mark.machine, needs_root]

CREATE_TASK = "Submit the session (the next task waits for its containers and shows what is pending)"


def spec_vars(name: str, **extra: t.Any) -> str:
    session = {"name": name, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": 3, "resources": {"cpu": 800, "memory": 64},
               "command": ["sh", "-c", "echo hello from $BACKENDAI_CLUSTER_HOST rank $WORLD_RANK; exec sleep 600"]}
    session.update(extra)
    return json.dumps({"session": session})


class Session:
    def __init__(self, tmp_path: t.Any) -> None:
        self.name = "pb-" + uuid.uuid4().hex[:8]
        self.state_dir = str(tmp_path / "state")
        self.first: t.Optional[subprocess.CompletedProcess] = None

    def play(self, playbook: str, *extra: str, check: bool = False, spec: str = "") -> subprocess.CompletedProcess:
        return run_playbook(playbook, "-e", spec or spec_vars(self.name), "-e", "session_state_dir=" + self.state_dir,
                            *extra, check=check)


@pytest.fixture
def session(tmp_path: t.Any, host_leaks: t.Any) -> t.Iterator[Session]:
    """A session name and state directory for a test that should make nothing; should it have made the session,
    it is destroyed after the test. Then nothing of it may be left (the snapshot diff and the record)."""
    s = Session(tmp_path)
    try:
        yield s
    finally:
        host_leaks.record(s.state_dir, [s.name])
        if os.path.exists(os.path.join(s.state_dir, s.name)):
            s.play("destroy_session.yml", spec=json.dumps({"session_name": s.name}))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[Session]:
    """One session made by create_session.yml (its run in ``live.first``) that the tests below share, in the file's
    order: each leaves it RUNNING with the same session ID (the status test kills sub1's command and repairs it, the
    changed-spec test recreates it with the same keys) and the destroy test ends it (else this fixture does). Its leak
    check is the record's (what it made, read before the destroy): between the tests the machine lock is free, so a
    diff of the machine would see other runs (the snapshot diff of the playbooks' destroy is Molecule's)."""
    s = Session(tmp_path_factory.mktemp("pb"))
    s.first = s.play("create_session.yml")
    made = None
    try:
        yield s
    finally:
        if os.path.exists(os.path.join(s.state_dir, s.name)):
            made = leaks.record(s.state_dir, [s.name])
            s.play("destroy_session.yml", spec=json.dumps({"session_name": s.name}))
        assert made is None or leaks.leaks(None, made) == []


def test_create_is_real_idempotent_and_reachable(live: Session) -> None:
    session, first = live, live.first
    assert first is not None
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert play_stats(first)["changed"] == 1
    view = task_results(first)[CREATE_TASK]["session"]
    assert view["state"] == "RUNNING" and view["backend"] == "local" and view["mode"] == "single-node"
    assert [c["hostname"] for c in view["containers"]] == ["main1", "sub1", "sub2"]
    assert "PRIVATE KEY" not in first.stdout + first.stderr
    # the user's way in: ssh -F <state>/<name>/ssh_config main1, then ssh sub1
    cmd = view["main1"]["ssh_command"].split() + ["ssh", "sub1", "hostname"]
    assert cmd[:2] == ["ssh", "-F"]
    hop = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert (hop.returncode, hop.stdout.strip()) == (0, "sub1"), hop.stderr
    second = session.play("create_session.yml")
    assert second.returncode == 0 and play_stats(second)["changed"] == 0
    assert task_results(second)[CREATE_TASK]["session"]["session_id"] == view["session_id"]


def test_status_shows_logs_and_a_dead_container_as_degraded(live: Session) -> None:
    session = live
    assert session.first is not None and session.first.returncode == 0
    deadline = time.monotonic() + 10
    while True:
        status = session.play("session_status.yml", "-e", "log_lines=3")
        assert status.returncode == 0, status.stdout[-2000:]
        (view,) = task_results(status)["Read the session state"]["sessions"]
        tails = {c["hostname"]: c["log_tail"] for c in view["containers"]}
        if all(tails.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert view["state"] == "RUNNING"
    assert tails["sub2"][-1:] == ["hello from sub2 rank 2"]
    assert {c["exit_code"] for c in view["containers"]} == {None}
    with open(os.path.join(session.state_dir, session.name, "session.json"), encoding="utf-8") as f:
        sub1 = [c for c in json.load(f)["containers"] if c["hostname"] == "sub1"][0]
    os.kill(sub1["pid"], signal.SIGKILL)  # kill -9 of sub1's command (the container's first process: its `sleep`)
    deadline = time.monotonic() + 10
    while True:
        status = session.play("session_status.yml")
        (view,) = task_results(status)["Read the session state"]["sessions"]
        if view["state"] == "DEGRADED" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert view["state"] == "DEGRADED"
    shown = task_results(status)["Show each session's state and which containers run"]["msg"]
    assert shown == ["%s: DEGRADED - 2 of 3 containers running; stopped: sub1 (failed on local, exit code 137)" % session.name]
    assert {c["hostname"]: c["status"] for c in view["containers"]}["sub1"] == "failed"
    # present again repairs it, keeping the keys and so the session ID
    before = view["session_id"]
    again = session.play("create_session.yml")
    assert again.returncode == 0 and play_stats(again)["changed"] == 1
    repaired = task_results(again)[CREATE_TASK]["session"]
    assert repaired["state"] == "RUNNING" and repaired["session_id"] == before


def test_changed_spec_recreates_with_diff_and_same_keys(live: Session) -> None:
    session, first = live, live.first
    assert first is not None
    sid = task_results(first)[CREATE_TASK]["session"]["session_id"]
    changed = session.play("create_session.yml", "--diff", spec=spec_vars(session.name, env={"EXTRA": "1"}))
    assert changed.returncode == 0 and play_stats(changed)["changed"] == 1
    result = task_results(changed)[CREATE_TASK]
    assert result["session"]["session_id"] == sid
    assert '"EXTRA"' in result["diff"]["after"] and '"EXTRA"' not in result["diff"]["before"]
    assert "PRIVATE KEY" not in changed.stdout


def test_check_mode_makes_nothing(session: Session) -> None:
    proc = session.play("create_session.yml", check=True)
    assert proc.returncode == 0 and play_stats(proc)["changed"] == 1
    assert not os.path.exists(os.path.join(session.state_dir, session.name))


def test_destroy_is_idempotent_and_complete(live: Session) -> None:
    session = live
    assert session.first is not None and session.first.returncode == 0
    made = leaks.record(session.state_dir, [session.name])
    gone = session.play("destroy_session.yml")
    assert gone.returncode == 0 and play_stats(gone)["changed"] == 1
    assert leaks.leaks(None, made) == []
    again = session.play("destroy_session.yml")
    assert again.returncode == 0 and play_stats(again)["changed"] == 0


def test_bad_input_fails_clearly_and_makes_nothing(session: Session) -> None:
    bad = session.play("create_session.yml", spec=spec_vars(session.name, cluster_size="many", colour="red"))
    assert bad.returncode != 0 and "Traceback" not in bad.stdout + bad.stderr
    result = task_results(bad)[CREATE_TASK]
    assert result["problems"] == [
        'session.colour: unknown key; allowed keys: name, image, driver, command, cluster_size, cluster_mode, '
        'resources, mounts, ssh, secrets, network, master_port, env, roles, placement, datacenters, ports, mpi, user, '
        'failure, max_run_time, keep_after',
        'session.cluster_size: must be an integer from 1 to 4096 (containers in total, main included) (got "many")']
    too_big = session.play("create_session.yml", spec=spec_vars(session.name, resources={"cpu": 10 ** 7}))
    assert too_big.returncode != 0
    msg = task_results(too_big)[CREATE_TASK]["msg"]
    assert msg.startswith("session %s is PENDING on this machine: no single agent can hold all 3 containers" % session.name)
    assert "local: cpu short by" in msg
    assert not os.path.exists(os.path.join(session.state_dir, session.name))
