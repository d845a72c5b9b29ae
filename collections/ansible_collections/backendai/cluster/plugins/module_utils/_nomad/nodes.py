# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Agents (placement input) from live Nomad node data.

The ``session`` module and the ``nomad_nodes`` inventory plugin read nodes the same way:
:func:`summarize_node` gives free capacity (pure arithmetic over the node and its allocations), and :func:`agent_from_summary` turns a
summary into the agent mapping placement takes. The inventory plugin stores that mapping as the
host variable ``backendai_agent``, so a playbook can build the same ``agents`` list from hostvars.
"""

from __future__ import annotations

import functools
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import DEFAULT_UNDERLAY_MTU

_TERMINAL_CLIENT_STATUSES = frozenset(("complete", "failed", "lost"))
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
    """The placement agent (``{name, cpu, memory, gpu, datacenter, drivers, node_pool, host_volumes}``) of a node
    summary; ``host_volumes``: ``{name: {read_only}}`` of every host volume the node declares."""
    free = summary.get("free") or {}
    return {
        "name": summary.get("name"),
        "cpu": int(free.get("cpu") or 0),
        "memory": int(free.get("memory") or 0),
        "gpu": free_gpus(summary),
        "datacenter": summary.get("datacenter") or "dc1",
        "drivers": list(summary.get("drivers") or []),
        "node_pool": summary.get("node_pool") or "default",
        "host_volumes": {name: {"read_only": bool(v.get("read_only"))}
                         for name, v in (summary.get("host_volumes") or {}).items()},
    }


# The inventory plugin loads this module: it stays clear of the job renderer and the network code, so these two
# are written out here (a unit test checks them against ``_nomad.job.PLUGIN_ATTRIBUTE`` and
# ``_session_network.MIN_NOMAD_VERSION``).
#: The node attribute of the collection's CNI plugin "backendai" (see ``_nomad.job.PLUGIN_ATTRIBUTE``).
PLUGIN_ATTRIBUTE = "plugins.cni.version.backendai"
#: The oldest Nomad client a session can use: only from 1.10 does it add its own identity to CNI_ARGS.
MIN_CLIENT_VERSION = "1.10.0"
#: ``GET /v1/nodes`` filter: Nomad evaluates it against the whole node (``nomad/state/paginator``), so the
#: plugin attribute can be asked for although the stubs do not carry attributes (``Node.Stub``).
PLUGIN_FILTER = '"%s" in Attributes' % PLUGIN_ATTRIBUTE
#: Nomad's filter for the nodes whose meta sets the session network's underlay address or MTU (go-bexpr ``"key" in
#: Meta``: a key of the node's Meta map; Nomad filters the whole node, not the stub, which has no Meta:
#: ``nomad/state/paginator/paginator.go``); the keys are :data:`UNDERLAY_IP_META` and :data:`UNDERLAY_MTU_META`.
UNDERLAY_META_FILTER = '"backendai.underlay_ip" in Meta or "backendai.underlay_mtu" in Meta'


@functools.lru_cache(maxsize=256)  # pure, and a cluster's 1,000 nodes run a handful of Nomad versions
def _version_key(version: str) -> t.Optional[t.Tuple[t.Tuple[int, ...], int]]:
    """``1.10.2`` -> ((1, 10, 2), 1); a pre-release (``1.10.0-beta.1``) sorts before its release, as in semver;
    ``+ent``-style build metadata is ignored. None if it is not a version."""
    core, _plus, _build = str(version or "").lstrip("v").partition("+")
    core, dash, _pre = core.partition("-")
    try:
        numbers = tuple(int(p) for p in core.split("."))
    except ValueError:
        return None
    return (numbers + (0,) * (3 - len(numbers)))[:3], 0 if dash else 1


def is_min_version(version: str, minimum: str = MIN_CLIENT_VERSION) -> bool:
    """Whether a client's ``nomad.version`` is at least ``minimum`` (the job's ``semver >= 1.10.0`` constraint)."""
    have, want = _version_key(str(version or "")), _version_key(str(minimum))
    return have is not None and want is not None and have >= want


def duplicate_names(stubs: t.Iterable[t.Mapping[str, t.Any]]) -> t.Dict[str, t.List[str]]:
    """Node name -> IDs, for every name more than one node that is not down carries.

    A session's group is pinned with ``${node.unique.name} = <name>``: two nodes of one name would both
    satisfy it, and the group could run on the one whose capacity and underlay address were not planned.
    Down nodes are left out (a re-installed node keeps its name; its old entry stays down until GC).
    """
    ids: t.Dict[str, t.List[str]] = {}
    for stub in stubs:
        if stub.get("Status") != "down":
            ids.setdefault(str(stub.get("Name") or ""), []).append(str(stub.get("ID") or ""))
    return {name: sorted(found) for name, found in sorted(ids.items()) if len(found) > 1}


def allocations_by_node(client: NomadClient) -> t.Dict[str, t.List[t.Dict[str, t.Any]]]:
    """Node ID -> the live allocations on it (``AllocatedResources`` included), read in bulk."""
    out: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {}
    for alloc in client.live_allocations():
        out.setdefault(str(alloc.get("NodeID") or ""), []).append(alloc)
    return out


def live_agents(client: NomadClient, exclude_job: t.Optional[str] = None, namespace: str = "default",
                nodes: t.Optional[t.List[t.Dict[str, t.Any]]] = None) -> t.List[t.Dict[str, t.Any]]:
    """Free capacity of every node a session can use, sorted by name: ready, eligible, of the default node pool,
    with the ``backendai`` CNI plugin fingerprinted (:data:`PLUGIN_ATTRIBUTE`) at Nomad 1.10 or later (only
    from 1.10 does the client add its own identity to CNI_ARGS; the job's constraints say the same).

    Raises :class:`PlanError` when two such nodes (not down) share a name (:func:`duplicate_names`).

    Each agent carries the node's ``HostVolumes`` (its ``client { host_volume }`` declarations, name ->
    read-only), which placement matches against a session's mounts as Nomad's scheduler does
    (``_session.placement.volume_shortage``). The node list stub carries them since Nomad 0.11.0
    (``nomad/structs`` ``Node.Stub``; Go's ``api.NodeListStub`` leaves the field out, the HTTP JSON has it), so
    this costs no request per node.

    A constant number of requests whatever the cluster size: ``GET /v1/nodes?resources=true`` with
    :data:`PLUGIN_FILTER` (capacity and reservations of every node with the plugin; the stub's ``Version`` is
    its ``nomad.version``) and ``GET /v1/allocations`` of every namespace, filtered by Nomad to the live ones
    and paged (see ``NomadClient.live_allocations``). With ``exclude_job``, that job's own allocations count
    as free (re-planning an existing session must see the capacity it already holds, or it would not fit
    where it runs). ``nodes``: that node list when the caller has it already (a node catalogue read with
    :data:`PLUGIN_FILTER`); then only the allocations are read.
    """
    if nodes is None:
        nodes = client.list_nodes(resources=True, filter_expr=PLUGIN_FILTER)
    twins = duplicate_names(nodes)
    if twins:
        raise PlanError("Nomad node names must be unique, since a session pins each container with "
                        "${node.unique.name}: %s; give each client its own name (client { name = ... }) or purge "
                        "the stale node" % "; ".join("%s is the name of nodes %s" % (name, ", ".join(found))
                                                     for name, found in twins.items()))
    by_node = allocations_by_node(client)
    agents = []
    for stub in nodes:
        if stub.get("NodePool", "default") not in SCHEDULABLE_POOLS:
            continue
        if not is_min_version(str(stub.get("Version") or "")):
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


def underlay_addresses(client: t.Optional[NomadClient], names: t.Sequence[str],
                       agents: t.Optional[t.Sequence[t.Mapping[str, t.Any]]] = None,
                       nodes: t.Optional[t.Sequence[t.Mapping[str, t.Any]]] = None,
                       node: t.Optional[t.Callable[[str], t.Optional[t.Dict[str, t.Any]]]] = None,
                       ) -> t.Dict[str, t.Tuple[str, int]]:
    """Agent name -> (underlay IPv4, underlay MTU) for the session network's ``BAI_AGENTS``.

    In order: the agent's ``underlay_ip``/``underlay_mtu`` in ``agents`` (the modules' option), the
    node's meta ``backendai.underlay_ip``/``backendai.underlay_mtu`` (``GET /v1/node/:id``, only for
    these agents), the node's ``Address`` (one ``GET /v1/nodes``) and 1500. It must be the address
    the overlay_agent role wrote into that agent's ``backendai.conflist``. Without a ``client``, only
    ``agents`` (agents given as data, not read from Nomad). ``nodes``: that node list when the caller has it
    already; ``node``: reads one full node in place of ``client.node`` (a node catalogue).
    """
    given = {str(a.get("name")): a for a in agents or [] if isinstance(a, t.Mapping)}
    if nodes is None and client is not None:
        nodes = client.list_nodes()
    stubs = {s.get("Name"): s for s in nodes or []}
    read_node = node or (client.node if client is not None else None)
    out: t.Dict[str, t.Tuple[str, int]] = {}
    for name in names:
        entry, stub = given.get(name) or {}, stubs.get(name) or {}
        meta = {}
        if read_node is not None and stub.get("ID") and not (entry.get("underlay_ip") and entry.get("underlay_mtu")):
            meta = (read_node(stub["ID"]) or {}).get("Meta") or {}
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


# Node capacity ---------------------------------------------------------------------------------

def _int(value: t.Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _alloc_is_live(alloc: t.Mapping[str, t.Any]) -> bool:
    """Whether an allocation holds resources on its node (Nomad: not terminal)."""
    return alloc.get("DesiredStatus", "run") == "run" and alloc.get("ClientStatus") not in _TERMINAL_CLIENT_STATUSES


def _alloc_usage(alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    cpu = memory = disk = 0
    devices: t.Dict[str, int] = {}
    allocated = alloc.get("AllocatedResources") or {}
    if allocated:
        for res in (allocated.get("Tasks") or {}).values():
            res = res or {}
            cpu += _int((res.get("Cpu") or {}).get("CpuShares"))
            memory += _int((res.get("Memory") or {}).get("MemoryMB"))
            for dev in res.get("Devices") or []:
                key = "/".join(p for p in (dev.get("Vendor"), dev.get("Type"), dev.get("Name")) if p)
                devices[key] = devices.get(key, 0) + len(dev.get("DeviceIDs") or [])
        disk += _int((allocated.get("Shared") or {}).get("DiskMB"))
    else:  # pre-0.9 shape
        res = alloc.get("Resources") or {}
        cpu, memory, disk = _int(res.get("CPU")), _int(res.get("MemoryMB")), _int(res.get("DiskMB"))
    return {"cpu": cpu, "memory": memory, "disk": disk, "devices": devices}


def summarize_node(node: t.Mapping[str, t.Any], allocations: t.Iterable[t.Mapping[str, t.Any]] = ()) -> t.Dict[str, t.Any]:
    """A plain view of a node for inventories: identity, drivers, networks and free capacity.

    ``free = total (NodeResources) - reserved (ReservedResources) - sum of the live allocations'
    AllocatedResources``. CPU is in MHz (CpuShares), memory/disk in MB; devices are counted per
    ``vendor/type/name`` from healthy instances. CNI: ``cni_plugins`` from the
    ``plugins.cni.version.<plugin>`` attributes, ``cni_networks`` from NodeResources.Networks
    entries of mode ``cni/<name>`` (what Nomad fingerprints from ``cni_config_dir``).
    """
    resources = node.get("NodeResources") or {}
    reserved = node.get("ReservedResources") or {}
    attributes = node.get("Attributes") or {}
    total = {
        "cpu": _int((resources.get("Cpu") or {}).get("CpuShares")),
        "cpu_cores": _int((resources.get("Cpu") or {}).get("TotalCpuCores")),
        "memory": _int((resources.get("Memory") or {}).get("MemoryMB")),
        "disk": _int((resources.get("Disk") or {}).get("DiskMB")),
        "devices": {},
    }
    for dev in resources.get("Devices") or []:
        key = "/".join(p for p in (dev.get("Vendor"), dev.get("Type"), dev.get("Name")) if p)
        total["devices"][key] = sum(1 for i in dev.get("Instances") or [] if i.get("Healthy", True))
    held = {
        "cpu": _int((reserved.get("Cpu") or {}).get("CpuShares")),
        "memory": _int((reserved.get("Memory") or {}).get("MemoryMB")),
        "disk": _int((reserved.get("Disk") or {}).get("DiskMB")),
    }
    used: t.Dict[str, t.Any] = {"cpu": 0, "memory": 0, "disk": 0, "devices": {}}
    live = 0
    for alloc in allocations:
        if not _alloc_is_live(alloc):
            continue
        live += 1
        usage = _alloc_usage(alloc)
        for key in ("cpu", "memory", "disk"):
            used[key] += usage[key]
        for name, count in usage["devices"].items():
            used["devices"][name] = used["devices"].get(name, 0) + count
    free = {key: max(0, total[key] - held[key] - used[key]) for key in ("cpu", "memory", "disk")}
    free["devices"] = {name: max(0, count - used["devices"].get(name, 0)) for name, count in total["devices"].items()}
    drivers = node.get("Drivers") or {}
    networks = resources.get("Networks") or []
    return {
        "id": node.get("ID"),
        "name": node.get("Name"),
        "datacenter": node.get("Datacenter"),
        "node_pool": node.get("NodePool") or "default",
        "node_class": node.get("NodeClass") or "",
        "status": node.get("Status"),
        "eligible": node.get("SchedulingEligibility") == "eligible",
        "drain": bool(node.get("Drain")),
        "address": attributes.get("unique.network.ip-address") or node.get("Address") or "",
        "drivers": sorted(name for name, info in drivers.items()
                          if (info or {}).get("Detected") and (info or {}).get("Healthy")),
        "cni_plugins": sorted(k[len("plugins.cni.version."):] for k in attributes if k.startswith("plugins.cni.version.")),
        "cni_networks": sorted(n["Mode"][len("cni/"):] for n in networks if str(n.get("Mode", "")).startswith("cni/")),
        "bridge": any(n.get("Mode") == "bridge" for n in networks) or "plugins.cni.version.bridge" in attributes,
        "host_networks": sorted((node.get("HostNetworks") or {}).keys()),
        "host_volumes": {name: {"path": (v or {}).get("Path") or "", "read_only": bool((v or {}).get("ReadOnly"))}
                         for name, v in sorted((node.get("HostVolumes") or {}).items())},
        "meta": dict(node.get("Meta") or {}),
        "total": total,
        "reserved": held,
        "allocated": used,
        "free": free,
        "allocations": live,
    }
