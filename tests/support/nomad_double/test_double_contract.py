# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad / Vault API doubles keep the documented HTTP contract (plain ``requests``, no client wrapper)."""

from __future__ import annotations

import copy
import socket
import threading
import time
import typing as t

import pytest
import requests

from nomad_double.fixtures import (  # noqa: F401 - pytest fixtures
    nomad_double,
    nomad_double_factory,
    test_pki,
    vault_double,
    vault_double_factory,
)
from nomad_double.server import NomadAPIDouble, SchemaChecker

TIMEOUT = 5


def make_job(job_id: str = "web", groups: t.Sequence[str] = ("g1",), node: t.Optional[str] = "n1",
             env: t.Optional[t.Dict[str, str]] = None, count: int = 1, cpu: int = 500, memory: int = 256,
             mode: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    task_groups = []
    for name in groups:
        group: t.Dict[str, t.Any] = {
            "Name": name, "Count": count,
            "Tasks": [{"Name": "main", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                       "Env": dict(env or {"A": "1"}), "Resources": {"CPU": cpu, "MemoryMB": memory}}],
        }
        if node:
            group["Constraints"] = [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}]
        if mode:
            group["Networks"] = [{"Mode": mode}]
        task_groups.append(group)
    return {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"], "Meta": {"owner": "test"},
            "TaskGroups": task_groups}


def put(double: NomadAPIDouble, path: str, body: t.Any, **kw: t.Any) -> requests.Response:
    return requests.put(double.url + path, json=body, timeout=TIMEOUT, **kw)


def get(double: NomadAPIDouble, path: str, **kw: t.Any) -> requests.Response:
    return requests.get(double.url + path, timeout=TIMEOUT, **kw)


@pytest.fixture
def nomad(nomad_double: NomadAPIDouble) -> NomadAPIDouble:
    nomad_double.add_node("n1", cpu=2000, memory=4096)
    nomad_double.add_node("n2", cpu=2000, memory=4096, datacenter="dc1", cni_networks=["overlay"])
    return nomad_double


# Schema and validation ---------------------------------------------------------------------------

def test_schema_rejects_unknown_key_with_plain_text_400(nomad: NomadAPIDouble) -> None:
    job = make_job()
    job["TaskGroups"][0]["Tasks"][0]["Enabeld"] = True
    resp = put(nomad, "/v1/jobs", {"Job": job})
    assert resp.status_code == 400
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert "$.Job.TaskGroups[0].Tasks[0].Enabeld: unknown key" in resp.text
    assert nomad.stored_job("web") is None


@pytest.mark.parametrize("mutate, fragment", [
    (lambda j: j.update(datacenters=["dc1"]), "$.Job.datacenters: non-canonical key"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0].update(KillTimeout="5s"), "$.Job.TaskGroups[0].Tasks[0].KillTimeout"),
    (lambda j: j["TaskGroups"][0].update(Count="1"), "$.Job.TaskGroups[0].Count"),
    (lambda j: j.update(ReschedulePolicy={}), "$.Job.ReschedulePolicy: unknown key"),
])
def test_schema_rejects_wrong_types_and_misplaced_keys(nomad: NomadAPIDouble, mutate: t.Any, fragment: str) -> None:
    job = make_job()
    mutate(job)
    resp = put(nomad, "/v1/jobs", {"Job": job})
    assert resp.status_code == 400 and fragment in resp.text


def test_schema_checks_plan_and_variable_bodies(nomad: NomadAPIDouble) -> None:
    resp = put(nomad, "/v1/job/web/plan", {"Job": make_job(), "Diff": True, "Dif": True})
    assert resp.status_code == 400 and "$.Dif: unknown key" in resp.text
    resp = put(nomad, "/v1/var/app/x", {"Items": {"k": "v"}, "items": {}})
    assert resp.status_code == 400 and "$.items: non-canonical key" in resp.text
    resp = put(nomad, "/v1/var/app/x", {"Items": {"k": 1}})
    assert resp.status_code == 400 and "$.Items.k" in resp.text


def test_schema_checker_accepts_the_collections_rendered_job() -> None:
    from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import render_raw

    rendered = render_raw({"name": "s1", "image": "python:3.11-slim", "cluster_size": 2,
                           "resources": {"cpu": 1000, "memory": 1024}}, [{"name": "a1", "cpu": 4000, "memory": 8192}])
    assert SchemaChecker.load().problems("register", {"Job": rendered.job}) == []


@pytest.mark.parametrize("path, body, message", [
    ("/v1/jobs", {}, "Job must be specified"),
    ("/v1/jobs", {"Job": {"Name": "x", "TaskGroups": []}}, "Job ID hasn't been provided"),
    ("/v1/job/other", {"Job": make_job()}, "Job ID does not match name"),
    ("/v1/job/web/plan", {"Diff": True}, "Job must be specified"),
    ("/v1/job/other/plan", {"Job": make_job(), "Diff": True}, "Job ID does not match"),
])
def test_http_handler_checks_answer_400(nomad: NomadAPIDouble, path: str, body: t.Any, message: str) -> None:
    resp = put(nomad, path, body)
    assert resp.status_code == 400 and resp.text == message


def test_body_that_is_not_json_is_400(nomad: NomadAPIDouble) -> None:
    resp = requests.put(nomad.url + "/v1/jobs", data=b"{nope", timeout=TIMEOUT)
    assert resp.status_code == 400


@pytest.mark.parametrize("mutate, fragment", [
    (lambda j: j["TaskGroups"].append(copy.deepcopy(j["TaskGroups"][0])), "Job task group 2 redefines 'g1' from group 1"),
    (lambda j: j["TaskGroups"][0].update(Count=-1), "Task group count can't be negative"),
    (lambda j: j["TaskGroups"][0].update(Tasks=[]), "Missing tasks for task group"),
    (lambda j: j["TaskGroups"][0]["Tasks"][0].update(Driver=""), "Missing task driver"),
    (lambda j: j.update(Type="daemon"), 'Invalid job type: "daemon"'),
    (lambda j: j.update(TaskGroups=[]), "Missing job task groups"),
])
def test_job_validate_failures_are_500_multierror_like_nomad(nomad: NomadAPIDouble, mutate: t.Any, fragment: str) -> None:
    job = make_job()
    mutate(job)
    for path, body in (("/v1/jobs", {"Job": job}), ("/v1/job/web/plan", {"Job": job, "Diff": True})):
        resp = put(nomad, path, body)
        assert resp.status_code == 500, resp.text
        assert resp.text.startswith("1 error occurred:\n\t* ") and fragment in resp.text


# Jobs -------------------------------------------------------------------------------------------

def test_register_get_list_and_404(nomad: NomadAPIDouble) -> None:
    assert get(nomad, "/v1/job/web").status_code == 404
    assert get(nomad, "/v1/job/web").text == "job not found"
    resp = requests.post(nomad.url + "/v1/jobs", json={"Job": make_job()}, timeout=TIMEOUT)
    assert resp.status_code == 200
    reg = resp.json()
    assert reg["EvalID"] and reg["JobModifyIndex"] > 0 and resp.headers["X-Nomad-Index"]
    job = get(nomad, "/v1/job/web").json()
    assert job["Version"] == 0 and job["Namespace"] == "default" and job["Region"] == "global"
    assert job["JobModifyIndex"] == reg["JobModifyIndex"] and job["Priority"] == 50 and job["Stop"] is False
    # registering the identical job again changes nothing
    again = put(nomad, "/v1/job/web", {"Job": make_job()}).json()
    assert again["JobModifyIndex"] == reg["JobModifyIndex"] and get(nomad, "/v1/job/web").json()["Version"] == 0
    put(nomad, "/v1/jobs", {"Job": make_job("web2")})
    stubs = get(nomad, "/v1/jobs", params={"prefix": "web2"}).json()
    assert [s["ID"] for s in stubs] == ["web2"] and "Meta" not in stubs[0]
    stubs = get(nomad, "/v1/jobs", params={"meta": "true"}).json()
    assert [s["Meta"] for s in stubs] == [{"owner": "test"}, {"owner": "test"}]


def test_jobs_are_stored_per_namespace(nomad: NomadAPIDouble) -> None:
    put(nomad, "/v1/jobs", {"Job": make_job()}, params={"namespace": "team-a"})
    assert get(nomad, "/v1/job/web").status_code == 404
    assert get(nomad, "/v1/job/web", params={"namespace": "team-a"}).json()["Namespace"] == "team-a"
    assert get(nomad, "/v1/jobs").json() == []
    assert [s["Namespace"] for s in get(nomad, "/v1/jobs", params={"namespace": "*"}).json()] == ["team-a"]
    # Nomad: the query parameter wins over the job's Namespace
    job = make_job("web3")
    job["Namespace"] = "team-b"
    put(nomad, "/v1/jobs", {"Job": job}, params={"namespace": "team-a"})
    assert get(nomad, "/v1/job/web3", params={"namespace": "team-a"}).status_code == 200


def test_unknown_region_has_no_path(nomad: NomadAPIDouble) -> None:
    resp = get(nomad, "/v1/jobs", params={"region": "mars"})
    assert resp.status_code == 500 and resp.text == "No path to region"
    assert get(nomad, "/v1/jobs", params={"region": "global"}).status_code == 200


def test_plan_diff_types(nomad: NomadAPIDouble) -> None:
    plan = put(nomad, "/v1/job/web/plan", {"Job": make_job(groups=("g1", "g2")), "Diff": True}).json()
    assert plan["Diff"]["Type"] == "Added" and plan["JobModifyIndex"] == 0
    assert {g["Name"]: g["Type"] for g in plan["Diff"]["TaskGroups"]} == {"g1": "Added", "g2": "Added"}
    assert plan["Annotations"]["DesiredTGUpdates"]["g1"]["Place"] == 1 and plan["FailedTGAllocs"] is None
    assert get(nomad, "/v1/job/web").status_code == 404  # a plan changes nothing
    reg = put(nomad, "/v1/jobs", {"Job": make_job(groups=("g1", "g2"))}).json()

    same = put(nomad, "/v1/job/web/plan", {"Job": make_job(groups=("g1", "g2")), "Diff": True}).json()
    assert same["Diff"]["Type"] == "None" and same["JobModifyIndex"] == reg["JobModifyIndex"]
    assert [(g["Name"], g["Type"], g["Updates"]) for g in same["Diff"]["TaskGroups"]] == [
        ("g1", "None", {"ignore": 1}), ("g2", "None", {"ignore": 1})]

    edited = make_job(groups=("g1",), env={"A": "2"})
    plan = put(nomad, "/v1/job/web/plan", {"Job": edited, "Diff": True}).json()
    assert plan["Diff"]["Type"] == "Edited"
    groups = {g["Name"]: g for g in plan["Diff"]["TaskGroups"]}
    assert groups["g2"]["Type"] == "Deleted" and groups["g2"]["Updates"] == {"destroy": 1}
    task = groups["g1"]["Tasks"][0]
    assert groups["g1"]["Type"] == "Edited" and task["Type"] == "Edited"
    assert task["Annotations"] == ["forces create/destroy update"]
    assert {"Type": "Edited", "Name": "Env[A]", "Old": "1", "New": "2", "Annotations": None} in task["Fields"]
    assert plan["Annotations"]["DesiredTGUpdates"]["g1"]["DestructiveUpdate"] == 1

    no_diff = put(nomad, "/v1/job/web/plan", {"Job": make_job(groups=("g1", "g2")), "Diff": False}).json()
    assert no_diff["Diff"] is None


def test_plan_reports_unplaceable_groups(nomad: NomadAPIDouble) -> None:
    plan = put(nomad, "/v1/job/web/plan", {"Job": make_job(node="nowhere"), "Diff": True}).json()
    failed = plan["FailedTGAllocs"]["g1"]
    assert failed["ConstraintFiltered"] == {"${node.unique.name} = nowhere": 2} and failed["NodesEvaluated"] == 2
    big = put(nomad, "/v1/job/web/plan", {"Job": make_job(cpu=3000), "Diff": True}).json()
    assert big["FailedTGAllocs"]["g1"]["DimensionExhausted"] == {"cpu": 1}
    cni = put(nomad, "/v1/job/web/plan", {"Job": make_job(node="n1", mode="cni/overlay"), "Diff": True}).json()
    assert cni["FailedTGAllocs"]["g1"]["ConstraintFiltered"] == {"${node.unique.name} = n1": 1, "missing network": 1}
    ok = put(nomad, "/v1/job/web/plan", {"Job": make_job(node="n2", mode="cni/overlay"), "Diff": True}).json()
    assert ok["FailedTGAllocs"] is None


def test_groups_go_only_to_nodes_with_compatible_host_volumes(nomad_double: NomadAPIDouble) -> None:
    """scheduler/feasible/feasible.go HostVolumeChecker: every host volume request's Source declared by the node,
    a read-only declaration only for a ReadOnly request; the node list stub carries HostVolumes (Node.Stub)."""
    nomad_double.add_node("n1", runtime_bundle=False)
    nomad_double.add_node("n2", runtime_bundle=False, host_volumes={"data": ("/srv/data", True)})
    nomad_double.add_node("n3", runtime_bundle=False, host_volumes={"data": ("/srv/data", False)})
    stubs = {s["Name"]: s["HostVolumes"] for s in get(nomad_double, "/v1/nodes").json()}
    assert stubs == {"n1": {}, "n2": {"data": {"Name": "data", "Path": "/srv/data", "ReadOnly": True, "ID": ""}},
                     "n3": {"data": {"Name": "data", "Path": "/srv/data", "ReadOnly": False, "ID": ""}}}

    def job(node: str, read_only: bool) -> t.Dict[str, t.Any]:
        body = make_job(node=None)
        body["TaskGroups"][0]["Constraints"] = [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}]
        body["TaskGroups"][0]["Volumes"] = {"v": {"Name": "v", "Type": "host", "Source": "data", "ReadOnly": read_only}}
        return {"Job": body, "Diff": True}

    missing = "missing compatible host volumes"
    for node, read_only, placed in (("n1", True, False), ("n2", False, False), ("n2", True, True), ("n3", False, True)):
        failed = put(nomad_double, "/v1/job/web/plan", job(node, read_only)).json()["FailedTGAllocs"]
        if placed:
            assert failed is None, (node, read_only, failed)
        else:
            assert failed["g1"]["ConstraintFiltered"][missing] == 1, (node, read_only, failed)


def test_allocations_start_after_the_configured_delay(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(alloc_start_delay=0.5)
    double.add_node("n1")
    started = time.monotonic()
    put(double, "/v1/jobs", {"Job": make_job()})
    statuses = [a["ClientStatus"] for a in get(double, "/v1/job/web/allocations").json()]
    if time.monotonic() - started < 0.5:  # (a very slow machine may already be past the delay)
        assert statuses == ["pending"]
    deadline = time.monotonic() + 10
    while statuses != ["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
        statuses = [a["ClientStatus"] for a in get(double, "/v1/job/web/allocations").json()]
    assert statuses == ["running"] and time.monotonic() - started >= 0.5


def test_allocations_follow_the_node_constraint_and_start(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(alloc_start_delay=None)  # pending until the test says otherwise
    double.add_node("n1")
    double.add_node("n2")
    put(double, "/v1/jobs", {"Job": make_job(groups=("g1", "g2"), node="n2")})
    allocs = get(double, "/v1/job/web/allocations").json()
    assert [(a["Name"], a["NodeName"], a["ClientStatus"]) for a in allocs] == [
        ("web.g1[0]", "n2", "pending"), ("web.g2[0]", "n2", "pending")]
    assert allocs[0]["TaskStates"]["main"]["State"] == "pending"
    double.alloc_start_delay = 0.0
    allocs = get(double, "/v1/job/web/allocations").json()
    assert {a["ClientStatus"] for a in allocs} == {"running"}
    state = allocs[0]["TaskStates"]["main"]
    assert state["State"] == "running" and state["Failed"] is False and state["Restarts"] == 0
    full = get(double, "/v1/allocation/" + allocs[0]["ID"]).json()
    assert full["AllocatedResources"]["Tasks"]["main"]["Cpu"]["CpuShares"] == 500
    assert full["Job"]["ID"] == "web" and get(double, "/v1/job/web").json()["Status"] == "running"
    assert get(double, "/v1/allocation/nope").status_code == 404
    double.set_alloc_status(allocs[0]["ID"], "failed", restarts=2)
    failed = get(double, "/v1/allocation/" + allocs[0]["ID"]).json()
    assert failed["ClientStatus"] == "failed" and failed["TaskStates"]["main"]["Failed"] is True
    assert failed["TaskStates"]["main"]["Restarts"] == 2


def test_an_allocation_is_served_as_the_model_holds_it_with_its_job_of_the_version_it_runs(nomad: NomadAPIDouble) -> None:
    """``GET /v1/allocation/:id`` encodes the embedded job once per job view and splices it in: the answer is
    still exactly the model's allocation, the job of each allocation's own version after an update."""
    put(nomad, "/v1/jobs", {"Job": make_job(groups=("g1", "g2"))})
    allocs = get(nomad, "/v1/job/web/allocations").json()
    for alloc in allocs:
        assert get(nomad, "/v1/allocation/" + alloc["ID"]).json() == nomad.model.allocation(alloc["ID"])
    put(nomad, "/v1/jobs", {"Job": make_job(groups=("g1", "g2"), env={"A": "2"})})
    for alloc in get(nomad, "/v1/job/web/allocations?all=true").json():
        served = get(nomad, "/v1/allocation/" + alloc["ID"]).json()
        assert served == nomad.model.allocation(alloc["ID"])
        assert served["Job"]["Version"] == alloc["JobVersion"]


def test_pending_forever_and_unplaced(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(alloc_start_delay=None)
    double.add_node("n1")
    put(double, "/v1/jobs", {"Job": make_job(groups=("g1", "g2"))})
    put(double, "/v1/jobs", {"Job": make_job("lost", node="nowhere")})
    assert {a["ClientStatus"] for a in get(double, "/v1/job/web/allocations").json()} == {"pending"}
    assert get(double, "/v1/job/lost/allocations").json() == []
    assert get(double, "/v1/job/lost/summary").json()["Summary"]["g1"]["Queued"] == 1
    assert get(double, "/v1/job/lost").json()["Status"] == "pending"


def test_edit_replaces_allocations_and_count_changes(nomad: NomadAPIDouble) -> None:
    put(nomad, "/v1/jobs", {"Job": make_job()})
    first = get(nomad, "/v1/job/web/allocations").json()
    put(nomad, "/v1/jobs", {"Job": make_job(env={"A": "2"})})
    allocs = get(nomad, "/v1/job/web/allocations").json()
    assert [(a["ID"] == first[0]["ID"], a["DesiredStatus"], a["JobVersion"]) for a in allocs] == [
        (True, "stop", 0), (False, "run", 1)]
    put(nomad, "/v1/jobs", {"Job": make_job(env={"A": "2"}, count=2)})
    live = [a for a in get(nomad, "/v1/job/web/allocations").json() if a["DesiredStatus"] == "run"]
    assert sorted(a["Name"] for a in live) == ["web.g1[0]", "web.g1[1]"]


def test_deregister(nomad: NomadAPIDouble) -> None:
    assert requests.delete(nomad.url + "/v1/job/absent", timeout=TIMEOUT).json()["EvalID"] == ""
    put(nomad, "/v1/jobs", {"Job": make_job()})
    resp = requests.delete(nomad.url + "/v1/job/web", timeout=TIMEOUT)
    assert resp.status_code == 200 and resp.json()["EvalID"]
    job = get(nomad, "/v1/job/web").json()
    assert job["Stop"] is True and job["Status"] == "dead"
    # python-nomad sends Python booleans ("True"); Nomad parses them with strconv.ParseBool
    assert requests.delete(nomad.url + "/v1/job/web?purge=True", timeout=TIMEOUT).status_code == 200
    assert get(nomad, "/v1/job/web").status_code == 404
    assert get(nomad, "/v1/job/web/allocations").json() == []
    bad = requests.delete(nomad.url + "/v1/job/web?purge=yes", timeout=TIMEOUT)
    assert bad.status_code == 400 and "as a bool" in bad.text


def test_logs_plain_origin_end_and_offset(nomad: NomadAPIDouble) -> None:
    put(nomad, "/v1/jobs", {"Job": make_job()})
    alloc = get(nomad, "/v1/job/web/allocations").json()[0]
    nomad.append_log(alloc["ID"], "main", "one\ntwo\nthree\n")
    nomad.append_log(alloc["ID"], "main", "oops\n", stream="stderr")
    logs = "/v1/client/fs/logs/" + alloc["ID"]
    resp = get(nomad, logs, params={"task": "main", "type": "stdout", "plain": "true", "origin": "end", "offset": "6"})
    assert resp.status_code == 200 and resp.text == "three\n"
    resp = get(nomad, logs, params={"task": "main", "type": "stderr", "plain": "true", "origin": "start", "offset": "0"})
    assert resp.text == "oops\n"
    assert get(nomad, logs, params={"task": "main", "type": "stdout", "plain": "true", "origin": "end",
                                    "offset": "999"}).text == "one\ntwo\nthree\n"
    assert get(nomad, logs, params={"type": "stdout"}).status_code == 400
    assert get(nomad, logs, params={"task": "main", "type": "stdlog"}).status_code == 400
    assert get(nomad, "/v1/client/fs/logs/nope", params={"task": "main", "type": "stdout"}).status_code == 404


def test_nodes(nomad: NomadAPIDouble) -> None:
    stubs = get(nomad, "/v1/nodes").json()
    assert [s["Name"] for s in sorted(stubs, key=lambda s: s["Name"])] == ["n1", "n2"]
    assert stubs[0]["NodeResources"] is None
    with_res = get(nomad, "/v1/nodes", params={"resources": "true"}).json()
    assert with_res[0]["NodeResources"]["Cpu"]["CpuShares"] == 2000
    node = get(nomad, "/v1/node/" + nomad.node_id("n2")).json()
    assert {n["Mode"] for n in node["NodeResources"]["Networks"]} == {"host", "bridge", "cni/overlay"}
    assert node["Attributes"]["plugins.cni.version.bridge"] and node["Drivers"]["docker"]["Healthy"]
    assert get(nomad, "/v1/node/nope").status_code == 404
    put(nomad, "/v1/jobs", {"Job": make_job()})
    allocs = get(nomad, "/v1/node/%s/allocations" % nomad.node_id("n1")).json()
    assert [a["TaskGroup"] for a in allocs] == ["g1"] and allocs[0]["AllocatedResources"]["Shared"]["DiskMB"] == 300


# Variables --------------------------------------------------------------------------------------

def test_variable_check_and_set(nomad: NomadAPIDouble) -> None:
    path = "/v1/var/nomad/jobs/web"
    assert get(nomad, path).status_code == 404 and get(nomad, path).text == "variable not found"
    created = put(nomad, path, {"Path": "nomad/jobs/web", "Items": {"k": "v1"}}, params={"cas": "0"})
    assert created.status_code == 200
    var = created.json()
    assert var["Items"] == {"k": "v1"} and var["ModifyIndex"] == var["CreateIndex"]
    # cas=0 means "create only if absent": the current variable comes back with 409
    conflict = put(nomad, path, {"Items": {"k": "v2"}}, params={"cas": "0"})
    assert conflict.status_code == 409
    assert conflict.json()["ModifyIndex"] == var["ModifyIndex"] and conflict.json()["Items"] == {"k": "v1"}
    assert put(nomad, path, {"Items": {"k": "v2"}}, params={"cas": str(var["ModifyIndex"] + 5)}).status_code == 409
    updated = put(nomad, path, {"Items": {"k": "v2"}}, params={"cas": str(var["ModifyIndex"])}).json()
    assert updated["ModifyIndex"] > var["ModifyIndex"] and updated["CreateIndex"] == var["CreateIndex"]
    assert requests.delete(nomad.url + path, params={"cas": str(var["ModifyIndex"])}, timeout=TIMEOUT).status_code == 409
    deleted = requests.delete(nomad.url + path, params={"cas": str(updated["ModifyIndex"])}, timeout=TIMEOUT)
    assert deleted.status_code == 204 and deleted.content == b""
    assert get(nomad, path).status_code == 404
    # a CAS write against an absent variable conflicts with a zero-value variable
    zero = put(nomad, path, {"Items": {"k": "v"}}, params={"cas": "3"})
    assert zero.status_code == 409 and zero.json()["ModifyIndex"] == 0 and zero.json()["Items"] is None
    assert requests.delete(nomad.url + path, timeout=TIMEOUT).status_code == 204  # absent: fine
    assert put(nomad, path, {"Items": {"k": "v"}}, params={"cas": "x"}).status_code == 400


def test_variable_validation_and_namespaces(nomad: NomadAPIDouble) -> None:
    assert put(nomad, "/v1/var/app/x", {"Items": {}}).text == "variable missing required Items object"
    # a bad path is a 400: canonicalizeAndValidate (nomad/variables_endpoint.go) wraps structs.ValidatePath's error
    reserved = put(nomad, "/v1/var/nomad/other", {"Items": {"k": "v"}})
    assert (reserved.status_code, reserved.text) == (400, 'only paths at "nomad/jobs" or "nomad/job-templates" and '
                                                          'below are valid paths under the top-level "nomad" directory')
    assert (put(nomad, "/v1/var/app/x.y", {"Items": {"k": "v"}}).status_code,) == (400,)
    assert put(nomad, "/v1/var/app/x.y?lock-acquire", {"Items": {"k": "v"}}).text == 'invalid path "app/x.y"'
    assert put(nomad, "/v1/var/nomad/jobs/j", {"Items": {"k": "v"}}).status_code == 200
    put(nomad, "/v1/var/app/x", {"Items": {"k": "a"}}, params={"namespace": "team-a"})
    assert get(nomad, "/v1/var/app/x").status_code == 404
    assert get(nomad, "/v1/var/app/x", params={"namespace": "team-a"}).json()["Namespace"] == "team-a"
    listed = get(nomad, "/v1/vars", params={"namespace": "*", "prefix": "app/"}).json()
    assert [(v["Namespace"], v["Path"]) for v in listed] == [("team-a", "app/x")] and "Items" not in listed[0]


# ACL, faults, recording ---------------------------------------------------------------------------

def test_acl_token(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(token="secret-management-token")
    assert (get(double, "/v1/jobs").status_code, get(double, "/v1/jobs").text) == (403, "Permission denied")
    wrong = get(double, "/v1/jobs", headers={"X-Nomad-Token": "nope"})
    assert (wrong.status_code, wrong.text) == (403, "ACL token not found")
    assert get(double, "/v1/jobs", headers={"X-Nomad-Token": "secret-management-token"}).status_code == 200
    assert get(double, "/v1/jobs", headers={"Authorization": "Bearer secret-management-token"}).status_code == 200
    assert double.requests_containing("secret-management-token") == []
    assert [r.token_present for r in double.requests] == [False, False, True, True, True]
    assert all("x-nomad-token" not in r.headers for r in double.requests)


def test_fault_injection(nomad: NomadAPIDouble) -> None:
    nomad.fail_next("GET", r"^/v1/jobs$", status=500, body="rpc error: boom", times=2)
    nomad.deny_next("PUT", r"^/v1/var/")
    assert (get(nomad, "/v1/jobs").status_code, get(nomad, "/v1/jobs").text) == (500, "rpc error: boom")
    assert get(nomad, "/v1/jobs").status_code == 200
    assert get(nomad, "/v1/job/x").status_code == 404  # other paths unaffected
    assert put(nomad, "/v1/var/a", {"Items": {"k": "v"}}).status_code == 403
    assert put(nomad, "/v1/var/a", {"Items": {"k": "v"}}).status_code == 200
    forever = nomad.fail_next("*", "^/v1/nodes$", status=503, body="down", times=None)
    assert [get(nomad, "/v1/nodes").status_code for _ in range(3)] == [503, 503, 503] and forever.hits == 3
    nomad.clear_faults()
    assert get(nomad, "/v1/nodes").status_code == 200
    nomad.timeout_next("GET", "^/v1/jobs$", seconds=2)
    start = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        requests.get(nomad.url + "/v1/jobs", timeout=0.3)
    assert time.monotonic() - start < 1.5
    nomad.inject("GET", "^/v1/regions$", delay=0.2)  # slow but answered
    assert get(nomad, "/v1/regions").json() == ["global"]
    assert [r.status for r in nomad.find("GET", "^/v1/jobs$")][:3] == [500, 500, 200]
    assert sum(r.fault for r in nomad.requests) == 8  # 2 x 500, 403, 3 x 503, timeout, delay


def test_requests_are_recorded(nomad: NomadAPIDouble) -> None:
    put(nomad, "/v1/var/nomad/jobs/web", {"Items": {"ssh_private_key": "PRIVATE-KEY-MATERIAL"}})
    put(nomad, "/v1/jobs", {"Job": make_job()}, params={"namespace": "default"})
    writes = nomad.find("PUT", "^/v1/jobs$")
    assert len(writes) == 1 and writes[0].json["Job"]["ID"] == "web" and writes[0].q("namespace") == "default"
    holders = nomad.requests_containing("PRIVATE-KEY-MATERIAL")
    assert [r.path for r in holders] == ["/v1/var/nomad/jobs/web"]


def test_stop_leaves_no_thread_or_socket(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory()
    double.timeout_next("GET", ".*", seconds=30)
    with pytest.raises(requests.ReadTimeout):
        requests.get(double.url + "/v1/jobs", timeout=0.2)
    port = double.port
    start = time.monotonic()
    double.stop()
    assert time.monotonic() - start < 5 and not double.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_unknown_paths_and_methods(nomad: NomadAPIDouble) -> None:
    assert get(nomad, "/v1/nope").status_code == 404
    assert requests.delete(nomad.url + "/v1/jobs", timeout=TIMEOUT).status_code == 405


# TLS --------------------------------------------------------------------------------------------

def test_tls_double(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(tls=True)
    assert double.url.startswith("https://127.0.0.1:")
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(double.url + "/v1/jobs", timeout=TIMEOUT)
    assert requests.get(double.url + "/v1/jobs", timeout=TIMEOUT, verify=double.pki.ca_cert).json() == []


def test_tls_double_requiring_client_certificates(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(tls=True, require_client_cert=True)
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(double.url + "/v1/jobs", timeout=TIMEOUT, verify=double.pki.ca_cert)
    resp = requests.get(double.url + "/v1/jobs", timeout=TIMEOUT, verify=double.pki.ca_cert,
                        cert=(double.pki.client_cert, double.pki.client_key))
    assert resp.status_code == 200


# Vault KV v2 ------------------------------------------------------------------------------------

def test_vault_kv_v2_contract(vault_double: t.Any) -> None:
    url = vault_double.url + "/v1/secret/data/sessions/s1"
    auth = {"X-Vault-Token": "vault-root-token"}
    assert requests.get(url, timeout=TIMEOUT).status_code == 403
    assert requests.get(url, timeout=TIMEOUT).json() == {"errors": ["permission denied"]}
    missing = requests.get(url, headers=auth, timeout=TIMEOUT)
    assert missing.status_code == 404 and missing.json() == {"errors": []}
    written = requests.post(url, json={"data": {"k": "v"}, "options": {"cas": 0}}, headers=auth, timeout=TIMEOUT)
    assert written.status_code == 200 and written.json()["data"]["version"] == 1
    clash = requests.post(url, json={"data": {"k": "w"}, "options": {"cas": 0}}, headers=auth, timeout=TIMEOUT)
    assert clash.status_code == 400
    assert clash.json() == {"errors": ["check-and-set parameter did not match the current version"]}
    assert requests.put(url, json={"data": {"k": "w"}, "options": {"cas": 1}}, headers=auth,
                        timeout=TIMEOUT).json()["data"]["version"] == 2
    read = requests.get(url, headers=auth, timeout=TIMEOUT).json()["data"]
    assert read["data"] == {"k": "w"} and read["metadata"]["version"] == 2
    assert requests.post(url, json={"Data": {}}, headers=auth, timeout=TIMEOUT).json() == {"errors": ["no data provided"]}
    other_ns = requests.get(url, headers=dict(auth, **{"X-Vault-Namespace": "team-a"}), timeout=TIMEOUT)
    assert other_ns.status_code == 404
    meta_url = vault_double.url + "/v1/secret/metadata/sessions/s1"
    assert requests.get(meta_url, headers=auth, timeout=TIMEOUT).json()["data"]["current_version"] == 2
    assert requests.delete(meta_url, headers=auth, timeout=TIMEOUT).status_code == 204
    assert requests.get(url, headers=auth, timeout=TIMEOUT).status_code == 404
    nomount = requests.get(vault_double.url + "/v1/kv2/data/x", headers=auth, timeout=TIMEOUT)
    assert nomount.status_code == 404 and "no handler for route" in nomount.json()["errors"][0]
    assert vault_double.requests_containing("vault-root-token") == []


# Variable locks, evaluations, the allocation list, node status (issue 12) -------------------------

LOCK = "/v1/var/locks/one"


def test_variable_lock_acquire_conflict_renew_release(nomad: NomadAPIDouble) -> None:
    body = {"Path": "locks/one", "Items": {"holder": "a"}, "Lock": {"TTL": "10s", "LockDelay": "1s"}}
    first = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    assert first.status_code == 200, first.text
    lock_id = first.json()["Lock"]["ID"]
    assert first.json()["Lock"]["TTL"] == "10s"
    other = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    assert other.status_code == 409 and other.json()["Items"] is None  # no data shown to a loser
    write = put(nomad, LOCK, {"Path": "locks/one", "Items": {"x": "y"}})
    assert write.status_code == 409  # a locked variable is written only with its lock ID
    assert requests.delete(nomad.url + LOCK, timeout=TIMEOUT).status_code == 409
    renew = requests.put(nomad.url + LOCK + "?lock-renew", json={"Path": "locks/one", "Lock": {"ID": lock_id}}, timeout=TIMEOUT)
    assert renew.status_code == 200 and "Items" not in renew.json()
    wrong = requests.put(nomad.url + LOCK + "?lock-release", json={"Path": "locks/one", "Lock": {"ID": "nope"}}, timeout=TIMEOUT)
    assert wrong.status_code == 409
    both = requests.put(nomad.url + LOCK + "?lock-release&lock-acquire", json=body, timeout=TIMEOUT)
    assert (both.status_code, both.text) == (400, "multiple lock operations")
    cas = requests.put(nomad.url + LOCK + "?lock-acquire&cas=3", json=body, timeout=TIMEOUT)
    assert (cas.status_code, cas.text) == (400, "CAS can't be used with lock operations")
    released = requests.put(nomad.url + LOCK + "?lock-release", json={"Path": "locks/one", "Lock": {"ID": lock_id}},
                            timeout=TIMEOUT)
    # makeVariablesApplyResponse: a release's output is the metadata with the request's Items (none) and no Lock
    assert released.status_code == 200 and "Lock" not in released.json() and "Items" not in released.json()
    assert released.json()["ModifyIndex"] == int(released.headers["X-Nomad-Index"])
    assert requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT).status_code == 200
    short = dict(body, Lock={"TTL": "5s"})
    assert requests.put(nomad.url + "/v1/var/locks/two?lock-acquire", json=short, timeout=TIMEOUT).text == \
        "TTL must be between 10 seconds and 24 hours"


def test_variable_lock_timer_is_twice_the_ttl_then_the_lock_delay_as_in_nomad(nomad: NomadAPIDouble) -> None:
    """nomad/locks.go, CreateVariableLockTTLTimer: ``lockTTL := variable.Lock.TTL * 2``; when that timer fires,
    ``time.AfterFunc(variable.Lock.LockDelay, ...)`` calls invalidateVariableLock, which removes the lock. Until then
    the variable holds it (every acquire gets 409); RenewLock (nomad/variables_endpoint.go) fails once the timer is
    gone; VarLockRelease (nomad/state/state_store_variables.go) does not look at the timer."""
    now = [1000.0]
    nomad.model.clock = lambda: now[0]
    body = {"Path": "locks/one", "Items": {"holder": "a"}, "Lock": {"TTL": "10s", "LockDelay": "2s"}}
    first = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    lock_id = first.json()["Lock"]["ID"]
    renew_body = {"Path": "locks/one", "Lock": {"ID": lock_id}}

    def acquire() -> int:
        return requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT).status_code

    def renew() -> int:
        return requests.put(nomad.url + LOCK + "?lock-renew", json=renew_body, timeout=TIMEOUT).status_code

    now[0] += 11  # past the TTL: Nomad's timer has not fired yet (TTL x 2)
    assert nomad.lock_of("locks/one") is not None and acquire() == 409
    assert renew() == 200  # a renewal restarts the timer: 2 x TTL from now
    now[0] += 19.9
    assert acquire() == 409 and nomad.lock_of("locks/one")["ID"] == lock_id
    now[0] += 0.2  # the timer fired: the lock delay (2 s) runs, the lock is still held and no longer renewable
    assert nomad.lock_of("locks/one") is not None and acquire() == 409
    assert renew() == 409
    assert get(nomad, LOCK).json()["Lock"]["ID"] == lock_id
    now[0] += 1.85  # 2 x TTL + 1.95 s after the renewal
    assert acquire() == 409
    before = get(nomad, LOCK).json()["ModifyIndex"]
    now[0] += 0.1  # 2 x TTL + LockDelay: invalidateVariableLock removed it (a raft write: a new index)
    assert nomad.lock_of("locks/one") is None
    after = get(nomad, LOCK).json()
    assert after.get("Lock") is None and after["ModifyIndex"] > before and after["Items"] == {"holder": "a"}
    assert acquire() == 200


def test_variable_lock_released_in_its_delay_and_acquired_again_with_the_holders_id(nomad: NomadAPIDouble) -> None:
    now = [1000.0]
    nomad.model.clock = lambda: now[0]
    body = {"Path": "locks/one", "Items": {"holder": "a"}, "Lock": {"TTL": "10s", "LockDelay": "5s", "ID": "my-id"}}
    first = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    assert first.json()["Lock"]["ID"] == "my-id"  # VariableLock.Canonicalize keeps a given ID
    assert requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT).status_code == 200  # isLocked: same ID
    now[0] += 21  # in the delay
    released = requests.put(nomad.url + LOCK + "?lock-release", json={"Path": "locks/one", "Lock": {"ID": "my-id"}},
                            timeout=TIMEOUT)
    assert released.status_code == 200 and nomad.lock_of("locks/one") is None
    other = dict(body, Lock={"TTL": "10s"})
    assert requests.put(nomad.url + LOCK + "?lock-acquire", json=other, timeout=TIMEOUT).status_code == 200  # no delay


def test_register_creates_an_evaluation_with_failed_groups_and_a_blocked_eval(nomad: NomadAPIDouble) -> None:
    job = make_job("web", groups=("g1", "g2"), cpu=1500)  # both pinned to n1 (2000 MHz): g2 cannot be placed
    answer = put(nomad, "/v1/jobs", {"Job": job}).json()
    ev = get(nomad, "/v1/evaluation/" + answer["EvalID"]).json()
    assert ev["Status"] == "complete" and ev["JobID"] == "web" and ev["TriggeredBy"] == "job-register"
    assert list(ev["FailedTGAllocs"]) == ["g2"] and ev["FailedTGAllocs"]["g2"]["DimensionExhausted"] == {"cpu": 1}
    blocked = get(nomad, "/v1/evaluation/" + ev["BlockedEval"]).json()
    assert blocked["Status"] == "blocked" and blocked["PreviousEval"] == ev["ID"]
    ok = put(nomad, "/v1/jobs", {"Job": make_job("db", node="n2")}).json()
    ev = get(nomad, "/v1/evaluation/" + ok["EvalID"]).json()
    assert ev["FailedTGAllocs"] is None and ev["BlockedEval"] == ""
    assert get(nomad, "/v1/evaluation/nope").status_code == 404


def test_allocation_list_filter_fields_and_pages(nomad: NomadAPIDouble) -> None:
    for i in range(5):
        assert put(nomad, "/v1/jobs", {"Job": make_job("j%d" % i, cpu=100, memory=64)}).status_code == 200
    requests.delete(nomad.url + "/v1/job/j4", timeout=TIMEOUT)  # stopped: its allocation is no longer live
    live = 'DesiredStatus == "run" and ClientStatus != "complete"'
    seen, token, pages = [], None, 0
    while True:
        params = {"namespace": "*", "resources": "true", "task_states": "false", "filter": live, "per_page": "2"}
        if token:
            params["next_token"] = token
        page = requests.get(nomad.url + "/v1/allocations", params=params, timeout=TIMEOUT)
        assert page.status_code == 200
        pages += 1
        for stub in page.json():
            assert stub["TaskStates"] is None and stub["AllocatedResources"]["Tasks"]["main"]["Cpu"]["CpuShares"] == 100
            seen.append(stub["JobID"])
        token = page.headers.get("X-Nomad-NextToken")
        if not token:
            break
    assert seen == ["j0", "j1", "j2", "j3"] and pages == 2
    plain = get(nomad, "/v1/allocations").json()
    assert len(plain) == 5 and plain[0]["AllocatedResources"] is None and plain[0]["TaskStates"]
    bad = requests.get(nomad.url + "/v1/allocations", params={"filter": "ClientStatus matches x"}, timeout=TIMEOUT)
    assert bad.status_code == 400


def test_node_down_makes_its_allocations_lost(nomad: NomadAPIDouble) -> None:
    put(nomad, "/v1/jobs", {"Job": make_job("web")})
    nomad.set_node_status("n1", "down")
    (alloc,) = get(nomad, "/v1/job/web/allocations").json()
    assert (alloc["ClientStatus"], alloc["DesiredStatus"]) == ("lost", "stop")
    assert alloc["DesiredDescription"] == "alloc is lost since its node is down"
    nodes = {n["Name"]: n["Status"] for n in get(nomad, "/v1/nodes").json()}
    assert nodes == {"n1": "down", "n2": "ready"}


# Blocking queries and concurrency (issue 24) ------------------------------------------------------

def test_variable_reads_block_on_index_and_wait_as_nomads_blocking_rpc(nomad: NomadAPIDouble) -> None:
    """Variables.Read (nomad/variables_endpoint.go) runs through blockingRPC (nomad/rpc.go): the index is the
    variable's ModifyIndex (absent: the variables table's); with ``index`` the read waits for a higher one or ``wait``
    (plus up to wait/16 of jitter). parseWait (command/agent/http.go) refuses a bad ``wait`` or ``index``."""
    path = "/v1/var/app/block"
    assert put(nomad, path, {"Items": {"k": "1"}}).status_code == 200
    first = get(nomad, path)
    index = int(first.headers["X-Nomad-Index"])
    assert index == first.json()["ModifyIndex"]
    started = time.monotonic()
    same = get(nomad, path, params={"index": str(index), "wait": "300ms"})
    took = time.monotonic() - started
    assert same.status_code == 200 and int(same.headers["X-Nomad-Index"]) == index
    assert 0.3 <= took < 0.3 * (1 + 1 / 16) + 0.5, took
    assert get(nomad, path, params={"index": str(index - 1), "wait": "10s"}).status_code == 200  # older: at once

    answers: t.List[requests.Response] = []
    waiter = threading.Thread(target=lambda: answers.append(get(nomad, path, params={"index": str(index), "wait": "4s"})))
    waiter.start()
    time.sleep(0.3)
    assert not answers, "the read did not block"
    put(nomad, path, {"Items": {"k": "2"}})
    waiter.join(3)
    assert answers and answers[0].json()["Items"] == {"k": "2"} and int(answers[0].headers["X-Nomad-Index"]) > index

    gone = get(nomad, "/v1/var/app/absent")
    assert gone.status_code == 404 and int(gone.headers["X-Nomad-Index"]) >= int(answers[0].headers["X-Nomad-Index"])
    absent: t.List[requests.Response] = []
    waiter = threading.Thread(target=lambda: absent.append(
        get(nomad, "/v1/var/app/absent", params={"index": gone.headers["X-Nomad-Index"], "wait": "4s"})))
    waiter.start()
    time.sleep(0.3)
    assert not absent
    put(nomad, "/v1/var/app/absent", {"Items": {"k": "v"}})
    waiter.join(3)
    assert absent and absent[0].status_code == 200
    listed = get(nomad, "/v1/vars", params={"prefix": "app/"})
    assert int(listed.headers["X-Nomad-Index"]) == absent[0].json()["ModifyIndex"]
    assert (get(nomad, path, params={"wait": "soon"}).status_code, get(nomad, path, params={"wait": "soon"}).text) == \
        (400, "Invalid wait time")
    assert get(nomad, path, params={"index": "x"}).text == "Invalid index"


def test_evaluation_reads_block_until_a_worker_processed_it(nomad: NomadAPIDouble) -> None:
    """Eval.GetEval (nomad/eval_endpoint.go) runs through blockingRPC with the evaluation's ModifyIndex: a read from
    the register's EvalCreateIndex answers once a worker processed it (a raft write: a higher ModifyIndex), not at
    once and not only after ``wait``."""
    nomad.eval_delay = 0.4
    answer = put(nomad, "/v1/jobs", {"Job": make_job("web")}).json()
    path = "/v1/evaluation/" + answer["EvalID"]
    pending = get(nomad, path)
    assert pending.json()["Status"] == "pending" and pending.json()["ModifyIndex"] == answer["EvalCreateIndex"]
    assert int(pending.headers["X-Nomad-Index"]) == answer["EvalCreateIndex"]
    started = time.monotonic()
    done = get(nomad, path, params={"index": str(answer["EvalCreateIndex"]), "wait": "5s"})
    took = time.monotonic() - started
    assert done.json()["Status"] == "complete" and 0.2 <= took < 2, (done.json()["Status"], took)
    index = int(done.headers["X-Nomad-Index"])
    assert index == done.json()["ModifyIndex"] > answer["EvalCreateIndex"]
    started = time.monotonic()
    same = get(nomad, path, params={"index": str(index), "wait": "200ms"})  # nothing changes any more: ``wait``
    assert same.json()["ModifyIndex"] == index and 0.2 <= time.monotonic() - started < 1
    assert get(nomad, path, params={"index": "1", "wait": "5s"}).json()["ModifyIndex"] == index  # older: at once
    assert get(nomad, "/v1/evaluation/nope", params={"index": "1", "wait": "1s"}).status_code == 404


def test_lock_conflicts_carry_their_raft_index_and_a_release_wakes_blocked_readers(nomad: NomadAPIDouble) -> None:
    body = {"Path": "locks/one", "Items": {"holder": "a"}, "Lock": {"TTL": "10s", "LockDelay": "1s"}}
    held = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    lost = requests.put(nomad.url + LOCK + "?lock-acquire", json=body, timeout=TIMEOUT)
    assert lost.status_code == 409 and int(lost.headers["X-Nomad-Index"]) > held.json()["ModifyIndex"]
    readers: t.List[requests.Response] = []
    threads = [threading.Thread(target=lambda: readers.append(
        get(nomad, LOCK, params={"index": lost.headers["X-Nomad-Index"], "wait": "5s"}))) for _ in range(5)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    assert not readers
    requests.put(nomad.url + LOCK + "?lock-release", json={"Path": "locks/one", "Lock": {"ID": held.json()["Lock"]["ID"]}},
                 timeout=TIMEOUT)
    for th in threads:
        th.join(3)
    assert len(readers) == 5 and all(r.json().get("Lock") is None for r in readers)


def test_the_double_serves_hundreds_of_concurrent_connections(nomad: NomadAPIDouble) -> None:
    """200 clients block on one variable at once (each holds a connection and a server thread), then one write
    answers them all: nothing is reset or refused, no request waits for another. (The listen backlog's effect, SYNs
    dropped and sent again a second later in a burst, is a speed figure: ``benchmarks/admission.py`` prints it.)"""
    put(nomad, "/v1/var/app/many", {"Items": {"k": "1"}})
    index = get(nomad, "/v1/var/app/many").headers["X-Nomad-Index"]
    answers: t.List[t.Any] = []

    def one() -> None:
        try:
            answers.append(get(nomad, "/v1/var/app/many", params={"index": index, "wait": "20s"}).status_code)
        except requests.RequestException as err:
            answers.append(repr(err))

    threads = [threading.Thread(target=one) for _ in range(200)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 15
    while len(nomad.find("GET", "^/v1/var/app/many$")) < 201 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not answers, answers[:3]
    put(nomad, "/v1/var/app/many", {"Items": {"k": "2"}})
    for th in threads:
        th.join(10)
    assert answers == [200] * 200, [a for a in answers if a != 200][:3]


def test_a_reset_connection_after_handling_keeps_the_effect(nomad: NomadAPIDouble) -> None:
    nomad.reset_next("PUT", "^/v1/var/app/reset$", handled=True)
    with pytest.raises(requests.ConnectionError) as err:
        put(nomad, "/v1/var/app/reset", {"Items": {"k": "v"}})
    assert "reset" in str(err.value).lower() or "aborted" in str(err.value).lower(), err.value
    assert nomad.stored_variable("app/reset")["Items"] == {"k": "v"}
    nomad.reset_next("PUT", "^/v1/var/app/other$")
    with pytest.raises(requests.ConnectionError):
        put(nomad, "/v1/var/app/other", {"Items": {"k": "v"}})
    assert nomad.stored_variable("app/other") is None


def test_cpu_seconds_count_the_answers_and_not_a_blocking_wait(nomad: NomadAPIDouble) -> None:
    """``cpu_seconds`` (the benchmarks' split of a process's CPU between the client and the double) grows with the
    work of answering, and a blocking query's wait adds (next to) nothing to it."""
    path = "/v1/var/app/cpu"
    assert put(nomad, path, {"Items": {"k": "1"}}).status_code == 200
    index = int(get(nomad, path).headers["X-Nomad-Index"])
    before = nomad.cpu_seconds
    for _ in range(20):
        assert get(nomad, "/v1/vars", params={"prefix": "app/"}).status_code == 200
    deadline = time.monotonic() + 2  # counted when each request thread ends, just after its answer
    while nomad.cpu_seconds <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert nomad.cpu_seconds > before
    time.sleep(0.1)
    before = nomad.cpu_seconds
    started = time.monotonic()
    assert get(nomad, path, params={"index": str(index), "wait": "500ms"}).status_code == 200
    assert time.monotonic() - started >= 0.5
    assert nomad.cpu_seconds - before < 0.1, nomad.cpu_seconds - before
