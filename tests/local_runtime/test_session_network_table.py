"""Args version 4 on a Nomad client: the real plugin in real namespaces reads the session's agent table (Nomad
Variables, here the Nomad API double's) and admits it only as its job signed it.

The agents, relays and double are those of ``test_session_network_identity`` (local agents standing for Nomad
clients, their plugin config ``"identity": "nomad"``). A group's args carry the session's scalars and the table's
digest under the MAC (``_session_network.NetworkParams.args("4")``); the table is written as the control node writes
it (``_session_network.table_items``, ``PUT /v1/var/:path`` in the claims namespace).

The attack: whoever can write the claims namespace's variables (a token with ``write`` on
``backendai-cluster/*``, or a stolen one) rewrites a session's table, putting an address of its own among the
session's agents so that every agent of the session floods the session's frames to it too. The defence is the
digest under the MAC: such a table is refused. Each refusal has its control, the genuine table admitted by the same
plugin run the same way.
"""
from __future__ import annotations

import json
import os
import typing as t
import urllib.request
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_network_identity import NS, TOKEN, Cluster, group, interfaces, refused  # noqa: F401
from test_session_network_identity import cluster, netns, world  # noqa: F401 - pytest fixtures

SLOT = 1400
STRANGER = "10.99.0.66"  # not an agent of the session: where a forged table would send its frames


def v4(c: Cluster) -> net.NetworkParams:
    """The session over agent1 and agent2, its table in namespace ``default`` (the claims namespace)."""
    return net.make_params(str(uuid.uuid4()), SLOT, [c.w.agents[a]["underlay_ip"] for a in ("agent1", "agent2")])


def put_table(double: NomadAPIDouble, params: net.NetworkParams,
              chunks: t.Optional[t.List[t.Tuple[str, t.Dict[str, str]]]] = None) -> None:
    for path, items in chunks if chunks is not None else net.table_items(params):
        body = {"Namespace": params.table_namespace, "Path": path, "Items": items}
        req = urllib.request.Request("%s/v1/var/%s?namespace=%s" % (double.url, path, params.table_namespace),
                                     data=json.dumps(body).encode(), method="PUT", headers={"X-Nomad-Token": TOKEN})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200


def args4(c: Cluster, params: net.NetworkParams, group_name: str, agent: str, alloc: str,
          job_id: str = "train-42") -> str:
    signed = net.signed_args(net.signing_key(c.cluster_key, agent), NS, job_id, group_name, params.args("4"))
    assert "BAI_AGENTS" not in signed and "BAI_WG" not in signed  # the agents are the table's
    return net.nomad_cni_args(signed, "global", NS, job_id, group_name, alloc)


def session_record(c: Cluster, agent: str, params: net.NetworkParams) -> dict[str, t.Any]:
    with open(os.path.join(c.w.fabric, "state", agent, "sessions", params.session_id + ".json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_table_is_read_once_per_session_on_an_agent_and_gives_the_sessions_agents(cluster: Cluster,
                                                                                       netns: t.Any) -> None:
    c = cluster
    params = v4(c)
    allocs = c.register("train-42", [group("main1", "agent1"), group("sub1", "agent1"), group("sub2", "agent2")])
    put_table(c.double, params)
    before = c.w.agent_state("agent1")
    first, second = netns(), netns()
    c.double.clear_requests()
    ok = c.plugin("agent1", "ADD", allocs["main1"], first, args4(c, params, "main1", "agent1", allocs["main1"]))
    assert ok["rc"] == 0, ok
    record = session_record(c, "agent1", params)
    assert record["agents"] == list(params.agents) and record["table"] == params.args("4")["BAI_TAB"]
    assert record["peers"] == [params.agents[1]]  # the VXLAN device floods to agent2, from the table
    read = sorted(r.path for r in c.double.requests)  # (the table is read beside the group's look-up)
    assert read == ["/v1/allocations", "/v1/allocations", "/v1/var/" + net.table_items(params)[0][0]], read
    c.double.clear_requests()  # the session's second container on the agent: the record stands for the table
    ok = c.plugin("agent1", "ADD", allocs["sub1"], second, args4(c, params, "sub1", "agent1", allocs["sub1"]))
    assert ok["rc"] == 0, ok
    assert [r.path for r in c.double.requests] == ["/v1/allocations", "/v1/allocations"]
    for alloc, ns in ((allocs["sub1"], second), (allocs["main1"], first)):
        assert c.plugin("agent1", "DEL", alloc, ns, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before


def test_a_table_written_over_is_refused(cluster: Cluster, netns: t.Any) -> None:
    """The forged table adds the attacker's address to the session's agents (and, in a second try, replaces
    agent2's): the digest its job signed no longer matches, and nothing is made on the agent."""
    c = cluster
    params = v4(c)
    allocs = c.register("train-42", [group("main1", "agent1")])
    (path, items), = net.table_items(params)
    before, ns = c.w.agent_state("agent1"), netns()
    cni_args = args4(c, params, "main1", "agent1", allocs["main1"])
    for forged in (params._replace(agents=params.agents + (STRANGER,)),
                   params._replace(agents=(params.agents[0], STRANGER))):
        put_table(c.double, params, [(path, net.table_items(forged)[0][1])])  # at the signed table's path
        refused(c.plugin("agent1", "ADD", allocs["main1"], ns, cni_args), "is not the one its job signed")
        assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    c.double.model.delete_variable("default", path, None, None)
    refused(c.plugin("agent1", "ADD", allocs["main1"], ns, cni_args), "is missing")
    assert c.w.agent_state("agent1") == before
    # control: the genuine table, same plugin, same args
    put_table(c.double, params)
    ok = c.plugin("agent1", "ADD", allocs["main1"], ns, cni_args)
    assert ok["rc"] == 0, ok
    assert STRANGER not in session_record(c, "agent1", params)["agents"]
    assert c.plugin("agent1", "DEL", allocs["main1"], ns, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before


def test_a_record_of_another_table_is_not_taken_for_the_signed_one(cluster: Cluster, netns: t.Any) -> None:
    """A second container whose args sign another table than the session's record on the agent (an update that
    changed the agents while a container of the old version runs) is not admitted on the record: its own table is
    read, and the session's parameters on the agent conflict."""
    c = cluster
    params = v4(c)
    allocs = c.register("train-42", [group("main1", "agent1"), group("sub1", "agent1")])
    put_table(c.double, params)
    moved = params._replace(agents=(params.agents[0], c.w.agents["agent3"]["underlay_ip"]))
    put_table(c.double, moved)
    before, first, second = c.w.agent_state("agent1"), netns(), netns()
    assert c.plugin("agent1", "ADD", allocs["main1"], first, args4(c, params, "main1", "agent1", allocs["main1"]))["rc"] == 0
    c.double.clear_requests()
    other = c.plugin("agent1", "ADD", allocs["sub1"], second, args4(c, moved, "sub1", "agent1", allocs["sub1"]))
    assert other["rc"] != 0 and "other network parameters" in other["out"]["msg"], other
    assert c.double.find("GET", "^/v1/var/")  # its own table was read, not the record taken for it
    assert interfaces(second) == ["lo"]
    assert c.plugin("agent1", "DEL", allocs["main1"], first, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before


def test_a_session_on_one_agent_reads_no_table_and_is_that_agents_alone(cluster: Cluster, netns: t.Any) -> None:
    """A session on one agent has no table to write or read: the plugin makes the one-agent table of its own underlay
    address and checks the signed digest against it, so args signed for a one-agent session elsewhere are refused."""
    c = cluster
    here = net.make_params(str(uuid.uuid4()), SLOT + 1, [c.w.agents["agent1"]["underlay_ip"]])
    elsewhere = here._replace(agents=(c.w.agents["agent2"]["underlay_ip"],))
    alloc = c.register("train-42", [group("main1", "agent1")])["main1"]
    before, ns = c.w.agent_state("agent1"), netns()
    c.double.clear_requests()
    refused(c.plugin("agent1", "ADD", alloc, ns, args4(c, elsewhere, "main1", "agent1", alloc)),
            "is not the one its job signed")
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    ok = c.plugin("agent1", "ADD", alloc, ns, args4(c, here, "main1", "agent1", alloc))
    assert ok["rc"] == 0, ok
    assert not c.double.find("GET", "^/v1/var/")  # no table in Nomad for a session on one agent
    assert c.plugin("agent1", "DEL", alloc, ns, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before
