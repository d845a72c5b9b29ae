#!/usr/bin/python
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_agents
short_description: Several agent "hosts" on this machine, for trying multi-node sessions with the local backend
version_added: 0.1.0
description:
  - Creates or removes a set of local agents. Each agent is a network namespace of this machine with its own address
    on an underlay network (a bridge inside a namespace of its own; nothing is added to the host's namespace).
  - The result's RV(agents) list is what M(backendai.cluster.session) takes as O(backendai.cluster.session#module:agents)
    with the local backend. A multi-node session is then placed on these agents like on Nomad nodes; its containers sit
    behind their agents and are joined across agents by the session's VXLAN overlay.
  - Idempotent - the same definition on running agents changes nothing. Removal is refused while sessions are still
    on the agents (destroy them first), unless O(force=true).
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - backendai.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  state:
    description: V(present) creates the agents (recreating them if their definition changed); V(absent) removes them.
    type: str
    choices: [present, absent]
    default: present
  agents:
    description:
      - The agents, each C({name, cpu, memory, gpu, datacenter}) - the capacity placement sees (CPU in MHz, memory in
        MB, GPU devices). Names are DNS labels of at most 31 characters.
      - Required with O(state=present).
    type: list
    elements: dict
  name:
    description: Name of this set of agents (several sets may exist side by side).
    type: str
    default: local
  state_dir:
    description: Directory where local agents keep their state, one subdirectory per set.
    type: path
    default: ~/.local/state/backendai-cluster/agents
  underlay_subnet:
    description: The underlay network of the agents; the n-th agent gets its n-th host address.
    type: str
    default: 10.230.0.0/24
  underlay_mtu:
    description:
      - MTU of the underlay. Overlay networks on these agents get 50 bytes less (VXLAN over IPv4).
    type: int
    default: 1500
  force:
    description: With O(state=absent), remove the agents even while sessions are on them (they stop working).
    type: bool
    default: false
requirements:
  - root, iproute2 (network namespaces, veth, bridge)
seealso:
  - module: backendai.cluster.session
"""

EXAMPLES = r"""
- name: Three local agents
  backendai.cluster.local_agents:
    agents:
      - {name: agent1, cpu: 4000, memory: 4096}
      - {name: agent2, cpu: 4000, memory: 4096}
      - {name: agent3, cpu: 4000, memory: 4096}
  register: local

- name: A multi-node session spread over them
  backendai.cluster.session:
    backend: local
    spec: "{{ session }}"
    agents: "{{ local.agents }}"

- name: Remove the agents (after the sessions on them)
  backendai.cluster.local_agents:
    state: absent
"""

RETURN = r"""
agents:
  description:
    - The agents as the session module takes them - C(name), C(cpu), C(memory), C(gpu), C(datacenter) - plus C(local),
      what the local backend needs (C(netns), C(underlay_ip), C(underlay_mtu), C(cni_config_dir), C(state_dir),
      C(fabric)).
  returned: state=present
  type: list
  elements: dict
state_dir:
  description: Where this set of agents keeps its state.
  returned: always
  type: str
"""

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as _local_agents
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import ClusterModule


def run(module: ClusterModule) -> t.Dict[str, t.Any]:
    p = module.params
    if p["state"] == "present":
        return _local_agents.create_agents(p["agents"], p["state_dir"], p["name"], p["underlay_subnet"], p["underlay_mtu"],
                                           check_mode=module.check_mode)
    return _local_agents.destroy_agents(p["state_dir"], p["name"], force=p["force"], check_mode=module.check_mode)


def main() -> None:
    module = ClusterModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            agents=dict(type="list", elements="dict"),
            name=dict(type="str", default="local"),
            state_dir=dict(type="path", default=_local_agents.DEFAULT_AGENTS_ROOT),
            underlay_subnet=dict(type="str", default=_local_agents.UNDERLAY_SUBNET),
            underlay_mtu=dict(type="int", default=_local_agents.UNDERLAY_MTU),
            force=dict(type="bool", default=False),
        ),
        shared=(),
        required_if=[("state", "present", ["agents"])],
    )
    module.run(run)


if __name__ == "__main__":
    main()
