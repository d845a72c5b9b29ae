# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network: its parameters, their admission, and its layout on an agent. Pure, stdlib only.

Every session of every backend is on ONE static CNI network per agent, ``backendai``
(``network { mode = "cni/backendai" }``), served by this collection's CNI plugin (``_cni_plugin``).
What makes a session's network its own are the parameters each task group carries in
``network { cni { args = {...} } }``:

=============  =========================================================================
``BAI_V``      version of this format (``3``; the plugin also reads ``2`` and ``1``)
``BAI_SID``    the session ID (a UUID, fresh for every create)
``BAI_VNI``    the session's VXLAN network identifier (claimed cluster-wide, see *slots*)
``BAI_NET``    the session's subnet (claimed with the VNI)
``BAI_AGENTS`` the underlay IPv4 addresses of the session's agents, in plan order: version 2 packs
               them (4 bytes each) in base64url without padding, version 1 joined dotted
               quads with ``,``
``BAI_MTU``    the MTU inside the session network
``BAI_ENC``    version 3: how VXLAN crosses the underlay, ``wireguard`` or ``none`` (:data:`UNDERLAY_ENCRYPTIONS`)
``BAI_WG``     with ``wireguard``: the agents' WireGuard public keys, plan order, packed (32 bytes each)
``BAI_TUN``    with ``wireguard``: the cluster's tunnel prefix (a ULA /48 as 12 hex digits)
``BAI_TAB``    version 4: the digest of the session's *agent table* (below), base64url SHA-256
``BAI_N``      version 4: how many agents the table holds
``BAI_TNS``    version 4: the Nomad namespace of the table's variables (the claims namespace)
``BAI_MAC``    HMAC-SHA256, with the MAC key of the agent the group is pinned to (*keys* below),
               over all of the above and the allocation's namespace, job and group
=============  =========================================================================

*The agent table* (version 4, what Nomad jobs carry): the per-agent data (underlay addresses and, with
``wireguard``, public keys; the tunnel addresses follow from the keys and ``BAI_TUN``) is written ONCE per
session, as Nomad Variables in the claims namespace (:func:`table_path`: ``backendai-cluster/network/agents/
<first slot>/<digest>/<k>``, :data:`TABLE_CHUNK` agents each, under Nomad's 64 KiB per variable), not into
every group. A group's args carry only the session's own scalars and ``BAI_TAB``, the digest of the table
(:func:`table_digest`: SHA-256 over the session ID, the encryption, the count and the packed bytes) under the
MAC: the plugin reads the table at the session's first ADD on its agent and admits it only when its digest is
the signed one, so whoever can write the variables can change nothing a plugin admits. The group's args are
then the same size whatever the session's size (about 400 bytes), and no ``CNI_ARGS`` limit caps the agents.
Versions 1 to 3 carry the agents inline (the local runtime, which has no Nomad, still writes version 3).

*Whose identity*: the namespace, job and group under the MAC are the allocation's as Nomad's
API has it. The plugin takes only ``NOMAD_ALLOC_ID`` from ``CNI_ARGS`` as Nomad's word, reads
that allocation from the agent's local Nomad API and admits it only when it is live, on this
agent, the only live allocation of its group, and its namespace, job and group are the signed
ones (``_cni_nomad``). The other ``NOMAD_*`` keys are not trusted: Nomad 1.10+ adds them after
the job's own args (``client/allocrunner/networking_cni.go``: ``addCustomCNIArgs`` then
``addNomadWorkloadCNIArgs``), but it *skips* a value holding ``;`` (job IDs may hold one), which
leaves the job's own value in place, and Nomad 1.9 (which has ``cni { args }``) adds none of
them. Alloc IDs are UUIDs, never skipped. The local runtime, its own authority (no Nomad), builds
``CNI_ARGS`` itself and its agents' configs say so (``"identity": "local"``): their identity is
the ``NOMAD_NAMESPACE``/``NOMAD_JOB_ID``/``NOMAD_GROUP_NAME`` it wrote.

*Keys*: the control node holds the cluster key; an agent holds only its *agent key*,
``derive_agent_key(cluster_key, agent_name)`` (HKDF-SHA256, RFC 5869, info
:data:`AGENT_KEY_LABEL` + the agent's Nomad node name, the name the group's
``${node.unique.name}`` constraint pins it to and that Nomad reports as the allocation's
``NodeName``). MACs are made with :func:`network_mac_key` of that agent key (HKDF again, its own
label), so other secrets of an agent (its WireGuard keypair) can be derived from the same agent
key with other labels. A copy of session B's parameters in another job fails the MAC, and so
does any edited parameter; parameters signed for agent X do not verify on agent Y, and agent X's
key signs nothing agent Y admits.

*Slots*: a session claims one slot ``s`` of the pool; its VNI is ``VNI_BASE + s`` and its
subnet is the ``s``-th /24 of ``SUBNET_POOL``, so one claim makes both unique cluster-wide.

Every group carries every agent's address (Nomad does not interpolate ``cni { args }``, see
``_nomad.job_network``), so a job grows with containers x agents: version 2 writes about 5.3
bytes per agent where version 1 wrote about 13. Its alphabet (``A-Z a-z 0-9 - _``) has no ``=``
or ``;``: the reference plugins parse ``CNI_ARGS`` with libcni's ``LoadArgs``, which refuses a
pair holding a second ``=``. ``CNI_ARGS`` is one environment string of the plugin's process, which
Linux caps at ``MAX_ARG_STRLEN`` (128 KiB): :func:`check_params` refuses more agents than fit.

*Underlay encryption* (version 3, ``BAI_ENC=wireguard``, the default for sessions spanning agents): each agent
has one WireGuard interface; its private key is :func:`wireguard_private_key` of its agent key, its tunnel address
:func:`tunnel_address` (the cluster's /48 and 80 bits of a hash of its public key). The control node puts every
agent's public key and the prefix into the args, so the plugin sets exactly the session's peers (public key, tunnel
address as the only allowed IP, underlay address as endpoint) and runs the session's VXLAN between tunnel addresses
over that interface. 48 bytes per agent instead of 5.3: :func:`max_agents` of an encrypted session is 2,688.

Layout on an agent: the agent's position ``i`` in ``BAI_AGENTS`` gives it the ``i``-th disjoint
block of the subnet for host-local IPAM; the block's first address is the bridge's (the
containers' gateway). A session with one agent has a bridge only; one with several also has a
VXLAN device that floods to exactly the other agents (head-end replication).
"""

from __future__ import annotations

# The plugin imports this module for every container it attaches: only cheap imports here (no typing,
# dataclasses, collections, re, uuid or ipaddress at run time; see ``_Record``, ``ip4``). Security code is the
# standard library's: ``hmac`` and ``hashlib`` load OpenSSL, about 3 ms of a plugin start against an ADD of 35 ms
# or more (README, "Benchmarks": the local bring-up): worth it for MAC code that is not our own.
import binascii  # built into the interpreter: base64 without importing base64 (and re, struct)
import hashlib
import hmac
import os

# inet_aton/inet_ntoa: C speed for the per-agent address work of a session's first ADD on an agent (1,024 agents:
# ~1 ms, against ~5 ms in Python); _socket is built in and costs nothing to import (the socket package would)
from _socket import inet_aton as _inet_aton, inet_ntoa as _inet_ntoa

TYPE_CHECKING = False
if TYPE_CHECKING:
    import typing as t


class _Record(tuple):
    """What the plugin uses of ``collections.namedtuple``: fields by name and position, ``_fields``, ``_replace``,
    a readable repr. Written out because importing ``collections`` (with keyword, operator, reprlib) costs ~3 ms at
    every start of the plugin, about a tenth of its ADD."""

    __slots__ = ()
    _fields: t.Tuple[str, ...] = ()
    #: Values of the last fields when not given (a record that gained fields keeps its old constructor calls).
    _defaults: t.Tuple[t.Any, ...] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        for i, name in enumerate(cls._fields):
            setattr(cls, name, property(lambda self, i=i: self[i]))

    def __new__(cls, *values: t.Any) -> t.Any:
        missing = len(cls._fields) - len(values)
        if 0 < missing <= len(cls._defaults):
            values += cls._defaults[len(cls._defaults) - missing:]
        if len(values) != len(cls._fields):
            raise TypeError("%s takes %d values (%s), got %d"
                            % (cls.__name__, len(cls._fields), ", ".join(cls._fields), len(values)))
        return tuple.__new__(cls, values)

    def _replace(self, **change: t.Any) -> t.Any:
        unknown = set(change) - set(self._fields)
        if unknown:
            raise TypeError("%s has no field %s" % (type(self).__name__, ", ".join(sorted(unknown))))
        return type(self)(*(change.get(f, v) for f, v in zip(self._fields, self)))

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % fv for fv in zip(self._fields, self)))


NETWORK_NAME = "backendai"
PLUGIN_TYPE = "backendai"
CNI_VERSION = "1.0.0"
ARGS_VERSION = "3"
#: The args Nomad jobs carry: the per-agent data in the session's agent table, only its digest in the args.
TABLE_ARGS_VERSION = "4"
#: Versions admission reads: 1 and 2 are what jobs rendered before version 3 carry (a container of a running session
#: that restarts after the role upgraded the plugin presents its job's original parameters; and an update of
#: such a session keeps writing its version, since new args in a group make Nomad replace its allocation).
#: Versions 1 and 2 have no underlay encryption (their VXLAN crosses the underlay in plaintext, as before).
ARGS_VERSIONS = ("1", "2", "3", "4")
#: Linux's limit on one environment string (``CNI_ARGS=...`` and its NUL): 32 pages.
MAX_ARG_STRLEN = 32 * 4096
#: Room left in CNI_ARGS for everything but BAI_AGENTS: ``IgnoreUnknown``, the other parameters and the MAC,
#: and Nomad's keys (job ID and group name may be long: Nomad allows 128 characters each).
CNI_ARGS_RESERVE = 2048
#: Nomad adds NOMAD_* to CNI_ARGS from this version on (hashicorp/nomad#24319); ``cni { args }`` came in 1.9.
MIN_NOMAD_VERSION = "1.10.0"
VXLAN_PORT = 4789
VXLAN_OVERHEAD_IPV4 = 50
#: VXLAN over IPv6 (the tunnel addresses): outer IPv6 40 + UDP 8 + VXLAN 8 + inner Ethernet 14.
VXLAN_OVERHEAD_IPV6 = 70
#: WireGuard around it, counted for an IPv6 underlay (the larger case): outer IPv6 40 + UDP 8 + WireGuard 32
#: (type, receiver, counter 16 + Poly1305 tag 16).
WIREGUARD_OVERHEAD = 80
WIREGUARD_PORT = 51820
#: The agent's one WireGuard interface (the conflist's ``wireguard.interface`` may name another: local agents
#: share one UAPI socket directory, /var/run/wireguard, so each needs its own name).
WIREGUARD_INTERFACE = "baiwg0"
#: How session VXLAN crosses the underlay: inside WireGuard between agents (the default), or as it is (an
#: operator whose underlay is encrypted already). Jobs of args versions 1 and 2 are ``none``.
UNDERLAY_ENCRYPTIONS = ("wireguard", "none")
#: How an agent runs WireGuard: the kernel module (``ip link add type wireguard``) or ``wireguard-go``.
WIREGUARD_MODES = ("kernel", "userspace")
#: An underlay's MTU when nothing says otherwise: Ethernet's.
DEFAULT_UNDERLAY_MTU = 1500
MIN_MTU = 576
VNI_BASE = 0x10000
VNI_MAX = 0xFFFFFF
SUBNET_POOL = "10.200.0.0/13"
SUBNET_PREFIX = 24
KEY_BYTES = 32
BRIDGE_PREFIX = "bai"   # + 12 hex: every session bridge matches "bai+" in iptables
VXLAN_PREFIX = "baix"   # + 11 hex
PARAM_KEYS = ("BAI_V", "BAI_SID", "BAI_VNI", "BAI_NET", "BAI_AGENTS", "BAI_MTU")
#: Version 3's parameters after PARAM_KEYS: the underlay encryption, and with ``wireguard`` the agents' WireGuard
#: public keys (plan order, packed) and the cluster's tunnel prefix. Under the MAC whenever present.
ENC_KEY, WG_KEY, TUN_KEY = "BAI_ENC", "BAI_WG", "BAI_TUN"
V3_KEYS = (ENC_KEY, WG_KEY, TUN_KEY)
#: Version 4's parameters: the agent table's digest, its agent count, its variables' namespace. Under the MAC.
TABLE_KEY, COUNT_KEY, TABLE_NS_KEY = "BAI_TAB", "BAI_N", "BAI_TNS"
V4_KEYS = (TABLE_KEY, COUNT_KEY, TABLE_NS_KEY)
#: The scalars of version 4 (no BAI_AGENTS, BAI_WG: those are the table's).
V4_PARAM_KEYS = ("BAI_V", "BAI_SID", "BAI_VNI", "BAI_NET", "BAI_MTU", ENC_KEY) + V4_KEYS
#: Where the agent tables live (Nomad Variables, in the claims namespace), and how many agents one variable holds:
#: 1,024 x (4 + 32) bytes in base64url is 49,152 characters, under Nomad's 64 KiB of items per variable
#: (``maxVariableSize`` in nomad/structs/variables.go).
TABLE_PREFIX = "backendai-cluster/network/agents"
TABLE_CHUNK = 1024
TABLE_LABEL = b"backendai-cluster agent table v1"
#: The most agents a session can span: far beyond any cluster, so that only the subnet pool (the planner says
#: so: ``_nomad.job_network.slots_needed``) limits a version 4 session.
MAX_TABLE_AGENTS = 1 << 20
MAC_KEY = "BAI_MAC"
IDENTITY_KEYS = ("NOMAD_NAMESPACE", "NOMAD_JOB_ID", "NOMAD_GROUP_NAME")
ALLOC_KEY = "NOMAD_ALLOC_ID"
#: HKDF ``info`` of an agent key: this label, a NUL, the agent's name (versioned: a new derivation gets a new label).
AGENT_KEY_LABEL = b"backendai-cluster agent key v1"
#: HKDF ``info`` of the session network's MAC key, derived from an agent key.
NETWORK_MAC_LABEL = b"backendai-cluster session network mac v1"
#: HKDF ``info`` of an agent's WireGuard private key (X25519, clamped), derived from its agent key.
WIREGUARD_KEY_LABEL = b"backendai-cluster wireguard key v1"
#: HKDF ``info`` of the cluster's tunnel prefix (a ULA /48), derived from the cluster key on the control node.
TUNNEL_PREFIX_LABEL = b"backendai-cluster tunnel prefix v1"
#: Hashed with an agent's WireGuard public key: the 80 interface bits of its tunnel address in that /48.
TUNNEL_ADDRESS_LABEL = b"backendai-cluster tunnel address v1"
#: The order in which Nomad's client adds its keys after the job's args (a ``map``: order is not kept
#: in CNI_ARGS; the keys are what matters).
NOMAD_KEYS = ("NOMAD_REGION", "NOMAD_NAMESPACE", "NOMAD_JOB_ID", "NOMAD_GROUP_NAME", "NOMAD_ALLOC_ID")
#: Who tells the plugin an allocation's identity: ``nomad`` (the local Nomad agent's API) or ``local`` (the local
#: runtime, which builds CNI_ARGS itself).
IDENTITY_SOURCES = ("nomad", "local")
#: The Nomad agent's HTTP API on an agent (Nomad's default ``addresses.http`` and ``ports.http``).
DEFAULT_NOMAD_ADDR = "http://127.0.0.1:4646"


class NetworkError(ValueError):
    """Parameters that cannot be laid out, or that are not admitted; the message says why."""


class AdmissionError(NetworkError):
    """CNI_ARGS that do not admit this allocation to a session network."""


# ---------------------------------------------------------------------------- IPv4, without ipaddress
# The few IPv4 operations the plugin needs, on integers: importing ipaddress costs the plugin a tenth
# of its run (checked against ipaddress in the unit tests).

_PRIVATE = ((0x0A000000, 8), (0xAC100000, 12), (0xC0A80000, 16))  # RFC 1918


def ip4(text: str) -> int:
    """A dotted-quad IPv4 address as an integer (NetworkError if it is not one)."""
    text = str(text)
    try:  # the common case, in C: inet_aton takes other forms too ("1", "0x7f.1"), so only its canonical text passes
        packed = _inet_aton(text)
        if _inet_ntoa(packed) == text:
            return int.from_bytes(packed, "big")
    except (OSError, ValueError):
        pass
    parts = text.split(".")
    if len(parts) == 4 and len(text) <= 15:
        try:
            a, b, c, d = [int(p) for p in parts]
        except ValueError:
            pass
        else:  # written back, it must be the text itself: no sign, space, "_", leading zero or non-ASCII digit
            if 0 <= a <= 255 and 0 <= b <= 255 and 0 <= c <= 255 and 0 <= d <= 255 and "%d.%d.%d.%d" % (a, b, c, d) == text:
                return (a << 24) | (b << 16) | (c << 8) | d
    raise NetworkError("%r is not an IPv4 address" % (text,))


def ip4_text(value: int) -> str:
    return "%d.%d.%d.%d" % (value >> 24 & 255, value >> 16 & 255, value >> 8 & 255, value & 255)


def _canonical_ip4(text: str) -> bool:
    """Whether ``text`` is a dotted quad in its one form (what :func:`ip4` accepts), in C."""
    try:
        return _inet_ntoa(_inet_aton(text)) == text
    except (OSError, ValueError, TypeError):
        return False


def net4(text: str, strict: bool = True) -> t.Tuple[int, int]:
    """``a.b.c.d/n`` as (network address, prefix length); with ``strict`` the host bits must be zero."""
    address, sep, prefix = str(text).partition("/")
    if not sep or not prefix.isdigit() or not prefix.isascii() or int(prefix) > 32:
        raise NetworkError("%r is not an IPv4 network" % (text,))
    value, length = ip4(address), int(prefix)
    mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
    if strict and value & ~mask & 0xFFFFFFFF:
        raise NetworkError("%r has host bits set" % (text,))
    return value & mask, length


def net4_text(network: t.Tuple[int, int]) -> str:
    return "%s/%d" % (ip4_text(network[0]), network[1])


def overlaps(a: t.Tuple[int, int], b: t.Tuple[int, int]) -> bool:
    shift = 32 - min(a[1], b[1])
    return (a[0] >> shift) == (b[0] >> shift) if shift < 32 else True


def _private(network: t.Tuple[int, int]) -> bool:
    return any(network[1] >= length and overlaps(network, (base, length)) for base, length in _PRIVATE)


# ---------------------------------------------------------------------------- parameters

class NetworkParams(_Record):
    """What a session's network is, the same for every group of the session: the session ID, its VNI and
    subnet, the underlay IPv4 addresses of its agents (plan order), the MTU inside; how VXLAN crosses the
    underlay (``encryption``, :data:`UNDERLAY_ENCRYPTIONS`) and, with ``wireguard``, the agents' WireGuard public
    keys (32 bytes each, plan order) and the cluster's tunnel prefix (12 hex digits: a ULA /48)."""

    __slots__ = ()
    _fields = ("session_id", "vni", "subnet", "agents", "mtu", "encryption", "wg_keys", "tunnel_prefix",
               "table_namespace")
    _defaults = ("none", (), "", "default")

    def args(self, version: str = ARGS_VERSION) -> t.Dict[str, str]:
        """The parameters as ``cni { args }`` of ``version`` (see :data:`ARGS_VERSIONS`), without the MAC."""
        if version not in ARGS_VERSIONS:
            raise NetworkError("BAI_V must be one of %s, got %r" % (", ".join(ARGS_VERSIONS), version))
        if version in ("1", "2") and self.encryption != "none":
            raise NetworkError("BAI_V %s has no underlay encryption: a %s session needs version 3 or 4"
                               % (version, self.encryption))
        if version == "4":
            out = {"BAI_V": version, "BAI_SID": self.session_id, "BAI_VNI": str(self.vni), "BAI_NET": self.subnet,
                   "BAI_MTU": str(self.mtu), ENC_KEY: self.encryption}
            if self.encrypted:
                out[TUN_KEY] = self.tunnel_prefix
            out.update({TABLE_KEY: table_digest(self), COUNT_KEY: str(len(self.agents)),
                        TABLE_NS_KEY: self.table_namespace})
            return out
        if len(self.agents) > max_agents(self.encrypted):
            raise NetworkError("%d agents do not fit CNI_ARGS in args version %s (at most %d): version 4 carries "
                               "them in the agent table" % (len(self.agents), version, max_agents(self.encrypted)))
        agents = ",".join(self.agents) if version == "1" else encode_agents(self.agents)
        out = {"BAI_V": version, "BAI_SID": self.session_id, "BAI_VNI": str(self.vni), "BAI_NET": self.subnet,
               "BAI_AGENTS": agents, "BAI_MTU": str(self.mtu)}
        if version == "3":
            out[ENC_KEY] = self.encryption
            if self.encryption == "wireguard":
                out[WG_KEY] = _b64url(b"".join(self.wg_keys)).decode("ascii")
                out[TUN_KEY] = self.tunnel_prefix
        return out

    @property
    def encrypted(self) -> bool:
        return self.encryption == "wireguard"

    def tunnel_addresses(self) -> t.Tuple[str, ...]:
        """The agents' tunnel addresses (plan order), from their public keys."""
        return tuple(tunnel_address(self.tunnel_prefix, k) for k in self.wg_keys)

    @property
    def spans(self) -> bool:
        return len(self.agents) > 1


_B64_FROM_URL = bytes.maketrans(b"-_", b"+/")
_B64_TO_URL = bytes.maketrans(b"+/", b"-_")
_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _b64url(data: bytes) -> bytes:
    """base64url without padding."""
    return binascii.b2a_base64(data, newline=False).translate(_B64_TO_URL).rstrip(b"=")


def encode_agents(agents: t.Sequence[str]) -> str:
    """``BAI_AGENTS`` of version 2: the addresses packed big-endian, base64url without padding."""
    return _b64url(b"".join(ip4(a).to_bytes(4, "big") for a in agents)).decode("ascii")


def decode_agents(text: str, version: str = ARGS_VERSION) -> t.Tuple[str, ...]:
    """The addresses in ``BAI_AGENTS`` of ``version`` (NetworkError if the text is not that version's form)."""
    if version == "1":
        return tuple(a for a in text.split(",") if a)
    packed = _agents_packed(text, version)
    return tuple(_inet_ntoa(packed[i:i + 4]) for i in range(0, len(packed), 4))


def _agents_packed(text: str, version: str) -> bytes:
    """The addresses of ``BAI_AGENTS`` of ``version`` 2 or later, 4 bytes each (NetworkError if malformed)."""
    if not _B64URL.issuperset(text) or len(text) % 16 not in (0, 6, 11):  # 4 bytes an address: 16 chars per 3
        raise NetworkError("BAI_AGENTS must be IPv4 addresses packed in base64url (version %s), got %r..."
                           % (version, text[:24]))
    packed = binascii.a2b_base64(text.encode("ascii").translate(_B64_FROM_URL) + b"=" * (-len(text) % 4))
    if _b64url(packed) != text.encode("ascii"):
        raise NetworkError("BAI_AGENTS is not in its one base64url form (unused bits set): %r..." % (text[:24],))
    return packed


def decode_wg_keys(text: str) -> t.Tuple[bytes, ...]:
    """The 32-byte public keys packed in ``BAI_WG`` (base64url without padding; NetworkError if malformed)."""
    if not _B64URL.issuperset(text) or len(text) % 128 not in (0, 43, 86):  # 32 bytes a key: 128 chars per 3
        raise NetworkError("BAI_WG must be WireGuard public keys packed in base64url, got %r..." % (text[:24],))
    packed = binascii.a2b_base64(text.encode("ascii").translate(_B64_FROM_URL) + b"=" * (-len(text) % 4))
    if _b64url(packed) != text.encode("ascii") or len(packed) % 32:
        raise NetworkError("BAI_WG is not in its one base64url form: %r..." % (text[:24],))
    return tuple(packed[i:i + 32] for i in range(0, len(packed), 32))


def wg_key_text(key: bytes) -> str:
    """A 32-byte WireGuard key in the base64 form ``wg`` reads and shows."""
    return binascii.b2a_base64(key, newline=False).decode("ascii")


def slot_count(pool: str = SUBNET_POOL, prefix: int = SUBNET_PREFIX) -> int:
    pool_len = net4(pool)[1]
    if not pool_len <= prefix <= 28:
        raise NetworkError("session subnets of /%d do not fit the pool %s" % (prefix, pool))
    return min(1 << (prefix - pool_len), VNI_MAX - VNI_BASE + 1)


def slot_network(slot: int, pool: str = SUBNET_POOL, prefix: int = SUBNET_PREFIX) -> t.Tuple[int, str]:
    """(VNI, subnet) of slot ``slot``."""
    count = slot_count(pool, prefix)
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < count:
        raise NetworkError("network slot must be an integer from 0 to %d, got %r" % (count - 1, slot))
    return VNI_BASE + slot, net4_text((net4(pool)[0] + (slot << (32 - prefix)), prefix))


def overhead(encryption: str = "none") -> int:
    """What the underlay MTU loses to the session network: VXLAN over IPv4 (50), or VXLAN over IPv6 tunnel
    addresses (70) inside WireGuard (80, for an IPv6 underlay: IPv4 would take 60)."""
    return VXLAN_OVERHEAD_IPV6 + WIREGUARD_OVERHEAD if encryption == "wireguard" else VXLAN_OVERHEAD_IPV4


def wireguard_mtu(underlay_mtu: int) -> int:
    """The MTU of the agent's WireGuard interface: the underlay's minus WireGuard's own overhead."""
    return int(underlay_mtu) - WIREGUARD_OVERHEAD


def overlay_mtu(underlay_mtu: int, encryption: str = "none") -> int:
    """The MTU inside a session network: ``underlay - 50`` plain, ``underlay - 80 - 70`` in WireGuard."""
    mtu = int(underlay_mtu) - overhead(encryption)
    if mtu < MIN_MTU:
        raise NetworkError("underlay MTU %s leaves %d bytes inside the session network (%s takes %d); at least %d "
                           "are needed" % (underlay_mtu, mtu, "VXLAN inside WireGuard" if encryption == "wireguard"
                                           else "VXLAN over IPv4", overhead(encryption), MIN_MTU))
    return mtu


def make_params(session_id: str, slot: int, agents: t.Sequence[str], underlay_mtu: int = DEFAULT_UNDERLAY_MTU,
                pool: str = SUBNET_POOL, prefix: int = SUBNET_PREFIX, encryption: str = "none",
                wg_keys: t.Sequence[bytes] = (), tunnel_prefix: str = "") -> NetworkParams:
    vni, subnet = slot_network(slot, pool, prefix)
    return check_params(NetworkParams(str(session_id), vni, subnet, tuple(str(a) for a in agents),
                                      overlay_mtu(underlay_mtu, encryption), encryption, tuple(wg_keys),
                                      tunnel_prefix))


# Checked without re: the plugin imports this module once per container, and re costs more than its work.
_HEX = frozenset("0123456789abcdef")


def _is_uuid(text: str) -> bool:
    """A lower-case UUID in its 8-4-4-4-12 form."""
    parts = text.split("-")
    return [len(p) for p in parts] == [8, 4, 4, 4, 12] and _HEX.issuperset("".join(parts))


def check_params(p: NetworkParams) -> NetworkParams:
    """The parameters, validated (raises NetworkError naming the bad one)."""
    sid = str(p.session_id).lower()
    if not _is_uuid(sid):
        raise NetworkError("BAI_SID must be a UUID, got %r" % (p.session_id,))
    if not VNI_BASE <= p.vni <= VNI_MAX:
        raise NetworkError("BAI_VNI must be from %d to %d, got %r" % (VNI_BASE, VNI_MAX, p.vni))
    try:
        subnet = net4(p.subnet)
    except NetworkError:
        raise NetworkError("BAI_NET must be an IPv4 network, got %r" % (p.subnet,)) from None
    if not _private(subnet) or subnet[1] > 28:
        raise NetworkError("BAI_NET must be a private IPv4 network of at least 16 addresses, got %s" % net4_text(subnet))
    if not p.agents:
        raise NetworkError("BAI_AGENTS must list at least one agent")
    agents = []
    for a in p.agents:
        if isinstance(a, str) and _canonical_ip4(a):
            agents.append(a)
            continue
        try:
            agents.append(ip4_text(ip4(a)))
        except NetworkError:
            raise NetworkError("BAI_AGENTS must be IPv4 addresses, got %r" % (a,)) from None
    if len(set(agents)) != len(agents):
        raise NetworkError("BAI_AGENTS lists an address twice: %s" % ",".join(agents))
    if len(agents) > MAX_TABLE_AGENTS:
        raise NetworkError("a session network spans at most %d agents, got %d" % (MAX_TABLE_AGENTS, len(agents)))
    if not MIN_MTU <= p.mtu <= 65535:
        raise NetworkError("BAI_MTU must be from %d to 65535, got %r" % (MIN_MTU, p.mtu))
    agent_block(net4_text(subnet), len(agents), 0)  # the subnet has room for every agent
    if p.encryption not in UNDERLAY_ENCRYPTIONS:
        raise NetworkError("BAI_ENC must be one of %s, got %r" % (", ".join(UNDERLAY_ENCRYPTIONS), p.encryption))
    keys: t.Tuple[bytes, ...] = ()
    tun = ""
    if p.encryption == "wireguard":
        keys, tun = tuple(p.wg_keys), str(p.tunnel_prefix).lower()
        if len(keys) != len(agents) or not all(isinstance(k, bytes) and len(k) == 32 for k in keys):
            raise NetworkError("BAI_WG must hold one 32-byte WireGuard public key for each of the %d agents, got %d"
                               % (len(agents), len(keys)))
        if len(tun) != 12 or not tun.startswith("fd") or not _HEX.issuperset(tun):
            raise NetworkError("BAI_TUN must be a ULA /48 prefix as 12 hex digits starting with fd, got %r"
                               % (p.tunnel_prefix,))
        addresses = [tunnel_address(tun, k) for k in keys]
        if len(set(addresses)) != len(addresses):  # the same key twice, or 80 bits of SHA-256 that collide
            twice = sorted({agents[i] for i, a in enumerate(addresses) if addresses.count(a) > 1})
            raise NetworkError("agents %s have the same WireGuard key or tunnel address: a session cannot span "
                               "them (give one of them another Nomad node name)" % ", ".join(twice))
    tns = str(p.table_namespace)
    if not (0 < len(tns) <= 128 and _NAMESPACE_CHARS.issuperset(tns)):
        raise NetworkError("BAI_TNS must be a Nomad namespace name (letters, digits, '-'), got %r" % (p.table_namespace,))
    return NetworkParams(sid, int(p.vni), net4_text(subnet), tuple(agents), int(p.mtu), p.encryption, keys, tun, tns)


_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def max_agents(encrypted: bool = False) -> int:
    """How many agents args versions 1 to 3 can carry inline: as many as ``BAI_AGENTS`` (and ``BAI_WG``: 32 bytes
    more per agent) holds within CNI_ARGS's limit. Packed base64url: 16/3 characters per agent, 48 with WireGuard.
    Version 4 has no such limit (the agents are in the table)."""
    return (MAX_ARG_STRLEN - CNI_ARGS_RESERVE) * 3 // (16 + (128 if encrypted else 0))


# ---------------------------------------------------------------------------- the agent table (version 4)

def table_digest(params: NetworkParams, packed: t.Optional[bytes] = None) -> str:
    """``BAI_TAB``: base64url SHA-256 of the session's agent table (session ID, encryption, agent count, the packed
    underlay addresses, the packed WireGuard keys). ``packed``: the agents' addresses packed, when the caller has
    them (a table just decoded)."""
    head = "%s\0%s\0%d\0" % (params.session_id, params.encryption, len(params.agents))
    h = hashlib.sha256(TABLE_LABEL + b"\0" + head.encode("ascii"))
    h.update(packed if packed is not None else b"".join(
        _inet_aton(a) if _canonical_ip4(a) else ip4(a).to_bytes(4, "big") for a in params.agents))
    h.update(b"".join(params.wg_keys))
    return _b64url(h.digest()).decode("ascii")


def table_path(vni: int, digest: str, chunk: int) -> str:
    """The Nomad variable holding chunk ``chunk`` of the agent table ``digest`` of the session with VNI ``vni``
    (under the session's first slot: the session that holds the slot's claim is the only one writing there)."""
    return "%s/%d/%s/%d" % (TABLE_PREFIX, vni - VNI_BASE, digest, chunk)


def table_slot_prefix(slot: int) -> str:
    """Every agent table of the session whose block starts at ``slot`` (removed with its claim)."""
    return "%s/%d/" % (TABLE_PREFIX, slot)


def table_chunks(count: int) -> int:
    return max(1, -(-count // TABLE_CHUNK))


def table_items(params: NetworkParams) -> t.List[t.Tuple[str, t.Dict[str, str]]]:
    """(variable path, items) of every chunk of the session's agent table, as the control node writes them."""
    digest = table_digest(params)
    out = []
    for k in range(table_chunks(len(params.agents))):
        part = slice(k * TABLE_CHUNK, (k + 1) * TABLE_CHUNK)
        items = {"agents": encode_agents(params.agents[part])}
        if params.encrypted:
            items["wg"] = _b64url(b"".join(params.wg_keys[part])).decode("ascii")
        out.append((table_path(params.vni, digest, k), items))
    return out


class TableRef(_Record):
    """What a version 4 group's args say of its session's agent table: where (namespace, paths) and its digest."""

    __slots__ = ()
    _fields = ("namespace", "digest", "count", "paths")


def resolve_table(adm: "Admission", chunks: t.Sequence[t.Optional[t.Mapping[str, t.Any]]]) -> "Admission":
    """``adm`` (version 4) with the agents and keys of its table, from the items of its variables (in order); an
    AdmissionError unless they are the table whose digest the MAC covers."""
    ref = adm.table
    if ref is None:
        return adm
    packed: t.List[bytes] = []
    keys: t.List[bytes] = []
    for path, items in zip(ref.paths, chunks):
        if not isinstance(items, dict) or not isinstance(items.get("agents"), str):
            raise AdmissionError("the session's agent table %s is missing or has no agents (was the session removed?)"
                                 % path)
        try:
            packed.append(_agents_packed(items["agents"], "2"))
            if adm.params.encryption == "wireguard":
                keys.extend(decode_wg_keys(str(items.get("wg", ""))))
        except NetworkError as e:
            raise AdmissionError("the session's agent table %s is malformed: %s" % (path, e)) from None
    addresses = b"".join(packed)
    agents = [_inet_ntoa(addresses[i:i + 4]) for i in range(0, len(addresses), 4)]
    p = adm.params._replace(agents=tuple(agents), wg_keys=tuple(keys))
    try:
        found = table_digest(p, addresses)
    except NetworkError as e:
        raise AdmissionError("the session's agent table is malformed: %s" % e) from None
    if len(agents) != ref.count or not hmac.compare_digest(found, ref.digest):
        raise AdmissionError("the session's agent table (%d agents) is not the one its job signed (%d agents, digest "
                             "%s): written over, or of another session" % (len(agents), ref.count, ref.digest))
    try:
        return adm._replace(params=check_params(p))
    except NetworkError as e:
        raise AdmissionError(str(e)) from None


# ---------------------------------------------------------------------------- MAC and CNI_ARGS

def generate_key() -> str:
    """A new cluster key, as the hex text stored in key files."""
    return os.urandom(KEY_BYTES).hex()


def parse_key(text: str, where: str = "the network key") -> bytes:
    text = (text or "").strip()
    if len(text) < 2 * KEY_BYTES or len(text) % 2 or not _HEX.issuperset(text):
        raise NetworkError("%s must hold at least %d hex digits (made by the overlay_agent role or local_agents)"
                           % (where, 2 * KEY_BYTES))
    return bytes.fromhex(text)


def read_key(path: str) -> bytes:
    """The key in file ``path``; a leading ``~`` is the user's home (the default path is written so, and only
    Ansible's ``path`` options expand it: the CLI, scripts and benchmarks pass it as written)."""
    path = os.path.expanduser(path)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except OSError as e:
        raise NetworkError("cannot read the network key %s: %s" % (path, e.strerror or e)) from None
    except UnicodeDecodeError:
        text = ""
    return parse_key(text, "the network key %s" % path)


def _message(namespace: str, job_id: str, group: str, params: t.Mapping[str, str]) -> bytes:
    head, tail = _message_parts(namespace, job_id, params)
    return head + group.encode("utf-8") + tail


def _message_parts(namespace: str, job_id: str, params: t.Mapping[str, str]) -> t.Tuple[bytes, bytes]:
    """What the MAC covers, but the group's name: the text before it and after it (a job's groups share both)."""
    fields = [(k, params[k]) for k in PARAM_KEYS if k in params]  # (all of them up to version 3; 4 has no BAI_AGENTS)
    fields += [(k, params[k]) for k in V3_KEYS if k in params]  # (none in versions 1 and 2: their MACs unchanged)
    fields += [(k, params[k]) for k in V4_KEYS if k in params]  # (none before version 4)
    return (("backendai-session-network\nNOMAD_NAMESPACE=%s\nNOMAD_JOB_ID=%s\nNOMAD_GROUP_NAME="
             % (namespace, job_id)).encode("utf-8"), ("\n" + "".join("%s=%s\n" % kv for kv in fields)).encode("utf-8"))


def hkdf_sha256(ikm: bytes, info: bytes, length: int = KEY_BYTES, salt: bytes = b"") -> bytes:
    """HKDF-SHA256 (RFC 5869: extract, then expand) over the stdlib's HMAC: the standard library has no HKDF and the
    plugin stays stdlib-only (checked against RFC 5869's test vectors in the unit tests)."""
    return hkdf_expand(hkdf_extract(ikm, salt), info, length)


def hkdf_extract(ikm: bytes, salt: bytes = b"") -> bytes:
    """HKDF-Extract (RFC 5869 2.2): the pseudorandom key of ``ikm``; no salt = HashLen zeros. One for every key
    expanded from the same ``ikm`` (:func:`derive_agent_keys`, :func:`agent_secrets`)."""
    return hmac.digest(salt or b"\0" * 32, ikm, "sha256")


def hkdf_expand(prk: bytes, info: bytes, length: int = KEY_BYTES) -> bytes:
    """HKDF-Expand (RFC 5869 2.3) of the pseudorandom key ``prk``."""
    if not 0 < length <= 255 * 32:
        raise ValueError("HKDF-SHA256 gives 1 to %d bytes, not %d" % (255 * 32, length))
    out, block, i = b"", b"", 0
    while len(out) < length:  # RFC 5869 2.3: T(i) = HMAC(PRK, T(i-1) | info | i)
        i += 1
        block = hmac.digest(prk, block + info + bytes((i,)), "sha256")
        out += block
    return out[:length]


def check_agent_name(agent_name: str) -> str:
    """An agent's name as a key derivation takes it: non-empty text without NUL or newline."""
    if not isinstance(agent_name, str) or not agent_name or "\0" in agent_name or "\n" in agent_name:
        raise NetworkError("an agent name (its Nomad node name) must be non-empty text without NUL or newline, got %r"
                           % (agent_name,))
    return agent_name


def derive_agent_key(cluster_key: bytes, agent_name: str, label: bytes = AGENT_KEY_LABEL) -> bytes:
    """The key agent ``agent_name`` holds (never the cluster key): HKDF-SHA256 of the cluster key with ``info`` =
    ``label``, NUL, the agent's name. The agent derives what it needs from it with other labels
    (:func:`network_mac_key`, :func:`wireguard_private_key`)."""
    return hkdf_sha256(cluster_key, label + b"\0" + check_agent_name(agent_name).encode("utf-8"))


def derive_agent_keys(cluster_key: bytes, agent_names: t.Iterable[str]) -> t.Dict[str, bytes]:
    """:func:`derive_agent_key` of each agent, the cluster key extracted once (a session's render derives one key per
    agent: 10,000 HMACs fewer for 10,000 agents)."""
    prk = hkdf_extract(cluster_key)
    return {a: hkdf_expand(prk, AGENT_KEY_LABEL + b"\0" + check_agent_name(a).encode("utf-8")) for a in agent_names}


def agent_secrets(agent_key: bytes) -> t.Tuple[bytes, bytes]:
    """(:func:`network_mac_key`, :func:`wireguard_private_key`) of ``agent_key``, extracted once."""
    prk = hkdf_extract(agent_key)
    return hkdf_expand(prk, NETWORK_MAC_LABEL), _clamp(hkdf_expand(prk, WIREGUARD_KEY_LABEL))


def wireguard_private_key(agent_key: bytes) -> bytes:
    """The WireGuard (X25519) private key of the agent holding ``agent_key``: HKDF-SHA256 with
    :data:`WIREGUARD_KEY_LABEL`, clamped as RFC 7748 5 and ``wg genkey`` do. Its public key is ``wg pubkey`` of it
    (the agent needs none: ``wg`` derives it), or X25519 on the control node (``_session.keys``)."""
    return _clamp(hkdf_sha256(agent_key, WIREGUARD_KEY_LABEL))


def _clamp(key: bytes) -> bytes:
    """An X25519 private key as RFC 7748 5 clamps it."""
    k = bytearray(key)
    k[0] &= 248
    k[31] = (k[31] & 127) | 64
    return bytes(k)


def tunnel_prefix(cluster_key: bytes) -> str:
    """The cluster's tunnel prefix, a ULA /48 (RFC 4193: ``fd`` + 40 bits) derived from the cluster key: 12 hex
    digits (the control node's: agents get it in ``BAI_TUN``)."""
    return "fd" + hkdf_sha256(cluster_key, TUNNEL_PREFIX_LABEL, 5).hex()


def tunnel_address(prefix: str, public_key: bytes) -> str:
    """An agent's tunnel address: the /48 ``prefix`` and 80 bits of SHA-256 of its WireGuard public key (what a
    peer's ``allowed-ips`` holds, so WireGuard accepts from it only packets of that address). Full form, no ``::``."""
    digits = prefix + hashlib.sha256(TUNNEL_ADDRESS_LABEL + b"\0" + public_key).hexdigest()[:20]
    return ":".join(digits[i:i + 4] for i in range(0, 32, 4))


def network_mac_key(agent_key: bytes) -> bytes:
    """The key of the ``BAI_MAC`` of the groups pinned to the agent holding ``agent_key``."""
    return hkdf_sha256(agent_key, NETWORK_MAC_LABEL)


def signing_key(cluster_key: bytes, agent_name: str) -> bytes:
    """What the control node signs a group pinned to ``agent_name`` with (:func:`signed_args`)."""
    return network_mac_key(derive_agent_key(cluster_key, agent_name))


def signed_args(key: bytes, namespace: str, job_id: str, group: str, args: t.Mapping[str, str]) -> t.Dict[str, str]:
    """``args`` (a session's ``NetworkParams.args()``, made once for all its groups) with the MAC of one group;
    ``key``: the :func:`signing_key` of the agent the group is pinned to."""
    return GroupSigner(namespace, job_id, args).sign(key, group)


class GroupSigner:
    """Signs the groups of one job (``args``: its ``NetworkParams.args()``, shared by every group): what the MAC
    covers but the group's name is made once, not once per group."""

    def __init__(self, namespace: str, job_id: str, args: t.Mapping[str, str]) -> None:
        self.args = dict(args)
        self.head, self.tail = _message_parts(namespace, job_id, args)

    def sign(self, key: bytes, group: str) -> t.Dict[str, str]:
        """The group's ``cni { args }``: the args with the MAC made with ``key`` (:func:`signing_key`)."""
        out = dict(self.args)
        out[MAC_KEY] = hmac.digest(key, self.head + group.encode("utf-8") + self.tail, "sha256").hex()
        return out


def job_args(key: bytes, namespace: str, job_id: str, group: str, params: NetworkParams) -> t.Dict[str, str]:
    """The ``cni { args }`` of one task group (``group`` is its name: the container's hostname)."""
    return signed_args(key, namespace, job_id, group, params.args())


def nomad_cni_args(args: t.Mapping[str, str], region: str, namespace: str, job_id: str, group: str,
                   alloc_id: str) -> str:
    """``CNI_ARGS`` exactly as Nomad's client builds it: ``IgnoreUnknown``, the job's args, then the NOMAD_*
    keys, which override the job's (a value with ``;`` is skipped, as Nomad does)."""
    out: t.Dict[str, str] = {"IgnoreUnknown": "true"}
    out.update(args)
    for k, v in zip(NOMAD_KEYS, (region, namespace, job_id, group, alloc_id)):
        if ";" not in v:
            out[k] = v
    return ";".join("%s=%s" % kv for kv in out.items())


def parse_cni_args(text: str) -> t.Dict[str, str]:
    """``K=V;K=V`` -> dict (libcni's format; a later key wins)."""
    out = {}
    for pair in (text or "").split(";"):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep:
            raise AdmissionError("CNI_ARGS item %r is not KEY=VALUE" % pair[:40])
        out[key] = value
    return out


class Admission(_Record):
    """An allocation admitted to a session network: Nomad's identity of it and its ``NetworkParams``; with version 4,
    ``table`` says where its agent table is (:class:`TableRef`) and ``params`` has no agents until
    :func:`resolve_table` (None: the agents are in the args)."""

    __slots__ = ()
    _fields = ("namespace", "job_id", "group", "alloc_id", "params", "table")
    _defaults = (None,)


def admit(key: bytes, cni_args: t.Mapping[str, str],
          identity: t.Optional[t.Tuple[str, str, str]] = None) -> Admission:
    """Check CNI_ARGS: every parameter present and valid, the MAC right for the allocation's identity.

    ``key``: this agent's :func:`network_mac_key`. ``identity``: (namespace, job, group) of the allocation as the
    local Nomad agent's API has it (the plugin's look-up, ``_cni_nomad``); None: the ``NOMAD_*`` keys of
    ``cni_args`` are the identity (the local runtime, which builds CNI_ARGS itself). A version 4 admission has no
    agents yet: :func:`resolve_table` adds them from the table its ``BAI_TAB`` signs."""
    if identity is None:
        missing = [k for k in IDENTITY_KEYS if not cni_args.get(k)]
        if missing:
            raise AdmissionError("CNI_ARGS lack %s: Nomad 1.10 or later adds them; an older client or another "
                                 "runtime cannot join a session network" % ", ".join(missing))
        identity = (cni_args[IDENTITY_KEYS[0]], cni_args[IDENTITY_KEYS[1]], cni_args[IDENTITY_KEYS[2]])
    version = cni_args.get("BAI_V", "")
    required = V4_PARAM_KEYS if version == TABLE_ARGS_VERSION else PARAM_KEYS
    missing = [k for k in required + (MAC_KEY,) if not cni_args.get(k)]
    if missing:
        raise AdmissionError("CNI_ARGS lack the session network parameters %s: the group's network block needs "
                             "cni { args } as rendered by backendai.cluster" % ", ".join(missing))
    if version not in ARGS_VERSIONS:
        raise AdmissionError("BAI_V %r is not a version this plugin knows (%s)" % (version, ", ".join(ARGS_VERSIONS)))
    signed = {k: cni_args[k] for k in required}
    if version in ("3", "4"):
        enc = cni_args.get(ENC_KEY, "")
        signed[ENC_KEY] = enc
        if enc == "wireguard":
            wanted = (WG_KEY, TUN_KEY) if version == "3" else (TUN_KEY,)
            missing = [k for k in wanted if not cni_args.get(k)]
            if missing:
                raise AdmissionError("CNI_ARGS lack %s: a session with underlay encryption carries its agents' "
                                     "WireGuard keys" % ", ".join(missing))
            signed.update((k, cni_args[k]) for k in wanted)
        elif enc != "none":
            raise AdmissionError("BAI_ENC must be one of %s, got %r" % (", ".join(UNDERLAY_ENCRYPTIONS), enc))
    ns, job, group = identity
    want = hmac.digest(key, _message(ns, job, group, signed), "sha256").hex()
    if not hmac.compare_digest(want, cni_args[MAC_KEY].lower()):
        raise AdmissionError("the session network parameters are not admitted for job %r, group %r in namespace %r "
                             "on this agent: their MAC does not match (parameters of another job or group, signed "
                             "for another agent, or edited)" % (job, group, ns))
    try:
        vni, mtu = int(cni_args["BAI_VNI"]), int(cni_args["BAI_MTU"])
    except ValueError:
        raise AdmissionError("BAI_VNI and BAI_MTU must be integers") from None
    enc = signed.get(ENC_KEY, "none")
    try:
        if version == TABLE_ARGS_VERSION:
            return _admit_table(ns, job, group, cni_args, vni, mtu, enc)
        params = check_params(NetworkParams(cni_args["BAI_SID"], vni, cni_args["BAI_NET"],
                                            decode_agents(cni_args["BAI_AGENTS"], version), mtu, enc,
                                            decode_wg_keys(signed[WG_KEY]) if enc == "wireguard" else (),
                                            signed.get(TUN_KEY, "")))
    except NetworkError as e:
        raise AdmissionError(str(e)) from None
    return Admission(ns, job, group, cni_args.get(ALLOC_KEY, ""), params)


def _admit_table(ns: str, job: str, group: str, cni_args: t.Mapping[str, str], vni: int, mtu: int,
                 enc: str) -> Admission:
    """A version 4 admission (MAC checked): its scalars validated, its table's place and digest; no agents yet."""
    count_text, digest = cni_args[COUNT_KEY], cni_args[TABLE_KEY]
    if not count_text.isdigit() or not 0 < int(count_text) <= MAX_TABLE_AGENTS:
        raise NetworkError("BAI_N must be the number of the session's agents, got %r" % count_text[:24])
    if len(digest) != 43 or not _B64URL.issuperset(digest):
        raise NetworkError("BAI_TAB must be a SHA-256 digest in base64url, got %r" % digest[:48])
    count = int(count_text)
    # validated as a one-agent session (every scalar checked: the SID, VNI, subnet, MTU, prefix, namespace)
    probe = NetworkParams(cni_args["BAI_SID"], vni, cni_args["BAI_NET"], ("10.0.0.1",), mtu, enc,
                          (b"\0" * 32,) if enc == "wireguard" else (), cni_args.get(TUN_KEY, ""), cni_args[TABLE_NS_KEY])
    p = check_params(probe)._replace(agents=(), wg_keys=())
    ref = TableRef(p.table_namespace, digest, count,
                   tuple(table_path(vni, digest, k) for k in range(table_chunks(count))))
    return Admission(ns, job, group, cni_args.get(ALLOC_KEY, ""), p, ref)


# ---------------------------------------------------------------------------- layout on an agent

class AgentLayout(_Record):
    """One session on one agent: its position among the session's agents, its bridge and VXLAN device, the
    bridge's address (the first of the agent's block), the block for IPAM, the other agents' underlay addresses;
    with underlay encryption, this agent's WireGuard public key and tunnel address, and the other agents'
    (public key as ``wg`` writes it, tunnel address, underlay address)."""

    __slots__ = ()
    _fields = ("index", "bridge", "vxlan", "gateway", "prefixlen", "range_start", "range_end", "peers",
               "wg_key", "tunnel", "wg_peers")
    _defaults = ("", "", ())


def agent_block(subnet: str, count: int, index: int) -> t.Tuple[str, str, str]:
    """Block ``index`` of ``count`` disjoint blocks of ``subnet`` (an agent's: each agent works out only its own):
    (gateway, first container address, last). NetworkError if ``subnet`` has no room for ``count``."""
    network, length = net4(subnet)
    per = ((1 << (32 - length)) - 2) // max(1, count)
    if per < 2:
        raise NetworkError("subnet %s is too small for %d agents" % (subnet, count))
    lo = network + 1 + index * per
    return ip4_text(lo), ip4_text(lo + 1), ip4_text(lo + per - 1)


def link_names(session_id: str) -> t.Tuple[str, str]:
    """(bridge, vxlan) names of a session on every agent (IFNAMSIZ: 15 characters)."""
    digest = hashlib.sha256(("links\0" + session_id).encode()).hexdigest()
    return BRIDGE_PREFIX + digest[:12], VXLAN_PREFIX + digest[:11]


#: What the names of a session's peer sets end with (after its bridge's name): its agents' underlay addresses
#: (IPv4, plain VXLAN) and its peers' tunnel addresses (IPv6, VXLAN inside WireGuard).
PEER_SET_SUFFIXES = ("-peers", "-peers6")


def peer_set_names(session_id: str) -> t.Tuple[str, str]:
    """(IPv4, IPv6) names of the session's ipset of its peers' addresses on an agent (at most 31 characters)."""
    bridge = link_names(session_id)[0]
    return bridge + PEER_SET_SUFFIXES[0], bridge + PEER_SET_SUFFIXES[1]


def is_peer_set_name(name: str) -> bool:
    """Whether ``name`` is what :func:`peer_set_names` makes (of some session)."""
    for suffix in PEER_SET_SUFFIXES:
        stem = name[:-len(suffix)] if name.endswith(suffix) else ""
        if len(stem) == len(BRIDGE_PREFIX) + 12 and stem.startswith(BRIDGE_PREFIX) \
                and all(c in "0123456789abcdef" for c in stem[len(BRIDGE_PREFIX):]):
            return True
    return False


def layout(params: NetworkParams, underlay_ip: str) -> AgentLayout:
    """Where ``underlay_ip`` (this agent) stands in the session; NetworkError if it is not one of its agents."""
    if underlay_ip not in params.agents:
        raise AdmissionError("this agent (underlay address %s) is not one of the session's agents (%s)"
                             % (underlay_ip, ", ".join(params.agents)))
    index = params.agents.index(underlay_ip)
    gateway, start, end = agent_block(params.subnet, len(params.agents), index)
    bridge, vxlan = link_names(params.session_id)
    peers = tuple(a for a in params.agents if a != underlay_ip)
    if not params.encrypted:
        return AgentLayout(index, bridge, vxlan, gateway, net4(params.subnet)[1], start, end, peers)
    tunnels = params.tunnel_addresses()
    wg_peers = tuple((wg_key_text(params.wg_keys[i]), tunnels[i], params.agents[i])
                     for i in range(len(params.agents)) if i != index)
    return AgentLayout(index, bridge, vxlan, gateway, net4(params.subnet)[1], start, end, peers,
                       wg_key_text(params.wg_keys[index]), tunnels[index], wg_peers)


def vni_match(vni: int) -> str:
    """An iptables ``u32`` expression matching a VXLAN header's VNI (``lo:hi`` for a range).

    ``0>>22&0x3C@`` moves past the IPv4 header; the VNI is the top 24 bits of the 32-bit word at
    offset 12 of the UDP header (8 bytes of UDP, then the VXLAN header's second word)."""
    return "0>>22&0x3C@12>>8=%s" % vni


VNI_RANGE_MATCH = "0>>22&0x3C@12>>8=0x%X:0x%X" % (VNI_BASE, VNI_MAX)


def vni_match6(vni: int) -> str:
    """The ``u32`` VNI match over IPv6, for a packet whose next header is UDP itself (``4>>8&0xFF=17``: the byte
    after the payload length): only then is the VNI word at 40 + 12. A packet with extension headers never matches
    (an attacker could otherwise place any VNI at offset 52); the chain drops it first (``_cni_system.base_rules6``)."""
    return "4>>8&0xFF=17&&52>>8=%s" % vni


# ---------------------------------------------------------------------------- the static config

def static_conflist(underlay_ip: str, key_file: str, state_dir: str, egress: bool = True,
                    uplinks: t.Sequence[str] = (), underlay_mtu: int = DEFAULT_UNDERLAY_MTU, vxlan_port: int = VXLAN_PORT,
                    portmap: bool = True, agent_name: str = "", identity: str = "nomad",
                    nomad_addr: str = DEFAULT_NOMAD_ADDR, nomad_token_file: str = "",
                    nomad_ca_file: str = "", nomad_client_cert: str = "", nomad_client_key: str = "",
                    nomad_allow_plain_http: bool = False, wireguard_interface: str = WIREGUARD_INTERFACE,
                    wireguard_port: int = WIREGUARD_PORT, wireguard_mode: str = "auto") -> t.Dict[str, t.Any]:
    """The one network config of an agent (``<cni_config_dir>/backendai.conflist``).

    ``key_file``: the agent's own key (:func:`derive_agent_key`). ``uplinks``: interfaces egress may leave by
    (default: those of the agent's default routes). ``identity``: ``nomad`` (every allocation is looked up in the
    local Nomad agent at ``nomad_addr``, with the ACL token in ``nomad_token_file`` and the CA of
    ``nomad_ca_file`` for https, ``nomad_client_cert``/``nomad_client_key`` where Nomad verifies its clients;
    plain http off loopback only with ``nomad_allow_plain_http``; ``agent_name`` is the agent's Nomad node name) or
    ``local`` (the local runtime's
    agents: the CNI_ARGS are the runtime's own). ``wireguard_*``: the agent's one WireGuard interface, its UDP
    port, and ``kernel``, ``userspace`` (wireguard-go) or ``auto`` (the kernel module where it loads).
    """
    if identity not in IDENTITY_SOURCES:
        raise NetworkError("identity must be one of %s, got %r" % (", ".join(IDENTITY_SOURCES), identity))
    plugin: t.Dict[str, t.Any] = {"type": PLUGIN_TYPE, "underlayIP": ip4_text(ip4(underlay_ip)),
                                  "underlayMTU": int(underlay_mtu), "vxlanPort": int(vxlan_port),
                                  "keyFile": key_file, "stateDir": state_dir, "egress": bool(egress),
                                  "agentName": check_agent_name(agent_name), "identity": identity,
                                  "wireguard": {"interface": wireguard_interface, "port": int(wireguard_port),
                                                "mode": wireguard_mode}}
    if identity == "nomad":
        plugin["nomadAddr"] = nomad_addr
        if nomad_token_file:
            plugin["nomadTokenFile"] = nomad_token_file
        if nomad_ca_file:
            plugin["nomadCACert"] = nomad_ca_file
        if nomad_client_cert:
            plugin["nomadClientCert"] = nomad_client_cert
        if nomad_client_key:
            plugin["nomadClientKey"] = nomad_client_key
        if nomad_allow_plain_http:
            plugin["nomadAllowPlainHTTP"] = True
    if uplinks:
        plugin["uplinks"] = list(uplinks)
    plugins: t.List[t.Dict[str, t.Any]] = [{"type": "loopback"}, plugin]
    if portmap:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}, "snat": True})
    return {"cniVersion": CNI_VERSION, "name": NETWORK_NAME, "plugins": plugins}
