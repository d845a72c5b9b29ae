# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The overlay of a multi-node session as pure data: MTU, VNI, names, address blocks, the CNI conflist
(Nomad and local forms), and the ip/bridge commands that create it, converge it and remove it."""

from __future__ import annotations

import ipaddress
import json

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._overlay import (
    VNI_BASE,
    VNI_MAX,
    VXLAN_PORT,
    Observed,
    OverlayError,
    agent_ranges,
    conflist_text,
    create_commands,
    delete_commands,
    derive_subnet,
    derive_vni,
    device_names,
    isolation_rule,
    observe,
    overlay_mtu,
    parse_flood,
    parse_links,
    plan_changes,
    plan_overlay,
    render_conflist,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session_render import plan_session

IPS = {"node-a": "10.0.0.11", "node-b": "10.0.0.12", "node-c": "10.0.0.13"}
AGENTS = ["node-a", "node-b", "node-c"]


def layout(**kw):
    args = dict(network="backendai-train-42", agents=AGENTS, underlay_ips=IPS, underlay_mtu=1500)
    args.update(kw)
    return plan_overlay(**args)


def test_mtu_takes_the_vxlan_over_ipv4_overhead() -> None:
    assert overlay_mtu(1500) == 1450 and overlay_mtu(9001) == 8951 and overlay_mtu(1400) == 1350
    with pytest.raises(OverlayError, match="VXLAN over IPv4 takes 50"):
        overlay_mtu(600)


def test_vni_names_and_subnet_are_stable_and_in_range() -> None:
    vnis = {derive_vni("backendai-s%d" % i) for i in range(2000)}
    assert all(VNI_BASE <= v <= VNI_MAX for v in vnis) and len(vnis) == 2000
    assert derive_vni("backendai-x") == derive_vni("backendai-x")
    bridge, vxlan = device_names("backendai-train-42")
    assert bridge.startswith("bov") and vxlan.startswith("bvx") and bridge[3:] == vxlan[3:]
    assert max(len(bridge), len(vxlan)) <= 15  # IFNAMSIZ - 1
    net = ipaddress.IPv4Network(derive_subnet("backendai-train-42"))
    assert net.prefixlen == 24 and net.subnet_of(ipaddress.IPv4Network("10.200.0.0/13"))


def test_agent_blocks_are_disjoint_and_in_plan_order() -> None:
    ranges = agent_ranges("10.200.7.0/24", AGENTS)
    assert [(r.gateway, r.start, r.end) for r in ranges.values()] == [
        ("10.200.7.1", "10.200.7.2", "10.200.7.84"),
        ("10.200.7.85", "10.200.7.86", "10.200.7.168"),
        ("10.200.7.169", "10.200.7.170", "10.200.7.252")]
    no_egress = agent_ranges("10.200.7.0/24", AGENTS, egress=False)
    assert [(r.gateway, r.start, r.end) for r in no_egress.values()] == [
        (None, "10.200.7.1", "10.200.7.84"), (None, "10.200.7.85", "10.200.7.168"), (None, "10.200.7.169", "10.200.7.252")]
    with pytest.raises(OverlayError, match="gives agent node-b 83 addresses .* but 84 containers"):
        agent_ranges("10.200.7.0/24", AGENTS, counts={"node-b": 84})
    with pytest.raises(OverlayError, match="too small for 3 agents"):
        agent_ranges("10.200.7.0/30", AGENTS)


def test_every_agent_gets_the_same_overlay_with_its_own_block_and_peers() -> None:
    ovs = layout(subnet="10.200.7.0/24")
    assert {ov.vni for ov in ovs.values()} == {derive_vni("backendai-train-42")}
    assert {(ov.bridge, ov.vxlan, ov.mtu, ov.subnet) for ov in ovs.values()} == {
        device_names("backendai-train-42") + (1450, "10.200.7.0/24")}
    assert ovs["node-b"].local_ip == "10.0.0.12" and ovs["node-b"].peers == ("10.0.0.11", "10.0.0.13")
    with pytest.raises(OverlayError, match="no underlay address for agent"):
        layout(underlay_ips={"node-a": "10.0.0.11"})
    with pytest.raises(OverlayError, match="share an underlay address"):
        layout(underlay_ips=dict(IPS, **{"node-c": "10.0.0.11"}))


def test_nomad_conflist_has_gateway_nat_firewall_and_portmap() -> None:
    ov = layout(subnet="10.200.7.0/24")["node-b"]
    conf = render_conflist(ov)
    assert conf == {
        "cniVersion": "1.0.0", "name": "backendai-train-42",
        "plugins": [
            {"type": "loopback"},
            {"type": "bridge", "bridge": ov.bridge, "mtu": 1450, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": "10.200.7.0/24", "rangeStart": "10.200.7.86", "rangeEnd": "10.200.7.168",
                                   "gateway": "10.200.7.85"}]]}},
            {"type": "firewall", "backend": "iptables"},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ]}
    assert json.loads(conflist_text(conf)) == conf and conflist_text(conf).endswith("\n")


def test_local_conflist_is_a_private_layer2_network() -> None:
    ov = layout(subnet="10.231.3.0/24", egress=False)["node-c"]
    conf = render_conflist(ov, ipam_data_dir="/state/s/cni/ipam/node-c")
    assert [p["type"] for p in conf["plugins"]] == ["loopback", "bridge"]
    bridge = conf["plugins"][1]
    assert (bridge["isGateway"], bridge["ipMasq"]) == (False, False)
    assert bridge["ipam"] == {"type": "host-local", "dataDir": "/state/s/cni/ipam/node-c", "ranges": [[{
        "subnet": "10.231.3.0/24", "rangeStart": "10.231.3.169", "rangeEnd": "10.231.3.252"}]]}


def test_commands_from_nothing() -> None:
    ov = layout(subnet="10.200.7.0/24")["node-a"]
    br, vx = ov.bridge, ov.vxlan
    assert create_commands(ov).lines() == [
        "ip link add %s mtu 1450 type bridge" % br,
        "ip link set %s up" % br,
        "ip link add %s mtu 1450 type vxlan id %d local 10.0.0.11 dstport %d" % (vx, ov.vni, VXLAN_PORT),
        "ip link set %s master %s" % (vx, br),
        "ip link set %s up" % vx,
        "bridge fdb append 00:00:00:00:00:00 dev %s dst 10.0.0.12" % vx,
        "bridge fdb append 00:00:00:00:00:00 dev %s dst 10.0.0.13" % vx,
    ]
    one = plan_overlay("backendai-solo", ["node-a"], IPS)["node-a"]
    assert not one.spans and create_commands(one).lines() == [
        "ip link add %s mtu 1450 type bridge" % one.bridge, "ip link set %s up" % one.bridge]
    dev = layout(underlay_dev="eth1")["node-a"]
    assert create_commands(dev).ip[2].endswith("dstport 4789 dev eth1")


def _seen(ov, flood=(), **vx_changes):
    vx = {"kind": "vxlan", "mtu": ov.mtu, "up": True, "master": ov.bridge, "vni": ov.vni, "local": ov.local_ip,
          "port": VXLAN_PORT, "link": None}
    vx.update(vx_changes)
    links = {ov.bridge: {"kind": "bridge", "mtu": ov.mtu, "up": True, "master": None, "vni": None, "local": None,
                         "port": None, "link": None}, ov.vxlan: vx}
    return observe(ov, links, flood)


def test_converged_agent_needs_nothing_and_only_the_flood_difference_is_fixed() -> None:
    ov = layout()["node-a"]
    assert not plan_changes(ov, _seen(ov, flood=("10.0.0.12", "10.0.0.13")))
    fix = plan_changes(ov, _seen(ov, flood=("10.0.0.12", "10.0.0.99")))
    assert fix.ip == [] and fix.fdb == ["fdb del 00:00:00:00:00:00 dev %s dst 10.0.0.99" % ov.vxlan,
                                        "fdb append 00:00:00:00:00:00 dev %s dst 10.0.0.13" % ov.vxlan]


def test_a_vxlan_device_with_other_parameters_is_recreated() -> None:
    ov = layout()["node-a"]
    ch = plan_changes(ov, _seen(ov, flood=("10.0.0.12",), vni=ov.vni + 1))
    assert ch.ip[0] == "link delete %s" % ov.vxlan and ch.ip[1].startswith("link add %s" % ov.vxlan)
    assert len(ch.fdb) == 2  # the new device has no flood entries yet
    mtu = plan_changes(ov, _seen(ov, flood=("10.0.0.12", "10.0.0.13"), mtu=1500, up=False))
    assert mtu.ip == ["link set %s mtu 1450" % ov.vxlan, "link set %s up" % ov.vxlan]


def test_vni_of_another_device_is_refused() -> None:
    ov = layout()["node-a"]
    seen = Observed(vnis={ov.vni: "vxlan-other"})
    with pytest.raises(OverlayError, match="VNI %d is already used by VXLAN device vxlan-other on agent node-a" % ov.vni):
        plan_changes(ov, seen)


def test_parse_ip_and_bridge_json() -> None:
    links = parse_links(json.dumps([
        {"ifname": "lo", "flags": ["LOOPBACK", "UP"], "mtu": 65536},
        {"ifname": "bov1", "flags": ["BROADCAST", "UP"], "mtu": 1450, "linkinfo": {"info_kind": "bridge"}},
        {"ifname": "bvx1", "flags": ["BROADCAST"], "mtu": 1450, "master": "bov1",
         "linkinfo": {"info_kind": "vxlan", "info_data": {"id": 70000, "local": "10.0.0.11", "port": 4789}}},
    ]))
    assert links["bvx1"] == {"kind": "vxlan", "mtu": 1450, "up": False, "master": "bov1", "vni": 70000,
                             "local": "10.0.0.11", "port": 4789, "link": None}
    assert links["bov1"]["up"] is True and links["lo"]["kind"] == ""
    fdb = json.dumps([{"mac": "c2:79:1c:1b:d8:f6", "flags": [], "master": "bov1", "state": "permanent"},
                      {"mac": "00:00:00:00:00:00", "dst": "10.0.0.13", "flags": ["self"], "state": "permanent"},
                      {"mac": "00:00:00:00:00:00", "dst": "10.0.0.12", "flags": ["self"], "state": "permanent"}])
    assert parse_flood(fdb, "bvx1") == ("10.0.0.12", "10.0.0.13")
    assert delete_commands("bov1", "bvx1", links) == ["link delete bvx1", "link delete bov1"]
    assert delete_commands("bov2", "bvx2", links) == []


def test_isolation_rule_drops_new_connections_into_the_bridge_but_not_published_ports() -> None:
    rule = isolation_rule("bov1", "backendai-x")
    assert " ".join(rule) == ("-o bov1 ! -i bov1 -m conntrack --ctstate NEW -m conntrack ! --ctstate DNAT "
                              "-m comment --comment backendai-cluster overlay backendai-x isolation -j DROP")


def test_the_plan_gives_the_overlay_its_agents_and_counts() -> None:
    agents = [{"name": n, "cpu": 2000, "memory": 4096} for n in AGENTS]
    plan = plan_session({"name": "train-42", "image": "x", "cluster_size": 6, "cluster_mode": "multi-node",
                         "resources": {"cpu": 1000, "memory": 1024}}, agents)
    assert plan.agents_used == tuple(AGENTS)
    counts = {a: sum(c.agent == a for c in plan.containers) for a in plan.agents_used}
    ovs = plan_overlay("backendai-train-42", list(plan.agents_used), IPS, counts=counts)
    assert set(ovs) == set(AGENTS) and counts == {"node-a": 2, "node-b": 2, "node-c": 2}


@pytest.mark.parametrize("bad", ["", "../etc/x", "a/b", "-x", "x" * 64, None])
def test_network_names_that_are_not_cni_names_are_refused(bad) -> None:
    with pytest.raises(OverlayError, match="network must be"):
        layout(network=bad)
