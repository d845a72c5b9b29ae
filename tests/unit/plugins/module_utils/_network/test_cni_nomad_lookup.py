# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CNI plugin's look-up of an allocation (``_network._cni_nomad``) against the Nomad API double, over http and
https: what it reads, and the CNI error it gives for each way the look-up can fail (no namespaces needed; the attack
tests in real namespaces are tests/local_runtime/test_session_network_identity.py)."""

from __future__ import annotations

import json
import socket
import ssl
import typing as t
import urllib.parse
import urllib.request

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system
from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_nomad as lookup
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble

TOKEN = "5f0e6d1c-2b3a-4c5d-8e9f-read-job"


def config(addr: str, tmp_path: t.Any, token: t.Optional[str] = TOKEN, ca: str = "",
           **more: t.Any) -> system.Config:
    conf = {"underlayIP": "10.0.0.1", "stateDir": str(tmp_path / "state"), "keyFile": str(tmp_path / "agent.key"),
            "agentName": "n1", "nomadAddr": addr, **more}
    if token is not None:
        (tmp_path / "token").write_text(token + "\n")
        conf["nomadTokenFile"] = str(tmp_path / "token")
    if ca:
        conf["nomadCACert"] = ca
    return system.Config(conf)


def register(double: NomadAPIDouble, job_id: str, groups: t.Mapping[str, str], count: int = 1) -> t.Dict[str, str]:
    job = {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"], "TaskGroups": [
        {"Name": g, "Count": count, "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": n, "Operand": "="}],
         "Tasks": [{"Name": "main", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                    "Resources": {"CPU": 100, "MemoryMB": 64}}]} for g, n in groups.items()]}
    req = urllib.request.Request(double.url + "/v1/jobs", data=json.dumps({"Job": job}).encode(), method="PUT",
                                 headers={"X-Nomad-Token": TOKEN})
    ctx = ssl.create_default_context(cafile=double.pki.ca_cert) if double.pki else None
    if ctx is not None and double.require_client_cert:
        ctx.load_cert_chain(double.pki.client_cert, double.pki.client_key)
    urllib.request.urlopen(req, timeout=10, context=ctx).close()
    return {a["TaskGroup"]: a["ID"] for a in double.allocations_of(job_id)}


@pytest.fixture
def double(nomad_double_factory: t.Any) -> NomadAPIDouble:
    d = nomad_double_factory(token=TOKEN)
    d.add_node("n1")
    d.add_node("n2")
    return d


def test_the_look_up_reads_nomads_identity_of_the_allocation(double: NomadAPIDouble, tmp_path: t.Any) -> None:
    allocs = register(double, "train;42", {"main1": "n1", "sub1": "n2"})
    cfg = config(double.url, tmp_path)
    double.clear_requests()
    cni_args = {"NOMAD_ALLOC_ID": allocs["main1"], "NOMAD_JOB_ID": "other"}
    identity, api = lookup.confirmed_identity(cfg, cni_args, allocs["main1"])
    assert identity == ("default", "train;42", "main1")  # the job ID as Nomad has it, ';' and all
    lookup.check_only_live(api, identity, allocs["main1"])
    # list stubs only, never /v1/allocation/:id (Nomad's Allocation embeds the whole job)
    assert [r.path for r in double.requests] == ["/v1/allocations", "/v1/allocations"]
    by_id, group = double.requests
    assert (by_id.query["prefix"], by_id.query["namespace"], by_id.query["task_states"]) == (
        [allocs["main1"]], ["*"], ["false"])
    assert group.query["filter"] == ['JobID == "train;42" and TaskGroup == "main1"']  # the job ID quoted in the filter
    with pytest.raises(system.PluginError, match="runs on node 'n2', not on this agent"):
        lookup.confirmed_identity(cfg, {"NOMAD_ALLOC_ID": allocs["sub1"]}, allocs["sub1"])


def test_https_with_the_ca_of_the_config(nomad_double_factory: t.Any, tmp_path: t.Any) -> None:
    double = nomad_double_factory(tls=True, token=TOKEN)
    double.add_node("n1")
    allocs = register(double, "train", {"main1": "n1"})
    identity, _api = lookup.confirmed_identity(config(double.url, tmp_path, ca=double.pki.ca_cert),
                                               {"NOMAD_ALLOC_ID": allocs["main1"]}, allocs["main1"])
    assert identity == ("default", "train", "main1")
    (tmp_path / "x").mkdir()
    with pytest.raises(system.PluginError) as err:  # the system CAs do not know the test CA
        lookup.confirmed_identity(config(double.url, tmp_path / "x"), {"NOMAD_ALLOC_ID": allocs["main1"]}, allocs["main1"])
    assert err.value.code == system.E_TRY_LATER and "CERTIFICATE_VERIFY_FAILED" in err.value.msg


def test_https_with_a_client_certificate_where_nomad_verifies_clients(nomad_double_factory: t.Any,
                                                                      tmp_path: t.Any) -> None:
    """Nomad with ``tls.verify_https_client``: the look-up presents the config's client certificate; without one the
    handshake fails (a CNI error to try later, naming the cause), and a certificate without its key is a config
    error."""
    double = nomad_double_factory(tls=True, require_client_cert=True, token=TOKEN)
    double.add_node("n1")
    alloc = register(double, "train", {"main1": "n1"})["main1"]
    pki = double.pki
    cfg = config(double.url, tmp_path, ca=pki.ca_cert, nomadClientCert=pki.client_cert, nomadClientKey=pki.client_key)
    identity, _api = lookup.confirmed_identity(cfg, {"NOMAD_ALLOC_ID": alloc}, alloc)
    assert identity == ("default", "train", "main1")
    with pytest.raises(system.PluginError) as err:
        lookup.confirmed_identity(config(double.url, tmp_path, ca=pki.ca_cert), {"NOMAD_ALLOC_ID": alloc}, alloc)
    assert err.value.code == system.E_TRY_LATER and "cannot be asked" in err.value.msg
    with pytest.raises(system.PluginError, match="go together") as err:
        config(double.url, tmp_path, ca=pki.ca_cert, nomadClientCert=pki.client_cert)
    assert err.value.code == system.E_CONFIG


@pytest.mark.parametrize("addr, allowed", [
    ("http://127.0.0.1:4646", True), ("http://127.3.0.1:4646", True), ("http://localhost:4646", True),
    ("http://[::1]:4646", True), ("https://10.0.0.5:4646", True), ("https://nomad.example:4646", True),
    ("http://10.0.0.5:4646", False), ("http://nomad.example:4646", False), ("http://[fd00::1]:4646", False),
    ("http://0.0.0.0:4646", False),
])
def test_plain_http_only_on_loopback_unless_the_operator_opts_in(addr: str, allowed: bool, tmp_path: t.Any) -> None:
    """The token is sent in clear and whatever answers is taken for Nomad: plain http goes only to loopback, unless
    ``nomadAllowPlainHTTP`` is true (no connection is made here: refused when the look-up is set up)."""
    if allowed:
        lookup.NomadAgent(config(addr, tmp_path))
    else:
        with pytest.raises(system.PluginError, match="plain http to an address off loopback") as err:
            lookup.NomadAgent(config(addr, tmp_path))
        assert err.value.code == system.E_CONFIG
        assert TOKEN not in err.value.msg
        lookup.NomadAgent(config(addr, tmp_path, nomadAllowPlainHTTP=True))
    with pytest.raises(system.PluginError):  # only the JSON true opts in
        if allowed:
            raise system.PluginError(system.E_CONFIG, "(allowed anyway)")
        lookup.NomadAgent(config(addr, tmp_path, nomadAllowPlainHTTP="yes"))


def test_each_failure_of_the_look_up_is_a_cni_error_with_its_reason(double: NomadAPIDouble, tmp_path: t.Any) -> None:
    allocs = register(double, "train", {"main1": "n1"})
    alloc = allocs["main1"]
    double.clear_requests()
    refusals = {
        "lack NOMAD_ALLOC_ID": ({}, alloc),
        "is not an allocation ID": ({"NOMAD_ALLOC_ID": "x;y"}, "x;y"),
        "is not the allocation NOMAD_ALLOC_ID names": ({"NOMAD_ALLOC_ID": alloc}, "another-container"),
    }
    for reason, (cni_args, container) in refusals.items():
        with pytest.raises(system.PluginError, match=reason) as err:
            lookup.confirmed_identity(config(double.url, tmp_path), cni_args, container)
        assert err.value.code == system.E_ADMISSION
    assert not double.requests  # refused before asking Nomad
    with pytest.raises(system.PluginError, match="needs read-job|lacks read-job") as err:
        lookup.confirmed_identity(config(double.url, tmp_path, token="wrong"), {"NOMAD_ALLOC_ID": alloc}, alloc)
    assert err.value.code in (system.E_CONFIG, system.E_ADMISSION)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % unused.getsockname()[1]
    with pytest.raises(system.PluginError, match="cannot be asked") as err:
        lookup.confirmed_identity(config(closed, tmp_path), {"NOMAD_ALLOC_ID": alloc}, alloc)
    assert err.value.code == system.E_TRY_LATER
    double.fail_next("GET", "/v1/allocations", status=500, body="rpc error: no leader")
    with pytest.raises(system.PluginError, match="answered 500 .*no leader") as err:
        lookup.confirmed_identity(config(double.url, tmp_path), {"NOMAD_ALLOC_ID": alloc}, alloc)
    assert err.value.code == system.E_TRY_LATER
    with pytest.raises(system.PluginError, match="nomadAddr must be"):
        lookup.confirmed_identity(config("unix:///run/nomad.sock", tmp_path), {"NOMAD_ALLOC_ID": alloc}, alloc)


def test_a_scaled_group_has_another_live_allocation(double: NomadAPIDouble, tmp_path: t.Any) -> None:
    first = register(double, "train", {"main1": "n1"})["main1"]
    register(double, "train", {"main1": "n1"}, count=2)
    second, = [a["ID"] for a in double.allocations_of("train") if a["ID"] != first]
    identity, api = lookup.confirmed_identity(config(double.url, tmp_path), {"NOMAD_ALLOC_ID": second}, second)
    with pytest.raises(system.PluginError, match="another live allocation \\(%s\\)" % first):
        lookup.check_only_live(api, identity, second)
    double.set_alloc_status(first, "failed")
    lookup.check_only_live(api, identity, second)


def test_an_allocation_of_an_earlier_registration_of_the_job_id_is_counted(double: NomadAPIDouble,
                                                                           tmp_path: t.Any) -> None:
    """The job is purged and registered again while its first allocation still runs: Nomad's job endpoint lists that
    allocation only with ``all=true`` (``AllocsByJob``); the look-up's ``Alloc.List`` of the group reads the namespace's
    allocations, every incarnation, and counts it."""
    first = register(double, "train", {"main1": "n1"})["main1"]
    double.new_incarnation_keeping_allocations("train")
    register(double, "train", {"main1": "n1"}, count=2)
    second, = [a["ID"] for a in double.allocations_of("train") if a["ID"] != first]
    identity, api = lookup.confirmed_identity(config(double.url, tmp_path), {"NOMAD_ALLOC_ID": second}, second)
    with pytest.raises(system.PluginError, match="another live allocation \\(%s\\)" % first):
        lookup.check_only_live(api, identity, second)
    assert double.find("GET", "^/v1/allocations$") and not double.find("GET", "^/v1/job/")
    status, body = lookup.NomadAgent(config(double.url, tmp_path)).get("/v1/job/train/allocations")
    assert status == 200 and first not in body.decode()  # the control: without all=true it is not listed


@pytest.mark.parametrize("text", ["train-42", "evil;x", "a b/c?d=e&f", "ünï", "%41", ""])
def test_quote_is_urllib_quote(text: str) -> None:
    assert lookup.quote(text) == urllib.parse.quote(text, safe="")


@pytest.mark.parametrize("addr, want", [
    ("http://127.0.0.1:4646", ("http", "127.0.0.1", 4646)), ("https://nomad.local", ("https", "nomad.local", 443)),
    ("http://[::1]:4646", ("http", "::1", 4646)), ("http://localhost/", ("http", "localhost", 80)),
])
def test_addresses(addr: str, want: t.Tuple[str, str, int]) -> None:
    assert lookup._address(addr) == want
