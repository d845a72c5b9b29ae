# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session's VXLAN device made over netlink by the plugin (``_cni_system.vxlan_add``), byte for byte what
``ip link add ... type vxlan`` sends (linux/rtnetlink.h, if_link.h; iproute2's ip/iplink_vxlan.c). Without a kernel:
a fake socket records the request and acknowledges it."""

from __future__ import annotations

import socket
import struct
import sys
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system

E = "<" if sys.byteorder == "little" else ">"


def attrs(data: bytes) -> t.List[t.Tuple[int, bytes]]:
    out, at = [], 0
    while at < len(data):
        length, kind = struct.unpack_from(E + "HH", data, at)
        out.append((kind, data[at + 4:at + length]))
        at += (length + 3) & ~3
    return out


@pytest.mark.parametrize("local, dev", [("192.0.2.1", ""), ("fd00::1:1", "baiwg0")])
def test_the_vxlan_device_is_made_as_ip_link_add_makes_it(monkeypatch: t.Any, local: str, dev: str) -> None:
    """``ip link add baix0 mtu 1450 type vxlan id 65921 local LOCAL dstport 4789 [dev baiwg0]`` as iproute2 6.1 sends
    it (``iplink.c``, ``iplink_vxlan.c``: IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO holding IFLA_INFO_KIND ``vxlan`` without
    its NUL and IFLA_INFO_DATA with the ID, the local address, the device, the port in network order), one request
    with CREATE and EXCL, acknowledged. (The device it makes, against ip's, in the kernel: tests/local_runtime/
    test_session_network_vxlan_device.py.)"""
    sent: t.List[bytes] = []

    class Netlink:
        def __init__(self, family: int, kind: int, protocol: int) -> None:
            assert (family, kind, protocol) == (socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE

        def bind(self, address: t.Tuple[int, int]) -> None:
            pass

        def sendall(self, data: bytes) -> None:
            sent.append(data)

        def recv(self, size: int) -> bytes:
            seq = struct.unpack_from(E + "I", sent[-1], 8)[0]
            return struct.pack(E + "IHHIIi", 36, 2, 0, seq, 0, 0) + b"\0" * 16

        def close(self) -> None:
            pass

    monkeypatch.setattr(system._socket, "socket", Netlink)
    monkeypatch.setattr(system._socket, "if_nametoindex", lambda name: {"baiwg0": 7}[name])
    system.vxlan_add("baix0", 1450, 65921, local, 4789, dev)
    (data,) = sent
    length, kind, flags = struct.unpack_from(E + "IHH", data)
    assert (length, kind, flags) == (len(data), 16, 0x1 | 0x4 | 0x400 | 0x200)  # RTM_NEWLINK: REQUEST ACK CREATE EXCL
    assert data[16:32] == b"\0" * 16  # ifinfomsg: AF_UNSPEC, index 0, no flags
    top = attrs(data[32:])
    assert top[:2] == [(3, b"baix0\0"), (4, struct.pack(E + "I", 1450))]  # IFLA_IFNAME, IFLA_MTU
    ((linkinfo, nested),) = top[2:]
    assert linkinfo == 18  # IFLA_LINKINFO
    (info_kind, kind_name), (info_data, data_attrs) = attrs(nested)
    assert (info_kind, kind_name, info_data) == (1, b"vxlan", 2)
    family = socket.AF_INET6 if ":" in local else socket.AF_INET
    want = [(1, struct.pack(E + "I", 65921)), (17 if ":" in local else 4, socket.inet_pton(family, local))]
    want += [(3, struct.pack(E + "I", 7))] if dev else []  # IFLA_VXLAN_LINK
    want += [(15, struct.pack(">H", 4789))]  # IFLA_VXLAN_PORT, big-endian
    assert attrs(data_attrs) == want
