# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``max_run_time`` and ``keep_after`` in the spec, what the job carries for them, and how a session the time ended
is shown; the STOPPED state (pure). The supervisor itself runs in real containers:
tests/local_runtime/test_session_lifecycle_ops.py."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import GANG_RESTART_POLICY, render_job
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import STOPPED, session_state


def spec(**extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"name": "s", "image": "busybox", "command": ["train"], "cluster_size": 3}
    out.update(extra)
    return out


def _job(raw: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    agents = parse_agents([{"name": "n1", "cpu": 64000, "memory": 262144}])
    return render_job(build_plan(parse_spec(raw), agents, "0f0e0d0c-0b0a-4908-8706-050403020100"))


def test_unset_means_no_limit_and_the_job_is_what_it_was() -> None:
    parsed = parse_spec(spec())
    assert parsed.max_run_time == 0 and parsed.keep_after is None
    job = _job(spec())
    assert gang.SCRIPT_META_KEY not in job["Meta"] and gang.POLICY_META_KEY not in job["Meta"]


@pytest.mark.parametrize("extra, field, message", [
    ({"max_run_time": 0}, "session.max_run_time", "must be an integer from 1 to 2592000"),
    ({"max_run_time": "1h"}, "session.max_run_time", "must be an integer from 1 to 2592000"),
    ({"max_run_time": True}, "session.max_run_time", "seconds a session may run"),
    ({"keep_after": -1}, "session.keep_after", "must be an integer from 0 to 2592000"),
    ({"keep_after": 2592001}, "session.keep_after", "until state=absent"),
])
def test_bad_values_name_the_field_and_what_is_allowed(extra: t.Dict[str, t.Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec(**extra))
    assert field in str(e.value) and message in str(e.value), str(e.value)


def _mixed(**extra: t.Any) -> t.Dict[str, t.Any]:
    raw = spec(**extra)
    raw.pop("cluster_size")
    raw.pop("command")
    raw["roles"] = [{"name": "main", "replicas": 1, "command": ["mpirun", "train"]}, {"name": "worker", "replicas": 2}]
    return raw


@pytest.mark.parametrize("extra", [{"max_run_time": 60}, {"keep_after": 60}, {"max_run_time": 60, "keep_after": 0}])
def test_interactive_containers_are_members_with_a_lifetime(extra: t.Dict[str, t.Any]) -> None:
    """Each interactive container's supervisor keeps the time and the end too: every container is a member."""
    meta = _job(_mixed(**extra))["Meta"]
    assert meta[gang.MEMBERS_META_KEY] == "main1,worker1,worker2" and meta[gang.SCRIPT_META_KEY] == gang.GANG_SCRIPT


def test_an_interactive_session_takes_max_run_time() -> None:
    raw = {"name": "s", "image": "busybox", "cluster_size": 2, "max_run_time": 60}
    job = _job(raw)
    assert job["Type"] == "batch" and job["Meta"][gang.MEMBERS_META_KEY] == "main1,sub1"
    assert job["Meta"][gang.POLICY_META_KEY] == "none 3 600 0 360 2201 2,126,127 60"
    assert all(g["RestartPolicy"] == GANG_RESTART_POLICY for g in job["TaskGroups"])
    assert _job(dict(raw, keep_after=30))["Meta"][gang.POLICY_META_KEY].endswith(" 60 30")


def test_without_a_lifetime_members_are_the_containers_with_a_command() -> None:
    """A failure policy alone leaves interactive containers as they were (sshd as their first process)."""
    assert _job(_mixed(failure={"policy": "fail"}))["Meta"][gang.MEMBERS_META_KEY] == "main1"
    assert gang.SCRIPT_META_KEY not in _job({"name": "s", "image": "busybox", "cluster_size": 2,
                                             "failure": {"policy": "fail"}})["Meta"]


def test_keep_after_of_a_session_that_never_ends_is_refused() -> None:
    """keep_after counts from the end: a session where no container runs a command ends only at max_run_time or by
    its failure policy."""
    raw = {"name": "s", "image": "busybox", "cluster_size": 2, "keep_after": 60}
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    assert "session.keep_after" in str(e.value) and "set max_run_time" in str(e.value), str(e.value)
    assert parse_spec(dict(raw, max_run_time=600)).keep_after == 60
    assert parse_spec(dict(raw, failure={"policy": "fail"})).keep_after == 60
    assert parse_spec(_mixed(keep_after=60)).keep_after == 60  # a command ends: it counts from there


def test_max_run_time_puts_the_supervisor_in_the_job_and_nomad_restarts_no_task() -> None:
    job = _job(spec(max_run_time=30))
    meta = job["Meta"]
    assert meta[gang.SCRIPT_META_KEY] == gang.GANG_SCRIPT
    assert meta[gang.POLICY_META_KEY] == "none 3 600 0 360 2201 2,126,127 30"
    assert meta[gang.MEMBERS_META_KEY] == "main1,sub1,sub2"
    # a task Nomad restarted would start its time anew
    assert all(g["RestartPolicy"] == GANG_RESTART_POLICY for g in job["TaskGroups"])
    with_policy = _job(spec(max_run_time=30, failure={"policy": "fail"}))["Meta"][gang.POLICY_META_KEY]
    assert with_policy == "fail 3 600 0 360 2201 2,126,127 30"


def test_a_session_the_time_ended_is_shown_with_the_reason() -> None:
    first = "first 1795826188 sub1 - max_run_time 30s exceeded: every command was stopped\n"
    gangs = {h: gang.parse_status("policy none\nstate failed\ngeneration 0\nrestarts 0\nlast %s%s" % (first[6:], first))
             for h in ("main1", "sub1")}
    containers = [{"hostname": h, "status": "failed", "reason": "the command exited with code 1"} for h in gangs]
    summary = gang.apply_status(containers, gangs)
    assert summary is not None and summary["state"] == "failed" and summary["policy"] == "none"
    assert gang.failure_reason(summary) == ("max_run_time 30s exceeded: every command was stopped (first seen by "
                                            "sub1)")
    assert [c["reason"] for c in containers] == ["stopped: max_run_time 30s exceeded: every command was stopped"] * 2
    assert session_state([c["status"] for c in containers]) == "ERROR"


def test_a_supervisor_that_only_keeps_the_time_shows_nothing_while_it_runs() -> None:
    running = {"main1": gang.parse_status("policy none\nstate running\ngeneration 0\nrestarts 0\n")}
    containers = [{"hostname": "main1", "status": "running", "reason": ""}]
    assert gang.apply_status(containers, running) is None


def test_stopped_is_a_session_state() -> None:
    assert session_state(["complete", "failed"], paused=True) == STOPPED
    assert session_state([], stopped=True, paused=True) == STOPPED
    assert session_state(["complete"], stopped=True) == "TERMINATED"


def test_keep_after_puts_the_supervisor_in_the_job_with_both_times() -> None:
    meta = _job(spec(keep_after=600))["Meta"]
    assert meta[gang.POLICY_META_KEY] == "none 3 600 0 360 2201 2,126,127 0 600"
    assert _job(spec(keep_after=0, max_run_time=30))["Meta"][gang.POLICY_META_KEY].endswith(" 30 0")


def test_a_container_kept_up_after_its_end_is_shown_as_it_ended() -> None:
    gangs = {"main1": gang.parse_status("policy none\nstate done\ngeneration 0\nrestarts 0\nended 0 1795826188 600\n"),
             "sub1": gang.parse_status("policy none\nstate running\ngeneration 0\nrestarts 0\nended 3 1795826188 600\n")}
    assert gangs["main1"]["ended"] == {"exit_code": 0, "time": 1795826188, "keep_after": 600}
    containers = [{"hostname": h, "status": "running", "reason": "", "exit_code": None} for h in gangs]
    gang.apply_status(containers, gangs)
    assert [(c["status"], c["exit_code"], c["reason"]) for c in containers] == [
        ("complete", 0, ""), ("failed", 3, "the command exited with code 3")]
    assert session_state([c["status"] for c in containers]) == "ERROR"
