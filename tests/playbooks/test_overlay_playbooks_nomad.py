# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad path of a multi-node session through playbooks/create_session.yml and destroy_session.yml, against
the Nomad API double, with an inventory whose agents cannot be reached (SSH to a TEST-NET address): creating and
destroying a session only talks to Nomad - no agent is contacted, nothing is recorded on the control node - and the
job's groups all join the static network cni/backendai with their own signed parameters. What the agents' plugin
then does with them is tested on real namespaces with the local backend."""

from __future__ import annotations

import json
import os
import sys
import typing as t

import pytest
import yaml

from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import client_args
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import claim_path, slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    admit,
    nomad_cni_args,
    parse_cni_args,
    read_key,
)
from module_helpers import ENV_VARS, NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import group_key, run_playbook, task_results, with_table

pytestmark = pytest.mark.slow  # ansible-playbook runs (not in scripts/run-tests --quick)

AGENTS = {"agent1": "192.0.2.11", "agent2": "192.0.2.12", "agent3": "192.0.2.13"}


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    for name, address in AGENTS.items():
        double.add_node(name, cpu=2000, memory=4096, address=address)
    return double


@pytest.fixture
def inventory(tmp_path: t.Any) -> str:
    """Agents as inventory hosts that cannot be reached: any play on them would fail the run."""
    path = str(tmp_path / "inventory.yml")
    hosts = {name: {"ansible_host": address, "ansible_connection": "ssh", "ansible_ssh_common_args": "-o ConnectTimeout=1"}
             for name, address in AGENTS.items()}
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                             "ansible_python_interpreter": sys.executable}},
                                "children": {"agents": {"hosts": hosts}}}}, f)
    return path


def play(nomad: NomadAPIDouble, inventory: str, home: str, playbook: str, *extra: str) -> t.Any:
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=nomad.url, NOMAD_TOKEN=NOMAD_TOKEN, HOME=home)
    session = {"name": "ovl", "image": "python:3.11-slim", "cluster_size": 6, "cluster_mode": "multi-node",
               "resources": {"cpu": 1000, "memory": 1024}}
    return run_playbook(playbook, "-i", inventory, "-e", json.dumps({"session": session}), "-e", "wait_timeout=20",
                        *extra, env=env)


def test_multinode_create_and_destroy_only_talk_to_nomad(nomad: NomadAPIDouble, inventory: str, tmp_path: t.Any,
                                                        network_key_file: str) -> None:
    home = str(tmp_path / "home")
    os.makedirs(home)
    created = play(nomad, inventory, home, "create_session.yml")
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    assert set(json.loads(created.stdout)["stats"]) == {"localhost"}  # no play ran on an agent
    job = nomad.stored_job("ovl")
    assert job is not None
    assert {g["Networks"][0]["Mode"] for g in job["TaskGroups"]} == {"cni/backendai"}
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_V"] for g in job["TaskGroups"]} == {"4"}  # agents in the table
    key = read_key(network_key_file)
    for group in job["TaskGroups"]:
        args = parse_cni_args(nomad_cni_args(client_args(job, group["Name"]), "global", "default", "ovl", group["Name"],
                                             "alloc"))
        assert with_table(nomad, admit(group_key(job, group["Name"], key), args)).params.agents == tuple(AGENTS.values())
    slot = slot_of_job(job)[0]
    assert nomad.stored_variable(claim_path(slot))["Items"]["job"] == "ovl"
    assert not os.path.exists(os.path.join(home, ".local", "state", "backendai-cluster", "overlays"))
    shown = task_results(created)["Submit the session (the next task waits for its containers and shows what is pending)"]
    assert shown["network"]["signed"] is True and shown["network"]["slot"] == slot

    again = play(nomad, inventory, home, "create_session.yml")
    assert again.returncode == 0 and json.loads(again.stdout)["stats"]["localhost"]["changed"] == 0

    destroyed = play(nomad, inventory, home, "destroy_session.yml")
    assert destroyed.returncode == 0, destroyed.stdout[-3000:] + destroyed.stderr[-3000:]
    assert set(json.loads(destroyed.stdout)["stats"]) == {"localhost"}
    assert nomad.stored_job("ovl") is None and nomad.stored_variable(claim_path(slot)) is None
    assert nomad.stored_variable("nomad/jobs/ovl") is None
    assert not [path for _ns, path in nomad.model.variables if path.startswith("backendai-cluster/network/agents/")]


def test_a_failed_submission_leaves_nothing(nomad: NomadAPIDouble, inventory: str, tmp_path: t.Any) -> None:
    nomad.fail_next("POST", "^/v1/jobs$", status=400, body="injected: job rejected", times=None)
    created = play(nomad, inventory, str(tmp_path), "create_session.yml")
    assert created.returncode != 0
    result = task_results(created)["Submit the session (the next task waits for its containers and shows what is pending)"]
    assert result["failed_step"] == "register job" and "released" in result["rollback"]
    assert nomad.stored_job("ovl") is None and nomad.stored_variable("nomad/jobs/ovl") is None
    assert not [path for (_ns, path) in nomad.model.variables if path.startswith("backendai-cluster/")]
