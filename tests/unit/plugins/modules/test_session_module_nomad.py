# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""backendai.cluster.session with the nomad backend, run for real against the Nomad and Vault API doubles."""

from __future__ import annotations

import importlib
import json
import threading
import time
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import NOMAD_TOKEN, VAULT_TOKEN, ModuleRun, private_key_lines, spec, writes
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import (  # noqa: F401 - pytest fixtures
    nomad_double_factory,
    test_pki,
    vault_double,
    vault_double_factory,
)
from nomad_double.server import NomadAPIDouble

VAR_PATH = "^/v1/var/nomad/jobs/s1$"


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=4000, memory=8192)
    double.add_node("n2", cpu=4000, memory=8192)
    return double


def args(double: NomadAPIDouble, **extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": spec()}
    out.update(extra)
    return out


def stored_private_key(double: NomadAPIDouble, path: str = "nomad/jobs/s1") -> str:
    return double.stored_variable(path)["Items"]["ssh_private_key"]


def assert_no_secret(result: t.Any, *secrets: str) -> None:
    text = json.dumps(result)
    for secret in secrets:
        for line in private_key_lines(secret) if "PRIVATE KEY" in secret else [secret]:
            assert line not in text


# Create, idempotency, update ----------------------------------------------------------------------

def test_create_writes_the_variable_with_cas0_before_registering_the_job(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad))
    assert result["changed"] is True and not result.get("failed"), result.get("msg")
    order = writes(nomad)
    assert [w for w in order if w[1].startswith(("/v1/var/", "/v1/jobs"))][:3] == [
        ("PUT", "/v1/var/nomad/jobs/s1"), ("PUT", "/v1/var/backendai-cluster/network/slots/%d" % result["network"]["slot"]),
        ("POST", "/v1/jobs")], order
    # ... all under the admission lock, released (and its variable deleted) afterwards
    locked = [(r.method, r.path, sorted(r.query)) for r in nomad.requests if r.method != "GET"]
    assert locked[0] == ("PUT", "/v1/var/backendai-cluster/admission", ["lock-acquire", "namespace"]), locked
    release = next(i for i, r in enumerate(locked) if "lock-release" in r[2])
    assert locked[release + 1][0] == "DELETE" and release > 3, locked
    assert nomad.stored_variable("backendai-cluster/admission") is None
    var_put = nomad.find("PUT", VAR_PATH)[0]
    assert var_put.q("cas") == "0"
    view = result["session"]
    assert view["state"] == "RUNNING" and view["backend"] == "nomad" and view["mode"] == "single-node"
    assert [c["hostname"] for c in view["containers"]] == ["main1", "sub1"]
    assert all(c["status"] == "running" and c["agent"] == "n1" and c["address"] for c in view["containers"])
    main1 = view["main1"]
    assert main1["address"] == "10.0.0.10" and main1["ssh_port"] >= 20000
    assert main1["ssh_command"] == "ssh -p %d work@10.0.0.10" % main1["ssh_port"]  # the session user, not root
    private = stored_private_key(nomad)
    public = nomad.stored_variable("nomad/jobs/s1")["Items"]["ssh_public_key"]
    from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id
    assert view["session_id"] == derive_session_id("s1", public) == result["plan"]["session_id"]
    assert nomad.stored_job("s1")["Meta"]["BACKENDAI_SESSION_ID"] == view["session_id"]
    assert_no_secret(result, private, NOMAD_TOKEN)
    key_line = private_key_lines(private)[0]
    assert [(r.method, r.path) for r in nomad.requests_containing(key_line)] == [("PUT", "/v1/var/nomad/jobs/s1")]
    assert nomad.requests_containing(NOMAD_TOKEN) == []


def test_second_run_is_unchanged_and_keeps_the_keys(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    first = run(session_module, args(nomad))
    var_before = nomad.stored_variable("nomad/jobs/s1")
    nomad.clear_requests()
    second = run(session_module, args(nomad))
    assert second["changed"] is False, second.get("msg")
    assert second["session"]["session_id"] == first["session"]["session_id"]
    assert nomad.stored_variable("nomad/jobs/s1") == var_before  # not rewritten, keys not regenerated
    assert writes(nomad) == [("POST", "/v1/job/s1/plan")]  # the read-only dry run only
    assert_no_secret(second, var_before["Items"]["ssh_private_key"])


def hold_admission_lock(double: NomadAPIDouble) -> str:
    """Another client takes the cluster's admission lock (and keeps it for the test); its lock ID."""
    import requests
    body = {"Path": "backendai-cluster/admission", "Items": {"holder": "someone else"}, "Lock": {"TTL": "60s", "LockDelay": "1s"}}
    answer = requests.put(double.url + "/v1/var/backendai-cluster/admission?lock-acquire", json=body,
                          headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.json()["Lock"]["ID"]


def test_unchanged_present_writes_nothing_even_while_another_client_holds_the_lock(
        nomad: NomadAPIDouble, run: ModuleRun) -> None:
    """Issue 20: an idempotent re-run plans first (read-only) and takes the admission lock only to register."""
    run(session_module, args(nomad))
    held = hold_admission_lock(nomad)
    nomad.clear_requests()
    started = time.monotonic()
    second = run(session_module, args(nomad))
    assert second["changed"] is False and not second.get("failed"), second.get("msg")
    assert time.monotonic() - started < 5, "the unchanged run waited for the admission lock"
    methods = {(r.method, r.path) for r in nomad.requests if r.method != "GET"}
    assert methods == {("POST", "/v1/job/s1/plan")}, methods  # Nomad's read-only dry run, nothing else
    assert writes(nomad, admission=True) == [("POST", "/v1/job/s1/plan")]
    assert nomad.lock_of("backendai-cluster/admission")["ID"] == held  # untouched


def test_changed_spec_takes_the_lock_before_registering(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    run(session_module, args(nomad))
    nomad.clear_requests()
    result = run(session_module, args(nomad, spec=spec(env={"FOO": "bar"})))
    assert result["changed"] is True, result.get("msg")
    order = [(r.method, r.path, "lock-acquire" in r.query, "lock-release" in r.query) for r in nomad.requests
             if r.method != "GET"]
    acquire = next(i for i, w in enumerate(order) if w[2])
    register = order.index(("POST", "/v1/jobs", False, False))
    release = next(i for i, w in enumerate(order) if w[3])
    assert order[0] == ("POST", "/v1/job/s1/plan", False, False), order  # the read-only plan first, unlocked
    assert acquire < register < release, order
    assert nomad.stored_variable("backendai-cluster/admission") is None


@pytest.mark.slow
def test_changed_spec_waits_for_a_held_lock(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    run(session_module, args(nomad))
    held = hold_admission_lock(nomad)
    release_at: t.List[float] = []

    def release_soon() -> None:
        import requests
        time.sleep(1.0)
        release_at.append(time.monotonic())
        requests.put(nomad.url + "/v1/var/backendai-cluster/admission?lock-release",
                     json={"Path": "backendai-cluster/admission", "Lock": {"ID": held}},
                     headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)

    registered_at: t.List[float] = []
    nomad.before_request.append(lambda req: registered_at.append(time.monotonic()) if req.path == "/v1/jobs" else None)
    releaser = threading.Thread(target=release_soon)
    releaser.start()
    try:
        result = run(session_module, args(nomad, spec=spec(env={"FOO": "baz"})))
    finally:
        releaser.join()
    assert result["changed"] is True, result.get("msg")
    assert registered_at and release_at and registered_at[0] > release_at[0], (registered_at, release_at)
    assert nomad.stored_job("s1")["TaskGroups"][0]["Tasks"][0]["Env"]["FOO"] == "baz"


def test_changed_spec_updates_the_job_and_diff_shows_it_without_secrets(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    run(session_module, args(nomad))
    var_before = nomad.stored_variable("nomad/jobs/s1")
    version = nomad.stored_job("s1")
    nomad.clear_requests()
    result = run(session_module, args(nomad, spec=spec(env={"FOO": "bar"})), diff=True)
    assert result["changed"] is True, result.get("msg")
    assert "TaskGroups[main1].Tasks[kernel].Env[FOO]: <unset> -> bar" in result["changes"]
    assert "Env[FOO]: bar" in result["diff"]["after"] and "Env[FOO]: <unset>" in result["diff"]["before"]
    assert ("POST", "/v1/jobs") in writes(nomad) and not nomad.find("PUT", "^/v1/var/nomad/")
    assert nomad.stored_variable("nomad/jobs/s1") == var_before
    job = nomad.stored_job("s1")
    assert job["TaskGroups"][0]["Tasks"][0]["Env"]["FOO"] == "bar" and job != version
    assert result["session"]["state"] == "RUNNING"
    assert_no_secret(result, var_before["Items"]["ssh_private_key"], NOMAD_TOKEN)
    again = run(session_module, args(nomad, spec=spec(env={"FOO": "bar"})), diff=True)
    assert again["changed"] is False and "diff" not in again


def test_existing_session_keeps_its_agents_when_a_better_node_appears(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    run(session_module, args(nomad))
    nomad.add_node("a-tight", cpu=2000, memory=2048)  # tighter fit, first by name: a new session would go here
    fresh = run(session_module, args(nomad, spec=spec(name="s2")), check=True)
    assert fresh["plan"]["agents"] == ["a-tight"]  # the premise
    result = run(session_module, args(nomad))
    assert result["changed"] is False and result["plan"]["agents"] == ["n1"]


# Check mode and diff mode --------------------------------------------------------------------------

def test_check_mode_writes_nothing(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad), check=True, diff=True)
    assert result["changed"] is True and result["session"] is None
    assert writes(nomad) == [] and nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None
    assert result["job"]["Job"]["ID"] == "s1" and result["plan"]["status"] == "PLACED"
    assert result["diff"]["before"] == "" and '"ID": "s1"' in result["diff"]["after"]
    # an existing session: only reads and the read-only plan
    run(session_module, args(nomad))
    job, var = nomad.stored_job("s1"), nomad.stored_variable("nomad/jobs/s1")
    nomad.clear_requests()
    changed = run(session_module, args(nomad, spec=spec(size=3)), check=True, diff=True)
    assert changed["changed"] is True and "TaskGroups[sub2]: added" in changed["changes"]
    assert writes(nomad) == [("POST", "/v1/job/s1/plan")]
    assert nomad.stored_job("s1") == job and nomad.stored_variable("nomad/jobs/s1") == var
    nomad.clear_requests()
    absent = run(session_module, args(nomad, state="absent"), check=True)
    assert absent["changed"] is True and writes(nomad) == [] and nomad.stored_job("s1") is not None


def test_diff_mode_on_creation_shows_the_job_never_the_key(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad), diff=True)
    after = json.loads(result["diff"]["after"])
    assert after["Job"]["ID"] == "s1" and result["diff"]["before"] == ""
    assert "ssh_private_key" not in json.dumps(after["Job"]["Meta"])
    assert_no_secret(result, stored_private_key(nomad))


# Absent -------------------------------------------------------------------------------------------

def test_absent_purges_the_job_and_deletes_the_variable(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    slot = run(session_module, args(nomad))["network"]["slot"]
    nomad.clear_requests()
    # as playbooks/destroy_session.yml passes it: a spec that only names the session
    result = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "spec": {"name": "s1"}, "state": "absent"},
                 diff=True)
    assert result["changed"] is True and result["removed"] == {"job": True, "secrets": ["Nomad variable nomad/jobs/s1"],
                                                               "network_slot": slot}
    assert nomad.stored_variable("backendai-cluster/network/slots/%d" % slot) is None
    deregister = nomad.find("DELETE", "^/v1/job/s1$")[0]
    assert deregister.q("purge") in ("True", "true")
    assert nomad.find("DELETE", VAR_PATH)
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None
    assert "nomad job s1" in result["diff"]["before"]
    nomad.clear_requests()
    again = run(session_module, args(nomad, state="absent"))
    assert again["changed"] is False and writes(nomad) == []


def test_absent_refuses_a_job_not_made_by_the_collection(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    import requests

    job = {"ID": "s1", "Name": "s1", "Type": "service", "Datacenters": ["dc1"],
           "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}]}]}
    requests.put(nomad.url + "/v1/jobs", json={"Job": job}, headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)
    result = run(session_module, args(nomad, state="absent"))
    assert result["failed"] and "not made by backendai.cluster" in result["msg"]
    assert nomad.stored_job("s1") is not None
    result = run(session_module, args(nomad))
    assert result["failed"] and "choose another session name" in result["msg"]


# Rollback -----------------------------------------------------------------------------------------

def _fail_register_500(double: NomadAPIDouble) -> None:
    double.fail_next("POST", "^/v1/jobs$", status=500, body="rpc error: raft apply failed")


def _timeout_register(double: NomadAPIDouble) -> None:
    double.timeout_next("POST", "^/v1/jobs$", seconds=2.5)


def _deny_variable_write(double: NomadAPIDouble) -> None:
    double.deny_next("PUT", VAR_PATH)


def _never_start(double: NomadAPIDouble) -> None:
    double.alloc_start_delay = None


def _fail_an_allocation(double: NomadAPIDouble) -> None:
    double.alloc_start_delay = None

    def fail_sub1() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            allocs = [a for a in double.allocations_of("s1") if a["TaskGroup"] == "sub1"]
            if allocs:
                double.set_alloc_status(allocs[0]["ID"], "failed", task_state="dead", failed=True,
                                        description="Exceeded allowed attempts 2 in interval 5m0s")
                return
            time.sleep(0.05)

    threading.Thread(target=fail_sub1, daemon=True).start()


@pytest.mark.parametrize("inject, step, fragment", [
    (_fail_register_500, "register job", "HTTP 500"),
    pytest.param(_timeout_register, "register job", "timeout", marks=pytest.mark.slow),  # waits out the client's timeout
    (_deny_variable_write, "write keypair secret", "HTTP 403"),
    pytest.param(_never_start, "wait for containers", "containers not all running after 1s",
                 marks=pytest.mark.slow),  # waits out its 1 s
    (_fail_an_allocation, "wait for containers", "sub1 failed (Exceeded allowed attempts"),
], ids=["register-500", "register-timeout", "variable-403", "wait-timeout", "alloc-failed"])
def test_failed_creation_is_rolled_back(nomad: NomadAPIDouble, run: ModuleRun, inject: t.Any, step: str,
                                        fragment: str) -> None:
    inject(nomad)
    result = run(session_module, args(nomad, timeout=1, wait_timeout=1))
    assert result.get("failed") and result["changed"] is False
    msg = result["msg"]
    assert msg.startswith("creating session s1 failed at step '%s': " % step), msg
    assert fragment in msg and "Rolled back" in msg and "INCOMPLETE" not in msg, msg
    assert result["failed_step"] == step
    if step != "write keypair secret":
        assert "Nomad variable nomad/jobs/s1 deleted" in msg
    if step == "wait for containers":
        assert "job s1 deregistered (purged)" in msg
    time.sleep(0.1 if inject is not _timeout_register else 2.6)  # let a dropped request finish
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None
    put = nomad.find("PUT", VAR_PATH)[0]
    private = put.json["Items"]["ssh_private_key"]
    assert_no_secret(result, private, NOMAD_TOKEN)
    assert all(private_key_lines(private)[0] not in r.text for r in nomad.requests if r is not put)


def test_a_leftover_variable_is_not_overwritten_or_deleted(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    import requests

    requests.put(nomad.url + "/v1/var/nomad/jobs/s1", json={"Path": "nomad/jobs/s1", "Items": {"ssh_public_key": "x"}},
                 headers={"X-Nomad-Token": NOMAD_TOKEN}, timeout=5)
    result = run(session_module, args(nomad))
    assert result["failed"] and "Nomad variable nomad/jobs/s1 already exists" in result["msg"]
    assert nomad.stored_variable("nomad/jobs/s1")["Items"] == {"ssh_public_key": "x"}
    assert nomad.stored_job("s1") is None


# Placement -----------------------------------------------------------------------------------------

def test_pending_fails_with_the_reason_and_writes_nothing(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("tiny", cpu=1500, memory=4096)
    result = run(session_module, args(double))
    assert result["failed"] and result["plan"]["status"] == "PENDING"
    assert result["msg"].startswith("session s1 is PENDING: no single agent can hold all 2 containers")
    assert "tiny: cpu short by 500 MHz (1500 free, 2000 needed)" in result["msg"]
    assert writes(double) == []


@pytest.mark.slow
def test_wait_for_resources_succeeds_when_a_node_joins(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("tiny", cpu=1500, memory=4096)
    timer = threading.Timer(1.0, lambda: double.add_node("big", cpu=8000, memory=16384))
    timer.start()
    try:
        started = time.monotonic()
        result = run(session_module, args(double, wait_for_resources=20))
    finally:
        timer.cancel()
    assert result["changed"] is True, result.get("msg")
    assert result["plan"]["agents"] == ["big"] and time.monotonic() - started < 10
    assert len(double.find("GET", "^/v1/nodes$")) >= 2


@pytest.mark.slow
def test_wait_for_resources_gives_up_with_the_reason(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("tiny", cpu=1500, memory=4096)
    result = run(session_module, args(double, wait_for_resources=1))
    assert result["failed"] and "still after waiting 1s for resources" in result["msg"]


def test_live_agents_skip_unready_ineligible_and_draining_nodes(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("a-down", cpu=8000, memory=16384, status="down")
    double.add_node("b-ineligible", cpu=8000, memory=16384, eligibility="ineligible")
    double.add_node("c-drain", cpu=8000, memory=16384, drain=True)
    double.add_node("d-pool", cpu=8000, memory=16384, node_pool="gpu")
    double.add_node("e-ok", cpu=8000, memory=16384)
    result = run(session_module, args(double))
    assert result["plan"]["agents"] == ["e-ok"], result.get("msg")


def test_explicit_agents_are_used_as_given(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad, agents=[{"name": "n2", "cpu": 4000, "memory": 8192}]))
    assert result["plan"]["agents"] == ["n2"] and result["session"]["containers"][0]["agent"] == "n2"


# Vault ----------------------------------------------------------------------------------------------

def test_vault_backend_writes_kv2_with_cas0_and_renders_a_vault_block(nomad: NomadAPIDouble, vault_double: t.Any,
                                                                      run: ModuleRun) -> None:
    vspec = spec(secrets={"backend": "vault", "mount": "secret", "path": "backendai/sessions", "role": "backendai"})
    vargs = args(nomad, spec=vspec, vault_addr=vault_double.url, vault_token=VAULT_TOKEN)
    result = run(session_module, vargs)
    assert result["changed"] is True, result.get("msg")
    write = vault_double.find("POST", "^/v1/secret/data/backendai/sessions/s1$")
    assert len(write) == 1 and write[0].json["options"] == {"cas": 0}
    assert nomad.find("PUT", "^/v1/var/nomad/") == [] and nomad.stored_variable("nomad/jobs/s1") is None
    task = nomad.stored_job("s1")["TaskGroups"][0]["Tasks"][0]
    assert task["Vault"] == {"ChangeMode": "noop", "Role": "backendai"}
    assert 'secret "secret/data/backendai/sessions/s1"' in task["Templates"][0]["EmbeddedTmpl"]
    assert result["secret"]["backend"] == "vault" and result["secret"]["mount"] == "secret"
    private = vault_double.stored_secret("secret", "backendai/sessions/s1")["ssh_private_key"]
    assert_no_secret(result, private, VAULT_TOKEN, NOMAD_TOKEN)
    assert vault_double.requests_containing(VAULT_TOKEN) == []
    again = run(session_module, vargs)
    assert again["changed"] is False and len(vault_double.find("POST", "/data/")) == 1
    assert_no_secret(again, private)
    gone = run(session_module, dict(vargs, state="absent"))
    assert gone["changed"] is True and vault_double.stored_secret("secret", "backendai/sessions/s1") is None
    assert vault_double.find("DELETE", "^/v1/secret/metadata/backendai/sessions/s1$")


def test_vault_write_failure_leaves_nothing(nomad: NomadAPIDouble, vault_double: t.Any, run: ModuleRun) -> None:
    vault_double.inject("POST", "/data/", status=403, body='{"errors":["permission denied"]}',
                        content_type="application/json")
    vspec = spec(secrets={"backend": "vault", "path": "backendai/sessions"})
    result = run(session_module, args(nomad, spec=vspec, vault_addr=vault_double.url, vault_token=VAULT_TOKEN))
    assert result["failed"] and "at step 'write keypair secret'" in result["msg"] and "permission denied" in result["msg"]
    assert nomad.stored_job("s1") is None and writes(nomad) == []


# TLS, errors -------------------------------------------------------------------------------------

def test_tls_is_verified_by_default(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    double = nomad_double_factory(tls=True, token=NOMAD_TOKEN)
    double.add_node("n1")
    result = run(session_module, args(double))
    assert result["failed"] and "TLS error" in result["msg"] and "exception" not in result
    assert double.stored_job("s1") is None
    result = run(session_module, args(double, ca_cert=double.pki.ca_cert))
    assert result["changed"] is True, result.get("msg")


def test_wrong_token_fails_cleanly(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad, token="not-the-token-1234"))
    assert result["failed"] and result["http_status"] == 403 and "ACL token not found" in result["msg"]
    assert "Traceback" not in json.dumps(result) and "not-the-token-1234" not in json.dumps(result)


def test_invalid_spec_lists_every_problem(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad, spec={"name": "x y", "image": "i", "cluster_size": -1}))
    assert result["failed"] and len(result["problems"]) == 2 and writes(nomad) == []


def test_environment_fallbacks_choose_the_nomad_backend(nomad: NomadAPIDouble, run: ModuleRun,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOMAD_ADDR", nomad.url)
    monkeypatch.setenv("NOMAD_TOKEN", NOMAD_TOKEN)
    result = run(session_module, {"spec": spec()})
    assert result["changed"] is True and result["session"]["backend"] == "nomad"
    assert result["invocation"]["module_args"]["token"] != NOMAD_TOKEN


# Libraries, local dispatch -----------------------------------------------------------------------

@pytest.mark.parametrize("module_attr, library, extra", [
    ("_nomad.api.HAS_PYTHON_NOMAD", "python-nomad", {}),
    ("_session.keys.HAS_CRYPTOGRAPHY", "cryptography", {}),
    ("_vault.client.HAS_HVAC", "hvac", {"spec": spec(secrets={"backend": "vault"})}),
])
def test_missing_library_is_reported_with_missing_required_lib(nomad: NomadAPIDouble, run: ModuleRun,
                                                                monkeypatch: pytest.MonkeyPatch, module_attr: str,
                                                                library: str, extra: t.Dict[str, t.Any]) -> None:
    owner, attr = module_attr.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module("ansible_collections.backendai.cluster.plugins.module_utils." + owner), attr, False)
    result = run(session_module, args(nomad, **extra))
    assert result["failed"] and "Failed to import the required Python library (%s)" % library in result["msg"]
    assert writes(nomad) == []


def test_local_backend_is_the_default_without_a_nomad_address(run: ModuleRun, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: t.Any) -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._local import local_backend as _backend_local
    from ansible_collections.backendai.cluster.plugins.modules import session_info

    calls: t.List[t.Tuple[str, t.Any]] = []

    def present(self: t.Any, spec_raw: t.Any, agents: t.Any = None, check_mode: bool = False, diff: bool = False,
                wait: bool = True, wait_timeout: float = 300.0, wait_for_resources: float = 0.0) -> t.Dict[str, t.Any]:
        assert agents is None  # no agents given: this machine is the one agent
        calls.append(("present", (spec_raw["name"], self.root, check_mode, wait, wait_timeout)))
        return {"changed": True, "session": {"name": spec_raw["name"], "backend": "local"}, "plan": {}}

    def absent(self: t.Any, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
               diff: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
        calls.append(("absent", (name or spec_raw["name"], self.root, check_mode, keep_logs)))
        return {"changed": False}

    def info(self: t.Any, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
        calls.append(("info", (self.root, name, log_lines)))
        return []

    monkeypatch.setattr(_backend_local.LocalBackend, "present", present)
    monkeypatch.setattr(_backend_local.LocalBackend, "absent", absent)
    monkeypatch.setattr(_backend_local.LocalBackend, "info", info)
    state = str(tmp_path)
    result = run(session_module, {"spec": spec(), "state_dir": state, "wait_timeout": 30})
    assert result["changed"] is True and result["session"] == {"name": "s1", "backend": "local"}
    run(session_module, {"spec": {"name": "s1"}, "state": "absent", "state_dir": state, "keep_logs": True}, check=True)
    assert run(session_info, {"state_dir": state, "name": "s1", "log_lines": 3})["sessions"] == []
    assert calls == [("present", ("s1", state, False, True, 30.0)), ("absent", ("s1", state, True, True)),
                     ("info", (state, "s1", 3))]
