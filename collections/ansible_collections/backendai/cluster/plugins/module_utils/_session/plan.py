# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session plan: the spec expanded into containers (hostname, role, index, ranks, agent, IDs).

``build_plan(spec, agents, session_id)`` is the single place where the cluster layout is decided;
the environment, the Nomad job and the local runtime all read it. Pure and deterministic.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import PENDING, PLACED, Agent, HostVolume, place
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import NETWORK_NAME
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Resources, SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_kernel_id

SINGLE_NODE = "single-node"
MULTI_NODE = "multi-node"
#: Every group of every session, single-node or multi-node: the one static CNI network of each agent.
NETWORK_MODE = "cni/" + NETWORK_NAME


@dataclass(frozen=True)
class Container:
    hostname: str  # <role><idx>: main1, sub1, ...
    role: str
    idx: int  # 1-based within the role
    rank: int  # 0-based global index (WORLD_RANK, BACKENDAI_CLUSTER_LOCAL_RANK)
    local_rank: int  # 0-based index among this session's containers on the same agent (LOCAL_RANK)
    agent: str
    datacenter: str  # the agent's datacenter ("" while PENDING)
    kernel_id: str
    image: str
    command: t.Tuple[str, ...]
    resources: Resources
    user_env: t.Tuple[t.Tuple[str, str], ...]

    @property
    def is_main(self) -> bool:
        return self.role == "main"


@dataclass(frozen=True)
class SessionPlan:
    spec: SessionSpec
    status: str  # PLACED or PENDING
    reason: str
    session_id: str
    containers: t.Tuple[Container, ...]
    mode: str  # BACKENDAI_CLUSTER_MODE: single-node when all containers share one agent
    network_mode: str  # always NETWORK_MODE: the session network (see _session_network)

    @property
    def placed(self) -> bool:
        return self.status == PLACED

    @property
    def hostnames(self) -> t.Tuple[str, ...]:
        return tuple(c.hostname for c in self.containers)

    @property
    def replicas(self) -> str:
        """``main:1,sub:3``: roles in global order with their replica counts."""
        return ",".join("%s:%d" % (r.name, r.replicas) for r in self.spec.roles)

    @property
    def agents_used(self) -> t.Tuple[str, ...]:
        return tuple(dict.fromkeys(c.agent for c in self.containers if c.agent))


def expand_roles(spec: SessionSpec) -> t.List[t.Tuple[str, str, int, t.Any]]:
    """(hostname, role, idx, Role) in global order: main1 first, then roles in spec order, by index."""
    out = []
    for role in spec.roles:
        for idx in range(1, role.replicas + 1):
            out.append(("%s%d" % (role.name, idx), role.name, idx, role))
    return out


def build_plan(spec: SessionSpec, agents: t.Sequence[Agent], session_id: str,
               volumes: t.Sequence[HostVolume] = ()) -> SessionPlan:
    """Place the session on ``agents`` and lay out its containers; ``volumes``: the host volumes every
    container needs on its agent (the backend's form of the spec's mounts; none on the local backend).

    A PENDING plan still lists the containers (with an empty agent) so that callers can show them.
    """
    layout = expand_roles(spec)
    placement = place([entry[3].resources for entry in layout], agents, spec.cluster_mode,
                      spec.strategy, spec.driver, spec.datacenters, volumes)
    assigned = placement.agents if placement.status == PLACED else ("",) * len(layout)
    datacenter_of = {a.name: a.datacenter for a in agents}
    per_agent: t.Dict[str, int] = {}
    containers = []
    for rank, ((hostname, role_name, idx, role), agent) in enumerate(zip(layout, assigned)):
        local_rank = per_agent.get(agent, 0)
        per_agent[agent] = local_rank + 1
        containers.append(Container(
            hostname=hostname, role=role_name, idx=idx, rank=rank, local_rank=local_rank, agent=agent,
            datacenter=datacenter_of.get(agent, ""),
            kernel_id=derive_kernel_id(session_id, hostname, rank == 0), image=role.image,
            command=role.command, resources=role.resources, user_env=role.env,
        ))
    spans = len(placement.agents_used) if placement.status == PLACED else 0
    mode = MULTI_NODE if spans > 1 else SINGLE_NODE
    return SessionPlan(spec=spec, status=placement.status if placement.status == PLACED else PENDING,
                       reason=placement.reason, session_id=session_id, containers=tuple(containers),
                       mode=mode, network_mode=NETWORK_MODE)
