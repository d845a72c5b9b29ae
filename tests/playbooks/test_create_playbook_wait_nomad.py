# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/create_session.yml while the containers are slow to start, against the Nomad API double:
each poll prints, at the default verbosity, which containers are still pending; a session this run created
and that does not come up (timeout, a failed container) is removed again, an existing one is left alone;
an unreadable state is shown and polled again."""

from __future__ import annotations

import json
import re
import threading
import time
import typing as t

import pytest

from module_helpers import ENV_VARS, NOMAD_TOKEN, private_key_lines, spec
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import run_playbook

pytestmark = pytest.mark.slow  # ansible-playbook runs, waiting on polls (not in scripts/run-tests --quick)


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384)
    return double


def create(nomad: NomadAPIDouble, *extra: str, session: t.Optional[t.Dict[str, t.Any]] = None) -> t.Tuple[int, str]:
    """Run the playbook as a user would (default output callback); its exit code and output."""
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=nomad.url, NOMAD_TOKEN=NOMAD_TOKEN, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    proc = run_playbook("create_session.yml", "-e", json.dumps({"session": session or spec(size=2)}),
                        "-e", "wait_poll_interval=1", *extra, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def poll_lines(out: str) -> t.List[str]:
    """The item labels the wait printed, one per poll."""
    return re.findall(r"^ok: \[localhost\] => \(item=(.*)\)(?: =>.*)?$", out, flags=re.MULTILINE)  # (-v adds "=> result")


def when(condition: t.Callable[[], bool], then: t.Callable[[], None], within: float = 60.0) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if condition():
                then()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def allocs(nomad: NomadAPIDouble, group: t.Optional[str] = None) -> t.List[t.Dict[str, t.Any]]:
    return [a for a in nomad.allocations_of("s1") if group is None or a["TaskGroup"] == group]


def set_all(nomad: NomadAPIDouble, status: str) -> None:
    for alloc in allocs(nomad):
        nomad.set_alloc_status(alloc["ID"], status, task_state="running" if status == "running" else "pending")


def test_each_poll_prints_what_is_pending_until_all_run(nomad: NomadAPIDouble) -> None:
    nomad.alloc_start_delay = None  # allocations stay pending until the test starts them
    main_started = threading.Event()

    def start_main() -> None:
        alloc = allocs(nomad, "main1")[0]
        nomad.set_alloc_status(alloc["ID"], "running", task_state="running")
        main_started.set()

    # main1 starts once the playbook polls, sub1 two polls later
    when(lambda: len(nomad.find("GET", "^/v1/job/s1/allocations")) >= 2, start_main)
    when(lambda: main_started.is_set() and len(nomad.find("GET", "^/v1/job/s1/allocations")) >= 5,
         lambda: set_all(nomad, "running"))
    code, out = create(nomad)
    assert code == 0, out[-4000:]
    lines = poll_lines(out)
    assert "0 of 2 containers running; waiting for main1 (pending on n1), sub1 (pending on n1)" in lines, lines
    assert "1 of 2 containers running; waiting for sub1 (pending on n1)" in lines, lines
    assert lines[-1] == "2 of 2 containers running", lines
    assert "Session s1 is RUNNING: main1, sub1" in out
    assert nomad.stored_job("s1") is not None and nomad.stored_variable("nomad/jobs/s1") is not None

    assert "[ERROR]" not in out and "rescued=0" in out

    again, out = create(nomad)  # already running: no wait at all
    assert again == 0 and "changed=0" in out and poll_lines(out) == [], out[-4000:]
    assert "[ERROR]" not in out and "rescued=0" in out and "skipped=" in out


def test_a_created_session_that_does_not_come_up_is_removed(nomad: NomadAPIDouble) -> None:
    nomad.alloc_start_delay = None
    started = time.monotonic()
    code, out = create(nomad, "-e", "wait_timeout=3", "-vvv")
    assert code != 0
    assert time.monotonic() - started < 60, "the wait ends at wait_timeout"
    private = nomad.find("PUT", "^/v1/var/nomad/jobs/s1$")[0].json["Items"]["ssh_private_key"]
    assert not [line for line in private_key_lines(private) if line in out], "a private key line in -vvv output"
    lines = poll_lines(out)
    assert 2 <= len(lines) <= 6 and set(lines) == {
        "0 of 2 containers running; waiting for main1 (pending on n1), sub1 (pending on n1)"}, lines
    assert "Session s1 is not up after 3s: 0 of 2 containers running; waiting for main1 (pending on n1)" in out
    assert "This run created the session, so it was removed again" in out
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None
    assert "PRIVATE KEY" not in out and NOMAD_TOKEN not in out


def test_a_failed_container_ends_the_wait_at_once(nomad: NomadAPIDouble) -> None:
    nomad.alloc_start_delay = None

    def fail_sub1() -> None:
        set_all(nomad, "running")
        alloc = allocs(nomad, "sub1")[0]
        nomad.set_alloc_status(alloc["ID"], "failed", task_state="dead", failed=True,
                               description="Exceeded allowed attempts 2 in interval 5m0s")

    when(lambda: len(nomad.find("GET", "^/v1/job/s1/allocations")) >= 2, fail_sub1)
    started = time.monotonic()
    code, out = create(nomad, "-e", "wait_timeout=120")
    assert code != 0
    assert time.monotonic() - started < 60, "a failed container does not wait for the timeout"
    assert "Session s1 has containers that stopped: 1 of 2 containers running; stopped: sub1 (failed on n1, exit code 1)" in out, \
        out[-3000:]
    assert "This run created the session, so it was removed again" in out
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None


def test_an_existing_session_that_does_not_come_up_is_left_alone(nomad: NomadAPIDouble) -> None:
    code, out = create(nomad)
    assert code == 0, out[-4000:]
    nomad.alloc_start_delay = None  # the updated containers stay pending
    changed = spec(size=2, env={"FOO": "bar"})
    code, out = create(nomad, "-e", "wait_timeout=2", session=changed)
    assert code != 0
    assert "Session s1 is not up after 2s" in out and "existed before this run and is left as it is" in out, out[-3000:]
    job = nomad.stored_job("s1")
    assert job is not None and job["TaskGroups"][0]["Tasks"][0]["Env"]["FOO"] == "bar"
    assert nomad.stored_variable("nomad/jobs/s1") is not None


def test_an_unreadable_state_is_shown_and_polled_again(nomad: NomadAPIDouble) -> None:
    nomad.alloc_start_delay = None
    # The module reads the allocations once after submitting; the next read is the playbook's first poll.
    when(lambda: len(nomad.find("GET", "^/v1/job/s1/allocations")) >= 1,
         lambda: nomad.fail_next("GET", "^/v1/job/s1/allocations", status=500, body="injected: leader lost"))
    when(lambda: len(nomad.find("GET", "^/v1/job/s1/allocations")) >= 4, lambda: set_all(nomad, "running"))
    code, out = create(nomad)
    assert code == 0, out[-4000:]
    lines = poll_lines(out)
    assert any(line.startswith("cannot read the session state: ") and "leader lost" in line for line in lines), lines
    assert lines[-1] == "2 of 2 containers running", lines


def test_waiting_for_free_capacity_prints_why_it_does_not_fit(nomad: NomadAPIDouble) -> None:
    big = spec(size=2, resources={"cpu": 6000, "memory": 1024})  # 12000 MHz on one node (single-node): n1 has 8000
    # a bigger node joins the cluster once the playbook has tried twice
    when(lambda: len(nomad.find("GET", "^/v1/nodes$")) >= 3, lambda: nomad.add_node("n2", cpu=16000, memory=16384))
    code, out = create(nomad, "-e", "wait_for_resources=60", session=big)
    assert code == 0, out[-4000:]
    lines = poll_lines(out)
    pending = [line for line in lines if line.startswith("PENDING: ")]
    assert pending and "n1" in pending[0], lines
    assert lines[-1] == "placed on n2" and "placed on n2" not in lines[:-1], lines
    assert "Session s1 is RUNNING: main1, sub1" in out
    assert nomad.stored_job("s1") is not None


def test_no_free_capacity_in_time_fails_with_the_reason_and_makes_nothing(nomad: NomadAPIDouble) -> None:
    big = spec(size=2, resources={"cpu": 6000, "memory": 1024})
    code, out = create(nomad, "-e", "wait_for_resources=3", session=big)
    assert code != 0
    lines = poll_lines(out)
    assert len(lines) >= 2 and all(line.startswith("PENDING: ") for line in lines), lines
    assert "Session s1 still cannot be placed after waiting 3s for free capacity: " in out, out[-3000:]
    assert [(r.method, r.path) for r in nomad.requests if r.method != "GET"] == []  # only reads
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None


def test_without_wait_for_resources_a_session_that_does_not_fit_fails_at_once(nomad: NomadAPIDouble) -> None:
    code, out = create(nomad, session=spec(size=2, resources={"cpu": 6000, "memory": 1024}))
    assert code != 0 and poll_lines(out) == [], out[-3000:]
    assert "session s1 is PENDING: no single agent can hold all 2 containers" in out, out[-3000:]
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None


@pytest.mark.parametrize("option, value", [("wait_timeout", "5m"), ("wait_poll_interval", "0"),
                                           ("wait_for_resources", "-1")])
def test_bad_wait_options_fail_before_anything_is_made(nomad: NomadAPIDouble, option: str, value: str) -> None:
    code, out = create(nomad, "-e", "%s=%s" % (option, value))
    assert code != 0 and "must be whole numbers of seconds" in out, out[-3000:]
    assert "wrong: %s=%s" % (option, json.dumps(value)) in out, out[-3000:]
    assert [(r.method, r.path) for r in nomad.requests] == []
