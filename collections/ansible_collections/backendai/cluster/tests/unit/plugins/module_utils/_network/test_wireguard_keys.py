# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agents' WireGuard keys and tunnel addresses: derived from agent keys (versioned HKDF labels), the same on the
control node (cryptography's X25519) and on the agent (``wg pubkey``), unique over 10,000 agents, and what args
version 3 costs per agent."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import wireguard_peers, wireguard_public_key

KEY = bytes(range(32))
SID = "3614fdf3-0e04-4b5c-9a5e-1d2b3c4d5e6f"


def test_the_private_key_is_a_clamped_hkdf_of_the_agent_key_with_its_own_label() -> None:
    agent_key = net.derive_agent_key(KEY, "n1")
    private = net.wireguard_private_key(agent_key)
    assert private[0] & 7 == 0 and private[31] & 0x80 == 0 and private[31] & 0x40  # RFC 7748 5
    raw = net.hkdf_sha256(agent_key, b"backendai-cluster wireguard key v1")
    assert private[1:31] == raw[1:31] and private != net.network_mac_key(agent_key)
    assert net.wireguard_private_key(net.derive_agent_key(KEY, "n2")) != private


@pytest.mark.skipif(shutil.which("wg") is None, reason="wireguard-tools (scripts/setup installs it) is not installed")
def test_the_control_node_and_wg_agree_on_the_public_key() -> None:
    """The control node derives every agent's public key with cryptography; the agent's wg derives the same."""
    for name in ("n1", "agent-7", "node.example.com"):
        private = net.wireguard_private_key(net.derive_agent_key(KEY, name))
        by_wg = subprocess.run(["wg", "pubkey"], input=net.wg_key_text(private) + "\n", capture_output=True, text=True,
                               check=True).stdout.strip()
        assert by_wg == net.wg_key_text(wireguard_public_key(private))


def test_tunnel_addresses_are_unique_ula_for_10000_agents() -> None:
    names = ["agent-%05d" % i for i in range(10000)]
    prefix, keys = wireguard_peers(KEY, names)
    assert len(prefix) == 12 and prefix.startswith("fd") and prefix == net.tunnel_prefix(KEY) != net.tunnel_prefix(b"k" * 32)
    addresses = [ipaddress.IPv6Address(net.tunnel_address(prefix, k)) for k in keys]
    assert len(set(keys)) == len(set(addresses)) == 10000
    network = ipaddress.IPv6Network("%s:%s:%s::/48" % (prefix[:4], prefix[4:8], prefix[8:]))
    assert all(a in network for a in addresses) and network.subnet_of(ipaddress.IPv6Network("fd00::/8"))


def test_a_collision_is_refused_at_planning_time() -> None:
    """Two agents with one key (or one tunnel address) cannot be in one session: check_params names them."""
    prefix, keys = wireguard_peers(KEY, ["a", "b"])
    with pytest.raises(net.NetworkError, match="agents 10.0.0.1, 10.0.0.2 have the same WireGuard key or tunnel address"):
        net.make_params(SID, 3, ["10.0.0.1", "10.0.0.2"], encryption="wireguard", wg_keys=(keys[0], keys[0]),
                        tunnel_prefix=prefix)


def test_args_version_3_costs_48_bytes_per_agent_and_fits_cni_args() -> None:
    def args(count: int) -> dict:
        names = ["n%d" % i for i in range(count)]
        prefix, keys = wireguard_peers(KEY, names)
        p = net.make_params(SID, 3, [net.ip4_text(0x0A000000 + i + 1) for i in range(count)], encryption="wireguard",
                            wg_keys=keys, tunnel_prefix=prefix, prefix=16, pool="10.0.0.0/13")
        return net.job_args(KEY, "n" * 128, "j" * 64, "g", p)

    small, big = args(30), args(330)
    per_agent = (sum(map(len, big.values())) - sum(map(len, small.values()))) / 300
    assert 47.9 < per_agent < 48.1  # 4 bytes of IPv4 + 32 of public key, base64url
    assert net.max_agents(True) == (net.MAX_ARG_STRLEN - net.CNI_ARGS_RESERVE) * 3 // 144 == 2688


def test_the_mtu_accounts_for_wireguard_and_vxlan_over_ipv6() -> None:
    assert net.overlay_mtu(1500, "wireguard") == 1500 - 80 - 70 == 1350 and net.overlay_mtu(1500) == 1450
    assert net.wireguard_mtu(1500) == 1420
    with pytest.raises(net.NetworkError, match="VXLAN inside WireGuard takes 150"):
        net.overlay_mtu(700, "wireguard")
