# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The example inventories with the repository's playbooks: inventories/static and inventories/nomad."""

from __future__ import annotations

import typing as t

import pytest

from module_helpers import ENV_VARS, NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import play_stats, run_playbook, task_results

pytestmark = pytest.mark.slow  # ansible-inventory and ansible-playbook runs (not in scripts/run-tests --quick)

RENDER_TASK = "Place the session and render its Nomad job"


def test_static_inventory_agents_equal_the_examples_agents_file(tmp_path: t.Any) -> None:
    static = run_playbook("render_session.yml", "-i", "inventories/static", "-e", "@examples/multi-node.yml",
                          "-e", "output_dir=%s/a" % tmp_path)
    assert static.returncode == 0, static.stdout[-3000:] + static.stderr[-3000:]
    listed = run_playbook("render_session.yml", "-e", "@examples/multi-node.yml", "-e", "@examples/agents.yml",
                          "-e", "output_dir=%s/b" % tmp_path)
    assert listed.returncode == 0
    assert task_results(static)[RENDER_TASK]["plan"] == task_results(listed)[RENDER_TASK]["plan"]


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=8000, memory=16384)
    double.add_node("n2", cpu=8000, memory=16384, status="down")
    return double


def test_nomad_inventory_with_the_session_playbooks(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=nomad.url, NOMAD_TOKEN=NOMAD_TOKEN)
    common = ["-i", "inventories/nomad", "-e", "@examples/single-node.yml"]
    render = run_playbook("render_session.yml", *common, "-e", "output_dir=%s" % tmp_path, env=env)
    assert render.returncode == 0, render.stdout[-3000:] + render.stderr[-3000:]
    assert task_results(render)[RENDER_TASK]["plan"]["agents"] == ["n1"]
    create = run_playbook("create_session.yml", *common, env=env)
    assert create.returncode == 0 and play_stats(create)["changed"] == 1, create.stdout[-3000:]
    assert nomad.stored_job("example-single") is not None
    destroy = run_playbook("destroy_session.yml", *common, env=env)
    assert destroy.returncode == 0 and play_stats(destroy)["changed"] == 1, destroy.stdout[-3000:]
    assert nomad.stored_job("example-single") is None and nomad.stored_variable("nomad/jobs/example-single") is None
