# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement: which agent runs which container. Pure and deterministic.

Rules (from Backend.AI's cluster session docs):

* single-node: every container on one agent that can hold all of them; if none can, the plan is
  ``PENDING`` with a reason that says, per agent, which resource is short.
* multi-node: if one agent can hold every container, all go there (to cut latency); otherwise the
  containers are spread across agents. All or nothing: either every container has an agent or the
  plan is ``PENDING``.
* host volumes (Nomad's rule, not from those docs): a session whose mounts need host volumes goes
  only to agents that declare every one, read-write where a mount of it is read-write
  (:func:`volume_shortage`); an agent of unknown volumes (no ``host_volumes``) is assumed to serve them.
* strategies: ``concentrated`` (default; as few agents as possible) and ``dispersed`` (as many as
  possible). The same input gives the same plan; ties are broken by agent name.

Agents are free capacities (what is left on the node), not totals.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._errors import AgentsError, Problem
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Resources

PLACED = "PLACED"
PENDING = "PENDING"
#: How many agents a PENDING reason lists one by one before it summarises the rest.
REASON_AGENT_LIMIT = 8


class Agent(t.NamedTuple):
    """Free capacity of one agent (a Nomad client node): CPU MHz, memory MB, GPU devices.

    A named tuple rather than a frozen dataclass: a plan reads thousands of agents (inventories of
    10,000 nodes), and a frozen dataclass costs about ten times as much to make."""

    name: str
    cpu: int
    memory: int
    gpu: int = 0
    datacenter: str = "dc1"
    drivers: t.Optional[t.Tuple[str, ...]] = None  # None: unknown, assume every driver
    #: Host volumes the node declares, name -> declared read-only. None: unknown, assume every volume.
    host_volumes: t.Optional[t.Mapping[str, bool]] = None


class HostVolume(t.NamedTuple):
    """A host volume every container of a session needs on its node: the volume's name, whether each mount of
    it is read-only, the mount source it serves and, for a volume that is not a mount's, what it is (for reasons)."""

    name: str
    read_only: bool
    source: str = ""
    purpose: str = ""


#: Appended to a PENDING reason when a node lacks a host volume: where an operator declares one.
VOLUME_HINT = ("; to declare a mount source on the clients that should serve it, add {path: <source>} (read_only: true "
               "only if every mount of it is read-only) to the overlay_agent role's overlay_agent_data_roots there and "
               "restart their Nomad client")


@dataclass(frozen=True)
class Placement:
    """The outcome: an agent name per container (global order), or PENDING with a reason."""

    status: str
    agents: t.Tuple[str, ...]
    reason: str = ""

    @property
    def agents_used(self) -> t.Tuple[str, ...]:
        """Distinct agents, in order of first use."""
        return tuple(dict.fromkeys(self.agents))


def parse_agents(raw: t.Any, path: str = "agents") -> t.List[Agent]:
    """Validate a list of agent mappings ``{name, cpu, memory, gpu?, datacenter?, drivers?, ...}``.

    Unknown keys are allowed (inventory host vars carry more); every problem is reported at once.
    """
    problems: t.List[Problem] = []
    if not isinstance(raw, list):
        raise AgentsError([Problem(path, "must be a list of {name, cpu, memory, gpu, datacenter}", raw, True)])
    agents: t.List[Agent] = []
    seen: t.Set[str] = set()
    for i, item in enumerate(raw):
        if isinstance(item, dict):  # the common case, checked in one go; anything else gets the full diagnosis below
            name, cpu, memory, gpu = item.get("name"), item.get("cpu"), item.get("memory"), item.get("gpu", 0)
            dc, drivers = item.get("datacenter", "dc1"), item.get("drivers")
            if (isinstance(name, str) and name and name not in seen and _count(cpu) and _count(memory) and _count(gpu)
                    and isinstance(dc, str) and dc and drivers is None and item.get("host_volumes") is None):
                seen.add(name)
                agents.append(Agent(name, cpu, memory, gpu, dc, None))
                continue
        agent = _parse_agent(item, "%s[%d]" % (path, i), seen, problems)
        if agent is not None:
            agents.append(agent)
    if problems:
        raise AgentsError(problems)
    return agents


def _count(value: t.Any) -> bool:
    """An integer ≥ 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_agent(item: t.Any, where: str, seen: t.Set[str], problems: t.List[Problem]) -> t.Optional[Agent]:
    """One agent mapping, every problem with it added to ``problems`` (None if it is not a mapping)."""
    if not isinstance(item, dict):
        problems.append(Problem(where, "must be a mapping {name, cpu, memory, gpu, datacenter}", item, True))
        return None
    name = item.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem(where + ".name", "is required: the agent (Nomad node) name", name, name is not None))
        name = ""
    elif name in seen:
        problems.append(Problem(where + ".name", "is used by two agents", name, True))
    seen.add(name)
    nums = {}
    for key, required in (("cpu", True), ("memory", True), ("gpu", False)):
        value = item.get(key, None if required else 0)
        if not _count(value):
            problems.append(Problem("%s.%s" % (where, key), "must be an integer ≥ 0 (free %s)" % {
                "cpu": "CPU in MHz", "memory": "memory in MB", "gpu": "GPU devices"}[key], value, value is not None))
            value = 0
        nums[key] = value
    dc = item.get("datacenter", "dc1")
    if not isinstance(dc, str) or not dc:
        problems.append(Problem(where + ".datacenter", "must be a non-empty string", dc, True))
        dc = "dc1"
    drivers = item.get("drivers")
    if drivers is not None:
        if isinstance(drivers, dict):  # inventory form: {docker: true, exec: false}
            drivers = sorted(k for k, v in drivers.items() if v)
        if not isinstance(drivers, list) or not all(isinstance(d, str) for d in drivers):
            problems.append(Problem(where + ".drivers", "must be a list of task driver names", drivers, True))
            drivers = None
        else:
            drivers = tuple(drivers)
    return Agent(name, nums["cpu"], nums["memory"], nums["gpu"], dc, drivers,
                 _parse_host_volumes(item.get("host_volumes"), where + ".host_volumes", problems))


def _parse_host_volumes(raw: t.Any, where: str, problems: t.List[Problem]) -> t.Optional[t.Dict[str, bool]]:
    """``{name: {read_only: bool}}`` (the shape of Nomad's ``HostVolumes``) or a list of names (read-write)."""
    if raw is None:
        return None
    if isinstance(raw, list) and all(isinstance(n, str) and n for n in raw):
        return {n: False for n in raw}
    if isinstance(raw, dict) and all(isinstance(n, str) and n and isinstance(v, dict)
                                     and isinstance(v.get("read_only", False), bool) for n, v in raw.items()):
        return {n: v.get("read_only", False) for n, v in raw.items()}
    problems.append(Problem(where, "must map each host volume the node declares to {read_only: true|false}, or list "
                                   "their names", raw, True))
    return None


def volume_shortage(agent: Agent, volumes: t.Sequence[HostVolume]) -> str:
    """Why ``agent`` cannot serve ``volumes`` ("" if it can), as Nomad's scheduler decides for a static host volume
    (scheduler/feasible/feasible.go, HostVolumeChecker.nodeIsFeasibleForRequest): the node must declare it by name,
    and one it declares read-only serves only a read-only request. An agent of unknown volumes serves every one."""
    if agent.host_volumes is None:
        return ""
    short = []
    for volume in volumes:
        declared = agent.host_volumes.get(volume.name)
        if declared is None:
            short.append("no host volume %s (%s)" % (volume.name, volume.purpose or "mount source %s" % (volume.source or "?")))
        elif declared and not volume.read_only:
            short.append("host volume %s (mount source %s) is declared read-only, a mount of it is read-write" % (
                volume.name, volume.source or "?"))
    return ", ".join(short)


def _size_key(d: Resources) -> t.Tuple[int, int, int]:
    """Biggest first (GPU, then memory, then CPU): first-fit decreasing packs mixed sizes well."""
    return (-d.gpu, -d.memory, -d.cpu)


def _runs(demands: t.Sequence[Resources]) -> t.List[t.Tuple[Resources, int]]:
    """Equal demands counted together, biggest kind first (ties keep the order of first appearance)."""
    counts: t.Dict[Resources, int] = {}
    for d in demands:
        counts[d] = counts.get(d, 0) + 1
    return sorted(counts.items(), key=lambda item: _size_key(item[0]))


def _how_many(free: t.Sequence[int], d: Resources, limit: int) -> int:
    """How many containers of demand ``d`` fit into ``free`` (cpu, memory, gpu; at most ``limit``).

    Written out, not looped: placement calls it once per agent and kind of container (10,000 agents)."""
    n = limit
    if d.cpu:
        n = min(n, free[0] // d.cpu)
    if d.memory:
        n = min(n, free[1] // d.memory)
    if d.gpu:
        n = min(n, free[2] // d.gpu)
    return n if n > 0 else 0


def _fill(agent: Agent, runs: t.Sequence[t.Tuple[Resources, int]]) -> int:
    """How many of the containers this agent alone would take, filling the biggest kinds first."""
    if len(runs) == 1:  # one kind of container (the usual session): no free capacity to carry over
        return _how_many((agent.cpu, agent.memory, agent.gpu), runs[0][0], runs[0][1])
    free = [agent.cpu, agent.memory, agent.gpu]
    taken = 0
    for d, count in runs:
        k = _how_many(free, d, count)
        if k:
            taken += k
            free[0] -= k * d.cpu
            free[1] -= k * d.memory
            free[2] -= k * d.gpu
    return taken


def _total(demands: t.Sequence[Resources]) -> Resources:
    return Resources(sum(d.cpu for d in demands), sum(d.memory for d in demands), sum(d.gpu for d in demands))


def _shortage(agent: Agent, need: Resources) -> str:
    parts = []
    for label, have, want, unit in (("cpu", agent.cpu, need.cpu, " MHz"), ("memory", agent.memory, need.memory, " MB"),
                                    ("gpu", agent.gpu, need.gpu, "")):
        if have < want:
            parts.append("%s short by %d%s (%d free, %d needed)" % (label, want - have, unit, have, want))
    return ", ".join(parts)


def _limited(lines: t.List[str]) -> str:
    shown = lines[:REASON_AGENT_LIMIT]
    if len(lines) > REASON_AGENT_LIMIT:
        shown.append("and %d more agent(s)" % (len(lines) - REASON_AGENT_LIMIT))
    return "; ".join(shown)


def place(demands: t.Sequence[Resources], agents: t.Sequence[Agent], cluster_mode: str = "single-node",
          strategy: str = "concentrated", driver: str = "docker",
          datacenters: t.Sequence[str] = (), volumes: t.Sequence[HostVolume] = ()) -> Placement:
    """Place containers (their per-container demands, in global order, main1 first) on agents; every
    container needs ``volumes`` on its agent (:func:`volume_shortage`)."""
    eligible: t.List[Agent] = []
    excluded: t.List[str] = []
    lacking = False
    for a in agents:
        if datacenters and a.datacenter not in datacenters:
            excluded.append("%s: datacenter %s is not in %s" % (a.name, a.datacenter, ", ".join(datacenters)))
        elif a.drivers is not None and driver not in a.drivers:
            excluded.append("%s: no %s driver" % (a.name, driver))
        else:
            short = volume_shortage(a, volumes) if volumes else ""
            if short:
                excluded.append("%s: %s" % (a.name, short))
                lacking = True
            else:
                eligible.append(a)
    placement = _place(demands, agents, eligible, excluded, cluster_mode, strategy)
    if lacking and placement.status == PENDING:
        return Placement(PENDING, (), placement.reason + VOLUME_HINT)
    return placement


def _place(demands: t.Sequence[Resources], agents: t.Sequence[Agent], eligible: t.Sequence[Agent],
           excluded: t.List[str], cluster_mode: str, strategy: str) -> Placement:
    """:func:`place` on the ``eligible`` agents (``excluded``: why each other agent is not)."""
    n = len(demands)
    if not eligible:
        why = "no agent is eligible" if agents else "no agents were given"
        return Placement(PENDING, (), why + (": " + _limited(excluded) if excluded else ""))

    total = _total(demands)
    cpu, memory, gpu = total.cpu, total.memory, total.gpu
    whole = [a for a in eligible if a.cpu >= cpu and a.memory >= memory and a.gpu >= gpu]
    if whole:
        # GPU agents last when no GPU is needed; then dispersed takes the most headroom left, and
        # concentrated the tightest fit, keeping big agents free for big sessions.
        sign = -1 if strategy == "dispersed" else 1
        chosen = min(whole, key=lambda a: (a.gpu - total.gpu, sign * (a.memory - total.memory),
                                           sign * (a.cpu - total.cpu), a.name))
        return Placement(PLACED, (chosen.name,) * n)

    if cluster_mode == "single-node":
        lines = sorted(((_shortage(a, total), a.name) for a in eligible), key=lambda x: (len(x[0]), x[1]))
        return Placement(PENDING, (), "no single agent can hold all %d containers (they need cpu %d MHz, memory %d MB, "
                                      "gpu %d in total): %s" % (n, total.cpu, total.memory, total.gpu, _limited(
                                          ["%s: %s" % (name, why) for why, name in lines] + excluded)))

    runs = _runs(demands)
    fills = {a.name: _fill(a, runs) for a in eligible}
    # most containers first, then by name; sorted on plain tuples (compared in C), the index keeps the agent
    ordered = [eligible[key[2]] for key in sorted(zip([-fills[a.name] for a in eligible], [a.name for a in eligible],
                                                      range(len(eligible))))]
    if strategy == "dispersed":
        assigned = _spread_dispersed(demands, ordered)
    else:
        assigned = _spread_concentrated(demands, ordered)
    if assigned is None:
        capacity = sum(fills.values())
        per_agent = ["%s holds %d" % (a.name, fills[a.name]) for a in ordered if fills[a.name]]
        empty = [a.name for a in ordered if not fills[a.name]]
        detail = per_agent[:REASON_AGENT_LIMIT]
        if len(per_agent) > REASON_AGENT_LIMIT:
            detail.append("%d more agent(s) hold %d" % (
                len(per_agent) - REASON_AGENT_LIMIT, sum(fills[a.name] for a in ordered[REASON_AGENT_LIMIT:])))
        if empty:
            detail.append("%d agent(s) cannot hold even one container (%s)" % (
                len(empty), ", ".join(empty[:REASON_AGENT_LIMIT]) + (", ..." if len(empty) > REASON_AGENT_LIMIT else "")))
        if capacity < n:
            head = "the eligible agents together can hold only %d of %d containers" % (capacity, n)
        else:
            head = "the %d containers of mixed sizes could not all be packed onto the eligible agents" % n
        return Placement(PENDING, (), "%s (each needs up to cpu %d MHz, memory %d MB, gpu %d): %s" % (
            head, max(d.cpu for d in demands), max(d.memory for d in demands), max(d.gpu for d in demands),
            "; ".join(detail + excluded[:REASON_AGENT_LIMIT])))
    return Placement(PLACED, tuple(assigned))


def _spread_concentrated(demands: t.Sequence[Resources], ordered: t.Sequence[Agent]) -> t.Optional[t.List[str]]:
    """Fill the agents that take the most containers first (fewest agents); None if not all fit."""
    result: t.List[t.Optional[str]] = [None] * len(demands)
    # remaining container indices grouped by demand, in global order
    groups: t.Dict[Resources, t.List[int]] = {}
    for i, d in enumerate(demands):
        groups.setdefault(d, []).append(i)
    order = sorted(groups, key=_size_key)  # biggest kinds first; dicts keep first-appearance order for ties
    left = len(demands)
    for agent in ordered:
        if not left:
            break
        free = [agent.cpu, agent.memory, agent.gpu]
        for d in order:
            pending = groups[d]
            if not pending:
                continue
            k = _how_many(free, d, len(pending))
            if not k:
                continue
            for i in pending[:k]:
                result[i] = agent.name
            del pending[:k]
            left -= k
            free[0] -= k * d.cpu
            free[1] -= k * d.memory
            free[2] -= k * d.gpu
    if left:
        return None
    return t.cast(t.List[str], result)


def _spread_dispersed(demands: t.Sequence[Resources], ordered: t.Sequence[Agent]) -> t.Optional[t.List[str]]:
    """Round-robin over the agents (most capacity first), biggest containers first; None if not all fit."""
    free = [[a.cpu, a.memory, a.gpu] for a in ordered]
    active = list(range(len(ordered)))
    result: t.List[str] = [""] * len(demands)
    pos = 0
    for i in sorted(range(len(demands)), key=lambda i: _size_key(demands[i])):  # stable: global order within a size
        d = demands[i]
        placed = False
        tries = 0
        while active and tries < len(active):
            pos %= len(active)
            slot = active[pos]
            f = free[slot]
            if f[0] >= d.cpu and f[1] >= d.memory and f[2] >= d.gpu:
                f[0] -= d.cpu
                f[1] -= d.memory
                f[2] -= d.gpu
                result[i] = ordered[slot].name
                pos += 1
                placed = True
                break
            pos += 1
            tries += 1
        if not placed:
            return None
    return result
