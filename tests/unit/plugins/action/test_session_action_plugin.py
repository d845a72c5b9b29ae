# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session action plugin (plugins/action/session.py) through ansible-playbook -vvv: a local session is
handled in the worker process with exactly the module's result, and everything else still runs the module.

Which path ran is read from -vvv: only the module path says ``Using module file .../modules/session.py``
(it packs the module). The module path is forced for comparison by naming the same Python under another
name as ``ansible_python_interpreter`` (``<venv>/bin/python3`` when ansible-playbook runs ``<venv>/bin/python``).
Nothing here makes a session: check mode, refused input and a missing session only (the real local
bring-up through the plugin is tests/playbooks/test_local_playbooks.py); the Nomad cases run against the API double.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing as t

import pytest

import local_session_dict  # the example image (scripts/setup builds it)
from module_helpers import ENV_VARS, NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import VENV_BIN, run_playbook, task_results

pytestmark = pytest.mark.slow  # ansible-playbook runs (not in scripts/run-tests --quick)

MODULE_RAN = re.compile(r"Using module file \S*/plugins/modules/session\.py")
# the same Python as ansible-playbook's (its shebang) under another name: the plugin leaves it to the module
OTHER_INTERPRETER = os.path.join(VENV_BIN, "python" if os.path.basename(sys.executable) == "python3" else "python3")
SECRET = "s3cr3t-token-that-must-never-show"

PLAYBOOK = """
- name: The session module on this machine
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    backendai.cluster.session:
      state_dir: "{{ state_dir }}"
  tasks:
    - name: Session
      backendai.cluster.session: "{{ args }}"
      environment: "{{ task_env | default({}) }}"
"""

GROUP_PLAYBOOK = """
- name: The session module with the Nomad group's defaults
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    group/backendai.cluster.nomad:
      nomad_addr: "{{ nomad_url }}"
  tasks:
    - name: Session
      backendai.cluster.session:
        spec: {name: s1, image: "python:3.11-slim", cluster_size: 1, resources: {cpu: 100, memory: 64}}
"""


def local_spec(name: str = "act1", **extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"name": name, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": 2,
                               "resources": {"cpu": 100, "memory": 64}}
    out.update(extra)
    return out


def play(tmp_path: t.Any, text: str, extra_vars: t.Mapping[str, t.Any], *args: str, check: bool = False,
         env: t.Optional[t.Dict[str, str]] = None) -> t.Tuple[t.Dict[str, t.Any], str]:
    """The Session task's result and the whole -vvv output."""
    path = os.path.join(str(tmp_path), "play.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    clean = {var: "" for var in ENV_VARS}
    clean.update(env or {})
    proc = run_playbook(path, "-vvv", "-e", json.dumps(dict(extra_vars)), *args, check=check, env=clean)
    out = proc.stdout + proc.stderr
    # -vvv prints its messages before the callback's JSON document
    document = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout[proc.stdout.rindex('{\n  "plays"'):], "")
    return task_results(document)["Session"], out


CASES = {
    "check-mode-new-session": ({"spec": local_spec()}, True),
    "absent-no-such-session": ({"name": "act-none", "state": "absent"}, False),
    "bad-spec": ({"spec": local_spec(cluster_size="many", colour="red")}, False),
    "pending-too-big": ({"spec": local_spec(resources={"cpu": 10 ** 7, "memory": 64})}, False),
    "names-differ": ({"name": "other", "spec": local_spec(), "state": "absent"}, False),
    "no-log-option-given": ({"spec": local_spec(), "token": SECRET, "vault_token": SECRET}, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_local_session_in_process_gives_the_modules_result(tmp_path: t.Any, case: str) -> None:
    args, check = CASES[case]
    extra = {"args": args, "state_dir": str(tmp_path / "state")}
    here, here_out = play(tmp_path, PLAYBOOK, extra, "--diff", check=check)
    module, module_out = play(tmp_path, PLAYBOOK, dict(extra, ansible_python_interpreter=OTHER_INTERPRETER), "--diff",
                              check=check)
    assert not MODULE_RAN.search(here_out) and MODULE_RAN.search(module_out)
    assert here == module
    assert "Traceback" not in here_out and SECRET not in here_out
    assert not os.path.exists(tmp_path / "state" / "act1")
    if case == "no-log-option-given":
        assert here["invocation"]["module_args"]["token"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_state_dir_from_module_defaults_is_checked_in_process(tmp_path: t.Any) -> None:
    regular = tmp_path / "file"
    regular.write_text("not a directory\n")
    result, out = play(tmp_path, PLAYBOOK, {"args": {"spec": local_spec()}, "state_dir": str(regular)})
    assert not MODULE_RAN.search(out)
    assert result["failed"] is True and result["msg"].startswith("state_dir: must be a directory"), result
    assert regular.read_text() == "not a directory\n"


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384)
    return double


def test_nomad_address_from_the_group_defaults_runs_the_module(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    result, out = play(tmp_path, GROUP_PLAYBOOK, {"nomad_url": nomad.url}, check=True,
                       env={"NOMAD_TOKEN": NOMAD_TOKEN})
    assert MODULE_RAN.search(out) and result.get("failed") is not True, out[-3000:]
    assert result["plan"]["status"] == "PLACED" and nomad.find("GET", "^/v1/nodes")


def test_nomad_address_from_the_task_environment_runs_the_module(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    result, out = play(tmp_path, PLAYBOOK, {"args": {"spec": local_spec()}, "state_dir": str(tmp_path / "state"),
                                            "task_env": {"NOMAD_ADDR": nomad.url, "NOMAD_TOKEN": NOMAD_TOKEN}}, check=True)
    assert MODULE_RAN.search(out) and result.get("failed") is not True, out[-3000:]
    assert result["plan"]["status"] == "PLACED" and nomad.find("GET", "^/v1/nodes")

