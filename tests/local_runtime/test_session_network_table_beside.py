"""A version 4 session's first ADD on an agent reads its agent table beside the look-up of the group's other
allocations (``_cni_system.beside``), no longer after it: the real plugin in real namespaces, against the Nomad API
double, as in ``test_session_network_table``.

The look-up is the defence against a scaled group (``nomad job scale`` with only ``scale-job`` adds a second
allocation: same job, group, args and agent, so the MAC holds). The table is read while it runs, but nothing is made
of it unless the look-up admits the allocation, and the look-up's refusal is the one given, even when the table is
forged too. The control: the same plugin, run the same way, admits the group's one allocation on the genuine table.
"""
from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from test_session_network_identity import NS, Cluster, group, interfaces, refused  # noqa: F401
from test_session_network_identity import cluster, netns, world  # noqa: F401 - pytest fixtures
from test_session_network_table import STRANGER, args4, put_table, session_record, v4


def test_a_second_allocation_of_a_group_is_refused_with_its_table_read_beside_and_nothing_made(
        cluster: Cluster, netns: t.Any) -> None:
    c = cluster
    params = v4(c)
    first = c.register("train-42", [group("main1", "agent1")])["main1"]
    c.register("train-42", [group("main1", "agent1", count=2)])
    second, = [a["ID"] for a in c.double.allocations_of("train-42", NS)
               if a["TaskGroup"] == "main1" and a["ID"] != first]
    path = net.table_items(params)[0][0]
    before, ns = c.w.agent_state("agent1"), netns()
    # the genuine table: the look-up alone refuses (and the table was read while it ran)
    put_table(c.double, params)
    c.double.clear_requests()
    refused(c.plugin("agent1", "ADD", second, ns, args4(c, params, "main1", "agent1", second)),
            "has another live allocation (%s)" % first)
    assert sorted(r.path for r in c.double.requests) == ["/v1/allocations", "/v1/allocations", "/v1/var/" + path]
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    # a forged table as well: still the look-up's refusal, not the table's
    forged = params._replace(agents=params.agents + (STRANGER,))
    put_table(c.double, params, [(path, net.table_items(forged)[0][1])])  # at the signed table's path
    refused(c.plugin("agent1", "ADD", second, ns, args4(c, params, "main1", "agent1", second)),
            "has another live allocation (%s)" % first)
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    # control: the group's one allocation, on the genuine table, is admitted by the same plugin run the same way
    c.double.set_alloc_status(second, "complete")
    put_table(c.double, params)
    first_ns = netns()
    ok = c.plugin("agent1", "ADD", first, first_ns, args4(c, params, "main1", "agent1", first))
    assert ok["rc"] == 0, ok
    assert session_record(c, "agent1", params)["agents"] == list(params.agents)
    assert c.plugin("agent1", "DEL", first, first_ns, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before
