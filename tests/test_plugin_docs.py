# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-doc renders every module and the inventory plugin, with the shared connection options and the action group."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from repo_helpers import REPO, VENV_BIN

PLUGINS = [("module", "backendai.cluster.session"), ("module", "backendai.cluster.session_info"),
           ("module", "backendai.cluster.session_render"), ("inventory", "backendai.cluster.nomad_nodes")]
CONNECTION = {"nomad_addr", "token", "namespace", "region", "ca_cert", "client_cert", "client_key", "validate_certs",
              "timeout"}


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-doc")] + list(args), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # ansible-doc runs as a process, once per plugin
def test_every_plugin_renders_as_text_and_json() -> None:
    for kind, name in PLUGINS:
        text = ansible_doc("-t", kind, name)
        assert text.returncode == 0 and "ERROR" not in text.stderr and "WARNING" not in text.stderr, text.stderr
        assert name in text.stdout
    proc = ansible_doc("--json", "-t", "module", *[n for k, n in PLUGINS if k == "module"])
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    for name, doc in docs.items():
        options = doc["doc"]["options"]
        assert CONNECTION <= set(options), name
        assert doc["doc"]["attributes"]["action_group"]["membership"] == ["backendai.cluster.nomad"], name
        assert doc["doc"]["attributes"]["check_mode"]["support"] == "full", name
    inventory = json.loads(ansible_doc("--json", "-t", "inventory", "backendai.cluster.nomad_nodes").stdout)
    options = inventory["backendai.cluster.nomad_nodes"]["doc"]["options"]
    assert CONNECTION <= set(options) and options["nomad_addr"]["env"] == [{"name": "NOMAD_ADDR"}]
    assert {"keyed_groups", "compose", "groups", "strict", "cache"} <= set(options)


@pytest.mark.parametrize("module", ["session", "session_info", "session_render"])
def test_action_group_lists_the_module(module: str) -> None:
    path = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "meta", "runtime.yml")
    with open(path, encoding="utf-8") as f:
        runtime = yaml.safe_load(f)
    assert module in runtime["action_groups"]["nomad"]
