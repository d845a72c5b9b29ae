# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-doc renders session_exec with the shared connection options and the action group; its options are the
argument spec's (names, types, defaults, choices), so the documentation cannot drift from what the module takes."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.session_exec import ARGUMENT_SPEC
from ansible_collections.backendai.cluster.plugins.modules import session_exec
from repo_helpers import REPO
from test_plugin_docs import CONNECTION, ansible_doc


@pytest.mark.slow  # ansible-doc runs as a process
def test_session_exec_renders_with_connection_options_and_action_group() -> None:
    text = ansible_doc("-t", "module", "backendai.cluster.session_exec")
    assert text.returncode == 0 and "ERROR" not in text.stderr and "WARNING" not in text.stderr, text.stderr
    doc = json.loads(ansible_doc("--json", "-t", "module", "backendai.cluster.session_exec").stdout)
    doc = doc["backendai.cluster.session_exec"]["doc"]
    assert CONNECTION <= set(doc["options"])
    assert doc["attributes"]["action_group"]["membership"] == ["backendai.cluster.nomad"]
    assert doc["attributes"]["check_mode"]["support"] == "partial"  # nothing runs in check mode


def test_documented_options_are_the_argument_spec() -> None:
    options = yaml.safe_load(session_exec.DOCUMENTATION)["options"]
    assert set(options) == set(ARGUMENT_SPEC)
    for name, spec in ARGUMENT_SPEC.items():
        doc = options[name]
        assert (doc["type"], doc.get("elements"), doc.get("default"), doc.get("choices"), bool(doc.get("required"))) == (
            spec["type"], spec.get("elements"), spec.get("default"), spec.get("choices"), bool(spec.get("required"))), name


def test_action_group_and_playbook() -> None:
    collection = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster")
    with open(os.path.join(collection, "meta", "runtime.yml"), encoding="utf-8") as f:
        assert "session_exec" in yaml.safe_load(f)["action_groups"]["nomad"]
    with open(os.path.join(collection, "playbooks", "session_exec.yml"), encoding="utf-8") as f:
        (play,) = yaml.safe_load(f)
    assert play["tasks"][0]["backendai.cluster.session_exec"]["command"] == "{{ exec_command }}"
