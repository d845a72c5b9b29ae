# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The double's client model (``model/tasks.py``) against what ``restarts.go``, ``task_runner.go`` and
``alloc_runner.go`` do: verdicts of the restart tracker, the task states and client statuses they make, and a lost
allocation's replacement once its node is back."""

from __future__ import annotations

import typing as t

from nomad_double.model import NomadModel
from nomad_double.model.tasks import (
    REASON_NO_RESTARTS,
    REASON_WITHIN_POLICY,
    TASK_NOT_RESTARTING,
    TASK_RESTARTING,
    TASK_TERMINATED,
    RestartTracker,
)

S = 1_000_000_000
NOMAD_DEFAULT = {"Attempts": 2, "Interval": 300 * S, "Delay": 5 * S, "Mode": "fail"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_attempts_never_restarts_and_a_successful_batch_exit_terminates() -> None:
    tracker = RestartTracker({"Attempts": 0, "Interval": 300 * S, "Delay": 5 * S, "Mode": "fail"}, "batch")
    assert tracker.state(137) == (TASK_NOT_RESTARTING, 0.0, REASON_NO_RESTARTS)
    assert tracker.state(0) == (TASK_TERMINATED, 0.0, REASON_NO_RESTARTS)
    # a service task restarts on success too, so with no attempts it does not restart either way
    assert RestartTracker({"Attempts": 0}, "service").state(0)[0] == TASK_NOT_RESTARTING


def test_attempts_within_the_interval_then_fail_and_a_new_interval_counts_again() -> None:
    clock = Clock()
    tracker = RestartTracker(NOMAD_DEFAULT, "batch", clock=clock)
    for _ in range(2):
        verdict, delay, reason = tracker.state(1)
        assert (verdict, reason) == (TASK_RESTARTING, REASON_WITHIN_POLICY) and 5.0 <= delay <= 6.25
    assert tracker.state(1) == (TASK_NOT_RESTARTING, 0.0,
                                'Exceeded allowed attempts 2 in interval 5m0s and mode is "fail"')
    clock.now += 301  # the interval began more than Interval ago: the count starts again
    assert tracker.state(1)[0] == TASK_RESTARTING
    assert tracker.state(0) == (TASK_TERMINATED, 0.0, "Restart unnecessary as task terminated successfully")


def model_with_alloc(policy: t.Mapping[str, t.Any]) -> t.Tuple[NomadModel, str]:
    model = NomadModel()
    node = model.add_node("n1")
    group = {"Name": "main1", "RestartPolicy": dict(policy), "Tasks": [{"Name": "kernel", "Resources": {}}]}
    job = {"ID": "s1", "Namespace": "default", "Type": "batch", "TaskGroups": [group]}
    rec = {"job": job, "Version": 0, "CreateIndex": 11}
    model.jobs[("default", "s1")] = rec
    model.create_alloc(rec, group, 0, node, [], "eval", model.next_index())
    (alloc_id,) = model.allocs
    return model, alloc_id


def test_a_task_restarting_then_failing_makes_the_allocation_failed() -> None:
    model, alloc_id = model_with_alloc(dict(NOMAD_DEFAULT, Attempts=1))
    model.task_started(alloc_id)
    stub = model.alloc_stub(model.allocs[alloc_id])
    assert stub["ClientStatus"] == "running" and stub["TaskStates"]["kernel"]["State"] == "running"
    assert model.task_exited(alloc_id, 137) is not None  # restarting: pending, Restarts 1
    stub = model.alloc_stub(model.allocs[alloc_id])
    task = stub["TaskStates"]["kernel"]
    assert (stub["ClientStatus"], task["State"], task["Restarts"]) == ("pending", "pending", 1)
    assert [e["Type"] for e in task["Events"]][-2:] == ["Terminated", "Restarting"]
    assert task["Events"][-2]["DisplayMessage"] == (
        'Exit Code: 137, Exit Message: "Docker container exited with non-zero exit code: 137"')
    assert task["Events"][-2]["Details"]["exit_code"] == "137"
    model.task_started(alloc_id)
    assert model.task_exited(alloc_id, 3) is None
    stub = model.alloc_stub(model.allocs[alloc_id])
    task = stub["TaskStates"]["kernel"]
    assert (stub["ClientStatus"], stub["ClientDescription"], task["State"], task["Failed"]) == (
        "failed", "Failed tasks", "dead", True)
    assert task["Events"][-1]["Type"] == "Not Restarting" and task["Events"][-1]["FailsTask"] is True


def test_a_lost_allocation_is_replaced_on_its_node_once_the_node_is_back() -> None:
    model, alloc_id = model_with_alloc(NOMAD_DEFAULT)
    model.task_started(alloc_id)
    model.set_node_status("n1", "down")
    assert model.client_status(model.allocs[alloc_id]) == "lost" and model.node_down_of(alloc_id)
    model.task_started(alloc_id)  # nothing a lost allocation's client says reaches the servers
    assert model.client_status(model.allocs[alloc_id]) == "lost"
    (new_id,) = model.node_back("n1")
    new = model.allocs[new_id]
    assert (new["Name"], new["NodeName"], new["PreviousAllocation"]) == ("s1.main1[0]", "n1", alloc_id)
    assert model.alloc_stub(model.allocs[alloc_id])["NextAllocation"] == new_id
    assert model.client_status(new) == "pending"
    assert model.node_back("n1") == []  # replaced once
