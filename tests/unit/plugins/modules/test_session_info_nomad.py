# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""backendai.cluster.session_info with the nomad backend against the Nomad API double: states, containers, logs."""

from __future__ import annotations

import typing as t

import pytest
import requests

from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from ansible_collections.backendai.cluster.plugins.modules import session_info, session_render
from module_helpers import NOMAD_TOKEN, ModuleRun, spec, writes
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384)
    return double


def conn(double: NomadAPIDouble, **extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"nomad_addr": double.url, "token": NOMAD_TOKEN}
    out.update(extra)
    return out


def create(run: ModuleRun, double: NomadAPIDouble, **extra: t.Any) -> t.Dict[str, t.Any]:
    args = conn(double, spec=spec(size=3))
    args.update(extra)
    result = run(session_module, args)
    assert not result.get("failed"), result.get("msg")
    return result


def alloc_of(double: NomadAPIDouble, group: str, job: str = "s1") -> str:
    return next(a["ID"] for a in double.allocations_of(job) if a["TaskGroup"] == group)


def info(run: ModuleRun, double: NomadAPIDouble, **extra: t.Any) -> t.List[t.Dict[str, t.Any]]:
    result = run(session_info, conn(double, **extra), check=True)
    assert result["changed"] is False and not result.get("failed"), result.get("msg")
    return result["sessions"]


def test_running_session_with_log_tails(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    created = create(run, nomad)
    nomad.append_log(alloc_of(nomad, "main1"), "kernel", "".join("step %d\n" % i for i in range(50)))
    nomad.append_log(alloc_of(nomad, "main1"), "kernel", "warning: a\nwarning: b\nwarning: c\n", stream="stderr")
    nomad.clear_requests()
    (view,) = info(run, nomad, name="s1", log_lines=2)
    assert writes(nomad) == []
    assert view["state"] == "RUNNING" and view["session_id"] == created["session"]["session_id"]
    main1 = view["containers"][0]
    assert main1["hostname"] == "main1" and main1["status"] == "running" and main1["agent"] == "n1"
    assert main1["log_tail"] == ["step 48", "step 49", "warning: b", "warning: c"]
    assert view["containers"][1]["log_tail"] == [] and main1["address"] == "10.0.0.10"
    assert view["main1"]["ssh_port"] == created["session"]["main1"]["ssh_port"]
    logs = nomad.find("GET", "^/v1/client/fs/logs/")
    assert {r.q("type") for r in logs} == {"stdout", "stderr"} and all(r.q("origin") == "end" for r in logs)
    (quiet,) = info(run, nomad, name="s1")
    assert "log_tail" not in quiet["containers"][0]


def test_degraded_when_one_container_failed(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)
    nomad.set_alloc_status(alloc_of(nomad, "sub2"), "failed", task_state="dead", failed=True)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "DEGRADED"
    by_host = {c["hostname"]: c for c in view["containers"]}
    assert by_host["sub2"]["status"] == "failed" and by_host["sub2"]["exit_code"] == 1
    assert by_host["main1"]["status"] == "running" and by_host["main1"]["exit_code"] is None


def test_degraded_when_one_container_restarts(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)
    nomad.set_alloc_status(alloc_of(nomad, "sub1"), "running", task_state="pending", restarts=2)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "DEGRADED"
    sub1 = view["containers"][1]
    assert (sub1["status"], sub1["restarts"]) == ("restarting", 2)


def test_error_when_every_container_is_down_and_one_failed(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)
    for group, status in (("main1", "failed"), ("sub1", "complete"), ("sub2", "failed")):
        nomad.set_alloc_status(alloc_of(nomad, group), status, task_state="dead", failed=status == "failed")
    assert info(run, nomad, name="s1")[0]["state"] == "ERROR"


def test_terminated_when_every_container_completed(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)
    for group in ("main1", "sub1", "sub2"):
        nomad.set_alloc_status(alloc_of(nomad, group), "complete", task_state="dead", failed=False)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "TERMINATED" and {c["exit_code"] for c in view["containers"]} == {0}


def test_scheduled_while_allocations_are_pending(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(token=NOMAD_TOKEN, alloc_start_delay=None)
    double.add_node("n1", cpu=8000, memory=16384)
    create(run, double, wait=False)
    (view,) = info(run, double, name="s1", log_lines=5)
    assert view["state"] == "SCHEDULED" and {c["status"] for c in view["containers"]} == {"pending"}
    assert not double.find("GET", "^/v1/client/fs/logs/")  # no logs read from pending allocations


def test_pending_when_nomad_cannot_place(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    # (the session module rolls such a job back at once; a job registered by hand shows PENDING)
    planned = run(session_module, dict(conn(nomad, spec=spec(size=3)), agents=[{"name": "ghost", "cpu": 8000, "memory": 16384,
                                                                        "underlay_ip": "192.168.77.7"}]),
                  check=True)
    answer = requests.put(nomad.url + "/v1/jobs", json=planned["job"], headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)
    assert answer.status_code == 200, answer.text
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "PENDING" and {c["status"] for c in view["containers"]} == {"unplaced"}
    assert view["containers"][0]["agent"] == "ghost"


def test_all_sessions_are_the_collections_jobs_only(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)
    create(run, nomad, spec=spec(name="s2", size=1))
    other = {"ID": "web", "Name": "web", "Type": "service", "Datacenters": ["dc1"],
             "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}]}]}
    requests.put(nomad.url + "/v1/jobs", json={"Job": other}, headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)
    sessions = info(run, nomad)
    assert [s["name"] for s in sessions] == ["s1", "s2"] and all(s["state"] == "RUNNING" for s in sessions)
    assert info(run, nomad, name="web") == [] and info(run, nomad, name="nope") == []


def test_stopped_job_is_stopped(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    """A job stopped without purge (``nomad job stop``, or ``state: stopped``) is a STOPPED session: state=present
    starts it again (tests/unit/plugins/modules/test_session_stop_nomad.py)."""
    create(run, nomad)
    requests.delete(nomad.url + "/v1/job/s1", headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)  # stop, no purge
    assert info(run, nomad, name="s1")[0]["state"] == "STOPPED"


def test_namespace_wildcard_shows_the_sessions_of_every_namespace(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad)  # s1 in default
    create(run, nomad, spec=spec(name="s1", size=1), namespace="team-a")  # the same name in another namespace
    create(run, nomad, spec=spec(name="s2", size=1), namespace="team-a")
    assert [s["name"] for s in info(run, nomad)] == ["s1"]  # one namespace: default
    everywhere = info(run, nomad, namespace="*", log_lines=1)
    assert sorted((s["namespace"], s["name"], len(s["containers"])) for s in everywhere) == [
        ("default", "s1", 3), ("team-a", "s1", 1), ("team-a", "s2", 1)]
    assert all(s["state"] == "RUNNING" and s["progress"]["done"] for s in everywhere)
    named = info(run, nomad, namespace="*", name="s1")
    assert sorted(s["namespace"] for s in named) == ["default", "team-a"]
    assert info(run, nomad, namespace="*", name="s") == []  # a name, not a prefix


@pytest.mark.parametrize("module, args", [
    (session_module, {"spec": spec()}),
    (session_module, {"name": "s1", "state": "absent"}),
    (session_render, {"spec": spec()}),
], ids=["present", "absent", "render"])
def test_the_wildcard_namespace_is_refused_for_changes(nomad: NomadAPIDouble, run: ModuleRun, module: t.Any,
                                                       args: t.Dict[str, t.Any]) -> None:
    result = run(module, conn(nomad, namespace="*", **args))
    assert result.get("failed") and result["msg"].startswith("namespace: '*' (every namespace) is only for"), result
    assert writes(nomad) == []
