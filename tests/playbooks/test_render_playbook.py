# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/render_session.yml as a user runs it: files written, lint-clean, idempotent, clear failures."""

from __future__ import annotations

import json
import os

import pytest

from repo_helpers import admitted_groups, lint_job_files, play_stats, read_var_spec, run_playbook, task_results

pytestmark = pytest.mark.slow  # ansible-playbook runs (not in scripts/run-tests --quick)

EXAMPLES = ["single-node", "multi-node", "heterogeneous"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_example_writes_lint_clean_files_idempotently(example: str, tmp_path: str) -> None:
    args = ["-e", "@examples/%s.yml" % example, "-e", "@examples/agents.yml", "-e", "output_dir=%s" % tmp_path]
    first = run_playbook("render_session.yml", *args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert play_stats(first)["changed"] == 1
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3 and {n.split(".", 1)[1] for n in names} == {"json", "nomad.hcl", "hostfile"}
    job_file = [os.path.join(tmp_path, n) for n in names if n.endswith(".json")][0]
    lint = lint_job_files(job_file)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    with open(job_file, encoding="utf-8") as f:
        assert "Job" in json.load(f)
    second = run_playbook("render_session.yml", *args)
    assert second.returncode == 0 and play_stats(second)["changed"] == 0


def test_check_mode_writes_nothing(tmp_path: str) -> None:
    out = os.path.join(str(tmp_path), "out")
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % out, check=True)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert play_stats(proc)["changed"] == 1 and not os.path.exists(out)


def test_pending_plan_fails_the_play_with_the_reason(tmp_path: str) -> None:
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml",
                        "-e", '{"agents": [{"name": "tiny", "cpu": 2000, "memory": 4096}]}',
                        "-e", "output_dir=%s" % tmp_path)
    assert proc.returncode != 0
    result = task_results(proc)["Place the session and render its Nomad job"]
    assert result["failed"] and result["msg"].startswith("session example-single is PENDING: no single agent can hold all 3")
    assert "tiny: cpu short by 1000 MHz (2000 free, 3000 needed), memory short by 2048 MB" in result["msg"]
    assert os.listdir(tmp_path) == []


def test_bad_spec_names_every_field_without_traceback(tmp_path: str) -> None:
    proc = run_playbook("render_session.yml", "-e", '{"session": {"name": "x y", "image": "i", "cluster_size": -1}}',
                        "-e", "@examples/agents.yml", "-e", "output_dir=%s" % tmp_path)
    assert proc.returncode != 0
    result = task_results(proc)["Place the session and render its Nomad job"]
    assert result["problems"] == [
        "session.name: must be 1 to 64 letters, digits, '-' or '_' (it is the Nomad job ID) (got \"x y\")",
        "session.cluster_size: must be an integer from 1 to 4096 (containers in total, main included) (got -1)"]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert os.listdir(tmp_path) == []


def test_nomad_cli_path_writes_a_signed_job_its_claim_and_the_keypair_and_prints_the_commands(
        tmp_path: str, network_key_file: str) -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import preferred_slot
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim
    from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import AdmissionError, read_key, resolve_table
    from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id
    from hclfmt_check import problems

    out = os.path.join(str(tmp_path), "out")
    args = ["-e", "@examples/multi-node.yml", "-e", "@examples/agents.yml", "-e", "output_dir=%s" % out,
            "-e", "write_secret=true"]
    first = run_playbook("render_session.yml", *args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    var_file = os.path.join(out, "example-multi.var.hcl")
    assert os.stat(var_file).st_mode & 0o777 == 0o600
    var = read_var_spec(var_file)
    assert var["path"] == "nomad/jobs/example-multi" and sorted(var["items"]) == ["ssh_private_key", "ssh_public_key"]
    private, public = var["items"]["ssh_private_key"], var["items"]["ssh_public_key"]
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n") and public.startswith("ssh-ed25519 ")
    for line in private.splitlines()[1:-1]:
        assert line not in first.stdout + first.stderr
    slot = preferred_slot("default", "example-multi")
    claim_file = os.path.join(out, "example-multi.slot-%d.var.hcl" % slot)
    assert os.stat(claim_file).st_mode & 0o777 == 0o600
    session_id = derive_session_id("example-multi", public)
    # the claim is the variable _network_claims writes for this session: same path, namespace and items
    assert read_var_spec(claim_file) == {
        "path": "backendai-cluster/network/slots/%d" % slot, "namespace": "default",
        "items": Claim(slot, "default", "example-multi", session_id, 1).items()}
    results = task_results(first)
    table_file = os.path.join(out, "example-multi.agents-0.var.hcl")
    table = read_var_spec(table_file)  # the agent table: once, in the claims namespace, under the slot
    assert table["namespace"] == "default" and table["path"].startswith("backendai-cluster/network/agents/%d/" % slot)
    assert results["Show how to run it with the Nomad CLI"]["msg"][:4] == [
        "nomad var put -namespace=default -check-index=0 @%s" % claim_file,
        "nomad var put -namespace=default @%s" % table_file,
        "nomad var put -namespace=default @%s" % var_file,
        "nomad job run %s" % os.path.join(out, "example-multi.nomad.hcl")]
    assert "network slot %d is taken" % slot in results["Show how to run it with the Nomad CLI"]["msg"][4]
    assert "-e network_slot=N" in results["Show how to run it with the Nomad CLI"]["msg"][4]
    assert results["Show how to remove it with the Nomad CLI"]["msg"][:4] == [
        "nomad job stop -namespace=default -purge example-multi",
        "nomad var purge -namespace=default %s" % table["path"],
        "nomad var purge -namespace=default backendai-cluster/network/slots/%d" % slot,
        "nomad var purge -namespace=default nomad/jobs/example-multi"]
    assert results["Show what is missing for the Nomad CLI"].get("skipped") is True
    # the job: signed for that slot in namespace default (which it names), admitted by the plugin for every group
    with open(os.path.join(out, "example-multi.json"), encoding="utf-8") as f:
        job = json.load(f)["Job"]
    assert job["Namespace"] == "default"
    key = read_key(network_key_file)
    admitted = [resolve_table(a, [table["items"]]) for a in admitted_groups(job, key)]  # with the table written
    assert [a.group for a in admitted] == [g["Name"] for g in job["TaskGroups"]] and len(admitted) == 6
    assert {a.params.vni for a in admitted} == {0x10000 + slot}
    assert {a.params.agents for a in admitted} == {("10.0.0.13", "10.0.0.11")}  # agent-c, agent-a: plan order
    with pytest.raises(AdmissionError):
        admitted_groups(job, key, namespace="team-a")  # registered in another namespace: refused
    lint = lint_job_files(os.path.join(out, "example-multi.json"))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    with open(os.path.join(out, "example-multi.nomad.hcl"), encoding="utf-8") as f:
        jobspec = f.read()
    assert 'nomadVar \\"nomad/jobs/example-multi\\"' in jobspec  # where the tasks read the variable
    assert session_id in jobspec and '\n  namespace   = "default"\n' in jobspec
    for path in (var_file, claim_file, table_file, os.path.join(out, "example-multi.nomad.hcl")):
        with open(path, encoding="utf-8") as f:
            assert problems(f.read()) == [], path
    again = run_playbook("render_session.yml", *args)
    assert again.returncode == 0 and play_stats(again)["changed"] == 0
    assert read_var_spec(var_file) == var  # same keys, same session ID
    # another slot: its claim replaces the old one's file; JSON variable specs
    moved = run_playbook("render_session.yml", *args, "-e", "network_slot=%d" % ((slot + 7) % 2048),
                         "-e", "secret_format=json")
    assert moved.returncode == 0, moved.stdout[-2000:]
    claims = sorted(n for n in os.listdir(out) if ".slot-" in n)
    assert claims == ["example-multi.slot-%d.var.json" % ((slot + 7) % 2048)]
    assert sorted(n for n in os.listdir(out) if ".agents-" in n) == ["example-multi.agents-0.var.json"]
    claim_json = read_var_spec(os.path.join(out, claims[0]))
    assert claim_json["items"]["first"] == str((slot + 7) % 2048) and claim_json["namespace"] == "default"
    with open(os.path.join(out, "example-multi.var.json"), encoding="utf-8") as f:
        body = json.load(f)
    assert body["Path"] == "nomad/jobs/example-multi" and set(body["Items"]) == {"ssh_private_key", "ssh_public_key"}
    assert body["Namespace"] == "default"
    assert os.stat(os.path.join(out, "example-multi.var.json")).st_mode & 0o777 == 0o600
    with open(os.path.join(out, "example-multi.json"), encoding="utf-8") as f:
        assert {a.params.vni for a in admitted_groups(json.load(f)["Job"], key)} == {0x10000 + (slot + 7) % 2048}


def test_without_the_key_the_cli_path_stays_unsigned_and_says_how_to_sign(tmp_path: str) -> None:
    out = os.path.join(str(tmp_path), "out")
    absent = os.path.join(str(tmp_path), "no-such.key")
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % out, "-e", "write_secret=true", env={"BACKENDAI_NETWORK_KEY_FILE": absent})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = task_results(proc)
    assert results["Show how to run it with the Nomad CLI"]["msg"] == [
        "nomad var put @%s" % os.path.join(out, "example-single.var.hcl"),
        "nomad job run %s" % os.path.join(out, "example-single.nomad.hcl")]
    missing = " ".join(results["Show what is missing for the Nomad CLI"]["msg"])
    assert "The job is not signed (BAI_MAC=UNSIGNED-RENDER-ONLY)" in missing
    assert "no cluster network key at %s (network_key_file, or BACKENDAI_NETWORK_KEY_FILE)" % absent in missing
    assert "nomad/jobs/example-single, which nothing has written yet" not in missing  # the keypair is there
    assert not [n for n in os.listdir(out) if ".slot-" in n]
    with open(os.path.join(out, "example-single.json"), encoding="utf-8") as f:
        job = json.load(f)["Job"]
    assert "Namespace" not in job
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_MAC"] for g in job["TaskGroups"]} == {"UNSIGNED-RENDER-ONLY"}


def test_without_write_secret_it_says_what_is_missing(tmp_path: str, network_key_file: str) -> None:
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % tmp_path)
    assert proc.returncode == 0
    msg = " ".join(task_results(proc)["Show what is missing for the Nomad CLI"]["msg"])
    assert "nomad/jobs/example-single, which nothing has written yet" in msg and "-e write_secret=true" in msg
    assert "The job is not signed" in msg and "write_secret is off" in msg and network_key_file in msg
    assert not [n for n in os.listdir(tmp_path) if ".var." in n]


@pytest.mark.parametrize("extra, problem", [
    (['{"agents": [{"name": "agent-a", "cpu": 8000, "memory": 32768}, '
      '{"name": "agent-b", "cpu": 8000, "memory": 32768, "underlay_ip": "10.0.0.12"}]}'],
     "agents[0].underlay_ip: is required to sign: the signed job lists every agent's real underlay address"),
    (["@examples/agents.yml", "-e", "network_slot=2048"],
     "network_slot: must be an integer from 0 to 2047 (one of the cluster's 2048 session network slots) (got 2048)"),
    (["@examples/agents.yml", "-e", "network_slot=-1"], "network_slot: must be an integer from 0 to 2047"),
])
def test_a_signed_render_refuses_placeholder_agents_and_bad_slots_writing_nothing(
        tmp_path: str, extra: list, problem: str) -> None:
    out = os.path.join(str(tmp_path), "out")
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", *extra,
                        "-e", "output_dir=%s" % out, "-e", "write_secret=true")
    assert proc.returncode != 0
    result = task_results(proc)["Place the session and render its Nomad job"]
    assert result["failed"] and len(result["problems"]) == 1 and result["problems"][0].startswith(problem)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not os.path.exists(out)


def test_sign_false_renders_unsigned_with_the_key_present(tmp_path: str) -> None:
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % tmp_path, "-e", "write_secret=true", "-e", "sign=false")
    assert proc.returncode == 0, proc.stdout[-2000:]
    missing = " ".join(task_results(proc)["Show what is missing for the Nomad CLI"]["msg"])
    assert "because sign=false was given" in missing
    assert not [n for n in os.listdir(tmp_path) if ".slot-" in n]


def test_write_secret_refuses_a_vault_spec_clearly(tmp_path: str) -> None:
    spec = {"session": {"name": "v1", "image": "i", "secrets": {"backend": "vault", "path": "bai"}}}
    proc = run_playbook("render_session.yml", "-e", json.dumps(spec), "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % tmp_path, "-e", "write_secret=true")
    assert proc.returncode != 0
    result = task_results(proc)["Place the session and render its Nomad job"]
    assert result["problems"] == ['session.secrets.backend: write_secret writes a Nomad variable file, so it needs '
                                  'nomad-variables (the session module stores Vault keypairs) (got "vault")']
    assert os.listdir(tmp_path) == []
