# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement edge cases: exact fit, one MB short, ties, the multi-node seed rule, all or nothing."""

from __future__ import annotations

import random
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import AgentsError
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import (
    PENDING,
    PLACED,
    VOLUME_HINT,
    Agent,
    HostVolume,
    _parse_agent,
    parse_agents,
    place,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Resources
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import agents_list, make_plan

R = Resources(cpu=1000, memory=2048, gpu=0)


def A(name: str, cpu: int, memory: int, gpu: int = 0, **kw: t.Any) -> Agent:
    return Agent(name, cpu, memory, gpu, **kw)


def test_single_node_exact_fit() -> None:
    p = place([R] * 4, [A("a", 4000, 8192)])
    assert p.status == PLACED and p.agents == ("a",) * 4


def test_single_node_one_mb_short_is_pending_with_per_agent_reason() -> None:
    p = place([R] * 4, [A("a", 4000, 8191), A("b", 3000, 9000)])
    assert p.status == PENDING and p.agents == ()
    assert p.reason == ("no single agent can hold all 4 containers (they need cpu 4000 MHz, memory 8192 MB, gpu 0 "
                        "in total): a: memory short by 1 MB (8191 free, 8192 needed); "
                        "b: cpu short by 1000 MHz (3000 free, 4000 needed)")


def test_single_node_never_spreads_even_if_agents_together_suffice() -> None:
    assert place([R] * 2, [A("a", 1000, 2048), A("b", 1000, 2048)], "single-node").status == PENDING


def test_best_fit_and_ties_broken_by_name() -> None:
    agents = [A("c", 8000, 16384), A("b", 4000, 8192), A("a", 4000, 8192), A("d", 4000, 9000)]
    assert place([R] * 4, agents).agents == ("a",) * 4  # a and b fit exactly: a wins by name
    assert place([R] * 4, agents, strategy="dispersed").agents == ("c",) * 4  # most headroom


def test_gpu_agents_kept_for_gpu_sessions() -> None:
    agents = [A("gpu", 4000, 8192, 4), A("cpu", 8000, 16384)]
    assert place([R] * 2, agents).agents == ("cpu", "cpu")
    assert place([Resources(1000, 2048, 1)] * 2, agents).agents == ("gpu", "gpu")


def test_multi_node_that_fits_one_agent_goes_there() -> None:
    p = place([R] * 3, [A("big", 3000, 6144), A("a", 2000, 4096), A("b", 2000, 4096)], "multi-node")
    assert p.agents == ("big",) * 3


def test_multi_node_concentrated_uses_fewest_agents() -> None:
    agents = [A("a", 2000, 4096), A("b", 3000, 6144), A("c", 1000, 2048), A("d", 1000, 2048)]
    p = place([R] * 5, agents, "multi-node")
    assert p.status == PLACED
    assert p.agents == ("b", "b", "b", "a", "a")
    assert p.agents_used == ("b", "a")


def test_multi_node_dispersed_spreads_round_robin() -> None:
    agents = [A("a", 2000, 4096), A("b", 3000, 6144), A("c", 1000, 2048)]
    p = place([R] * 5, agents, "multi-node", "dispersed")
    assert p.agents == ("b", "a", "c", "b", "a")


def test_multi_node_all_or_nothing() -> None:
    agents = [A("a", 2000, 4096), A("b", 2000, 4095), A("c", 500, 100000)]
    p = place([R] * 4, agents, "multi-node")
    assert p.status == PENDING and p.agents == ()
    assert p.reason.startswith("the eligible agents together can hold only 3 of 4 containers")
    assert "a holds 2; b holds 1" in p.reason and "1 agent(s) cannot hold even one container (c)" in p.reason


def test_deterministic_whatever_the_agent_order() -> None:
    agents = [A("n%03d" % i, 1000 * (i % 5), 2048 * (i % 7)) for i in range(60)]
    demands = [R] * 40
    first = place(demands, agents, "multi-node")
    rng = random.Random(7)
    for attempt in range(5):
        shuffled = list(agents)
        rng.shuffle(shuffled)
        assert place(demands, shuffled, "multi-node") == first, attempt


def test_heterogeneous_demands_keep_global_order() -> None:
    big, small = Resources(4000, 8192, 1), Resources(1000, 1024, 0)
    p = place([small, big, big, small], [A("g1", 5000, 9216, 1), A("g2", 5000, 9216, 1)], "multi-node")
    assert p.status == PLACED
    assert p.agents[1] != p.agents[2]  # one big container per GPU agent


def test_datacenter_and_driver_filters_are_explained() -> None:
    agents = [A("a", 9000, 9000, datacenter="dc2"), A("b", 9000, 9000, drivers=("exec",))]
    p = place([R], agents, datacenters=("dc1",))
    assert p.status == PENDING
    assert "a: datacenter dc2 is not in dc1" in p.reason
    assert place([R], agents).agents == ("a",)
    assert "b: no docker driver" in place([R], agents[1:]).reason


DATA = HostVolume("backendai-srv-data-0a1b2c3d", False, "/srv/data")
DATA_RO = DATA._replace(read_only=True)


def test_only_agents_that_declare_every_host_volume_are_considered() -> None:
    """Nomad's HostVolumeChecker (scheduler/feasible/feasible.go): a node that does not declare the volume is not
    feasible, so placing there would leave the group pending in Nomad."""
    agents = [A("a", 9000, 9000, host_volumes={}), A("b", 4000, 4096, host_volumes={DATA.name: False}),
              A("c", 9000, 9000, host_volumes={"backendai-other-00000000": False})]
    assert place([R] * 2, agents, volumes=(DATA,)).agents == ("b", "b")
    assert place([R] * 4, agents).agents == ("a",) * 4  # a session without mounts: every agent (b is too small)
    p = place([R] * 6, agents, "multi-node", volumes=(DATA,))
    assert p.status == PENDING and p.reason.startswith("the eligible agents together can hold only 2 of 6 containers")
    assert "a: no host volume backendai-srv-data-0a1b2c3d (mount source /srv/data)" in p.reason, p.reason
    assert p.reason.endswith(VOLUME_HINT)


def test_a_read_only_declaration_serves_only_read_only_mounts() -> None:
    """feasible.go nodeIsFeasibleForRequest: ``if !req.ReadOnly && volCfg.ReadOnly { return false }``."""
    agents = [A("ro", 9000, 9000, host_volumes={DATA.name: True})]
    assert place([R], agents, volumes=(DATA_RO,)).agents == ("ro",)
    p = place([R], agents, volumes=(DATA,))
    assert p.status == PENDING and p.reason == (
        "no agent is eligible: ro: host volume backendai-srv-data-0a1b2c3d (mount source /srv/data) is declared "
        "read-only, a mount of it is read-write" + VOLUME_HINT)
    assert place([R], [A("rw", 9000, 9000, host_volumes={DATA.name: False})], volumes=(DATA_RO,)).agents == ("rw",)


def test_no_agent_with_the_volume_names_it_and_how_to_declare_it() -> None:
    other = HostVolume("backendai-srv-models-99999999", True, "/srv/models")
    agents = [A("a", 9000, 9000, host_volumes={other.name: True}), A("b", 9000, 9000, host_volumes={})]
    p = place([R], agents, volumes=(DATA, other))
    assert p.status == PENDING and p.reason == (
        "no agent is eligible: a: no host volume backendai-srv-data-0a1b2c3d (mount source /srv/data); "
        "b: no host volume backendai-srv-data-0a1b2c3d (mount source /srv/data), no host volume "
        "backendai-srv-models-99999999 (mount source /srv/models)" + VOLUME_HINT)
    assert "overlay_agent_data_roots" in VOLUME_HINT and "{path: <source>}" in VOLUME_HINT


def test_agents_of_unknown_volumes_serve_every_volume() -> None:
    """Agents given as data without host_volumes (the local backend's, a static list) are not filtered."""
    assert place([R], [A("a", 9000, 9000)], volumes=(DATA,)).agents == ("a",)


def test_parse_agents_reads_host_volumes() -> None:
    raw = [{"name": "a", "cpu": 1, "memory": 1, "host_volumes": {"v1": {"read_only": True, "path": "/x"}, "v2": {}}},
           {"name": "b", "cpu": 1, "memory": 1, "host_volumes": ["v1"]}, {"name": "c", "cpu": 1, "memory": 1}]
    assert [a.host_volumes for a in parse_agents(raw)] == [{"v1": True, "v2": False}, {"v1": False}, None]
    with pytest.raises(AgentsError) as err:
        parse_agents([{"name": "a", "cpu": 1, "memory": 1, "host_volumes": {"v1": {"read_only": "yes"}}},
                      {"name": "b", "cpu": 1, "memory": 1, "host_volumes": "v1"}])
    assert [p.path for p in err.value.problems] == ["agents[0].host_volumes", "agents[1].host_volumes"]
    assert "must map each host volume the node declares to {read_only: true|false}" in str(err.value.problems[0])


def test_no_agents() -> None:
    assert place([R], []).reason == "no agents were given"


def test_pending_reason_is_bounded_for_many_agents() -> None:
    agents = [A("n%05d" % i, 100, 100) for i in range(10000)]
    p = place([R] * 4, agents)
    assert p.status == PENDING and "and 9992 more agent(s)" in p.reason and len(p.reason) < 1500


def test_parse_agents_reports_every_problem() -> None:
    with pytest.raises(AgentsError) as err:
        parse_agents([{"name": "a", "cpu": "x", "memory": 1}, {"cpu": 1, "memory": -1}, {"name": "a", "cpu": 1, "memory": 1}])
    got = [str(p) for p in err.value.problems]
    assert got == ['agents[0].cpu: must be an integer ≥ 0 (free CPU in MHz) (got "x")',
                   "agents[1].name: is required: the agent (Nomad node) name",
                   "agents[1].memory: must be an integer ≥ 0 (free memory in MB) (got -1)",
                   'agents[2].name: is used by two agents (got "a")']


def test_parse_agents_accepts_extra_keys_and_driver_maps() -> None:
    (agent,) = parse_agents([{"name": "a", "cpu": 1, "memory": 1, "drivers": {"docker": True, "exec": False}, "class": "x"}])
    assert agent.drivers == ("docker",)


def test_the_fast_path_for_well_formed_agents_agrees_with_the_full_check() -> None:
    """parse_agents takes well-formed mappings in one expression; whatever it accepts or refuses, the per-field
    check (_parse_agent) says the same, agent for agent."""
    class Name(str):  # what Ansible's unsafe text is: a str subclass
        pass

    rng = random.Random(7)
    good: t.Dict[str, t.List[t.Any]] = {  # field -> (well-formed values, others)
        "name": ["a", "b", "c", "d", Name("e")], "cpu": [0, 1000], "memory": [0, 2048], "gpu": [0, 2],
        "datacenter": ["dc1", Name("dc2")], "drivers": [None, None, ["docker"], {"docker": True}],
    }
    bad: t.Dict[str, t.List[t.Any]] = {
        "name": ["", None, 3], "cpu": [-1, True, 1.5, "1", None], "memory": [-5, False, None], "gpu": [-1, True],
        "datacenter": ["", 7], "drivers": ["docker", [1]],
    }
    accepted = 0
    for _round in range(600):
        raw = [{k: rng.choice(bad[k] if rng.random() < 0.04 else good[k]) for k in good if rng.random() < 0.95}
               for _i in range(3)]
        seen: t.Set[str] = set()
        problems: t.List[t.Any] = []
        full = [_parse_agent(item, "agents[%d]" % i, seen, problems) for i, item in enumerate(raw)]
        try:
            fast = parse_agents(raw)
        except AgentsError as err:
            assert [str(p) for p in err.problems] == [str(p) for p in problems], raw
        else:
            assert not problems and fast == full, raw
            accepted += 1
    assert 40 < accepted < 560  # both branches are exercised (83 accepted with this seed)


def test_plan_is_pending_but_lists_containers() -> None:
    plan = make_plan(agents_list(("a", 1000, 1024, 0)), cluster_size=3)
    assert not plan.placed and plan.hostnames == ("main1", "sub1", "sub2")
    assert all(c.agent == "" for c in plan.containers)


def test_every_session_is_on_the_session_network() -> None:
    two = agents_list(("a", 1000, 1024, 0), ("b", 1000, 1024, 0))
    spread = make_plan(two, cluster_size=2, cluster_mode="multi-node", resources={"memory": 1024})
    assert (spread.mode, spread.network_mode) == ("multi-node", "cni/backendai")
    one = make_plan(cluster_size=2, cluster_mode="multi-node")
    assert (one.mode, one.network_mode) == ("single-node", "cni/backendai")
