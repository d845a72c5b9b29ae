# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the session network plugin sends over netlink (a session's forwarding entries and its peer set), byte for
byte against the kernel's formats (linux/netlink.h, neighbour.h, netfilter/ipset/ip_set.h), and how it reads the
answers; and the one rule per peer set that replaced a rule per peer. Without a kernel: a fake socket records what
is sent and answers as the kernel does. (The real kernel is exercised by every ADD and DEL of the machine tests:
tests/local_runtime/test_session_network_attacks.py and the leak checks, which list the sets with ``ipset``.)"""

from __future__ import annotations

import socket
import struct
import sys
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

SID = "0b7e8a52-93a3-4d6c-9f43-3a8d50c1b0e1"
E = "<" if sys.byteorder == "little" else ">"


class FakeNetlink:
    """A netlink socket: records each send, acknowledges the last message of it (or answers ``errors``: seq ->
    errno, and ``dump``: payloads then NLMSG_DONE)."""

    sent: t.List[bytes] = []

    def __init__(self, family: int, kind: int, protocol: int) -> None:
        assert (family, kind) == (socket.AF_NETLINK, socket.SOCK_RAW)
        self.protocol, self.pending = protocol, b""
        self.errors: t.Dict[int, int] = FakeNetlink.errors
        self.dump = FakeNetlink.dump

    def bind(self, address: t.Tuple[int, int]) -> None:
        assert address == (0, 0)

    def sendall(self, data: bytes) -> None:
        FakeNetlink.sent.append(data)
        at, out = 0, []
        while at < len(data):
            length, _kind, flags, seq, _pid = struct.unpack_from(E + "IHHII", data, at)
            assert flags & 0x1, "every message is a request"
            if seq in self.errors:
                out.append(self._error(seq, self.errors[seq]))
            elif flags & 0x300 == 0x300:  # a dump
                for payload in self.dump:
                    out.append(struct.pack(E + "IHHII", 16 + len(payload), 0x607, 0x2, seq, 0) + payload)
                out.append(struct.pack(E + "IHHIIi", 20, 3, 0x2, seq, 0, 0))
            elif flags & 0x4:
                out.append(self._error(seq, 0))
            at += (length + 3) & ~3
        self.pending += b"".join(out)

    @staticmethod
    def _error(seq: int, errno: int) -> bytes:
        return struct.pack(E + "IHHIIi", 36, 2, 0, seq, 0, -errno) + b"\0" * 16

    def recv(self, size: int) -> bytes:
        data, self.pending = self.pending, b""
        assert data, "the plugin reads past the last answer"
        return data

    def close(self) -> None:
        pass

    errors: t.Dict[int, int] = {}
    dump: t.List[bytes] = []


@pytest.fixture
def netlink(monkeypatch: pytest.MonkeyPatch) -> t.Type[FakeNetlink]:
    FakeNetlink.sent, FakeNetlink.errors, FakeNetlink.dump = [], {}, []
    monkeypatch.setattr(system._socket, "socket", FakeNetlink)
    monkeypatch.setattr(system._socket, "if_nametoindex", lambda name: {"baix0": 42}[name])
    return FakeNetlink


def messages(data: bytes) -> t.List[t.Tuple[int, int, int, bytes]]:
    out, at = [], 0
    while at < len(data):
        length, kind, flags, seq, _pid = struct.unpack_from(E + "IHHII", data, at)
        out.append((kind, flags, seq, data[at + 16:at + length]))
        at += (length + 3) & ~3
    return out


def attrs(data: bytes) -> t.List[t.Tuple[int, bytes]]:
    out, at = [], 0
    while at < len(data):
        length, kind = struct.unpack_from(E + "HH", data, at)
        out.append((kind, data[at + 4:at + length]))
        at += (length + 3) & ~3
    return out


def test_forwarding_entries_are_what_bridge_fdb_append_sends(netlink: t.Type[FakeNetlink]) -> None:
    system.fdb_append("baix0", ["10.0.0.2", "fd00::1:2"])
    (sent,) = netlink.sent
    (k1, f1, s1, p1), (k2, f2, s2, p2) = messages(sent)
    assert (k1, k2) == (28, 28) and s2 == s1 + 1  # RTM_NEWNEIGH
    assert f1 == 0x1 | 0x400 | 0x800 and f2 == f1 | 0x4  # REQUEST, CREATE, APPEND; the batch's last acknowledged
    for payload, dst in ((p1, socket.inet_aton("10.0.0.2")), (p2, socket.inet_pton(socket.AF_INET6, "fd00::1:2"))):
        family, ifindex, state, flags, kind = struct.unpack_from(E + "BxxxiHBB", payload)
        assert (family, ifindex, state, flags, kind) == (7, 42, 0x80, 0x02, 0)  # AF_BRIDGE, PERMANENT, NTF_SELF
        assert attrs(payload[12:]) == [(2, b"\0" * 6), (1, dst)]  # NDA_LLADDR 00:00:00:00:00:00, NDA_DST


def test_an_error_names_the_entry_it_refused(netlink: t.Type[FakeNetlink]) -> None:
    netlink.errors = {2: 17}
    with pytest.raises(system.PluginError) as e:
        system.fdb_append("baix0", ["10.0.0.2", "10.0.0.3", "10.0.0.4"])
    assert e.value.msg == "fdb append dev baix0 dst 10.0.0.3 failed" and e.value.details == "File exists"


def test_many_entries_go_in_batches_each_acknowledged(netlink: t.Type[FakeNetlink]) -> None:
    dests = ["10.%d.%d.%d" % (i >> 16, i >> 8 & 255, i & 255) for i in range(1, 2 * system._BATCH + 2)]
    system.fdb_append("baix0", dests)
    assert [len(messages(b)) for b in netlink.sent] == [system._BATCH, system._BATCH, 1]
    for batch in netlink.sent:
        flags = [f for _k, f, _s, _p in messages(batch)]
        assert [bool(f & 0x4) for f in flags] == [False] * (len(flags) - 1) + [True]
    seqs = [s for b in netlink.sent for _k, _f, s, _p in messages(b)]
    assert seqs == list(range(seqs[0], seqs[0] + len(dests)))


def test_a_peer_set_is_created_flushed_and_filled_as_ipset_restore_does(netlink: t.Type[FakeNetlink]) -> None:
    system.ipset_fill("bai0123456789ab-peers", "inet", ["10.0.0.2", "10.0.0.3"])
    (create, flush, add), = [messages(b) for b in netlink.sent]
    name = (2, b"bai0123456789ab-peers\0")
    assert [m[0] for m in (create, flush, add)] == [0x602, 0x604, 0x609]  # NFNL_SUBSYS_IPSET: CREATE, FLUSH, ADD
    assert not create[1] & 0x200, "no NLM_F_EXCL: a set of the same session left by a killed ADD is reused"
    for m in (create, flush, add):
        assert m[3][:4] == b"\2\0\0\0"  # nfgenmsg: AF_INET, version 0, res_id 0
    a = attrs(create[3][4:])
    assert a[:6] == [(1, b"\6"), name, (3, b"hash:ip\0"), (4, bytes((system._IPSET_HASH_IP_REVISION,))), (5, b"\2"),
                     a[5]]
    assert a[5][0] == 7 | 0x8000 and attrs(a[5][1]) == [(18 | 0x4000, struct.pack(">I", 64)),
                                                        (19 | 0x4000, struct.pack(">I", 65536))]
    assert attrs(flush[3][4:]) == [(1, b"\6"), name]
    protocol, setname, lineno, adt = attrs(add[3][4:])
    assert (protocol, setname, lineno[0], adt[0]) == ((1, b"\6"), name, 9, 8 | 0x8000)  # the kernel wants a LINENO
    members = [attrs(data) for kind, data in attrs(adt[1])]
    assert members == [[(1 | 0x8000, struct.pack(E + "HH", 8, 1 | 0x4000) + socket.inet_aton(ip))]
                       for ip in ("10.0.0.2", "10.0.0.3")]


def test_an_ipv6_peer_set_holds_tunnel_addresses(netlink: t.Type[FakeNetlink]) -> None:
    system.ipset_fill("bai0123456789ab-peers6", "inet6", ["fd00::2"])
    create, _flush, add = messages(netlink.sent[0])
    assert (5, b"\x0a") in attrs(create[3][4:])  # NFPROTO_IPV6
    adt = attrs(add[3][4:])[3][1]
    ((_kind, data),) = attrs(adt)
    assert attrs(data) == [(1 | 0x8000, struct.pack(E + "HH", 20, 2 | 0x4000) + socket.inet_pton(socket.AF_INET6, "fd00::2"))]


def test_destroying_a_set_tells_busy_from_gone(netlink: t.Type[FakeNetlink]) -> None:
    assert system.ipset_destroy("x") is True
    netlink.errors = {1: 2}  # ENOENT: already gone (DEL is safe to repeat)
    assert system.ipset_destroy("x") is True
    netlink.errors = {1: system._IPSET_ERR_BUSY}  # iptables-nft still holds the rule's reference
    assert system.ipset_destroy("x") is False
    netlink.errors = {1: 1}
    with pytest.raises(system.PluginError, match="ipset destroy x failed"):
        system.ipset_destroy("x")


def test_the_last_session_takes_every_peer_set_of_the_plugin_and_no_other(
        netlink: t.Type[FakeNetlink], monkeypatch: pytest.MonkeyPatch) -> None:
    mine = net.peer_set_names(SID)
    left = net.peer_set_names("11111111-2222-4333-8444-555555555555")[0]
    netlink.dump = [b"\2\0\0\0" + system._attr(1, b"\6") + system._attr(2, n.encode() + b"\0")
                    for n in (left, "someone-elses", "bai0123456789ab-peers7")]
    destroyed: t.List[str] = []
    monkeypatch.setattr(system, "ipset_destroy", lambda name: destroyed.append(name) or True)
    system.sets_down(_state("none", 3), last_session=True)
    assert sorted(destroyed) == sorted({mine[0], left})
    destroyed.clear()
    system.sets_down(_state("wireguard", 3), last_session=False)
    assert destroyed == [mine[1]]
    destroyed.clear()
    system.sets_down(_state("none", 1), last_session=False)  # a session on one agent made none
    assert destroyed == []
    netlink.errors = {1: 22}  # a kernel without ipset: the last session's DEL still goes through
    system.sets_down(_state("none", 1), last_session=True)
    assert destroyed == []


def test_a_busy_set_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [False, False, True, True]  # busy, busy, gone
    monkeypatch.setattr(system, "ipset_destroy", lambda name: answers.pop(0))
    monkeypatch.setattr(system.time, "sleep", lambda s: None)
    system.sets_down(_state("none", 2), last_session=False)
    assert answers == [True]


def test_set_names_are_the_bridges_and_fit_ipset() -> None:
    v4, v6 = net.peer_set_names(SID)
    bridge = net.link_names(SID)[0]
    assert (v4, v6) == (bridge + "-peers", bridge + "-peers6") and len(v6) <= 31
    assert net.is_peer_set_name(v4) and net.is_peer_set_name(v6)
    for other in ("bai0123456789ab-peer", "baiX123456789ab-peers", "bai0123456789abc-peers", "kube-peers", bridge):
        assert not net.is_peer_set_name(other)


def _state(encryption: str, agents: int) -> t.Dict[str, t.Any]:
    peers = ["10.0.0.%d" % i for i in range(2, agents + 1)]
    return {"sid": SID, "vni": 70000, "bridge": net.link_names(SID)[0], "subnet": "10.200.5.0/24", "peers": peers,
            "encryption": encryption, "wg_peers": [["k%d" % i, "fd00::%d" % i, p] for i, p in enumerate(peers)]
            if encryption == "wireguard" else []}


@pytest.mark.parametrize("agents", [2, 1024])
def test_one_rule_per_session_whatever_its_agents(agents: int) -> None:
    cfg = type("Cfg", (), {"egress": False, "wg_interface": "baiwg0"})()
    plain = system.session_rules(cfg, _state("none", agents))["mangle"]
    vxlan = [r for r in plain if system.VXLAN_CHAIN in r]
    assert vxlan == ['-I %s 1 -m set --match-set %s src -m u32 --u32 "%s" -m comment --comment "backendai session %s" '
                     '-j RETURN' % (system.VXLAN_CHAIN, net.peer_set_names(SID)[0], net.vni_match(70000), SID)]
    assert system.peer_sets(_state("none", agents)) == [(net.peer_set_names(SID)[0], "inet", _state("none", agents)["peers"])]
    encrypted = _state("wireguard", agents)
    assert [r for r in system.session_rules(cfg, encrypted)["mangle"] if system.VXLAN_CHAIN in r] == []
    (rule6,) = system.session_rules6(cfg, encrypted)["mangle"]
    assert "-i baiwg0 -m set --match-set %s src" % net.peer_set_names(SID)[1] in rule6
    assert system.peer_sets(encrypted) == [(net.peer_set_names(SID)[1], "inet6", ["fd00::%d" % i for i in range(agents - 1)])]


def test_a_session_on_one_agent_has_no_peer_set_and_no_vxlan_rule() -> None:
    cfg = type("Cfg", (), {"egress": False, "wg_interface": "baiwg0"})()
    alone = _state("none", 1)
    assert system.peer_sets(alone) == [] and system.session_rules6(cfg, alone) == {"mangle": []}
    assert [r for r in system.session_rules(cfg, alone)["mangle"] if system.VXLAN_CHAIN in r] == []


@pytest.mark.parametrize("mtu, encryption", [(1250, "wireguard"), (1450, None), (1280, "wireguard")])
def test_links_up_turns_off_ipv6_addresses_only_where_the_device_has_ipv6(monkeypatch: t.Any, mtu: int,
                                                                          encryption: t.Optional[str]) -> None:
    """Below IPv6's minimum MTU (1,280) Linux gives a device no IPv6 at all, and ``addrgenmode`` on it fails the whole
    ``ip -batch`` ("Address family not supported by protocol": a session of VXLAN inside WireGuard over an IPv6
    underlay of MTU 1,400 has an overlay MTU of 1,250); at 1,280 and above both devices get ``addrgenmode none``."""
    batches: t.List[str] = []
    monkeypatch.setattr(system, "run", lambda argv, stdin="", **_kw: batches.append(stdin))
    monkeypatch.setattr(system, "fdb_append", lambda dev, dests: None)
    cfg = t.cast(t.Any, type("Cfg", (), {"underlay_ip": "192.0.2.1", "vxlan_port": 4789, "wg_interface": "baiwg0"}))
    st = {"bridge": "baib", "vxlan": "baix", "mtu": mtu, "sid": SID, "gateway": "10.201.0.1", "prefixlen": 24,
          "vni": 65921, "peers": ["192.0.2.2"], "tunnel": "fd00::1", "encryption": encryption,
          "wg_peers": [("key", "fd00::2", "192.0.2.2")]}
    system.links_up(cfg, st)
    (batch,) = batches
    off = [line for line in batch.splitlines() if "addrgenmode" in line]
    assert off == ([] if mtu < 1280 else ["link set dev baib addrgenmode none", "link set dev baix addrgenmode none"])
    assert "link set baix master baib" in batch and batch.endswith("link set baib up\n")
