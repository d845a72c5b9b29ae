# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/render_session.yml as a user runs it: files written, lint-clean, idempotent, clear failures."""

from __future__ import annotations

import json
import os

import pytest

from repo_helpers import lint_job_files, play_stats, run_playbook, task_results

EXAMPLES = ["single-node", "multi-node", "heterogeneous"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_example_writes_lint_clean_files_idempotently(example: str, tmp_path: str, shared_dir: str) -> None:
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


def read_var_file(path: str) -> dict:
    import hcl2

    with open(path, encoding="utf-8") as f:
        parsed = hcl2.loads(f.read())
    items = parsed["items"][0]
    heredoc = items["ssh_private_key"]
    assert heredoc.startswith('"<<EOT\n') and heredoc.endswith('\nEOT"')
    return {"path": parsed["path"].strip('"'), "private": heredoc[len('"<<EOT\n'):-len('EOT"')],
            "public": items["ssh_public_key"].strip('"')}


def test_nomad_cli_path_writes_the_keypair_as_a_variable_spec_and_prints_the_commands(tmp_path: str) -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id
    from hclfmt_check import problems

    out = os.path.join(str(tmp_path), "out")
    args = ["-e", "@examples/single-node.yml", "-e", "@examples/agents.yml", "-e", "output_dir=%s" % out,
            "-e", "write_secret=true"]
    first = run_playbook("render_session.yml", *args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    var_file = os.path.join(out, "example-single.var.hcl")
    assert os.stat(var_file).st_mode & 0o777 == 0o600
    var = read_var_file(var_file)
    assert var["path"] == "nomad/jobs/example-single"
    assert var["private"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n") and var["public"].startswith("ssh-ed25519 ")
    for line in var["private"].splitlines()[1:-1]:
        assert line not in first.stdout + first.stderr
    commands = task_results(first)["Show how to run it with the Nomad CLI"]["msg"]
    assert commands == ["nomad var put @%s" % var_file, "nomad job run %s" % os.path.join(out, "example-single.nomad.hcl")]
    with open(os.path.join(out, "example-single.nomad.hcl"), encoding="utf-8") as f:
        jobspec = f.read()
    assert 'nomadVar \\"nomad/jobs/example-single\\"' in jobspec  # where the tasks read the variable
    assert derive_session_id("example-single", var["public"]) in jobspec
    with open(var_file, encoding="utf-8") as f:
        assert problems(f.read()) == []
    again = run_playbook("render_session.yml", *args)
    assert again.returncode == 0 and play_stats(again)["changed"] == 0
    assert read_var_file(var_file) == var  # same keys, same session ID
    as_json = run_playbook("render_session.yml", *args, "-e", "secret_format=json")
    assert as_json.returncode == 0, as_json.stdout[-2000:]
    with open(os.path.join(out, "example-single.var.json"), encoding="utf-8") as f:
        body = json.load(f)
    assert body["Path"] == "nomad/jobs/example-single" and set(body["Items"]) == {"ssh_private_key", "ssh_public_key"}
    assert os.stat(os.path.join(out, "example-single.var.json")).st_mode & 0o777 == 0o600


def test_without_write_secret_it_says_what_is_missing(tmp_path: str) -> None:
    proc = run_playbook("render_session.yml", "-e", "@examples/single-node.yml", "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % tmp_path)
    assert proc.returncode == 0
    msg = " ".join(task_results(proc)["Show how to run it with the Nomad CLI"]["msg"])
    assert "nomad/jobs/example-single, which nothing has written yet" in msg and "-e write_secret=true" in msg
    assert not [n for n in os.listdir(tmp_path) if ".var." in n]


def test_write_secret_refuses_a_vault_spec_clearly(tmp_path: str) -> None:
    spec = {"session": {"name": "v1", "image": "i", "secrets": {"backend": "vault", "path": "bai"}}}
    proc = run_playbook("render_session.yml", "-e", json.dumps(spec), "-e", "@examples/agents.yml",
                        "-e", "output_dir=%s" % tmp_path, "-e", "write_secret=true")
    assert proc.returncode != 0
    result = task_results(proc)["Place the session and render its Nomad job"]
    assert result["problems"] == ['session.secrets.backend: write_secret writes a Nomad variable file, so it needs '
                                  'nomad-variables (the session module stores Vault keypairs) (got "vault")']
    assert os.listdir(tmp_path) == []
