"""The peer sets of the session network, with the real plugin in real namespaces on local agents.

A session's VXLAN is accepted on an agent only from the session's other agents: one rule per session matches its VNI
and its *peer set* (an ipset of the peers' addresses, filled by the plugin over netlink), where there was one rule
per peer. Sessions here have no underlay encryption (``underlay_encryption: none``, plain VXLAN between underlay
addresses: the IPv4 peer set; the IPv6 one, of the peers' tunnel addresses, is attacked through WireGuard in
``test_session_network_attacks``). Session P spans agent1 and agent2, session Q agent3 and agent1, and a host on the
underlay that is no agent ("stranger") stands beside them.

The attack: plain VXLAN carrying P's VNI, with P's container's MAC and address inside, sent to agent2 by the
stranger and by Q's container on agent3 (a container of another session, on an agent that is no agent of P).
Neither arrives; the same packet sent by agent1, P's other agent, does (the control). Then the sets' life: each of
P's agents holds exactly its peer in P's set and one rule naming it; the set goes with the session's last DEL on the
agent, and the agent's last session takes a peer set a killed teardown left.
"""
from __future__ import annotations

import subprocess
import typing as t

import pytest

import local_session_dict  # tests/support/local_session_dict.py: a session given as a dict, brought up by the runtime
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from conftest import make_session
from test_session_network_attacks import PORT, SEND, Listener, World, _sender, vxlan_packet


class PlainWorld(World):
    def plain_session(self, name: str, placement: dict[str, str]) -> dict[str, t.Any]:
        """A session like ``World.session``'s, without underlay encryption (plain VXLAN: the IPv4 peer set)."""
        s = make_session(name, self.keypair, size=len(placement), port=PORT)
        for c in s["containers"]:
            c["agent"] = placement[c["hostname"]]
        s["agents"] = {a: self.agents[a] for a in set(placement.values())}
        s["underlay_encryption"] = "none"
        info = local_session_dict.create_session(s, self.state_root)
        info["by_host"] = {c["hostname"]: c for c in info["containers"]}
        self.sessions[name] = info
        return info


@pytest.fixture(scope="module")
def world(run_dir: str, keypair: tuple[str, str]) -> t.Iterator[PlainWorld]:
    w = PlainWorld(run_dir, keypair)
    try:
        w.add_stranger()
        w.plain_session("sp", {"main1": "agent1", "sub1": "agent2"})
        w.plain_session("sq", {"main1": "agent3", "sub1": "agent1"})
        yield w
    finally:
        w.close()


def in_agent(w: World, agent: str, *argv: str, check: bool = True) -> str:
    return subprocess.run(["ip", "netns", "exec", w.agents[agent]["netns"]] + list(argv), capture_output=True,
                          text=True, check=check).stdout


def sets_of(w: World, agent: str) -> list[str]:
    return sorted(in_agent(w, agent, "ipset", "list", "-n").split())


def members(w: World, agent: str, name: str) -> list[str]:
    out = in_agent(w, agent, "ipset", "list", name)
    return sorted(out.split("Members:\n", 1)[1].split())


def vxlan_rules(w: World, agent: str) -> list[str]:
    return [r for r in in_agent(w, agent, "iptables-save", "-t", "mangle").splitlines()
            if r.startswith("-A BACKENDAI-VXLAN") and "backendai session" in r]


def test_each_agent_accepts_the_session_from_its_peers_by_one_rule_and_their_set(world: PlainWorld) -> None:
    w = world
    sp, sq = (w.sessions[s]["session_id"] for s in ("sp", "sq"))
    ul = {a: w.agents[a]["underlay_ip"] for a in w.agents}
    assert sets_of(w, "agent2") == [net.peer_set_names(sp)[0]]
    assert members(w, "agent2", net.peer_set_names(sp)[0]) == [ul["agent1"]]
    assert sets_of(w, "agent1") == sorted(net.peer_set_names(s)[0] for s in (sp, sq))
    assert members(w, "agent1", net.peer_set_names(sp)[0]) == [ul["agent2"]]
    assert members(w, "agent1", net.peer_set_names(sq)[0]) == [ul["agent3"]]
    rules = vxlan_rules(w, "agent1")
    assert len(rules) == 2 and all("--match-set" in r and " -s " not in r for r in rules), rules


def test_forged_plain_vxlan_from_no_agent_of_the_session_never_arrives(world: PlainWorld) -> None:
    """Each sender's packet carries its own text, so one listening window tells them apart; the control (P's own
    agent) is sent last, and the listener ends only 2 s after the last datagram it got."""
    w = world
    target = w.sessions["sp"]["by_host"]["sub1"]  # on agent2
    agent2 = w.agents["agent2"]["underlay_ip"]
    senders = {"the stranger on the underlay": w.stranger,
               "Q's container on agent3": w.sessions["sq"]["by_host"]["main1"]["netns"],
               "agent3 (an agent of Q, not of P)": w.agents["agent3"]["netns"],
               "control": w.agents["agent1"]["netns"]}  # (last)
    lis = Listener(target["netns"], "udp", 9999, 2.0, first=10.0)
    for text, netns in senders.items():
        pkt = vxlan_packet(w.sessions["sp"]["vni"], w.mac(target["netns"]), w.sessions["sp"]["by_host"]["main1"]["address"],
                           target["address"], 9999, text)
        _sender(netns, SEND, pkt.hex(), agent2)
    got = sorted({text for text, _peer in lis.result()})
    assert "control" in got, "P's own agent's VXLAN was not delivered: the test proves nothing"
    assert got == ["control"], "forged VXLAN of P reached P's sub1 from: %s" % got


def test_the_sets_go_with_their_sessions_and_the_last_session_takes_a_leftover(world: PlainWorld) -> None:
    w = world
    sp, sq = (w.sessions[s]["session_id"] for s in ("sp", "sq"))
    # a peer set a killed teardown left on agent3 (named as the plugin names them): the agent's last session takes it
    stray = net.peer_set_names("00000000-0000-4000-8000-000000000000")[0]
    in_agent(w, "agent3", "ipset", "create", stray, "hash:ip")
    rt.destroy_session("sp", w.state_root)
    del w.sessions["sp"]
    assert sets_of(w, "agent2") == [] and vxlan_rules(w, "agent2") == []
    assert sets_of(w, "agent1") == [net.peer_set_names(sq)[0]] and len(vxlan_rules(w, "agent1")) == 1
    assert net.peer_set_names(sp)[0] not in sets_of(w, "agent1")
    rt.destroy_session("sq", w.state_root)
    del w.sessions["sq"]
    assert {a: sets_of(w, a) for a in w.agents} == {a: [] for a in w.agents}
