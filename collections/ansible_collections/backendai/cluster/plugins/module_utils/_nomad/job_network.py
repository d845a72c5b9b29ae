# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network in a rendered Nomad job: what goes into every group's ``cni { args }``.

Every group of a session is ``network { mode = "cni/backendai" }`` with ``cni { args = {...} }``
= ``_session_network.job_args(key, namespace, job, group, params)``, every value written out in
every group, ``key`` being the signing key of the agent the group is pinned to
(``_session_network.signing_key(cluster_key, agent)``: that agent's plugin admits it, no other).
Nomad's client passes a group's ``cni { args }`` to the plugins as the job has them, not
interpolated: ``client/allocrunner/networking_cni.go`` (``Setup``: ``addCustomCNIArgs`` reads
``alloc.Job.LookupTaskGroup(...).Networks``), while ``InterpolateNetworks`` in the network hook
only feeds the hostname. So the per-agent data cannot live once in job ``Meta`` for the args to
reference. Args version 4 (what a new session gets) keeps it out of the job altogether: the agents'
underlay addresses and WireGuard keys are the session's *agent table*, written once as Nomad
Variables in the claims namespace (:meth:`RenderedNetwork.table`, ``_session_network.table_items``),
and every group carries only the session's scalars and the table's digest under its MAC: about 400
bytes whatever the session's size. Versions 1 to 3 (sessions created before) carry every agent in
every group, and keep doing so on update. The parameters are written once per session
(:attr:`RenderedNetwork.args`) and only the MAC is per group.

A job rendered WITHOUT the cluster key (``session_render`` with no key file, the render playbook,
the benchmarks) carries :data:`UNSIGNED_MAC` instead of a MAC: the plugin refuses it, so such a
job is for reading, not for running; the ``session`` module signs with the real key. Agents whose
underlay address is not known while rendering get a placeholder from :data:`PLACEHOLDER_POOL`
(RFC 2544's benchmarking range, never an agent's), and a job with a placeholder is never signed.

A session larger than one slot's /24 holds (more than 253 containers, or agents whose blocks of it
would be too small) takes a *block* of ``2**k`` aligned slots: its subnet is their union (a
/``24-k``), its VNI the first slot's, and every slot of the block is claimed (``_network_claims``).

Pure and deterministic; the key is never part of a result or a repr.
"""

from __future__ import annotations

import collections
import hashlib
import ipaddress
import typing as t
from dataclasses import dataclass, field

from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import wireguard_public_key
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    ARGS_VERSIONS,
    TABLE_ARGS_VERSION,
    DEFAULT_UNDERLAY_MTU,
    MAC_KEY,
    MIN_NOMAD_VERSION,
    NETWORK_NAME,
    SUBNET_POOL,
    SUBNET_PREFIX,
    VNI_BASE,
    NetworkError,
    GroupSigner,
    NetworkParams,
    agent_secrets,
    check_params,
    derive_agent_keys,
    ip4_text,
    net4,
    signing_key,
    overlay_mtu,
    slot_count,
    slot_network,
    table_items,
    tunnel_prefix,
)

#: The MAC of a job rendered without the cluster key (the plugin refuses it).
UNSIGNED_MAC = "UNSIGNED-RENDER-ONLY"
PLACEHOLDER_POOL = "198.18.0.0/15"
_PLACEHOLDER_FIRST = net4(PLACEHOLDER_POOL)[0] + 1
#: Keeps clients older than MIN_NOMAD_VERSION (no NOMAD_* keys in CNI_ARGS) out of placement.
VERSION_CONSTRAINT = {"LTarget": "${attr.nomad.version}", "RTarget": ">= %s" % MIN_NOMAD_VERSION, "Operand": "semver"}
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class JobNetwork:
    """What the renderer needs besides the plan: the claimed slot, the agents' underlay addresses, the key."""

    slot: t.Optional[int] = None  # the first slot of the block; None: the session's preferred one (render-only)
    underlay: t.Mapping[str, str] = field(default_factory=dict)  # agent name -> underlay IPv4
    key: t.Optional[bytes] = field(default=None, repr=False)  # None: render-only, unsigned
    underlay_mtu: int = DEFAULT_UNDERLAY_MTU
    slots: t.Optional[int] = None  # the claimed block's size, if larger than the session needs
    #: The args' format: a running session keeps its job's (:func:`args_version_of_job`): Nomad replaces the
    #: allocation of a group whose network changed, so re-writing the same parameters in a newer format would
    #: restart every container.
    args_version: str = TABLE_ARGS_VERSION
    #: Where version 4 agent tables are written (and the plugin reads them): the claims namespace.
    table_namespace: str = DEFAULT_NAMESPACE


def underlay_network(found: t.Mapping[str, t.Tuple[str, int]], key: t.Optional[bytes] = None) -> JobNetwork:
    """The session network over the agents' underlay (agent -> (IPv4, MTU), ``_nomad.nodes.underlay_addresses``):
    their addresses, and the smallest of their MTUs, which every packet of the session must fit."""
    return JobNetwork(underlay={a: ip for a, (ip, _mtu) in found.items()}, key=key,
                      underlay_mtu=min([mtu for _ip, mtu in found.values()] or [DEFAULT_UNDERLAY_MTU]))


def preferred_slot(namespace: str, job_id: str, count: t.Optional[int] = None) -> int:
    """Where a session starts looking for a free slot (and the slot a render-only job shows)."""
    count = count or slot_count()
    digest = hashlib.sha256(("%s/%s" % (namespace or DEFAULT_NAMESPACE, job_id)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def placeholder_address(index: int) -> str:
    """The placeholder underlay address of the ``index``-th agent (on integers: once per agent of a session)."""
    return ip4_text(_PLACEHOLDER_FIRST + index)


#: An unsigned render's tunnel prefix and WireGuard keys (no cluster key to derive them from): never admitted.
PLACEHOLDER_TUNNEL_PREFIX = "fd0000000000"


def placeholder_wg_key(index: int) -> bytes:
    return hashlib.sha256(b"backendai-cluster placeholder wireguard key\0%d" % index).digest()


def slots_needed(agent_count: int, max_per_agent: int) -> int:
    """How many slots (a power of two) a session needs: the smallest subnet of whole /24s in which each agent's
    block (``_session_network.agent_block``) holds its containers besides the bridge's address."""
    pool = ipaddress.IPv4Network(SUBNET_POOL).prefixlen
    for prefix in range(SUBNET_PREFIX, pool - 1, -1):
        if ((1 << (32 - prefix)) - 2) // max(1, agent_count) - 1 >= max(1, max_per_agent):
            return 1 << (SUBNET_PREFIX - prefix)
    raise PlanError("the session network cannot hold %d agents with up to %d containers each (the pool %s is too "
                    "small)" % (agent_count, max_per_agent, SUBNET_POOL))


def block_network(first: int, count: int) -> t.Tuple[int, str]:
    """(VNI, subnet) of the block of ``count`` slots starting at ``first`` (aligned to ``count``)."""
    if count < 1 or count & (count - 1) or first % count:
        raise NetworkError("a block of network slots is 2**k slots starting at a multiple of 2**k, got %d at %r"
                           % (count, first))
    slot_network(first + count - 1)  # the whole block is in the pool
    subnet = ipaddress.IPv4Network(slot_network(first)[1]).supernet(new_prefix=SUBNET_PREFIX - (count.bit_length() - 1))
    return VNI_BASE + first, str(subnet)


@dataclass(frozen=True)
class RenderedNetwork:
    params: NetworkParams
    slot: int  # the first slot of the session's block
    signed: bool
    placeholders: t.Tuple[str, ...]  # agents whose address is a placeholder
    #: ``params.args(version)``, made once: every group shares the text, only its MAC differs.
    args: t.Mapping[str, str] = field(compare=False, repr=False)
    slots: int = 1  # how many slots the block has
    #: agent -> the key its groups are signed with (secret: never in a result or repr), derived once per render
    #: with the WireGuard keys from the same agent keys; {} when unsigned.
    signing: t.Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: (namespace, job ID) -> the GroupSigner of its groups: made with the first group, used for the others.
    signers: t.Dict[t.Tuple[str, str], GroupSigner] = field(default_factory=dict, compare=False, repr=False)

    def table(self) -> t.List[t.Tuple[str, t.Dict[str, str]]]:
        """(variable path, items) of the session's agent table, in ``params.table_namespace``: what must be written
        before the job is registered; [] for args versions 1 to 3 (the agents are in the args) and for a session on
        one agent (its plugin makes the one-agent table of its own address and checks that digest: nothing to read)."""
        if self.args.get("BAI_V") != TABLE_ARGS_VERSION or len(self.params.agents) < 2:
            return []
        return table_items(self.params)

    def summary(self) -> t.Dict[str, t.Any]:
        """Secret-free, for results: what the session's network is."""
        return {"name": NETWORK_NAME, "slot": self.slot, "slots": self.slots, "vni": self.params.vni,
                "subnet": self.params.subnet,
                "agents": list(self.params.agents), "mtu": self.params.mtu, "signed": self.signed,
                "underlay_encryption": self.params.encryption,
                "placeholder_agents": list(self.placeholders)}


def session_slots(hosts_agents: t.Sequence[str]) -> int:
    """:func:`slots_needed` for a session whose containers run on ``hosts_agents`` (one entry per container)."""
    per_agent = collections.Counter(hosts_agents)
    return slots_needed(len(per_agent), max(per_agent.values() or [1]))


def session_network(session_id: str, agents: t.Sequence[str], namespace: str, job_id: str,
                    network: t.Optional[JobNetwork], slots: int = 1, encryption: str = "wireguard") -> RenderedNetwork:
    """The session's parameters (agents in plan order; ``slots``: its block size, :func:`session_slots`).

    ``encryption`` (the spec's ``network.underlay_encryption``) applies to a session spanning agents in args
    version 3: the control node derives every agent's WireGuard public key and the tunnel prefix from the cluster
    key (``_session.keys.wireguard_public_key``); an unsigned render shows placeholder keys. A session on one agent, or
    one whose job carries version 1 or 2, has no underlay traffic to encrypt, or keeps its plaintext format."""
    network = network or JobNetwork()
    if len(agents) < 2 or network.args_version not in ("3", TABLE_ARGS_VERSION):
        encryption = "none"
    slots = max(slots, network.slots or 0)
    slot = network.slot if network.slot is not None else preferred_slot(namespace, job_id) // slots * slots
    ips, placeholders = [], []
    for i, agent in enumerate(agents):
        ip = network.underlay.get(agent)
        if not ip:
            ip = placeholder_address(i)
            placeholders.append(agent)
        ips.append(ip)
    try:
        vni, subnet = block_network(slot, slots)
        prefix, wg_keys = "", ()  # type: t.Tuple[str, t.Tuple[bytes, ...]]
        # each agent's MAC key and WireGuard private key, from its agent key (each HKDF extract made once)
        secrets = {a: agent_secrets(k) for a, k in derive_agent_keys(network.key, agents).items()} \
            if network.key is not None else {}
        if encryption == "wireguard":
            prefix, wg_keys = ((tunnel_prefix(network.key), tuple(wireguard_public_key(secrets[a][1]) for a in agents))
                               if network.key is not None
                               else (PLACEHOLDER_TUNNEL_PREFIX, tuple(placeholder_wg_key(i) for i in range(len(agents)))))
        params = check_params(NetworkParams(str(session_id), vni, subnet, tuple(ips),
                                            overlay_mtu(network.underlay_mtu, encryption), encryption, wg_keys, prefix,
                                            network.table_namespace))
        return RenderedNetwork(params, slot, network.key is not None and not placeholders, tuple(placeholders),
                               params.args(network.args_version), slots,
                               {a: mac_key for a, (mac_key, _wg) in secrets.items()})
    except NetworkError as err:
        raise PlanError("session %s: the session network cannot be laid out: %s" % (job_id, err)) from None


def signing_keys(network: t.Optional[JobNetwork], agents: t.Iterable[str]) -> t.Dict[str, bytes]:
    """agent -> the key groups pinned to it are signed with (derived from the cluster key); {} when unsigned."""
    if network is None or network.key is None:
        return {}
    return {agent: signing_key(network.key, agent) for agent in agents}


def group_args(rendered: RenderedNetwork, key: t.Optional[bytes], namespace: str, job_id: str,
               group: str) -> t.Dict[str, str]:
    """One group's ``cni { args }`` as rendered (``key``: its agent's, :func:`signing_keys`)."""
    if rendered.signed and key is not None:
        where = (namespace or DEFAULT_NAMESPACE, job_id)
        signer = rendered.signers.get(where)
        if signer is None:
            signer = rendered.signers[where] = GroupSigner(where[0], job_id, rendered.args)
        return signer.sign(key, group)
    args = dict(rendered.args)
    args[MAC_KEY] = UNSIGNED_MAC
    return args


def network_args(job: t.Optional[t.Mapping[str, t.Any]]) -> t.Iterator[t.Tuple[str, t.Mapping[str, t.Any]]]:
    """(group name, CNI args) of each network of a rendered or registered job (``TaskGroups[].Networks[].CNI.Args``),
    in order; a network without args gives an empty mapping."""
    for group in (job or {}).get("TaskGroups") or []:
        for network in group.get("Networks") or []:
            yield group.get("Name", ""), (network.get("CNI") or {}).get("Args") or {}


def args_version_of_job(job: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """The ``BAI_V`` a rendered job's groups carry, if they agree on one this collection writes; else None."""
    found = {str(args.get("BAI_V")) for _group, args in network_args(job)}
    return found.pop() if len(found) == 1 and found <= set(ARGS_VERSIONS) else None
