# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lifecycle rules both backends share: local container statuses, what present repairs, Nomad's placement reasons."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session import status as ss
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job_view as sv
from ansible_collections.backendai.cluster.plugins.module_utils._session import summaries


@pytest.mark.parametrize("has_command, supervisor, sshd, code, status", [
    (True, True, True, None, "running"),
    (True, True, False, None, "running"),     # sshd of a batch container is a daemon: the task is its command
    (True, False, False, 0, "complete"),
    (True, False, False, 137, "failed"),       # kill -9 of the command
    (True, False, True, None, "failed"),       # the supervisor was killed: the command's end is unknown
    (False, True, True, None, "running"),
    (False, False, False, None, "failed"),     # an interactive container lives as long as its sshd
    (False, True, False, None, "failed"),
])
def test_local_container_status(has_command: bool, supervisor: bool, sshd: bool, code: t.Optional[int], status: str) -> None:
    got, reason = ss.local_container_status(has_command, supervisor, sshd, code)
    assert got == status
    assert bool(reason) == (status == "failed")
    if code:
        assert reason == "the command exited with code %d" % code


@pytest.mark.parametrize("statuses, repair", [
    (["running", "running"], False),
    (["complete", "complete"], False),          # TERMINATED: a finished batch session is not run again
    (["running", "complete"], False),           # DEGRADED only by completion: nothing broken
    (["running", "failed"], True),
    (["lost", "lost"], True),
    (["running", "restarting"], True),
    (["pending", "running"], False),
])
def test_needs_repair(statuses: t.List[str], repair: bool) -> None:
    assert ss.needs_repair(statuses) is repair


def test_failed_placement_reason_per_group() -> None:
    failed = {
        "sub1": {"NodesEvaluated": 2, "NodesFiltered": 1, "ConstraintFiltered": {"${node.unique.name} = n1": 1},
                 "NodesExhausted": 1, "DimensionExhausted": {"memory": 1}},
        "main1": {"NodesEvaluated": 0},
    }
    assert sv.failed_placement_reason(failed) == (
        "main1: no node in the job's datacenters and node pool is ready; "
        "sub1: resources exhausted on 1 of 2 nodes (memory: 1); 1 of 2 nodes filtered (${node.unique.name} = n1: 1)")


def test_broken_summary_names_container_status_node_code_and_reason() -> None:
    containers = [{"hostname": "main1", "status": "running", "agent": "n1"},
                  {"hostname": "sub1", "status": "lost", "agent": "n2", "exit_code": None,
                   "reason": "alloc is lost since its node is down"},
                  {"hostname": "sub2", "status": "failed", "agent": "local", "exit_code": 137,
                   "reason": "the command exited with code 137"}]
    assert summaries.broken_summary(containers) == ("sub1 lost on n2: alloc is lost since its node is down; "
                                                    "sub2 failed on local, exit code 137: the command exited with code 137")
