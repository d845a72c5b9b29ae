#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: overlay
short_description: The overlay network of one multi-node session on one agent (VXLAN, bridge, CNI config)
version_added: 0.1.0
description:
  - Run on every agent a multi-node session uses (the C(backendai.cluster.agent) role does, with its C(session_present)
    and C(session_absent) entry points). All agents compute the same layout from the same inputs.
  - V(present) makes the session's bridge and, when the session spans agents, a VXLAN device of its own VNI in it with
    one all-zero FDB entry per other agent (head-end replication, no multicast needed); installs the CNI network
    config C(<cni_config_dir>/<network>.conflist) that Nomad tasks join with C(network { mode = "cni/<network>" }),
    giving this agent its own block of the session subnet for host-local IPAM; and, with O(egress), adds a FORWARD rule
    that stops other sessions and the outside from opening connections into the session bridge (published ports
    pass).
  - V(absent) removes all of that, and the host-local IPAM data of the network. Idempotent; safe on an agent that never
    had the overlay.
  - MTU is the underlay MTU minus 50 (VXLAN over IPv4) on the bridge, the VXLAN device and every container interface.
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - backendai.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Reads the agent's links and reports the commands that would run; runs none and writes nothing.
  diff_mode:
    support: none
options:
  state:
    description: Whether the session's overlay is on this agent.
    type: str
    choices: [present, absent]
    default: present
  network:
    description:
      - The CNI network name, the C(<overlay>) of the job's C(cni/<overlay>) network mode (the session plan's
        C(network_mode) without C(cni/)). Link names and, by default, the VNI and subnet derive from it.
    type: str
    required: true
  agent:
    description: This agent's name in the session plan (the Nomad node name). Required with O(state=present).
    type: str
  agents:
    description:
      - Every agent of the session plan, in plan order (the plan's C(agents)). The subnet is split into one block per
        agent in this order. Required with O(state=present).
    type: list
    elements: str
  underlay_ips:
    description:
      - The underlay (VXLAN endpoint) IPv4 address of every agent of O(agents), by agent name. Required with
        O(state=present).
    type: dict
  subnet:
    description:
      - The session subnet (IPv4 CIDR). Default - a /24 of C(10.200.0.0/13) derived from O(network).
      - Must not overlap any address on the agent.
    type: str
  vni:
    description: The VXLAN network identifier. Default - derived from O(network), from 65536 to 16777215.
    type: int
  underlay_mtu:
    description: MTU of the underlay. Default - the MTU of the interface that holds this agent's underlay address.
    type: int
  underlay_interface:
    description: Bind the VXLAN device to this interface (C(dev)). Default - routing decides.
    type: str
  egress:
    description:
      - Give the containers a way out of the overlay, as Nomad's bridge network does - the bridge is their gateway
        (the first address of this agent's block), with outbound NAT, the firewall plugin and published ports (portmap).
      - With V(false) the overlay is a private layer-2 network only.
    type: bool
    default: true
  counts:
    description: Containers per agent (by name), checked against the size of each agent's block.
    type: dict
  cni_config_dir:
    description: The Nomad client's C(cni_config_dir), where the conflist goes.
    type: path
    default: /opt/cni/config
  ipam_data_dir:
    description: The data directory of the host-local IPAM plugin; O(state=absent) removes C(<ipam_data_dir>/<network>).
    type: path
    default: /var/lib/cni/networks
  netns:
    description:
      - Apply inside this named network namespace of the host instead of the host's own (for agents that are network
        namespaces, as made by M(backendai.cluster.local_agents), and for tests).
    type: str
requirements:
  - root, iproute2 (C(ip), C(bridge)), iptables (with O(egress)), kernel modules vxlan and bridge
seealso:
  - module: backendai.cluster.session
"""

EXAMPLES = r"""
- name: The session's overlay on this agent (run on every agent of the plan)
  backendai.cluster.overlay:
    network: backendai-train-42
    agent: "{{ inventory_hostname }}"
    agents: [node-a, node-b, node-c]
    underlay_ips: {node-a: 10.0.0.11, node-b: 10.0.0.12, node-c: 10.0.0.13}
  become: true

- name: Remove it
  backendai.cluster.overlay:
    network: backendai-train-42
    state: absent
  become: true
"""

RETURN = r"""
overlay:
  description:
    - The overlay on this agent - C(network), C(vni), C(subnet), C(mtu), C(bridge), C(vxlan), C(range) (C(start),
      C(end), C(gateway)), C(peers) (the other agents' underlay addresses), C(conflist) (its path).
  returned: state=present
  type: dict
commands:
  description: The commands run (or, in check mode, that would run) and the files written or removed.
  returned: always
  type: list
  elements: str
"""

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._module_base import ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._overlay import (
    OverlayError,
    check_network,
    conflist_file,
    device_names,
    plan_overlay,
    render_conflist,
)
from ansible_collections.backendai.cluster.plugins.module_utils._overlay_apply import AgentHost, apply_overlay, remove_overlay


class OverlayFailure(BackendAIClusterError):
    pass


def run(module: ClusterModule) -> t.Dict[str, t.Any]:
    p = module.params
    host = AgentHost(p["netns"] or "")
    try:
        conflist = os.path.join(p["cni_config_dir"], conflist_file(check_network(p["network"])))
        if p["state"] == "absent":
            bridge, vxlan = device_names(p["network"])
            return remove_overlay(p["network"], bridge, vxlan, host, conflist_path=conflist,
                                  ipam_dir=os.path.join(p["ipam_data_dir"], p["network"]), egress=p["egress"],
                                  check_mode=module.check_mode)
        if p["agent"] not in p["agents"]:
            raise OverlayError("agent %r is not one of the plan's agents (%s)" % (p["agent"], ", ".join(p["agents"])))
        local_ip = str(p["underlay_ips"].get(p["agent"], ""))
        underlay_mtu = p["underlay_mtu"]
        if underlay_mtu is None:
            underlay_mtu = host.link_of(local_ip)[1]
        counts = {str(k): int(v) for k, v in (p["counts"] or {}).items()}
        layout = plan_overlay(p["network"], p["agents"], p["underlay_ips"], underlay_mtu=underlay_mtu, subnet=p["subnet"],
                              vni=p["vni"], egress=p["egress"], counts=counts, underlay_dev=p["underlay_interface"] or "")
        ov = layout[p["agent"]]
        result = apply_overlay(ov, host, conflist, render_conflist(ov), check_mode=module.check_mode)
    except OverlayError as e:
        raise OverlayFailure(str(e)) from None
    result["overlay"] = {"network": ov.network, "vni": ov.vni, "subnet": ov.subnet, "mtu": ov.mtu, "bridge": ov.bridge,
                         "vxlan": ov.vxlan, "peers": list(ov.peers), "conflist": conflist,
                         "range": {"start": ov.range.start, "end": ov.range.end, "gateway": ov.range.gateway}}
    return result


def main() -> None:
    module = ClusterModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            network=dict(type="str", required=True),
            agent=dict(type="str"),
            agents=dict(type="list", elements="str"),
            underlay_ips=dict(type="dict"),
            subnet=dict(type="str"),
            vni=dict(type="int"),
            underlay_mtu=dict(type="int"),
            underlay_interface=dict(type="str"),
            egress=dict(type="bool", default=True),
            counts=dict(type="dict"),
            cni_config_dir=dict(type="path", default="/opt/cni/config"),
            ipam_data_dir=dict(type="path", default="/var/lib/cni/networks"),
            netns=dict(type="str"),
        ),
        shared=(),
        required_if=[("state", "present", ["agent", "agents", "underlay_ips"])],
    )
    module.run(run)


if __name__ == "__main__":
    main()
