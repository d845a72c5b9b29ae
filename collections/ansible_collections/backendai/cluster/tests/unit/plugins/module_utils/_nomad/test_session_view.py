# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session state from container statuses, current allocations, and Nomad plan diffs as readable changes."""

from __future__ import annotations

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import plan_diff as jd
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job_view as sv
from ansible_collections.backendai.cluster.plugins.module_utils._session import status as ss
from ansible_collections.backendai.cluster.plugins.module_utils._session import summaries


@pytest.mark.parametrize("statuses, stopped, state", [
    (["running", "running"], False, "RUNNING"),
    (["running", "pending"], False, "SCHEDULED"),
    (["pending", "pending"], False, "SCHEDULED"),
    (["running", "unplaced"], False, "PENDING"),
    ([], False, "PENDING"),
    (["running", "failed"], False, "DEGRADED"),
    (["running", "restarting"], False, "DEGRADED"),
    (["pending", "lost"], False, "DEGRADED"),
    (["running", "complete"], False, "DEGRADED"),
    (["complete", "complete"], False, "TERMINATED"),
    (["failed", "complete"], False, "ERROR"),
    (["failed", "unplaced"], False, "ERROR"),
    (["running", "running"], True, "TERMINATED"),
])
def test_session_state(statuses: list, stopped: bool, state: str) -> None:
    assert ss.session_state(statuses, stopped) == state


def test_current_allocation_prefers_the_newest_that_should_run() -> None:
    allocs = [{"ID": "a", "TaskGroup": "main1", "DesiredStatus": "stop", "CreateIndex": 30},
              {"ID": "b", "TaskGroup": "main1", "DesiredStatus": "run", "CreateIndex": 20},
              {"ID": "c", "TaskGroup": "main1", "DesiredStatus": "run", "CreateIndex": 10},
              {"ID": "d", "TaskGroup": "sub1", "DesiredStatus": "stop", "CreateIndex": 5}]
    assert {g: a["ID"] for g, a in sv.current_allocations(allocs).items()} == {"main1": "b", "sub1": "d"}


def test_container_status_and_exit_code() -> None:
    restarting = {"ClientStatus": "running", "TaskStates": {"kernel": {"State": "pending", "Restarts": 1}}}
    assert sv.container_status(restarting) == "restarting" and sv.container_status(None) == "unplaced"
    done = {"ClientStatus": "failed", "TaskStates": {"kernel": {"State": "dead", "Events": [
        {"Type": "Started"}, {"Type": "Terminated", "Details": {"exit_code": "137"}}]}}}
    assert sv.container_status(done) == "failed" and sv.exit_code(done) == 137
    assert sv.exit_code({"TaskStates": {"kernel": {"Events": [{"Type": "Terminated", "ExitCode": 3}]}}}) == 3


def test_plan_diff_changes_and_texts() -> None:
    diff = {"Type": "Edited", "Fields": [{"Type": "Edited", "Name": "Priority", "Old": "50", "New": "60"}],
            "TaskGroups": [
                {"Type": "Edited", "Name": "main1", "Tasks": [
                    {"Type": "Edited", "Name": "kernel", "Fields": [
                        {"Type": "Added", "Name": "Env[FOO]", "Old": "", "New": "bar"}]}]},
                {"Type": "Added", "Name": "sub2"},
                {"Type": "None", "Name": "sub1"}]}
    found = jd.changes(diff)
    assert [str(c) for c in found] == ["Priority: 50 -> 60", "TaskGroups[main1].Tasks[kernel].Env[FOO]: <unset> -> bar",
                                       "TaskGroups[sub2]: added"]
    before, after = jd.diff_texts(found)
    assert before.splitlines() == ["Priority: 50", "TaskGroups[main1].Tasks[kernel].Env[FOO]: <unset>",
                                   "TaskGroups[sub2]: <unset>"]
    assert after.splitlines() == ["Priority: 60", "TaskGroups[main1].Tasks[kernel].Env[FOO]: bar", "TaskGroups[sub2]: <added>"]
    assert jd.changes({"Type": "None"}) == [] and jd.changes(None) == []


def _containers(*items: tuple) -> list:
    return [{"hostname": h, "status": s, "agent": a, "exit_code": code, "restarts": r} for h, s, a, code, r in items]


@pytest.mark.parametrize("items, batch, expected", [
    ((("main1", "running", "n1", None, 0), ("sub1", "running", "n2", None, 0)), False,
     (True, 2, [], [], "2 of 2 containers running")),
    ((("main1", "running", "n1", None, 0), ("sub1", "pending", "n2", None, 0), ("sub2", "unplaced", "", None, 0)), False,
     (False, 1, ["sub1", "sub2"], [], "1 of 3 containers running; waiting for sub1 (pending on n2), sub2 (unplaced)")),
    ((("main1", "running", "n1", None, 0), ("sub1", "restarting", "n1", 1, 2)), False,
     (False, 1, ["sub1"], [], "1 of 2 containers running; waiting for sub1 (restarting on n1, exit code 1, 2 restarts)")),
    ((("main1", "running", "n1", None, 0), ("sub1", "failed", "n1", 137, 0), ("sub2", "lost", "n3", None, 0)), False,
     (False, 1, [], ["sub1", "sub2"],
      "1 of 3 containers running; stopped: sub1 (failed on n1, exit code 137), sub2 (lost on n3)")),
    ((("main1", "complete", "n1", 0, 0), ("sub1", "running", "n1", None, 0)), True,
     (True, 2, [], [], "2 of 2 containers running")),
    ((("main1", "complete", "n1", 0, 0), ("sub1", "running", "n1", None, 0)), False,
     (False, 1, [], ["main1"], "1 of 2 containers running; stopped: main1 (complete on n1, exit code 0)")),
    ((("main1", "running", "local", None, 0), ("sub1", "exited", "local", 3, 0)), False,
     (False, 1, [], ["sub1"], "1 of 2 containers running; stopped: sub1 (exited on local, exit code 3)")),
    ((), False, (False, 0, [], [], "0 of 0 containers running")),
], ids=["all-running", "pending-and-unplaced", "restarting", "failed-and-lost", "batch-complete", "service-complete",
        "local-exited", "none"])
def test_wait_progress(items: tuple, batch: bool, expected: tuple) -> None:
    progress = summaries.wait_progress(_containers(*items), batch=batch)
    done, running, waiting, failed, summary = expected
    assert progress == {"total": len(items), "running": running, "waiting": waiting, "failed": failed, "done": done,
                        "summary": summary}


def test_the_session_view_carries_its_progress() -> None:
    job = {"ID": "s1", "Type": "service", "Meta": {}, "TaskGroups": [{"Name": "main1"}, {"Name": "sub1"}]}
    stubs = [{"ID": "a1", "TaskGroup": "main1", "ClientStatus": "running", "DesiredStatus": "run", "NodeName": "n1"}]
    view = sv.build_view(job, stubs, {})
    assert view["progress"]["summary"] == "1 of 2 containers running; waiting for sub1 (unplaced)"
    assert view["progress"]["done"] is False
