# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared Nomad/Vault client layer (``_nomad_api``, ``_vault_api``) against the in-process API doubles."""

from __future__ import annotations

import typing as t
import warnings

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import api as na
from ansible_collections.backendai.cluster.plugins.module_utils._vault import client as va
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import summarize_node
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import PRIVATE_KEY_ITEM, PUBLIC_KEY_ITEM
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import render_raw
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair
from nomad_double.fixtures import (  # noqa: F401 - pytest fixtures
    nomad_double,
    nomad_double_factory,
    test_pki,
    vault_double,
    vault_double_factory,
)
from nomad_double.server import NomadAPIDouble

TOKEN = "3f1b7c1e-5a8d-4c4e-9f0a-0123456789ab"
NOMAD_ENV_VARS = ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION", "NOMAD_CACERT",
                  "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_SKIP_VERIFY")


def simple_job(job_id: str = "web", node: str = "n1") -> t.Dict[str, t.Any]:
    return {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"], "Meta": {"backendai_cluster_session": job_id},
            "TaskGroups": [{"Name": "g1", "Count": 1,
                            "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}],
                            "Tasks": [{"Name": "kernel", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                                       "Resources": {"CPU": 500, "MemoryMB": 256}}]}]}


@pytest.fixture(autouse=True)
def _no_nomad_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in NOMAD_ENV_VARS + ("VAULT_ADDR", "VAULT_TOKEN", "VAULT_NAMESPACE", "VAULT_CACERT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=TOKEN)
    double.add_node("n1", cpu=4000, memory=8192)
    double.add_node("n2", cpu=4000, memory=8192, devices=[{"vendor": "nvidia", "type": "gpu", "name": "A100", "count": 2}])
    return double


def client_for(double: NomadAPIDouble, **options: t.Any) -> na.NomadClient:
    params = {"nomad_addr": double.url, "token": TOKEN}
    params.update(options)
    return na.NomadClient(na.NomadConnection.from_params(params))


# Connection options -----------------------------------------------------------------------------

def test_connection_parsing_and_repr() -> None:
    conn = na.NomadConnection.from_params({"nomad_addr": "https://nomad.example:4646/", "token": TOKEN, "namespace": None,
                                           "validate_certs": "yes", "timeout": "3", "unrelated": 1})
    assert (conn.scheme, conn.host, conn.port, conn.secure, conn.base_url) == (
        "https", "nomad.example", 4646, True, "https://nomad.example:4646")
    assert conn.verify is True and conn.timeout == 3.0
    assert TOKEN not in repr(conn) and "<hidden>" in repr(conn)
    assert na.NomadConnection(nomad_addr="10.0.0.1").base_url == "http://10.0.0.1:4646"
    assert na.NomadConnection(nomad_addr="http://[::1]:80").base_url == "http://[::1]:80"
    assert na.NomadConnection(ca_cert="/ca.pem").verify == "/ca.pem"
    assert na.NomadConnection(ca_cert="/ca.pem", validate_certs=False).verify is False
    assert na.NomadConnection(client_cert="/c.pem", client_key="/k.pem").cert == ("/c.pem", "/k.pem")
    for bad in ("ftp://x", "http://user:pw@x:4646", "http://x:port"):
        with pytest.raises(ValueError):
            na.NomadConnection(nomad_addr=bad)
    with pytest.raises(ValueError):
        na.NomadConnection(client_cert="/c.pem")


def test_process_environment_is_not_read_by_the_client(nomad: NomadAPIDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """python-nomad's Nomad() would pick these up; the wrapper only uses the options it was given."""
    monkeypatch.setenv("NOMAD_ADDR", "http://127.0.0.1:1")
    monkeypatch.setenv("NOMAD_TOKEN", "env-token-must-not-be-used")
    monkeypatch.setenv("NOMAD_NAMESPACE", "env-ns")
    monkeypatch.setenv("NOMAD_REGION", "env-region")
    client = na.NomadClient(na.NomadConnection(nomad_addr=nomad.url))
    with pytest.raises(na.NomadError) as err:
        client.list_jobs()
    assert err.value.status == 403 and "Permission denied" in str(err.value)
    sent = nomad.requests[-1]
    assert sent.token_present is False and sent.query == {}


# Errors ------------------------------------------------------------------------------------------

def test_token_is_sent_as_header_and_never_in_errors(nomad: NomadAPIDouble) -> None:
    assert client_for(nomad).list_jobs() == []
    assert nomad.requests[-1].token_present
    wrong = "wrong-token-0123456789"
    with pytest.raises(na.NomadError) as err:
        client_for(nomad, token=wrong).get_job("web")
    assert err.value.status == 403 and "ACL token not found" in str(err.value)
    assert wrong not in str(err.value) and wrong not in repr(err.value)
    assert err.value.__context__ is None and err.value.__cause__ is None
    # even a server echoing the token back does not leak it
    nomad.fail_next("GET", "^/v1/jobs$", status=500, body="rpc error: token %s is bad" % TOKEN)
    with pytest.raises(na.NomadError) as err:
        client_for(nomad).list_jobs()
    assert TOKEN not in str(err.value) and "<redacted>" in str(err.value) and TOKEN not in err.value.body
    client = client_for(nomad)
    assert TOKEN not in repr(client)
    assert nomad.requests_containing(TOKEN) == []


@pytest.mark.parametrize("status, body", [(500, "rpc error: No cluster leader"), (403, "Permission denied"),
                                          (400, "bad request body"), (502, "")])
def test_http_errors_map_to_nomad_error_with_status_and_body(nomad: NomadAPIDouble, status: int, body: str) -> None:
    nomad.fail_next("POST", "^/v1/jobs$", status=status, body=body)  # python-nomad registers with POST
    with pytest.raises(na.NomadError) as err:
        client_for(nomad).register_job({"Job": simple_job()})
    assert err.value.status == status and err.value.body == body
    message = str(err.value)
    assert ("HTTP %d" % status) in message and (body or "(empty body)") in message and "registering job 'web'" in message
    assert err.value.method == "POST" and err.value.path == "/v1/jobs"


@pytest.mark.slow  # waits out a client timeout three times
def test_timeout_maps_to_nomad_timeout(nomad: NomadAPIDouble) -> None:
    nomad.timeout_next("GET", "^/v1/jobs$", seconds=3, times=3)  # a read is tried 3 times (issue 24)
    with pytest.raises(na.NomadTimeout) as err:
        client_for(nomad, timeout=0.3).list_jobs()
    assert err.value.status is None and "timeout" in str(err.value) and "(gave up after 3 attempts)" in str(err.value)


def test_a_transient_failure_of_a_read_is_retried_a_write_is_not(nomad: NomadAPIDouble) -> None:
    nomad.timeout_next("GET", "^/v1/jobs$", seconds=3)
    nomad.fail_next("GET", "^/v1/jobs$", status=500, body="rpc error: No cluster leader")
    client = client_for(nomad, timeout=0.3)
    assert client.list_jobs() == [] and len(client.retried) == 2
    nomad.fail_next("POST", "^/v1/jobs$", status=503, body="")
    with pytest.raises(na.NomadError) as err:
        client.register_job({"Job": simple_job()})
    assert err.value.status == 503 and "attempts" not in str(err.value) and len(nomad.find("POST", "^/v1/jobs$")) == 1


def test_connection_refused_is_a_nomad_error() -> None:
    with pytest.raises(na.NomadError) as err:
        na.NomadClient(na.NomadConnection(nomad_addr="http://127.0.0.1:9", timeout=1)).list_jobs()
    assert err.value.status is None and "cannot connect" in str(err.value)


# TLS -------------------------------------------------------------------------------------------

def test_tls_is_verified_by_default(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(tls=True)
    with pytest.raises(na.NomadError) as err:
        na.NomadClient(na.NomadConnection(nomad_addr=double.url)).list_jobs()
    assert err.value.status is None and "TLS error" in str(err.value) and "ca_cert" in str(err.value)
    assert na.NomadClient(na.NomadConnection(nomad_addr=double.url, ca_cert=double.pki.ca_cert)).list_jobs() == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning
        assert na.NomadClient(na.NomadConnection(nomad_addr=double.url, validate_certs=False)).list_jobs() == []


def test_tls_client_certificate(nomad_double_factory: t.Any) -> None:
    double = nomad_double_factory(tls=True, require_client_cert=True)
    with pytest.raises(na.NomadError):
        na.NomadClient(na.NomadConnection(nomad_addr=double.url, ca_cert=double.pki.ca_cert)).list_jobs()
    client = na.NomadClient(na.NomadConnection(nomad_addr=double.url, ca_cert=double.pki.ca_cert,
                                               client_cert=double.pki.client_cert, client_key=double.pki.client_key))
    assert client.list_nodes() == []


# Namespaces, regions ----------------------------------------------------------------------------

def test_namespace_and_region_are_passed_everywhere(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad, namespace="team-a", region="global")
    client.register_job({"Job": simple_job()})
    client.plan_job(simple_job())
    assert client.get_job("web")["Namespace"] == "team-a"
    alloc = client.job_allocations("web")[0]
    client.read_logs(alloc["ID"], "kernel")
    client.put_variable("nomad/jobs/web", {"k": "v"})
    client.get_variable("nomad/jobs/web")
    client.list_variables("nomad/")
    client.delete_variable("nomad/jobs/web")
    client.deregister_job("web")
    for req in nomad.requests[-10:]:
        if req.path.startswith("/v1/client/fs/logs/"):
            assert req.q("region") == "global"
            continue
        assert (req.q("namespace"), req.q("region")) == ("team-a", "global"), (req.method, req.path, req.query)
    assert nomad.stored_variable("nomad/jobs/web", "team-a") is None
    client.register_job({"Job": simple_job()})
    assert client_for(nomad).get_job("web") is None  # the default namespace has no such job
    with pytest.raises(na.NomadError) as err:
        client_for(nomad, region="mars").list_jobs()
    assert err.value.status == 500 and "No path to region" in str(err.value)


# Jobs ------------------------------------------------------------------------------------------

def test_job_lifecycle(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad)
    assert client.get_job("web") is None
    plan = client.plan_job({"Job": simple_job()})
    assert plan["Diff"]["Type"] == "Added"
    reg = client.register_job({"Job": simple_job()})
    assert reg["EvalID"] and reg["JobModifyIndex"]
    assert client.plan_job(simple_job())["Diff"]["Type"] == "None"
    assert [j["ID"] for j in client.list_jobs(prefix="we", meta=True)] == ["web"]
    assert client.list_jobs(meta=True)[0]["Meta"] == {"backendai_cluster_session": "web"}
    assert "Meta" not in client.list_jobs()[0]
    allocs = client.job_allocations("web")
    assert [(a["TaskGroup"], a["NodeName"], a["ClientStatus"]) for a in allocs] == [("g1", "n1", "running")]
    assert client.allocation(allocs[0]["ID"])["ID"] == allocs[0]["ID"]
    assert client.allocation("00000000-0000-0000-0000-000000000000") is None
    assert client.deregister_job("web", purge=True)["EvalID"]
    assert nomad.requests[-1].q("purge") in ("True", "true")
    assert client.get_job("web") is None
    assert client.deregister_job("web")["EvalID"] == ""  # absent: Nomad answers 200
    with pytest.raises(ValueError):
        client.register_job(simple_job())  # a bare job is not a register body


def test_ids_are_quoted_in_paths(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad)
    assert client.get_job("a/b c") is None
    assert nomad.requests[-1].path == "/v1/job/a/b c"  # the double decodes the path, as Go does


def test_read_logs_tail(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad)
    client.register_job({"Job": simple_job()})
    alloc = client.job_allocations("web")[0]
    nomad.append_log(alloc["ID"], "kernel", "".join("line %d\n" % i for i in range(1000)))
    nomad.append_log(alloc["ID"], "kernel", "err 1\nerr 2", stream="stderr")
    assert client.read_logs(alloc["ID"], "kernel", lines=2) == "line 998\nline 999\n"
    sent = nomad.requests[-1]
    assert (sent.q("task"), sent.q("type"), sent.q("origin"), sent.q("offset"), sent.q("follow")) == (
        "kernel", "stdout", "end", str(na.DEFAULT_LOG_BYTES), "False")
    assert sent.q("plain") in ("True", "true")
    assert client.read_logs(alloc["ID"], "kernel", type="stderr", lines=5) == "err 1\nerr 2"
    assert client.read_logs(alloc["ID"], "kernel", lines=0) == ""
    assert client.read_logs(alloc["ID"], "kernel", lines=3, max_bytes=9) == "line 999\n"
    with pytest.raises(na.NomadError) as err:
        client.read_logs(alloc["ID"], "nope")
    assert err.value.status == 400
    with pytest.raises(ValueError):
        client.read_logs(alloc["ID"], "kernel", type="stdlog")


# Nodes ------------------------------------------------------------------------------------------

def test_nodes_and_capacity(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad)
    job = simple_job(node="n2")
    job["TaskGroups"][0]["Tasks"][0]["Resources"]["Devices"] = [{"Name": "nvidia/gpu", "Count": 1}]
    client.register_job({"Job": job})
    nodes = {n["Name"]: n for n in client.list_nodes(resources=True)}
    assert nodes["n2"]["NodeResources"]["Cpu"]["CpuShares"] == 4000
    assert client.node("missing") is None
    cap = summarize_node(client.node(nodes["n2"]["ID"]), client.node_allocations(nodes["n2"]["ID"]))
    assert cap["name"] == "n2" and cap["datacenter"] == "dc1" and cap["drivers"] == ["docker"]
    assert cap["cni_networks"] == ["backendai"] and "bridge" in cap["cni_plugins"] and cap["bridge"]
    assert cap["free"] == {"cpu": 3500, "memory": 8192 - 256, "disk": 50000 - 300, "devices": {"nvidia/gpu/A100": 1}}
    assert cap["allocations"] == 1


# Variables ---------------------------------------------------------------------------------------

def test_variables_check_and_set(nomad: NomadAPIDouble) -> None:
    client = client_for(nomad)
    assert client.get_variable("nomad/jobs/web") is None
    meta = client.put_variable("nomad/jobs/web", {"k": "secret-value-1"}, cas=0)
    assert "Items" not in meta and meta["ModifyIndex"] > 0
    with pytest.raises(na.CASConflict) as err:
        client.put_variable("nomad/jobs/web", {"k": "secret-value-2"}, cas=0)
    assert err.value.status == 409 and err.value.modify_index == meta["ModifyIndex"]
    assert err.value.current["Items"] == {"k": "secret-value-1"}
    assert "secret-value" not in str(err.value) and "secret-value" not in repr(err.value)
    updated = client.put_variable("nomad/jobs/web", {"k": "secret-value-2"}, cas=meta["ModifyIndex"])
    assert client.get_variable("nomad/jobs/web")["Items"] == {"k": "secret-value-2"}
    with pytest.raises(na.CASConflict):
        client.delete_variable("nomad/jobs/web", cas=meta["ModifyIndex"])
    client.delete_variable("nomad/jobs/web", cas=updated["ModifyIndex"])
    assert client.get_variable("nomad/jobs/web") is None
    client.delete_variable("nomad/jobs/web")  # absent is fine
    with pytest.raises(ValueError):
        client.put_variable("nomad/jobs/web", {})


def test_session_submission_keeps_the_private_key_out_of_job_bodies(nomad: NomadAPIDouble) -> None:
    """The collection's own rendered job goes through the strict double, and the key only travels in the variable."""
    keypair = generate_keypair()
    rendered = render_raw({"name": "s1", "image": "python:3.11-slim", "cluster_size": 2, "cluster_mode": "multi-node",
                           "resources": {"cpu": 1000, "memory": 1024}},
                          [{"name": "n1", "cpu": 4000, "memory": 8192}, {"name": "n2", "cpu": 4000, "memory": 8192}],
                          public_key=keypair.public_key)
    client = client_for(nomad)
    client.put_variable("nomad/jobs/s1", {PRIVATE_KEY_ITEM: keypair.private_key, PUBLIC_KEY_ITEM: keypair.public_key}, cas=0)
    assert client.plan_job(rendered.job)["FailedTGAllocs"] is None
    client.register_job({"Job": rendered.job})
    assert client.plan_job(rendered.job)["Diff"]["Type"] == "None"
    assert {a["ClientStatus"] for a in client.job_allocations("s1")} == {"running"}
    key_line = keypair.private_key.strip().splitlines()[1]
    holders = nomad.requests_containing(key_line)
    assert [(r.method, r.path) for r in holders] == [("PUT", "/v1/var/nomad/jobs/s1")]


# Vault -------------------------------------------------------------------------------------------

def vault_client(double: t.Any, **options: t.Any) -> va.VaultClient:
    params = {"vault_addr": double.url, "vault_token": "vault-root-token"}
    params.update(options)
    return va.VaultClient(va.VaultConnection.from_params(params))


def test_vault_kv_v2(vault_double: t.Any) -> None:
    client = vault_client(vault_double)
    assert client.read_secret("secret", "sessions/s1") is None
    written = client.write_secret("secret", "sessions/s1", {"k": "v1"})
    assert written["version"] == 1
    with pytest.raises(va.VaultCASConflict) as err:
        client.write_secret("secret", "sessions/s1", {"k": "v2"}, cas=0)
    assert err.value.status == 400 and "check-and-set" in str(err.value)
    assert client.write_secret("secret", "sessions/s1", {"k": "v2"}, cas=1)["version"] == 2
    assert client.write_secret("secret", "/sessions/s1/", {"k": "v3"}, cas=None)["version"] == 3
    read = client.read_secret("secret", "sessions/s1")
    assert read["data"] == {"k": "v3"} and read["metadata"]["version"] == 3
    client.delete_secret("secret", "sessions/s1")
    assert client.read_secret("secret", "sessions/s1") is None
    client.delete_secret("secret", "sessions/s1")  # absent is fine
    assert vault_double.requests_containing("vault-root-token") == []
    assert "vault-root-token" not in repr(client)


def test_vault_errors(vault_double: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAULT_TOKEN", "vault-root-token")  # hvac would read it; the wrapper must not
    with pytest.raises(va.VaultError) as err:
        va.VaultClient(va.VaultConnection(vault_addr=vault_double.url)).read_secret("secret", "x")
    assert err.value.status == 403 and "permission denied" in str(err.value)
    with pytest.raises(va.VaultError) as err:
        vault_client(vault_double, vault_token="wrong-vault-token").write_secret("secret", "x", {"k": "v"})
    assert err.value.status == 403 and "wrong-vault-token" not in str(err.value) and err.value.__context__ is None
    with pytest.raises(va.VaultError) as err:
        vault_client(vault_double).read_secret("nomount", "x")
    assert err.value.status == 404 and "no handler for route" in str(err.value)
    vault_double.inject("POST", "/data/", status=500, body='{"errors":["internal error"]}', content_type="application/json")
    with pytest.raises(va.VaultError) as err:
        vault_client(vault_double).write_secret("secret", "x", {"k": "v"})
    assert err.value.status == 500 and "internal error" in str(err.value)
    vault_double.timeout_next("GET", "/data/", seconds=3)
    with pytest.raises(va.VaultError) as err:
        vault_client(vault_double, timeout=0.3).read_secret("secret", "x")
    assert err.value.status is None and "timeout" in str(err.value)


def test_vault_namespace_header(vault_double: t.Any) -> None:
    vault_client(vault_double, vault_namespace="team-a").write_secret("secret", "x", {"k": "v"})
    assert vault_double.requests[-1].headers.get("x-vault-namespace") == "team-a"
    assert vault_double.stored_secret("secret", "x", namespace="team-a") == {"k": "v"}
    assert vault_client(vault_double).read_secret("secret", "x") is None


def test_vault_tls_verified_by_default(vault_double_factory: t.Any) -> None:
    double = vault_double_factory(tls=True, token="vault-root-token")
    with pytest.raises(va.VaultError) as err:
        vault_client(double).read_secret("secret", "x")
    assert err.value.status is None and "TLS error" in str(err.value)
    assert vault_client(double, vault_ca_cert=double.pki.ca_cert).read_secret("secret", "x") is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert vault_client(double, validate_certs=False).read_secret("secret", "x") is None
