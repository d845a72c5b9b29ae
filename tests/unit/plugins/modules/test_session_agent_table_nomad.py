# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session's agent table on the Nomad path, against the Nomad API double: written once per session beside its
slot claim (in the claims namespace) before the job registers, removed with the claim on destroy and on rollback;
and the plugin's look-ups read list stubs whose size does not grow with the session (the real plugin in real
namespaces: tests/local_runtime/test_session_network_table.py)."""

from __future__ import annotations

import json
import typing as t
import urllib.request

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_nomad as lookup
from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import TABLE_PREFIX, read_key
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import NOMAD_TOKEN, ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import admitted_groups


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN, namespaces=["default", "infra"])
    double.add_node("n1", cpu=8000, memory=16384, address="192.168.60.1")
    double.add_node("n2", cpu=8000, memory=16384, address="192.168.60.2")
    return double


def tables(double: NomadAPIDouble) -> t.Dict[t.Tuple[str, str], t.Dict[str, str]]:
    return {key: var["Items"] for key, var in sorted(double.model.variables.items())
            if key[1].startswith(TABLE_PREFIX + "/")}


def multi(double: NomadAPIDouble, name: str = "mn", **extra: t.Any) -> t.Dict[str, t.Any]:
    out = {"nomad_addr": double.url, "token": NOMAD_TOKEN, "wait": False, "network_claims_namespace": "infra",
           "spec": spec(name, 4, cluster_mode="multi-node", resources={"cpu": 3000, "memory": 1024})}
    out.update(extra)
    return out


def test_the_table_is_written_once_beside_the_claim_and_removed_with_it(nomad: NomadAPIDouble, run: ModuleRun,
                                                                          network_key_file: str) -> None:
    made = run(session_module, multi(nomad))
    assert not made.get("failed"), made.get("msg")
    slot = made["network"]["slot"]
    (where, items), = tables(nomad).items()  # one variable for the session, in the claims namespace
    assert where[0] == "infra" and where[1].startswith("%s/%d/" % (TABLE_PREFIX, slot)) and sorted(items) == ["agents", "wg"]
    job = nomad.stored_job("mn")
    assert all("BAI_AGENTS" not in g["Networks"][0]["CNI"]["Args"] for g in job["TaskGroups"])
    admitted = admitted_groups(job, read_key(network_key_file), double=nomad)
    assert {a.params.agents for a in admitted} == {("192.168.60.1", "192.168.60.2")}
    assert {a.table.namespace for a in admitted} == {"infra"} and {a.params.encryption for a in admitted} == {"wireguard"}
    again = run(session_module, multi(nomad))
    assert again["changed"] is False and len(tables(nomad)) == 1  # nothing rewritten
    nomad.model.delete_variable(*where, None, None)  # lost: the containers' restarts could not be admitted
    checked = run(session_module, multi(nomad), check=True)
    assert checked["changed"] is True and tables(nomad) == {}
    repaired = run(session_module, multi(nomad))
    assert repaired["changed"] is True and repaired["changes"] == ["network slot %d: lost claim or agent table made "
                                                                   "again" % slot]
    assert tables(nomad) == {where: items} and nomad.stored_job("mn") == job  # the job itself unchanged
    gone = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "name": "mn", "state": "absent",
                                "network_claims_namespace": "infra"})
    assert not gone.get("failed"), gone.get("msg")
    assert tables(nomad) == {}


def test_a_failed_registration_removes_the_table_with_the_claim(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    nomad.fail_next("POST", "^/v1/jobs$", status=500, body="injected: raft down")
    failed = run(session_module, multi(nomad))
    assert failed.get("failed") and failed["failed_step"] == "register job"
    assert tables(nomad) == {} and nomad.stored_job("mn") is None


def register(double: NomadAPIDouble, job_id: str, groups: int) -> t.Dict[str, str]:
    job = {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"], "TaskGroups": [
        {"Name": "g%d" % i, "Networks": [{"Mode": "cni/backendai", "CNI": {"Args": {"BAI_PAD": "x" * 300}}}],
         "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": "n%d" % (1 + i % 2), "Operand": "="}],
         "Tasks": [{"Name": "main", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                    "Resources": {"CPU": 10, "MemoryMB": 16}}]} for i in range(groups)]}
    req = urllib.request.Request(double.url + "/v1/jobs", data=json.dumps({"Job": job}).encode(), method="PUT",
                                 headers={"X-Nomad-Token": NOMAD_TOKEN})
    urllib.request.urlopen(req, timeout=30).close()
    return {a["TaskGroup"]: a["ID"] for a in double.allocations_of(job_id)}


def test_the_look_ups_read_the_same_bytes_whatever_the_jobs_size(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    """Nomad's Allocation embeds its whole job (``/v1/allocation/:id``: grows with the job); the list stubs the
    look-ups read do not. Same group, same agent: the bytes read are the same for a 2-group and a 256-group job."""
    for node in range(3, 130):
        nomad.add_node("n%d" % node, cpu=8000, memory=16384)
    (tmp_path / "token").write_text(NOMAD_TOKEN)
    cfg = system.Config({"underlayIP": "10.0.0.1", "stateDir": str(tmp_path), "keyFile": str(tmp_path / "k"),
                         "agentName": "n1", "nomadAddr": nomad.url, "nomadTokenFile": str(tmp_path / "token")})
    read = {}
    for groups in (2, 256):
        alloc = register(nomad, "job%04d" % groups, groups)["g0"]  # (IDs of one length)
        nomad.clear_requests()
        identity, api = lookup.confirmed_identity(cfg, {"NOMAD_ALLOC_ID": alloc}, alloc)
        lookup.check_only_live(api, identity, alloc)
        read[groups] = sum(r.response_bytes for r in nomad.requests)
        full = nomad.model.allocation(alloc)  # what GET /v1/allocation/:id would have sent
        assert len(json.dumps(full)) > (20 * read[groups] if groups == 256 else 0)
    assert read[2] == read[256] < 4096, read
