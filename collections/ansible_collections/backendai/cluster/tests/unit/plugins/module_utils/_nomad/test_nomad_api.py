# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_nomad_api fed by recorded HTTP exchanges (tests/unit/fixtures/nomad/*.json), without any server.

A ``requests`` transport adapter answers from the fixtures and records what the wrapper sent
(URL, headers, verify/cert/timeout), so these tests run under ``ansible-test units`` too. The
live tests against the Nomad API double are in the repository's ``tests/``.
"""

from __future__ import annotations

import json
import typing as t
from urllib.parse import urlsplit

import pytest

requests = pytest.importorskip("requests")
pytest.importorskip("nomad")

from ansible_collections.backendai.cluster.plugins.module_utils import _defaults as defaults  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.args import nomad_connection_argument_spec  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import api as na  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import nodes  # noqa: E402
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.recorded_http import RecordedHTTP, load  # noqa: E402

TOKEN = "0b8a7c6d-unit-test-token"
NOT_FOUND = {"status": 404, "headers": {"Content-Type": "text/plain"}, "body": "404 page not found\n"}


def fixture(name: str) -> t.Dict[str, t.Any]:
    return load("nomad", name)


@pytest.fixture
def adapter() -> RecordedHTTP:
    return RecordedHTTP("nomad", NOT_FOUND)


def make_client(adapter: RecordedHTTP, **options: t.Any) -> na.NomadClient:
    session = adapter.session()
    params = {"nomad_addr": "http://nomad.test:4646", "token": TOKEN}
    params.update(options)
    return na.NomadClient(na.NomadConnection.from_params(params), session=session)


def test_headers_tls_and_timeout_settings(adapter: RecordedHTTP) -> None:
    adapter.add("jobs_list_meta", path="/v1/jobs")
    client = make_client(adapter, nomad_addr="https://nomad.test:4646", ca_cert="/etc/nomad/ca.pem",
                         client_cert="/etc/nomad/cli.pem", client_key="/etc/nomad/cli-key.pem", timeout=7)
    client.list_jobs()
    request, kwargs = adapter.sent[-1]
    assert request.url.startswith("https://nomad.test:4646/v1/jobs")
    assert request.headers["X-Nomad-Token"] == TOKEN and request.headers["User-Agent"] == na.USER_AGENT
    assert kwargs["verify"] == "/etc/nomad/ca.pem" and kwargs["cert"] == ("/etc/nomad/cli.pem", "/etc/nomad/cli-key.pem")
    assert kwargs["timeout"] == 7
    make_client(adapter, nomad_addr="https://nomad.test").list_jobs()
    assert adapter.sent[-1][1]["verify"] is True  # verified by default (python-nomad's default is False)
    make_client(adapter, nomad_addr="https://nomad.test", validate_certs=False).list_jobs()
    assert adapter.sent[-1][1]["verify"] is False
    make_client(adapter, token=None).list_jobs()
    assert "X-Nomad-Token" not in adapter.last.headers


def test_list_jobs_with_meta_namespace_and_region(adapter: RecordedHTTP) -> None:
    expected = adapter.add("jobs_list_meta")
    jobs = make_client(adapter, namespace="team-a", region="eu").list_jobs(prefix="we", meta=True)
    assert jobs == expected["body"] and jobs[0]["Meta"] == {"backendai_cluster_session": "web"}
    assert adapter.last_query == {"prefix": "we", "meta": "True", "namespace": "team-a", "region": "eu"}


def test_get_job_and_404(adapter: RecordedHTTP) -> None:
    assert make_client(adapter).get_job("web") is None  # no route yet: 404
    adapter.add("job_get")
    job = make_client(adapter).get_job("web")
    assert job["ID"] == "web" and job["Version"] == 0 and job["Status"] in ("running", "pending")


def test_register_plan_deregister(adapter: RecordedHTTP) -> None:
    adapter.add("jobs_register", method="POST")
    adapter.add("job_plan_none")
    adapter.add("job_deregister_purge")
    client = make_client(adapter)
    job = fixture("job_get")["response"]["body"]
    reg = client.register_job({"Job": job})
    assert reg["EvalID"] and reg["JobModifyIndex"] == fixture("jobs_register")["response"]["body"]["JobModifyIndex"]
    assert json.loads(adapter.last.body)["Job"]["ID"] == "web"
    plan = client.plan_job(job)
    assert plan["Diff"]["Type"] == "None" and adapter.last.url.split("?")[0].endswith("/v1/job/web/plan")
    sent = json.loads(adapter.last.body)
    assert sent["Diff"] is True and set(sent) == {"Job", "Diff", "PolicyOverride"}
    assert client.plan_job({"Job": job})["Diff"]["Type"] == "None"  # a register body is accepted too
    assert client.deregister_job("web")["EvalID"]
    assert adapter.last.method == "DELETE" and adapter.last_query["purge"] in ("True", "true")
    with pytest.raises(ValueError):
        client.register_job(job)


def test_plan_added_diff_shape(adapter: RecordedHTTP) -> None:
    adapter.add("job_plan_added")
    plan = make_client(adapter).plan_job(fixture("job_get")["response"]["body"])
    assert plan["Diff"]["Type"] == "Added"
    assert [(g["Name"], g["Type"]) for g in plan["Diff"]["TaskGroups"]] == [("main1", "Added")]
    assert plan["Annotations"]["DesiredTGUpdates"]["main1"]["Place"] == 1


def test_invalid_job_is_a_500_with_nomads_text(adapter: RecordedHTTP) -> None:
    adapter.add("jobs_register_invalid_count", method="POST")
    with pytest.raises(na.NomadError) as err:
        make_client(adapter).register_job({"Job": {"ID": "web"}})
    assert err.value.status == 500 and "Task group count can't be negative" in str(err.value)


def test_allocations_and_logs_tail(adapter: RecordedHTTP) -> None:
    allocs = adapter.add("job_allocations")["body"]
    alloc_id = allocs[0]["ID"]
    adapter.add("allocation_get")
    adapter.add("client_fs_logs_plain")
    client = make_client(adapter)
    assert client.job_allocations("web")[0]["TaskStates"]["kernel"]["State"] == "running"
    assert client.allocation(alloc_id)["AllocatedResources"]["Shared"]["Ports"][0]["Label"] == "ssh"
    assert client.read_logs(alloc_id, "kernel", lines=2) == "step 4\nstep 5\n"
    assert adapter.last_query == {"task": "kernel", "type": "stdout", "follow": "False", "offset": "65536",
                                  "origin": "end", "plain": "True"}
    assert client.allocation("00000000-0000-0000-0000-000000000000") is None


@pytest.mark.parametrize("text, lines, expected", [
    ("a\nb\nc\n", 2, "b\nc\n"), ("a\nb\nc", 2, "b\nc"), ("a\n", 5, "a\n"), ("", 3, ""), ("a\nb\n", 0, ""),
])
def test_tail_lines(text: str, lines: int, expected: str) -> None:
    assert na.tail_lines(text, lines) == expected


def test_nodes_and_capacity_summary(adapter: RecordedHTTP) -> None:
    node = adapter.add("node_get")["body"]
    adapter.add("nodes_list")
    adapter.add("node_allocations")
    client = make_client(adapter)
    assert [n["Name"] for n in client.list_nodes()] == ["n1"]
    cap = nodes.summarize_node(client.node(node["ID"]), client.node_allocations(node["ID"]))
    assert (cap["name"], cap["datacenter"], cap["node_pool"], cap["eligible"], cap["status"]) == ("n1", "dc1", "default", True, "ready")
    assert cap["total"]["cpu"] == 8000 and cap["reserved"] == {"cpu": 500, "memory": 512, "disk": 0}
    assert cap["allocated"]["cpu"] == 1000 and cap["allocated"]["devices"] == {"nvidia/gpu/A100": 1}
    assert cap["free"] == {"cpu": 6500, "memory": 16384 - 512 - 1024, "disk": 50000 - 300, "devices": {"nvidia/gpu/A100": 1}}
    assert cap["cni_networks"] == ["backendai-web"] and "bridge" in cap["cni_plugins"] and cap["bridge"] is True
    assert cap["host_networks"] == ["public"] and cap["meta"] == {"rack": "r1"} and cap["drivers"] == ["docker"]
    assert cap["address"] == "10.0.0.10"
    assert client.node("unknown") is None


def test_summarize_node_ignores_terminal_allocations() -> None:
    node = fixture("node_get")["response"]["body"]
    allocs = fixture("node_allocations")["response"]["body"]
    stopped = [dict(a, DesiredStatus="stop") for a in allocs]
    failed = [dict(a, ClientStatus="failed") for a in allocs]
    for variant in (stopped, failed, []):
        assert nodes.summarize_node(node, variant)["free"]["cpu"] == 7500
    legacy = [{"ClientStatus": "running", "DesiredStatus": "run", "Resources": {"CPU": 100, "MemoryMB": 10, "DiskMB": 1}}]
    assert nodes.summarize_node(node, legacy)["allocated"] == {"cpu": 100, "memory": 10, "disk": 1, "devices": {}}


def test_variables_and_cas_conflict(adapter: RecordedHTTP) -> None:
    assert make_client(adapter).get_variable("nomad/jobs/web") is None
    adapter.add("variable_get")
    put = adapter.add("variable_put")
    client = make_client(adapter, namespace="team-a")
    assert client.get_variable("nomad/jobs/web")["Items"]["ssh_public_key"].startswith("ssh-ed25519")
    # python-nomad forgets the namespace on /v1/var: the wrapper passes it
    assert adapter.last_query["namespace"] == "team-a"
    meta = client.put_variable("nomad/jobs/web", {"ssh_private_key": "k"}, cas=0)
    assert meta["ModifyIndex"] == put["body"]["ModifyIndex"] and "Items" not in meta
    assert adapter.last_query == {"cas": "0", "namespace": "team-a"}
    assert json.loads(adapter.last.body) == {"Path": "nomad/jobs/web", "Items": {"ssh_private_key": "k"}}
    adapter.add("variable_put_conflict")
    with pytest.raises(na.CASConflict) as err:
        client.put_variable("nomad/jobs/web", {"ssh_private_key": "k2"}, cas=0)
    conflict = err.value
    assert conflict.status == 409 and conflict.modify_index == put["body"]["ModifyIndex"]
    assert conflict.current["Items"]["ssh_private_key"] == "FIXTURE-PRIVATE-KEY"
    assert "FIXTURE-PRIVATE-KEY" not in str(conflict) and "FIXTURE-PRIVATE-KEY" not in repr(conflict)
    adapter.add("variable_delete")
    client.delete_variable("nomad/jobs/web", cas=3)
    assert adapter.last.method == "DELETE" and adapter.last_query == {"cas": "3", "namespace": "team-a"}


@pytest.mark.parametrize("name, status, text", [
    ("acl_permission_denied", 403, "Permission denied"),
    ("acl_token_not_found", 403, "ACL token not found"),
])
def test_acl_errors(adapter: RecordedHTTP, name: str, status: int, text: str) -> None:
    adapter.add(name)
    with pytest.raises(na.NomadError) as err:
        make_client(adapter).list_jobs()
    assert err.value.status == status and text in str(err.value) and "HTTP %d" % status in str(err.value)
    assert TOKEN not in str(err.value) and err.value.__context__ is None


def test_server_text_echoing_the_token_is_redacted(adapter: RecordedHTTP) -> None:
    adapter.routes[("GET", "/v1/jobs")] = {"status": 500, "headers": {}, "body": "token %s rejected" % TOKEN}
    with pytest.raises(na.NomadError) as err:
        make_client(adapter).list_jobs()
    assert TOKEN not in str(err.value) and TOKEN not in err.value.body and "<redacted>" in str(err.value)


@pytest.mark.parametrize("exc, cls, fragment", [
    (requests.exceptions.ReadTimeout("read timed out"), na.NomadTimeout, "timeout"),
    (requests.exceptions.ConnectTimeout("connect timed out"), na.NomadTimeout, "timeout"),
    (requests.exceptions.SSLError("certificate verify failed"), na.NomadError, "TLS error"),
    (requests.exceptions.ConnectionError("refused"), na.NomadError, "cannot connect"),
])
def test_transport_errors(adapter: RecordedHTTP, exc: BaseException, cls: t.Any, fragment: str) -> None:
    adapter.fail("GET", "/v1/nodes", exc)
    with pytest.raises(cls) as err:
        make_client(adapter).list_nodes()
    assert err.value.status is None and fragment in str(err.value)


def test_ids_are_quoted(adapter: RecordedHTTP) -> None:
    make_client(adapter).get_job("a/b?c")
    assert urlsplit(adapter.last.url).path == "/v1/job/a%2Fb%3Fc"


def test_connection_options() -> None:
    conn = na.NomadConnection.from_params({"nomad_addr": "nomad.test", "token": TOKEN, "timeout": None,
                                           "validate_certs": None, "extra": "ignored"})
    assert conn.base_url == "http://nomad.test:4646" and conn.validate_certs is True
    assert conn.timeout == defaults.DEFAULT_TIMEOUT and TOKEN not in repr(conn)
    tls = na.NomadConnection.from_params({"nomad_addr": "https://n:1", "validate_certs": False, "client_cert": "/c",
                                          "client_key": "/k"})
    assert tls.secure and tls.verify is False and tls.cert == ("/c", "/k")


def test_argument_spec_env_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ansible")
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    spec = nomad_connection_argument_spec()
    assert spec["token"]["no_log"] is True
    env = {name: opt["fallback"][1][0] for name, opt in spec.items() if "fallback" in opt}
    assert env == dict(defaults.NOMAD_ENV, validate_certs="NOMAD_SKIP_VERIFY")
    for var in env.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NOMAD_ADDR", "https://nomad.test:4646")
    monkeypatch.setenv("NOMAD_TOKEN", TOKEN)
    monkeypatch.setenv("NOMAD_SKIP_VERIFY", "true")
    result = ArgumentSpecValidator(spec).validate({"namespace": "team-a"})
    assert not result.error_messages
    conn = na.NomadConnection.from_params(result.validated_parameters)
    assert (conn.nomad_addr, conn.token, conn.namespace, conn.validate_certs) == ("https://nomad.test:4646", TOKEN, "team-a", False)
    monkeypatch.delenv("NOMAD_SKIP_VERIFY")
    assert ArgumentSpecValidator(spec).validate({}).validated_parameters["validate_certs"] is True
    assert ArgumentSpecValidator(spec).validate({"validate_certs": True}).validated_parameters["validate_certs"] is True


def test_the_environment_is_read_once_per_client_with_the_same_settings(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: t.Any) -> None:
    """``requests`` reads proxy variables and ``.netrc`` on every request (trust_env); the client reads them once, to
    the same effect: the proxy for its address (none if ``no_proxy`` names it), and for ``verify=True`` the
    ``REQUESTS_CA_BUNDLE``."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "skip.test")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    client = na.NomadClient(na.NomadConnection.from_params({"nomad_addr": "https://nomad.test:4646"}))
    assert client._session.trust_env is False
    assert client._session.proxies.get("https") == "http://proxy.test:3128"
    assert client._job.verify == str(bundle)
    client.close()
    skipped = na.NomadClient(na.NomadConnection.from_params({"nomad_addr": "https://skip.test:4646"}))
    assert "https" not in skipped._session.proxies
    skipped.close()
