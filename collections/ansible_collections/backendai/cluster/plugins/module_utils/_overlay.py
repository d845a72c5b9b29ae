# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The overlay network of a multi-node session: what to create on each agent. Pure: no I/O.

Design: one VXLAN segment (its own VNI) per session, not one shared segment for every session.

* On each agent the session uses there is a Linux bridge of its own with a VXLAN device of its
  own enslaved to it; the VXLAN device floods broadcast, unknown-unicast and multicast frames to
  the other agents of the session by head-end replication (one all-zero-MAC FDB entry per peer
  agent: ``bridge fdb append 00:00:00:00:00:00 dev <vxlan> dst <peer>``) and learns the MACs of
  remote containers from the frames it receives. No multicast is needed on the underlay (most
  clouds have none), no control plane, nothing shared between sessions.
* Isolation comes from the VNI: frames of two sessions never share a broadcast domain, so no ARP,
  no flood and no forwarding rule crosses sessions, and there is no firewall inside a session
  (the seeds' "private network with no firewall inside it"). A shared segment would need
  per-session filtering (ebtables/VLAN filtering) on every agent, which is exactly the kind of
  shared state that leaks when a teardown is missed (lablup/backend.ai#11917, #5719).
* Teardown is local and complete: deleting the session's two named links (and its CNI config,
  IPAM directory and isolation rule) removes every trace of it from an agent; agents the session
  never used are never touched.
* Addressing: one subnet per session; each agent of the plan gets a disjoint, contiguous block of
  it for host-local IPAM (agents in plan order), so containers on different agents never get the
  same address and no cross-agent IPAM is needed. Inside the overlay containers reach each
  other directly on layer 2 (no gateway). With ``egress`` (the Nomad path) the first address of an
  agent's block is its bridge's address, the default gateway of its containers for traffic that
  leaves the overlay (published ports, outbound NAT); the local runtime has no egress.
* MTU: VXLAN over IPv4 adds 50 bytes (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8), so the
  bridge, the VXLAN device and every container interface get the underlay MTU minus 50.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import typing as t
from dataclasses import dataclass, field

VXLAN_PORT = 4789
VXLAN_OVERHEAD_IPV4 = 50
MIN_MTU = 576
#: VNIs this collection derives: above the 12-bit range many setups use for VLAN-mapped VNIs.
VNI_BASE = 0x10000
VNI_MAX = 0xFFFFFF
#: Where session subnets come from unless one is given (2048 /24s).
SUBNET_POOL = "10.200.0.0/13"
SUBNET_PREFIX = 24
ALL_ZEROS_MAC = "00:00:00:00:00:00"
CNI_VERSION = "1.0.0"
ISOLATION_COMMENT = "backendai-cluster overlay %s isolation"


class OverlayError(ValueError):
    """An overlay that cannot be laid out as asked; the message says why."""


@dataclass(frozen=True)
class AgentRange:
    """An agent's block of the session subnet: its IPAM range, and its bridge address with egress."""

    start: str
    end: str
    gateway: t.Optional[str] = None

    @property
    def size(self) -> int:
        return int(ipaddress.IPv4Address(self.end)) - int(ipaddress.IPv4Address(self.start)) + 1


@dataclass(frozen=True)
class AgentOverlay:
    """Everything one agent needs for one session's overlay."""

    network: str  # the CNI network name (the conflist's name, "cni/<network>" in the job)
    agent: str
    vni: int
    subnet: str
    mtu: int
    bridge: str
    vxlan: str
    local_ip: str  # this agent's underlay address (VXLAN source)
    peers: t.Tuple[str, ...]  # the other agents' underlay addresses (head-end replication)
    range: AgentRange
    egress: bool = True
    underlay_dev: str = ""

    @property
    def spans(self) -> bool:
        """True when the session has containers on other agents too (a VXLAN device is needed)."""
        return bool(self.peers)


def _hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def overlay_mtu(underlay_mtu: int) -> int:
    """The MTU inside a VXLAN-over-IPv4 overlay on an underlay of ``underlay_mtu``."""
    mtu = int(underlay_mtu) - VXLAN_OVERHEAD_IPV4
    if mtu < MIN_MTU:
        raise OverlayError("underlay MTU %s leaves %d bytes inside the overlay (VXLAN over IPv4 takes %d); at least %d "
                           "are needed" % (underlay_mtu, mtu, VXLAN_OVERHEAD_IPV4, MIN_MTU))
    return mtu


def derive_vni(key: str) -> int:
    """A stable VNI for ``key`` (the network name) in [VNI_BASE, VNI_MAX]."""
    return VNI_BASE + int.from_bytes(_hash("vni\0" + key)[:4], "big") % (VNI_MAX - VNI_BASE + 1)


def device_names(key: str) -> t.Tuple[str, str]:
    """(bridge, vxlan) link names for ``key``: ``bov<8 hex>`` and ``bvx<8 hex>`` (IFNAMSIZ is 16)."""
    digest = _hash("dev\0" + key).hex()[:8]
    return "bov" + digest, "bvx" + digest


def derive_subnet(key: str, pool: str = SUBNET_POOL, prefix: int = SUBNET_PREFIX) -> str:
    """A stable /``prefix`` of ``pool`` for ``key`` (agents refuse a subnet another link already uses)."""
    net = ipaddress.IPv4Network(pool)
    if prefix < net.prefixlen or prefix > 30:
        raise OverlayError("subnet prefix /%d does not fit in %s" % (prefix, pool))
    count = 1 << (prefix - net.prefixlen)
    index = int.from_bytes(_hash("subnet\0" + key)[:4], "big") % count
    return str(ipaddress.IPv4Network((int(net.network_address) + (index << (32 - prefix)), prefix)))


def agent_ranges(subnet: str, agents: t.Sequence[str], egress: bool = True,
                 counts: t.Optional[t.Mapping[str, int]] = None) -> t.Dict[str, AgentRange]:
    """Split ``subnet`` into one disjoint block per agent (in the order given).

    With ``egress`` a block's first address is the agent's bridge (gateway) address. ``counts``
    (containers per agent) are checked against the block sizes.
    """
    try:
        net = ipaddress.IPv4Network(subnet)
    except ValueError as e:
        raise OverlayError("overlay subnet %r is not an IPv4 network: %s" % (subnet, e)) from None
    if not agents:
        raise OverlayError("an overlay needs at least one agent")
    if len(set(agents)) != len(agents):
        raise OverlayError("agents are listed twice: %s" % ", ".join(agents))
    first = int(net.network_address) + 1
    usable = net.num_addresses - 2
    per = usable // len(agents)
    need = 2 if egress else 1
    if per < need:
        raise OverlayError("subnet %s is too small for %d agents" % (subnet, len(agents)))
    out = {}
    for i, agent in enumerate(agents):
        lo = first + i * per
        hi = lo + per - 1
        gateway = str(ipaddress.IPv4Address(lo)) if egress else None
        start = lo + 1 if egress else lo
        rng = AgentRange(str(ipaddress.IPv4Address(start)), str(ipaddress.IPv4Address(hi)), gateway)
        want = (counts or {}).get(agent, 0)
        if want > rng.size:
            raise OverlayError("subnet %s gives agent %s %d addresses (one block of %d per agent), but %d containers "
                               "go there; use a larger subnet" % (subnet, agent, rng.size, per, want))
        out[agent] = rng
    return out


def _ipv4(value: t.Any, what: str) -> str:
    try:
        return str(ipaddress.IPv4Address(str(value)))
    except ValueError:
        raise OverlayError("%s must be an IPv4 address, got %r" % (what, value)) from None


NETWORK_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")  # as the spec's network.mode cni/<name>


def check_network(network: t.Any) -> str:
    """The CNI network name, validated (it names a file in the CNI config dir)."""
    if not isinstance(network, str) or not NETWORK_RE.match(network):
        raise OverlayError("network must be 1-63 letters, digits, '_', '.' or '-' starting with a letter or digit, "
                           "got %r" % (network,))
    return network


def plan_overlay(network: str, agents: t.Sequence[str], underlay_ips: t.Mapping[str, t.Any], underlay_mtu: int = 1500,
                 subnet: t.Optional[str] = None, vni: t.Optional[int] = None, egress: bool = True,
                 names: t.Optional[t.Tuple[str, str]] = None, counts: t.Optional[t.Mapping[str, int]] = None,
                 underlay_dev: str = "") -> t.Dict[str, AgentOverlay]:
    """The overlay of one session on each of its agents (``agents`` in plan order)."""
    check_network(network)
    missing = [a for a in agents if a not in underlay_ips]
    if missing:
        raise OverlayError("no underlay address for agent(s) %s" % ", ".join(missing))
    ips = {a: _ipv4(underlay_ips[a], "the underlay address of agent %s" % a) for a in agents}
    if len(set(ips.values())) != len(ips):
        raise OverlayError("two agents share an underlay address: %s" % json.dumps(ips, sort_keys=True))
    if vni is None:
        vni = derive_vni(network)
    if not 1 <= int(vni) <= VNI_MAX:
        raise OverlayError("VNI must be from 1 to %d, got %r" % (VNI_MAX, vni))
    mtu = overlay_mtu(underlay_mtu)
    subnet = subnet or derive_subnet(network)
    ranges = agent_ranges(subnet, agents, egress=egress, counts=counts)
    bridge, vxlan = names or device_names(network)
    return {a: AgentOverlay(network=network, agent=a, vni=int(vni), subnet=str(ipaddress.IPv4Network(subnet)),
                            mtu=mtu, bridge=bridge, vxlan=vxlan, local_ip=ips[a],
                            peers=tuple(ips[p] for p in agents if p != a), range=ranges[a], egress=egress,
                            underlay_dev=underlay_dev)
            for a in agents}


# ---------------------------------------------------------------------------- CNI

def render_conflist(ov: AgentOverlay, ipam_data_dir: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    """The CNI network configuration list of the session on this agent (Nomad: ``cni/<network>``).

    ``bridge`` joins each container to the session bridge (where the VXLAN device is), host-local
    hands out this agent's block. With egress, the bridge is the containers' gateway with outbound
    NAT (``ipMasq``: traffic within the subnet is never masqueraded), and firewall + portmap give
    Nomad's published ports, exactly as in Nomad's own bridge network.
    """
    rng: t.Dict[str, t.Any] = {"subnet": ov.subnet, "rangeStart": ov.range.start, "rangeEnd": ov.range.end}
    ipam: t.Dict[str, t.Any] = {"type": "host-local", "ranges": [[rng]]}
    if ov.egress:
        rng["gateway"] = ov.range.gateway
        ipam["routes"] = [{"dst": "0.0.0.0/0"}]
    if ipam_data_dir:
        ipam["dataDir"] = ipam_data_dir
    bridge = {"type": "bridge", "bridge": ov.bridge, "mtu": ov.mtu, "isGateway": ov.egress, "ipMasq": ov.egress,
              "hairpinMode": True, "ipam": ipam}
    plugins: t.List[t.Dict[str, t.Any]] = [{"type": "loopback"}, bridge]
    if ov.egress:
        plugins += [{"type": "firewall", "backend": "iptables"},
                    {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}]
    return {"cniVersion": CNI_VERSION, "name": ov.network, "plugins": plugins}


def conflist_text(conf: t.Mapping[str, t.Any]) -> str:
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


def conflist_file(network: str) -> str:
    return network + ".conflist"


# ---------------------------------------------------------------------------- links

@dataclass(frozen=True)
class Observed:
    """What is on the agent now (parsed from ``ip -d -j link show`` and ``bridge -j fdb show``)."""

    bridge: t.Optional[t.Dict[str, t.Any]] = None  # {mtu, up}
    vxlan: t.Optional[t.Dict[str, t.Any]] = None  # {vni, local, port, mtu, up, master, dev}
    flood: t.Tuple[str, ...] = ()  # dst of the all-zero FDB entries of the vxlan device
    vnis: t.Dict[int, str] = field(default_factory=dict)  # VNI -> name of every VXLAN device on the agent


def parse_links(links_json: str) -> t.Dict[str, t.Dict[str, t.Any]]:
    """``ip -d -j link show`` output -> {name: {kind, mtu, up, master, vni, local, port, dev_index}}."""
    out = {}
    for link in json.loads(links_json or "[]"):
        info = link.get("linkinfo") or {}
        data = info.get("info_data") or {}
        out[link["ifname"]] = {
            "kind": info.get("info_kind", ""), "mtu": link.get("mtu"), "up": "UP" in (link.get("flags") or []),
            "master": link.get("master"), "vni": data.get("id"), "local": data.get("local"), "port": data.get("port"),
            "link": data.get("link"),
        }
    return out


def parse_flood(fdb_json: str, vxlan: str) -> t.Tuple[str, ...]:
    """The destinations of the all-zero-MAC (flood) entries of ``vxlan`` in ``bridge -j fdb show``."""
    dsts = []
    for entry in json.loads(fdb_json or "[]"):
        if entry.get("ifname", vxlan) == vxlan and entry.get("mac") == ALL_ZEROS_MAC and entry.get("dst"):
            dsts.append(entry["dst"])
    return tuple(sorted(set(dsts)))


def observe(ov: AgentOverlay, links: t.Mapping[str, t.Mapping[str, t.Any]], flood: t.Sequence[str]) -> Observed:
    br = links.get(ov.bridge)
    vx = links.get(ov.vxlan)
    return Observed(bridge=dict(br) if br and br["kind"] == "bridge" else None,
                    vxlan=dict(vx) if vx and vx["kind"] == "vxlan" else None, flood=tuple(flood),
                    vnis={int(v["vni"]): n for n, v in links.items() if v["kind"] == "vxlan" and v["vni"] is not None})


@dataclass
class Changes:
    """Commands that bring an agent to the overlay: ``ip -batch`` lines, then ``bridge -batch`` lines."""

    ip: t.List[str] = field(default_factory=list)
    fdb: t.List[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ip or self.fdb)

    def lines(self) -> t.List[str]:
        return ["ip " + c for c in self.ip] + ["bridge " + c for c in self.fdb]


def _vxlan_add(ov: AgentOverlay) -> str:
    dev = " dev %s" % ov.underlay_dev if ov.underlay_dev else ""
    return "link add %s mtu %d type vxlan id %d local %s dstport %d%s" % (
        ov.vxlan, ov.mtu, ov.vni, ov.local_ip, VXLAN_PORT, dev)


def create_commands(ov: AgentOverlay) -> Changes:
    """From nothing: the bridge, the VXLAN device in it (only if the session spans agents), the flood entries."""
    return plan_changes(ov, Observed())


def plan_changes(ov: AgentOverlay, seen: Observed) -> Changes:
    """The commands that turn what is ``seen`` into ``ov`` (empty when it already is)."""
    ch = Changes()
    if seen.bridge is None:
        ch.ip.append("link add %s mtu %d type bridge" % (ov.bridge, ov.mtu))
    elif seen.bridge.get("mtu") != ov.mtu:
        ch.ip.append("link set %s mtu %d" % (ov.bridge, ov.mtu))
    if seen.bridge is None or not seen.bridge.get("up"):
        ch.ip.append("link set %s up" % ov.bridge)
    vx = seen.vxlan
    if not ov.spans:
        if vx is not None:
            ch.ip.append("link delete %s" % ov.vxlan)
        return ch
    other = seen.vnis.get(ov.vni)
    if other is not None and other != ov.vxlan:
        raise OverlayError("VNI %d is already used by VXLAN device %s on agent %s; give this session another VNI "
                           "(overlay_vni) or network name" % (ov.vni, other, ov.agent))
    stale = vx is not None and (vx.get("vni") != ov.vni or vx.get("local") != ov.local_ip or vx.get("port") != VXLAN_PORT)
    if stale:
        ch.ip.append("link delete %s" % ov.vxlan)
    if vx is None or stale:
        ch.ip += [_vxlan_add(ov), "link set %s master %s" % (ov.vxlan, ov.bridge), "link set %s up" % ov.vxlan]
        current: t.Tuple[str, ...] = ()
    else:
        if vx.get("mtu") != ov.mtu:
            ch.ip.append("link set %s mtu %d" % (ov.vxlan, ov.mtu))
        if vx.get("master") != ov.bridge:
            ch.ip.append("link set %s master %s" % (ov.vxlan, ov.bridge))
        if not vx.get("up"):
            ch.ip.append("link set %s up" % ov.vxlan)
        current = seen.flood
    for dst in sorted(set(current) - set(ov.peers)):
        ch.fdb.append("fdb del %s dev %s dst %s" % (ALL_ZEROS_MAC, ov.vxlan, dst))
    for dst in [p for p in ov.peers if p not in current]:
        ch.fdb.append("fdb append %s dev %s dst %s" % (ALL_ZEROS_MAC, ov.vxlan, dst))
    return ch


def delete_commands(bridge: str, vxlan: str, links: t.Mapping[str, t.Any]) -> t.List[str]:
    """``ip -batch`` lines removing the session's links that exist (deleting the VXLAN device drops its FDB)."""
    return ["link delete %s" % name for name in (vxlan, bridge) if name in links]


def isolation_rule(ov_bridge: str, network: str) -> t.List[str]:
    """The iptables rule (without ``-A/-C/-D FORWARD``) that keeps other sessions and the outside from opening
    connections into the session bridge of an agent that routes (the Nomad path, with egress): new connections
    forwarded into it from anywhere else are dropped, unless they are published ports (DNAT); replies pass."""
    return ["-o", ov_bridge, "!", "-i", ov_bridge, "-m", "conntrack", "--ctstate", "NEW", "-m", "conntrack",
            "!", "--ctstate", "DNAT", "-m", "comment", "--comment", ISOLATION_COMMENT % network, "-j", "DROP"]
