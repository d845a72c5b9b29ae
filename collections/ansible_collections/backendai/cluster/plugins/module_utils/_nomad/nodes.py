# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Agents (placement input) from live Nomad node data.

The ``session`` module and the ``nomad_nodes`` inventory plugin read nodes the same way:
:func:`summarize_node` (``_nomad_api``) gives free capacity, and :func:`agent_from_summary` turns a
summary into the agent mapping placement takes. The inventory plugin stores that mapping as the
host variable ``backendai_agent``, so a playbook can build the same ``agents`` list from hostvars.
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, summarize_node

#: Jobs without a NodePool (as this collection renders them) only run in Nomad's default pool.
SCHEDULABLE_POOLS = ("default",)
#: The device the rendered job requests for ``resources.gpu`` (``nvidia/gpu``): vendor, type.
GPU_DEVICE = ("nvidia", "gpu")


def free_gpus(summary: t.Mapping[str, t.Any]) -> int:
    """Free ``nvidia/gpu`` device instances of a node summary (over every model)."""
    total = 0
    for key, count in ((summary.get("free") or {}).get("devices") or {}).items():
        parts = key.split("/")
        if tuple(parts[:2]) == GPU_DEVICE:
            total += int(count)
    return total


def is_schedulable(summary: t.Mapping[str, t.Any]) -> bool:
    """Ready, eligible, not draining: a node Nomad places new allocations on."""
    return summary.get("status") == "ready" and bool(summary.get("eligible")) and not summary.get("drain")


def agent_from_summary(summary: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The placement agent (``{name, cpu, memory, gpu, datacenter, drivers, node_pool}``) of a node summary."""
    free = summary.get("free") or {}
    return {
        "name": summary.get("name"),
        "cpu": int(free.get("cpu") or 0),
        "memory": int(free.get("memory") or 0),
        "gpu": free_gpus(summary),
        "datacenter": summary.get("datacenter") or "dc1",
        "drivers": list(summary.get("drivers") or []),
        "node_pool": summary.get("node_pool") or "default",
    }


def allocations_by_node(client: NomadClient) -> t.Dict[str, t.List[t.Dict[str, t.Any]]]:
    """Node ID -> the live allocations on it (``AllocatedResources`` included), read in bulk."""
    out: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {}
    for alloc in client.live_allocations():
        out.setdefault(str(alloc.get("NodeID") or ""), []).append(alloc)
    return out


def live_agents(client: NomadClient, exclude_job: t.Optional[str] = None,
                namespace: str = "default") -> t.List[t.Dict[str, t.Any]]:
    """Free capacity of every ready, eligible node of the default node pool, sorted by name.

    A constant number of requests whatever the cluster size: ``GET /v1/nodes?resources=true``
    (capacity and reservations of every node) and ``GET /v1/allocations`` of every namespace,
    filtered by Nomad to the live ones and paged (see ``NomadClient.live_allocations``).
    With ``exclude_job``, that job's own allocations count as free (re-planning an existing
    session must see the capacity it already holds, or it would not fit where it runs).
    """
    nodes = client.list_nodes(resources=True)
    by_node = allocations_by_node(client)
    agents = []
    for stub in nodes:
        if stub.get("NodePool", "default") not in SCHEDULABLE_POOLS:
            continue
        if stub.get("Status") != "ready" or stub.get("SchedulingEligibility") != "eligible" or stub.get("Drain"):
            continue
        allocations = by_node.get(stub["ID"], [])
        if exclude_job:
            allocations = [a for a in allocations
                           if not (a.get("JobID") == exclude_job and (a.get("Namespace") or "default") == namespace)]
        agents.append(agent_from_summary(summarize_node(stub, allocations)))
    return sorted(agents, key=lambda a: a["name"] or "")


#: Node meta that overrides a node's underlay address / MTU for the session network (multi-homed agents).
UNDERLAY_IP_META = "backendai.underlay_ip"
UNDERLAY_MTU_META = "backendai.underlay_mtu"
DEFAULT_UNDERLAY_MTU = 1500


def underlay_addresses(client: NomadClient, names: t.Sequence[str],
                       agents: t.Optional[t.Sequence[t.Mapping[str, t.Any]]] = None) -> t.Dict[str, t.Tuple[str, int]]:
    """Agent name -> (underlay IPv4, underlay MTU) for the session network's ``BAI_AGENTS``.

    In order: the agent's ``underlay_ip``/``underlay_mtu`` in ``agents`` (the modules' option), the
    node's meta ``backendai.underlay_ip``/``backendai.underlay_mtu`` (``GET /v1/node/:id``, only for
    these agents), the node's ``Address`` (one ``GET /v1/nodes``) and 1500. It must be the address
    the overlay_agent role wrote into that agent's ``backendai.conflist``.
    """
    given = {str(a.get("name")): a for a in agents or [] if isinstance(a, t.Mapping)}
    stubs = {s.get("Name"): s for s in client.list_nodes()}
    out: t.Dict[str, t.Tuple[str, int]] = {}
    for name in names:
        entry, stub = given.get(name) or {}, stubs.get(name) or {}
        meta = {}
        if stub.get("ID") and not (entry.get("underlay_ip") and entry.get("underlay_mtu")):
            meta = (client.node(stub["ID"]) or {}).get("Meta") or {}
        ip = entry.get("underlay_ip") or meta.get(UNDERLAY_IP_META) or stub.get("Address") or ""
        mtu = entry.get("underlay_mtu") or meta.get(UNDERLAY_MTU_META) or DEFAULT_UNDERLAY_MTU
        if not ip:
            raise ValueError("agent %s: no underlay address for the session network (it is not a Nomad node of this "
                             "cluster and its entry in agents has no underlay_ip)" % name)
        try:
            out[name] = (str(ip), int(mtu))
        except (TypeError, ValueError):
            raise ValueError("agent %s: underlay MTU must be an integer, got %r" % (name, mtu)) from None
    return out
