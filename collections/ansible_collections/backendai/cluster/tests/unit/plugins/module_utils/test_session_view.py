# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session state from container statuses, current allocations, and Nomad plan diffs as readable changes."""

from __future__ import annotations

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils import _job_diff as jd
from ansible_collections.backendai.cluster.plugins.module_utils import _session_view as sv


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
    assert sv.session_state(statuses, stopped) == state


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
