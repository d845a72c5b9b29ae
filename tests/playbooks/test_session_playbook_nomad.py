# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules through ansible-playbook -vvv --diff against the Nomad API double: connection options from the
environment and module_defaults, the action group, and no secret anywhere in the output."""

from __future__ import annotations

import json
import os
import subprocess
import typing as t

import pytest

from module_helpers import ENV_VARS, NOMAD_TOKEN, private_key_lines, spec
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import play_stats, run_playbook, task_results

pytestmark = pytest.mark.slow  # ansible-playbook runs (not in scripts/run-tests --quick)

PLAYBOOK = """
- name: A cluster session on Nomad
  hosts: localhost
  gather_facts: false
  module_defaults:
    group/backendai.cluster.nomad:
      timeout: 5
      validate_certs: true
  tasks:
    - name: Create
      backendai.cluster.session:
        spec: "{{ session }}"
      register: created
    - name: Create again
      backendai.cluster.session:
        spec: "{{ session }}"
    - name: Info
      backendai.cluster.session_info:
        name: "{{ session.name }}"
        log_lines: 5
    - name: Render another session against live node data
      backendai.cluster.session_render:
        spec: "{{ session | combine({'name': 'other'}) }}"
    - name: Remove
      backendai.cluster.session:
        name: "{{ session.name }}"
        state: absent
    - name: Remove again
      backendai.cluster.session:
        name: "{{ session.name }}"
        state: absent
"""


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384)
    return double


def playbook_env(double: NomadAPIDouble) -> t.Dict[str, str]:
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=double.url, NOMAD_TOKEN=NOMAD_TOKEN)
    return env


def write_playbook(tmp_path: t.Any) -> str:
    path = os.path.join(str(tmp_path), "session.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(PLAYBOOK)
    return path


def test_playbook_run_is_idempotent_and_leaks_no_secret(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    proc = run_playbook(write_playbook(tmp_path), "-vvv", "--diff", "-e", json.dumps({"session": spec(size=2)}),
                        env=playbook_env(nomad))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # -vvv prints its messages before the callback's JSON document
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout[proc.stdout.rindex('{\n  "plays"'):],
                                       proc.stderr)
    results = task_results(proc)
    assert results["Create"]["changed"] is True and results["Create again"]["changed"] is False
    assert results["Info"]["sessions"][0]["state"] == "RUNNING"
    assert results["Render another session against live node data"]["plan"]["status"] == "PLACED"
    assert results["Remove"]["changed"] is True and results["Remove again"]["changed"] is False
    assert play_stats(proc)["changed"] == 2
    put = nomad.find("PUT", "^/v1/var/nomad/jobs/s1$")
    assert len(put) == 1
    private = put[0].json["Items"]["ssh_private_key"]
    for line in private_key_lines(private):
        assert line not in out
    assert "PRIVATE KEY" not in out and NOMAD_TOKEN not in out
    for request in nomad.requests:
        if request is not put[0]:
            assert private_key_lines(private)[0] not in request.text, (request.method, request.path)
    assert nomad.requests_containing(NOMAD_TOKEN) == []
    assert nomad.stored_job("s1") is None and nomad.stored_variable("nomad/jobs/s1") is None


def test_playbook_check_mode_writes_nothing(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    proc = run_playbook(write_playbook(tmp_path), "--diff", "-e", json.dumps({"session": spec(size=2)}),
                        env=playbook_env(nomad), check=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert task_results(proc)["Create"]["changed"] is True
    assert [r for r in nomad.requests if r.method != "GET"] == []
