# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every variable of both seed tables, checked against its documented meaning."""

from __future__ import annotations

import json
import os
import re
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env, mpi_hostfile
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import FIXTURES, agents_list, make_plan

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# (id, cluster_size, cluster_mode, agents, expected agent of each container)
CASES = [
    ("size1", 1, "single-node", agents_list(("a1", 8000, 16384, 0)), ["a1"]),
    ("size2-single", 2, "single-node", agents_list(("a1", 8000, 16384, 0)), ["a1", "a1"]),
    ("size4-single", 4, "single-node", agents_list(("a1", 8000, 16384, 0), ("a2", 1000, 1024, 0)), ["a1"] * 4),
    # multi-node that fits on one agent: everything there, and it is a single-node session
    ("size4-multi-fits-one", 4, "multi-node", agents_list(("a1", 8000, 16384, 0), ("a2", 9000, 20000, 0)), ["a1"] * 4),
    ("size2-multi", 2, "multi-node", agents_list(("a1", 1000, 2048, 0), ("a2", 1000, 2048, 0)), ["a1", "a2"]),
    ("size4-multi", 4, "multi-node", agents_list(("a1", 3000, 8192, 0), ("a2", 1000, 2048, 0)), ["a1", "a1", "a1", "a2"]),
]


def _expected_hosts(size: int) -> t.List[str]:
    return ["main1"] + ["sub%d" % i for i in range(1, size)]


@pytest.mark.parametrize("case_id,size,mode,agents,expected_agents", CASES, ids=[c[0] for c in CASES])
def test_seed_variables(case_id: str, size: int, mode: str, agents: t.List[t.Dict[str, t.Any]],
                        expected_agents: t.List[str]) -> None:
    plan = make_plan(agents, cluster_size=size, cluster_mode=mode, resources={"cpu": 1000, "memory": 2048},
                     master_port=23456, env={"FOO": "bar"})
    assert plan.placed, plan.reason
    hosts = _expected_hosts(size)
    envs = [container_env(plan, c) for c in plan.containers]
    assert [c.agent for c in plan.containers] == expected_agents
    spans = len(set(expected_agents))
    kernel_ids = [e["BACKENDAI_KERNEL_ID"] for e in envs]
    assert len(set(kernel_ids)) == size  # unique per container
    for rank, env in enumerate(envs):
        role = "main" if rank == 0 else "sub"
        # BACKENDAI_CLUSTER_* table
        assert env["BACKENDAI_CLUSTER_SIZE"] == str(size)
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts)
        assert env["BACKENDAI_CLUSTER_REPLICAS"] == ("main:1" if size == 1 else "main:1,sub:%d" % (size - 1))
        assert env["BACKENDAI_CLUSTER_HOST"] == hosts[rank]
        assert env["BACKENDAI_CLUSTER_IDX"] == ("1" if rank == 0 else str(rank))  # one-based within the role
        assert env["BACKENDAI_CLUSTER_ROLE"] == role
        assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(rank)  # zero-based global index
        assert env["BACKENDAI_CLUSTER_MODE"] == ("multi-node" if spans > 1 else "single-node")
        assert UUID_RE.match(env["BACKENDAI_KERNEL_ID"])
        assert env["BACKENDAI_SESSION_ID"] == kernel_ids[0]  # main1's kernel ID is the session ID
        # PyTorch / TensorFlow table
        assert env["WORLD_SIZE"] == str(size)
        assert env["WORLD_RANK"] == str(rank)
        assert env["RANK"] == env["WORLD_RANK"]
        same_agent_before = sum(1 for a in expected_agents[:rank] if a == expected_agents[rank])
        assert env["LOCAL_RANK"] == str(same_agent_before)  # zero-based index on its own agent
        assert env["MASTER_ADDR"] == "main1"
        assert env["MASTER_PORT"] == "23456"
        tf = json.loads(env["TF_CONFIG"])
        assert tf == {"cluster": {"worker": ["%s:23456" % h for h in hosts]}, "task": {"type": "worker", "index": rank}}
        assert env["FOO"] == "bar"


def test_tf_config_text_matches_the_seed_example_exactly() -> None:
    plan = make_plan(cluster_size=4)
    env = container_env(plan, plan.containers[0])
    assert env["TF_CONFIG"] == ('{"cluster": {"worker": ["main1:12345", "sub1:12345", "sub2:12345", "sub3:12345"]}, '
                                '"task": {"type": "worker", "index": 0}}')


def test_heterogeneous_roles() -> None:
    plan = make_plan(
        agents_list(("a1", 64000, 262144, 4)),
        roles=[{"name": "ps", "replicas": 2, "resources": {"cpu": 500}},
               {"name": "main"},
               {"name": "worker", "replicas": 3, "image": "trainer:2", "resources": {"gpu": 1}, "env": {"W": "1"}}])
    hosts = ["main1", "ps1", "ps2", "worker1", "worker2", "worker3"]
    assert plan.hostnames == tuple(hosts)  # main1 first, then roles in spec order, by index
    envs = {c.hostname: container_env(plan, c) for c in plan.containers}
    assert envs["worker2"]["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,ps:2,worker:3"
    assert envs["worker2"]["BACKENDAI_CLUSTER_ROLE"] == "worker"
    assert envs["worker2"]["BACKENDAI_CLUSTER_IDX"] == "2"
    assert envs["worker2"]["WORLD_RANK"] == "4"
    assert envs["worker2"]["BACKENDAI_CLUSTER_LOCAL_RANK"] == "4"
    assert envs["worker2"]["W"] == "1" and "W" not in envs["ps1"]
    assert envs["ps2"]["BACKENDAI_CLUSTER_IDX"] == "2"
    by_host = {c.hostname: c for c in plan.containers}
    assert by_host["worker1"].image == "trainer:2" and by_host["ps1"].image == "python:3.11-slim"
    assert by_host["worker1"].resources.gpu == 1 and by_host["ps1"].resources.cpu == 500
    assert by_host["ps1"].resources.memory == 1024  # default kept where the role does not override


def test_local_rank_counts_per_agent_in_global_order() -> None:
    plan = make_plan(agents_list(("a1", 2000, 4096, 0), ("a2", 2000, 4096, 0), ("a3", 1000, 4096, 0)),
                     cluster_size=5, cluster_mode="multi-node", resources={"cpu": 1000, "memory": 1024},
                     placement={"strategy": "dispersed"})
    assert [c.agent for c in plan.containers] == ["a1", "a2", "a3", "a1", "a2"]
    assert [c.local_rank for c in plan.containers] == [0, 0, 0, 1, 1]


def test_mpi_hostfile() -> None:
    plan = make_plan(cluster_size=3, mpi={"slots": 2})
    assert mpi_hostfile(plan) == "main1 slots=2\nsub1 slots=2\nsub2 slots=2\n"


def test_fixture_train42_four_containers_two_agents() -> None:
    """Literal values for one case, kept in a JSON fixture that a reviewer can read against the seeds."""
    with open(os.path.join(FIXTURES, "env_train42_multinode_4.json"), encoding="utf-8") as f:
        fixture = json.load(f)
    plan = make_plan(fixture["agents"], **fixture["spec"])
    got = {c.hostname: container_env(plan, c) for c in plan.containers}
    assert got == fixture["expected_env"]
