# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Batch admission (issue 24): the admission lock's holder places the creates queued behind it in one pass.

Pure planning, no HTTP (``_nomad.admission`` carries the requests and grants, ``_nomad.nomad_backend`` uses them).

A waiter publishes its :func:`placement_request` in its queue entry: what placement needs and nothing else
(per-container CPU, memory and GPUs, cluster mode, strategy, driver, datacenters, host volume names); no
name, image, environment or key. The holder, after placing its own session on one live capacity read, places
the queued requests in queue order on what is left (:class:`BatchPlanner`), each on the capacity the ones
before it left, and grants each the agents its containers go to with exactly the capacity they take there:
the waiter renders its own job on those agents alone (the same placement rules, so it cannot take more than
it was granted, whatever it decides among them) and registers it with its own keypair and token. The holder
never sees another session's secrets and never acts for another client.
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import host_volumes_needed
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import (
    PLACED,
    Agent,
    HostVolume,
    parse_agents,
    place,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan, expand_roles
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Resources, SessionSpec

#: Usage of one agent by a placement: (CPU MHz, memory MB, GPUs).
Usage = t.Tuple[int, int, int]


def placement_request(spec: SessionSpec) -> t.Dict[str, t.Any]:
    """What the holder needs to place this session for it (JSON-safe, no secret, nothing but placement)."""
    return {
        "demands": [[role.resources.cpu, role.resources.memory, role.resources.gpu] for _h, _r, _i, role in expand_roles(spec)],
        "cluster_mode": spec.cluster_mode, "strategy": spec.strategy, "driver": spec.driver,
        "datacenters": list(spec.datacenters),
        "volumes": [[v.name, bool(v.read_only)] for v in host_volumes_needed(spec.mounts)],
    }


def _usage(agents: t.Sequence[str], demands: t.Sequence[Resources]) -> t.Dict[str, Usage]:
    out: t.Dict[str, Usage] = {}
    for name, demand in zip(agents, demands):
        cpu, memory, gpu = out.get(name, (0, 0, 0))
        out[name] = (cpu + demand.cpu, memory + demand.memory, gpu + demand.gpu)
    return out


class BatchPlanner:
    """The free capacity left by the holder's own plan (``pool``: the agents it was placed on, as
    ``_nomad.nodes.live_agents`` gives them), taken from by each grant in turn."""

    def __init__(self, pool: t.Sequence[t.Mapping[str, t.Any]], own: SessionPlan) -> None:
        self._dicts = {str(a.get("name")): dict(a) for a in pool}
        self._agents: t.List[Agent] = parse_agents(list(pool))
        self._index = {a.name: i for i, a in enumerate(self._agents)}
        self._take(_usage([c.agent for c in own.containers], [c.resources for c in own.containers]))

    def _take(self, usage: t.Mapping[str, Usage]) -> None:
        for name, (cpu, memory, gpu) in usage.items():
            if name not in self._index:  # not placed ("") or not in the pool
                continue
            i = self._index[name]
            a = self._agents[i]
            self._agents[i] = a._replace(cpu=a.cpu - cpu, memory=a.memory - memory, gpu=a.gpu - gpu)

    def grant(self, request: t.Any) -> t.Optional[t.List[t.Dict[str, t.Any]]]:
        """The agents (``live_agents`` form) a queued request is granted, each with exactly the capacity its containers
        take there, or None: it does not fit now, or the request is not one this planner reads (the waiter then
        places itself when its turn comes)."""
        try:
            demands = [Resources(cpu=int(c), memory=int(m), gpu=int(g)) for c, m, g in request["demands"]]
            volumes = [HostVolume(str(name), bool(read_only)) for name, read_only in request.get("volumes") or []]
            placement = place(demands, self._agents, str(request["cluster_mode"]), str(request["strategy"]),
                              str(request["driver"]), [str(d) for d in request.get("datacenters") or []], volumes)
        except (KeyError, TypeError, ValueError):
            return None
        if placement.status != PLACED or not demands:
            return None
        usage = _usage(placement.agents, demands)
        self._take(usage)
        return [dict(self._dicts[name], cpu=cpu, memory=memory, gpu=gpu) for name, (cpu, memory, gpu) in usage.items()]
