# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network on the Nomad path, against the Nomad API double: slot claims (check-and-set in Nomad
Variables), their release on rollback and destroy, re-runs keeping the slot, the submitted job admitted for
itself only, and the cluster network key in no output, job, variable or log."""

from __future__ import annotations

import json
import os
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import claims as _network_claims
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import preferred_slot
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import client_args
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadConnection
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    VNI_BASE,
    AdmissionError,
    admit,
    nomad_cni_args,
    parse_cni_args,
    read_key,
    signed_args,
)
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from ansible_collections.backendai.cluster.plugins.modules import session_render as render_module
from module_helpers import ENV_VARS, NOMAD_TOKEN, ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import admitted_groups, group_key, lint_job_files, read_var_spec, run_playbook, with_table

PREFIX = "backendai-cluster/network/slots/"


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384, address="192.168.60.1")
    double.add_node("n2", cpu=8000, memory=16384, address="192.168.60.2", meta={"backendai.underlay_ip": "10.9.0.2"})
    return double


def args(double: NomadAPIDouble, name: str = "s1", **extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": spec(name), "wait": False}
    out.update(extra)
    return out


def claims(double: NomadAPIDouble, namespace: str = "default") -> t.Dict[int, t.Dict[str, str]]:
    out = {}
    for (ns, path), var in sorted(double.model.variables.items()):  # the double's store, read directly
        if ns == namespace and path.startswith(PREFIX):
            out[int(path[len(PREFIX):])] = var["Items"]
    return out


def slot_in_job(double: NomadAPIDouble, name: str) -> int:
    job = double.stored_job(name)
    assert job is not None
    return _network_claims.slot_of_job(job)[0]


def test_two_sessions_never_share_a_slot_and_the_job_carries_the_claimed_one(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    one = run(session_module, args(nomad, "s1"))
    two = run(session_module, args(nomad, "s2"))
    assert not one.get("failed") and not two.get("failed"), (one.get("msg"), two.get("msg"))
    assert one["network"]["slot"] != two["network"]["slot"]
    assert one["network"]["slot"] == preferred_slot("default", "s1") == slot_in_job(nomad, "s1")
    assert claims(nomad) == {
        one["network"]["slot"]: {"namespace": "default", "job": "s1", "session_id": one["plan"]["session_id"],
                                 "first": str(one["network"]["slot"]), "slots": "1"},
        two["network"]["slot"]: {"namespace": "default", "job": "s2", "session_id": two["plan"]["session_id"],
                                 "first": str(two["network"]["slot"]), "slots": "1"}}
    assert one["network"]["signed"] is True and one["network"]["vni"] == VNI_BASE + one["network"]["slot"]


def test_a_taken_preferred_slot_and_a_lost_race_give_the_next_free_one(nomad: NomadAPIDouble, run: ModuleRun,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    first = run(session_module, args(nomad, "s1"))["network"]["slot"]
    # s2 is made to start where s1 is, and to miss s1's claim in its listing (another run claimed it meanwhile):
    # its cas=0 write gets Nomad's 409 and it takes the next slot
    monkeypatch.setattr(_network_claims, "preferred_slot", lambda namespace, job, count=None: first)
    monkeypatch.setattr(_network_claims.NetworkClaims, "claimed", lambda self: set())
    nomad.clear_requests()
    second = run(session_module, args(nomad, "s2"))
    assert not second.get("failed"), second.get("msg")
    assert second["network"]["slot"] == (first + 1) % 2048
    tries = [r for r in nomad.find("PUT", "^/v1/var/" + PREFIX)]
    assert [(r.path, r.status, r.q("cas")) for r in tries] == [
        ("/v1/var/%s%d" % (PREFIX, first), 409, "0"), ("/v1/var/%s%d" % (PREFIX, second["network"]["slot"]), 200, "0")]
    assert claims(nomad)[first]["job"] == "s1"


def test_a_rerun_keeps_the_slot_and_remakes_a_lost_claim(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    slot = run(session_module, args(nomad))["network"]["slot"]
    again = run(session_module, args(nomad))
    assert again["changed"] is False and again["network"]["slot"] == slot == slot_in_job(nomad, "s1")
    nomad.model.variables.pop(("default", PREFIX + str(slot)))  # someone deleted the claim
    checked = run(session_module, args(nomad), check=True)
    assert checked["changed"] is True and slot not in claims(nomad)  # would make it again; check mode writes nothing
    third = run(session_module, args(nomad))
    assert third["changed"] is True and third["changes"] == ["network slot %d: lost claim or agent table made again" % slot]
    assert claims(nomad)[slot]["job"] == "s1"
    assert run(session_module, args(nomad))["changed"] is False


def test_a_failed_registration_releases_the_slot_and_the_secret(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    nomad.fail_next("POST", "^/v1/jobs$", status=500, body="injected: raft down")
    failed = run(session_module, args(nomad))
    assert failed.get("failed") and failed["failed_step"] == "register job"
    assert "network slot %d" % preferred_slot("default", "s1") in failed["rollback"] and "released" in failed["rollback"]
    assert claims(nomad) == {} and nomad.stored_variable("nomad/jobs/s1") is None and nomad.stored_job("s1") is None


def test_a_failed_claim_rolls_back_the_secret(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    nomad.fail_next("PUT", "^/v1/var/" + PREFIX, status=403, body="Permission denied")
    failed = run(session_module, args(nomad))
    assert failed.get("failed") and failed["failed_step"] == "claim network slot", failed.get("msg")
    assert claims(nomad) == {} and nomad.stored_variable("nomad/jobs/s1") is None and nomad.stored_job("s1") is None


def test_destroy_releases_the_slot_also_when_the_job_is_gone(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    one = run(session_module, args(nomad, "s1"))["network"]["slot"]
    two = run(session_module, args(nomad, "s2"))["network"]["slot"]
    gone = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "name": "s1", "state": "absent"})
    assert gone["removed"]["network_slot"] == one and list(claims(nomad)) == [two]
    # a create that stopped after its claim: only the secret and the claim are left, no job
    client = NomadClient(NomadConnection(nomad_addr=nomad.url, token=NOMAD_TOKEN))
    client.deregister_job("s2", purge=True)
    half = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "name": "s2", "state": "absent"})
    assert half["changed"] is True and half["removed"]["network_slot"] == two and claims(nomad) == {}
    nothing = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "name": "s2", "state": "absent"})
    assert nothing["changed"] is False and nothing["removed"]["network_slot"] is None


def test_claims_live_in_the_claims_namespace(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, args(nomad, namespace="team-a", network_claims_namespace="infra"))
    assert not result.get("failed"), result.get("msg")
    assert claims(nomad, "infra") == {result["network"]["slot"]: {
        "namespace": "team-a", "job": "s1", "session_id": result["plan"]["session_id"],
        "first": str(result["network"]["slot"]), "slots": "1"}}
    assert claims(nomad) == {}


def test_the_submitted_job_is_admitted_for_itself_only_and_passes_the_lint(nomad: NomadAPIDouble, run: ModuleRun,
                                                                           network_key_file: str, tmp_path: t.Any) -> None:
    result = run(session_module, args(nomad, spec=spec("mn", 4, cluster_mode="multi-node",
                                                       resources={"cpu": 3000, "memory": 1024})))
    assert result["plan"]["agents"] == ["n1", "n2"]
    # the underlay addresses: n1's Address, n2's node meta backendai.underlay_ip
    assert result["network"]["agents"] == ["192.168.60.1", "10.9.0.2"]
    key = read_key(network_key_file)
    job = nomad.stored_job("mn")
    for group in job["TaskGroups"]:
        mine = parse_cni_args(nomad_cni_args(client_args(job, group["Name"]), "global", "default", "mn", group["Name"], "a"))
        assert with_table(nomad, admit(group_key(job, group["Name"], key), mine)).params.agents == ("192.168.60.1", "10.9.0.2")
        with pytest.raises(AdmissionError):
            other = nomad_cni_args(client_args(job, group["Name"]), "global", "default", "other", group["Name"], "b")
            admit(group_key(job, group["Name"], key), parse_cni_args(other))
    path = tmp_path / "mn.json"
    path.write_text(json.dumps(result["job"]))
    lint = lint_job_files(str(path))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_a_session_of_an_earlier_release_keeps_its_args_version(nomad: NomadAPIDouble, run: ModuleRun,
                                                                  network_key_file: str) -> None:
    """Releases before args version 2 registered BAI_V = 1 (agents as dotted quads). Re-writing the same parameters
    as version 2 would change every group's network, which Nomad answers by replacing every allocation: a re-run
    after the upgrade keeps the job's version, and the plugin still admits it."""
    name, key = "old", read_key(network_key_file)
    session_args = args(nomad, name, spec=spec(name, 4, cluster_mode="multi-node", resources={"cpu": 3000, "memory": 1024}))
    run(session_module, session_args)
    job = nomad.stored_job(name)
    for group in job["TaskGroups"]:  # what the earlier release registered: the same parameters, version 1
        cni = group["Networks"][0]["CNI"]
        mine = group_key(job, group["Name"], key)
        params = with_table(nomad, admit(mine, parse_cni_args(nomad_cni_args(cni["Args"], "global", "default", name,
                                                                             group["Name"], "a")))).params
        plain = params._replace(encryption="none", wg_keys=(), tunnel_prefix="", mtu=1450)  # (before WireGuard)
        cni["Args"] = signed_args(mine, "default", name, group["Name"], plain.args("1"))
    client = NomadClient(NomadConnection(nomad_addr=nomad.url, token=NOMAD_TOKEN))
    client.register_job({"Job": job})
    allocs = sorted(a["ID"] for a in nomad.allocations_of(name))
    again = run(session_module, session_args)
    assert again["changed"] is False, again.get("changes")
    kept = nomad.stored_job(name)
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_V"] for g in kept["TaskGroups"]} == {"1"}
    assert sorted(a["ID"] for a in nomad.allocations_of(name)) == allocs
    assert {a.params.agents for a in admitted_groups(kept, key)} == {("192.168.60.1", "10.9.0.2")}
    fresh = run(session_module, args(nomad, "new", spec=spec("new", 2, cluster_mode="multi-node")))
    assert not fresh.get("failed"), fresh.get("msg")
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_V"] for g in nomad.stored_job("new")["TaskGroups"]} == {"4"}


def test_a_missing_key_fails_before_anything_is_written(nomad: NomadAPIDouble, run: ModuleRun, tmp_path: t.Any) -> None:
    nomad.clear_requests()
    failed = run(session_module, args(nomad, network_key_file=str(tmp_path / "nope.key")))
    assert failed.get("failed") and "cannot read the network key" in failed["msg"] and "overlay_agent" in failed["msg"]
    assert [r for r in nomad.requests if r.method != "GET"] == []


def test_render_is_unsigned_and_needs_no_key(run: ModuleRun, tmp_path: t.Any) -> None:
    rendered = run(render_module, {"spec": spec("r1", 2), "network_key_file": str(tmp_path / "absent.key"),
                                   "agents": [{"name": "a", "cpu": 8000, "memory": 8192, "underlay_ip": "10.1.1.1"}]})
    assert not rendered.get("failed"), rendered.get("msg")
    assert rendered["network"]["signed"] is False and rendered["network"]["agents"] == ["10.1.1.1"]
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_MAC"] for g in rendered["job"]["Job"]["TaskGroups"]} == {"UNSIGNED-RENDER-ONLY"}


@pytest.mark.slow
def test_the_key_is_in_no_output_job_or_variable(nomad: NomadAPIDouble, network_key_file: str, tmp_path: t.Any) -> None:
    """create_session.yml and destroy_session.yml at -vvv, and render_session.yml: the key's text appears nowhere."""
    with open(network_key_file, encoding="ascii") as f:
        key_text = f.read().strip()
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=nomad.url, NOMAD_TOKEN=NOMAD_TOKEN)
    session = json.dumps({"session": spec("vvv", 2)})
    outputs = []
    for playbook in ("create_session.yml", "destroy_session.yml"):
        proc = run_playbook(playbook, "-vvv", "-e", session, "-e", "wait_timeout=20", env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        outputs.append(proc.stdout + proc.stderr)
    # the Nomad CLI path signs with the key: its job, claim and keypair files, output and -vvv log hold none of it
    proc = run_playbook("render_session.yml", "-vvv", "-e", session, "-e", "output_dir=" + str(tmp_path),
                        "-e", "write_secret=true",
                        "-e", json.dumps({"agents": [{"name": "a", "cpu": 8000, "memory": 8192, "underlay_ip": "10.1.1.1"}]}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "signed for network slot" in proc.stdout and [f for f in os.listdir(tmp_path) if ".slot-" in f]
    outputs.append(proc.stdout + proc.stderr)
    outputs += [open(os.path.join(tmp_path, f), encoding="utf-8").read() for f in os.listdir(tmp_path)]
    outputs += [r.text for r in nomad.requests]
    for text in outputs:
        for piece in (key_text, key_text[:16], key_text[-16:]):
            assert piece not in text
    assert nomad.find("POST", "^/v1/jobs$") and claims(nomad) == {}


@pytest.mark.slow
def test_a_session_larger_than_a_slot_claims_an_aligned_block(nomad_double_factory: t.Any, run: ModuleRun) -> None:
    """300 containers do not fit a /24: the session takes a block of two slots (a /23), claims both, gives both back."""
    double = nomad_double_factory(token=NOMAD_TOKEN)
    for i in range(4):
        double.add_node("big%d" % i, cpu=100000, memory=200000)
    small = run(session_module, args(double, "s0"))["network"]
    big = run(session_module, args(double, "big", spec=spec("big", 300, cluster_mode="multi-node",
                                                              resources={"cpu": 1000, "memory": 1024})))
    assert not big.get("failed"), big.get("msg")
    net = big["network"]
    assert net["slots"] == 2 and net["slot"] % 2 == 0 and net["subnet"].endswith("/23")
    assert small["slot"] not in (net["slot"], net["slot"] + 1)
    assert {s for s, items in claims(double).items() if items["job"] == "big"} == {net["slot"], net["slot"] + 1}
    assert _network_claims.slot_of_job(double.stored_job("big")) == (net["slot"], 2)
    again = run(session_module, args(double, "big", spec=spec("big", 300, cluster_mode="multi-node",
                                                                resources={"cpu": 1000, "memory": 1024})))
    assert again["changed"] is False and again["network"]["slot"] == net["slot"]
    gone = run(session_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN, "name": "big", "state": "absent"})
    assert gone["removed"]["network_slot"] == net["slot"] and list(claims(double)) == [small["slot"]]


def test_check_mode_claims_nothing_and_shows_an_unsigned_job(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    nomad.clear_requests()
    planned = run(session_module, args(nomad), check=True)
    assert planned["changed"] is True and not planned.get("failed"), planned.get("msg")
    assert [r for r in nomad.requests if r.method != "GET"] == [] and claims(nomad) == {}
    assert planned["network"]["signed"] is False and planned["network"]["slot"] == preferred_slot("default", "s1")
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_MAC"] for g in planned["job"]["Job"]["TaskGroups"]} == {
        "UNSIGNED-RENDER-ONLY"}


def test_render_against_nomad_shows_the_nodes_underlay_addresses_unsigned(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    rendered = run(render_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN,
                                   "spec": spec("r2", 4, cluster_mode="multi-node", resources={"cpu": 3000, "memory": 1024})})
    assert not rendered.get("failed"), rendered.get("msg")
    assert rendered["network"]["agents"] == ["192.168.60.1", "10.9.0.2"] and rendered["network"]["signed"] is False
    assert rendered["network"]["placeholder_agents"] == [] and claims(nomad) == {}


def nomad_cli(double: NomadAPIDouble, command: str) -> None:
    """One command session_render printed, sent as the nomad CLI sends it (hashicorp/nomad command/var_put.go:
    ``@FILE`` parsed by extension, ``-namespace`` steps on the file's namespace, ``CheckedUpdate`` =
    ``PUT /v1/var/:path?cas=<-check-index, else the file's ModifyIndex, 0>``; command/var_purge.go: ``DELETE``;
    command/job_run.go: the job's own namespace; command/job_stop.go ``-purge``), against the API double. ``nomad
    job run X.nomad.hcl`` registers X.json, the same job as JSON (no HCL parser here)."""
    import shlex

    words = shlex.split(command)
    flags = dict(w[1:].split("=", 1) if "=" in w else (w[1:], "") for w in words[3:] if w.startswith("-"))
    args = [w for w in words[3:] if not w.startswith("-")]
    client = NomadClient(NomadConnection(nomad_addr=double.url, token=NOMAD_TOKEN))
    if words[:3] == ["nomad", "var", "put"]:
        var = read_var_spec(args[0][1:])
        ns = flags.get("namespace") or var["namespace"] or "default"
        client.in_namespace(ns).put_variable(var["path"], var["items"], cas=int(flags.get("check-index") or 0))
    elif words[:3] == ["nomad", "var", "purge"]:
        client.in_namespace(flags.get("namespace") or "default").delete_variable(args[0])
    elif words[:3] == ["nomad", "job", "run"]:
        with open(args[0].replace(".nomad.hcl", ".json"), encoding="utf-8") as f:
            body = json.load(f)
        client.in_namespace(body["Job"].get("Namespace") or flags.get("namespace") or "default").register_job(body)
    elif words[:3] == ["nomad", "job", "stop"]:
        client.in_namespace(flags.get("namespace") or "default").deregister_job(args[0], purge="purge" in flags)
    else:
        raise AssertionError("not a command the CLI path prints: %s" % command)


@pytest.mark.parametrize("fmt", ["hcl", "json"])
def test_the_cli_path_claims_what_the_session_module_claims_runs_admitted_and_is_destroyed_normally(
        nomad: NomadAPIDouble, nomad_double_factory: t.Any, run: ModuleRun, network_key_file: str, tmp_path: t.Any,
        fmt: str) -> None:
    """session_render against the cluster (team-a, claims in infra), its commands applied through the double's
    /v1/var and /v1/jobs: the claim is the variable _network_claims writes, every group is admitted, a second claim
    of the slot gets the 409 of -check-index=0, and `session state=absent` releases the claim as its own."""
    out = str(tmp_path / "out")
    rendered = run(render_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "namespace": "team-a",
                                   "network_claims_namespace": "infra", "output_dir": out, "write_secret": True,
                                   "secret_format": fmt, "spec": spec("cli", 4, cluster_mode="multi-node",
                                                                      resources={"cpu": 3000, "memory": 1024})})
    assert not rendered.get("failed"), rendered.get("msg")
    net, sid = rendered["network"], rendered["plan"]["session_id"]
    assert net["signed"] is True and net["agents"] == ["192.168.60.1", "10.9.0.2"]  # the nodes' addresses
    assert net["slot"] == preferred_slot("team-a", "cli") and claims(nomad, "infra") == {}  # nothing claimed yet
    assert rendered["claim_files"] == [os.path.join(out, "cli.slot-%d.var.%s" % (net["slot"], fmt))]
    assert rendered["commands"][0].startswith("nomad var put -namespace=infra -check-index=0 @")
    assert rendered["table_files"] == [os.path.join(out, "cli.agents-0.var.%s" % fmt)]
    assert rendered["commands"][1] == "nomad var put -namespace=infra @" + rendered["table_files"][0]
    assert rendered["commands"][2].startswith("nomad var put -namespace=team-a @")
    for command in rendered["commands"]:
        nomad_cli(nomad, command)
    # what _network_claims writes for this session, on a cluster of its own
    other = nomad_double_factory(token=NOMAD_TOKEN)
    own = _network_claims.NetworkClaims(NomadClient(NomadConnection(nomad_addr=other.url, token=NOMAD_TOKEN,
                                                                    namespace="infra")))
    assert own.claim("team-a", "cli", sid).slot == net["slot"]
    assert claims(nomad, "infra") == claims(other, "infra") == {net["slot"]: {
        "namespace": "team-a", "job": "cli", "session_id": sid, "first": str(net["slot"]), "slots": "1"}}
    job = nomad.stored_job("cli", "team-a")
    assert job is not None and nomad.stored_variable("nomad/jobs/cli", "team-a") is not None
    admitted = admitted_groups(job, read_key(network_key_file), "team-a", double=nomad)  # with the table put
    assert len(admitted) == 4 and {a.params.agents for a in admitted} == {("192.168.60.1", "10.9.0.2")}
    with pytest.raises(_network_claims.CASConflict):  # the slot is taken now: the claim command fails
        nomad_cli(nomad, rendered["commands"][0])
    # the session module sees the CLI-made session as its own and removes all of it, the claim included
    gone = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "name": "cli", "state": "absent",
                                "namespace": "team-a", "network_claims_namespace": "infra"})
    assert not gone.get("failed"), gone.get("msg")
    assert gone["removed"]["network_slot"] == net["slot"] and gone["removed"]["job"] is True
    assert claims(nomad, "infra") == {} and nomad.stored_variable("nomad/jobs/cli", "team-a") is None
    assert nomad.stored_job("cli", "team-a") is None
    assert not [path for _ns, path in nomad.model.variables if path.startswith("backendai-cluster/network/agents/")]


def test_the_cli_path_teardown_commands_remove_everything(nomad: NomadAPIDouble, run: ModuleRun, tmp_path: t.Any) -> None:
    """A session larger than a /24: one claim file per slot of its block, every one applied and purged again."""
    double = nomad
    for i in range(2):
        double.add_node("big%d" % i, cpu=400000, memory=400000, address="192.168.61.%d" % (i + 1))
    rendered = run(render_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN, "output_dir": str(tmp_path),
                                   "write_secret": True, "spec": spec("big", 300, cluster_mode="multi-node",
                                                                      resources={"cpu": 1000, "memory": 1024})})
    assert not rendered.get("failed"), rendered.get("msg")
    first = rendered["network"]["slot"]
    assert rendered["network"]["slots"] == 2 and first % 2 == 0 and len(rendered["claim_files"]) == 2
    for command in rendered["commands"]:
        nomad_cli(double, command)
    assert {s: items["first"] for s, items in claims(double).items()} == {first: str(first), first + 1: str(first)}
    assert _network_claims.slot_of_job(double.stored_job("big")) == (first, 2)
    for command in rendered["teardown"]:
        nomad_cli(double, command)
    assert claims(double) == {} and double.stored_job("big") is None and double.stored_variable("nomad/jobs/big") is None
    assert not [path for _ns, path in double.model.variables if path.startswith("backendai-cluster/network/agents/")]


def test_a_render_that_cannot_sign_as_asked_fails_clearly_writing_nothing(run: ModuleRun, tmp_path: t.Any) -> None:
    out = str(tmp_path / "out")
    agents = [{"name": "a", "cpu": 8000, "memory": 8192, "underlay_ip": "10.1.1.1"}]
    base = {"spec": spec("r3", 2), "agents": agents, "output_dir": out}
    alone = run(render_module, dict(base, sign=True))
    assert alone.get("failed") and alone["msg"].startswith("sign=true needs write_secret=true")
    keyless = run(render_module, dict(base, sign=True, write_secret=True, network_key_file=str(tmp_path / "nope.key")))
    assert keyless.get("failed") and "cannot read the network key %s" % (tmp_path / "nope.key") in keyless["msg"]
    assert "overlay_agent" in keyless["msg"] and "Traceback" not in keyless["msg"]
    misaligned = run(render_module, dict(base, write_secret=True, network_slot=3, spec=spec(
        "r4", 300, cluster_mode="multi-node", resources={"cpu": 100, "memory": 100}),
        agents=[dict(agents[0], cpu=100000, memory=100000)]))
    assert misaligned.get("failed") and misaligned["problems"] == [
        "network_slot: must be a multiple of 2 from 0 to 2046: this session needs an aligned block of 2 slots of the "
        "cluster's 2048 (got 3)"]
    assert not os.path.exists(out)
    checked = run(render_module, dict(base, write_secret=True), check=True)
    assert checked["changed"] is True and checked["network"]["signed"] is True and not os.path.exists(out)
    assert checked["claim_files"] == [os.path.join(out, "r3.slot-%d.var.hcl" % checked["network"]["slot"])]
