# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure block of the spec, what the job carries for it, the status file and the RESTARTING state (pure).
The supervisor itself runs in real containers: tests/local_runtime/test_failure_policy.py."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    GANG_RESTART_POLICY,
    RESTART_POLICY,
    render_job,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import FailureSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import HEALING, session_state


def spec(**failure: t.Any) -> t.Dict[str, t.Any]:
    return {"name": "s", "image": "busybox", "command": ["train"], "cluster_size": 3, "failure": failure}


def test_the_defaults() -> None:
    f = parse_spec({"name": "s", "image": "busybox"}).failure
    assert f == FailureSpec("none", 3, 600, (2, 126, 127), 0, 360, 2201) and not f.active


@pytest.mark.parametrize("failure, field, message", [
    ({"policy": "restart"}, "session.failure.policy", "must be one of: none, fail, restart_all, restart_one"),
    ({"max_restarts": -1}, "session.failure.max_restarts", "from 0 to 1000"),
    ({"window": 0}, "session.failure.window", "from 1 to 604800"),
    ({"hang_timeout": 1}, "session.failure.hang_timeout", "0 turns the heartbeat watch off"),
    ({"rejoin_timeout": 2}, "session.failure.rejoin_timeout", "from 5 to 86400"),
    ({"port": 2200}, "session.failure.port", "collides with ssh.port, master_port or a published port"),
    ({"port": 12345}, "session.failure.port", "collides"),
    ({"fail_on_exit_codes": [0]}, "session.failure.fail_on_exit_codes", "exit codes from 1 to 255"),
    ({"fail_on_exit_codes": 3}, "session.failure.fail_on_exit_codes", "must be a list"),
    ({"fail_on_exit_codes": [True]}, "session.failure.fail_on_exit_codes", "must be a list"),
    ({"retries": 3}, "session.failure.retries", "unknown key; allowed keys: policy, max_restarts"),
])
def test_bad_values_name_the_field(failure: t.Dict[str, t.Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec(**failure))
    assert field in str(e.value) and message in str(e.value), str(e.value)


def test_a_failure_block_that_is_not_a_mapping() -> None:
    with pytest.raises(SpecError, match="session.failure: must be a mapping"):
        parse_spec({"name": "s", "image": "busybox", "failure": "restart_all"})


def test_values_given() -> None:
    f = parse_spec(spec(policy="restart_one", max_restarts=0, window=60, fail_on_exit_codes=[5, 3, 5],
                        hang_timeout=0, rejoin_timeout=30, port=3000)).failure
    assert f == FailureSpec("restart_one", 0, 60, (3, 5), 0, 30, 3000)
    assert gang.policy_line(f) == "restart_one 0 60 0 30 3000 3,5"
    assert gang.policy_line(FailureSpec(fail_on_exit_codes=())) == "none 3 600 0 360 2201 -"


def _job(raw: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    agents = parse_agents([{"name": "n1", "cpu": 64000, "memory": 262144}])
    return render_job(build_plan(parse_spec(raw), agents, "0f0e0d0c-0b0a-4908-8706-050403020100"))


def test_the_job_of_a_policy_carries_the_supervisor_once_and_no_nomad_restarts() -> None:
    raw = spec(policy="restart_all")
    raw["roles"] = [{"name": "main", "replicas": 1}, {"name": "worker", "replicas": 2, "command": ["work"]},
                    {"name": "notebook", "replicas": 1, "command": None}]
    raw.pop("cluster_size")
    raw.pop("command")
    job = _job(raw)
    meta = job["Meta"]
    assert meta[gang.SCRIPT_META_KEY] == gang.GANG_SCRIPT
    assert meta[gang.POLICY_META_KEY] == "restart_all 3 600 0 360 2201 2,126,127"
    # only the containers with a command are members of the gang
    assert meta[gang.MEMBERS_META_KEY] == "worker1,worker2"
    assert {g["Name"]: g["RestartPolicy"] for g in job["TaskGroups"]} == {
        n: GANG_RESTART_POLICY for n in ("main1", "worker1", "worker2", "notebook1")}
    assert GANG_RESTART_POLICY["Attempts"] == 0 and GANG_RESTART_POLICY["Mode"] == "fail"


def test_policy_none_leaves_the_job_as_it_was() -> None:
    job = _job(spec())
    assert not any(k.startswith("BACKENDAI_GANG") or k == gang.POLICY_META_KEY for k in job["Meta"])
    assert all(g["RestartPolicy"] == RESTART_POLICY for g in job["TaskGroups"])
    assert _job(spec(policy="none", max_restarts=9)) == job


def test_the_status_file() -> None:
    text = ("policy restart_all\nstate waiting\ngeneration 2\nrestarts 2\n"
            "last 1795826188 sub2 137 the command was killed by signal 9\nfirst 1795826100 main1 - the command hung\n"
            "future line\n")
    assert gang.parse_status(text) == {
        "policy": "restart_all", "state": "waiting", "generation": 2, "restarts": 2,
        "last": {"time": 1795826188, "host": "sub2", "exit_code": 137, "reason": "the command was killed by signal 9"},
        "first": {"time": 1795826100, "host": "main1", "exit_code": None, "reason": "the command hung"}}
    assert gang.parse_status("") == {}


@pytest.mark.parametrize("statuses, healing, state", [
    (["running", "restarting"], True, HEALING),
    (["running", "restarting", "failed"], True, HEALING),   # waiting for a container that is gone
    (["failed", "failed"], True, "ERROR"),
    (["running", "restarting"], False, "DEGRADED"),          # Nomad restarting one task alone: as before
    (["running", "running"], True, HEALING),
])
def test_restarting_is_a_session_state(statuses: t.List[str], healing: bool, state: str) -> None:
    assert session_state(statuses, healing=healing) == state
