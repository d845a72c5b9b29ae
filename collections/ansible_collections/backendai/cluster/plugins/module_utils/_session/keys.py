# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session's SSH keypair, made with the ``cryptography`` library; the agents' WireGuard public keys.

One keypair per session: every container trusts it (authorized_keys), uses it as its client
identity and as sshd's host key, so ``ssh sub1`` needs neither a password nor a host-key prompt
and still pins the host key. The private key is a secret: it is only ever handed to a secret
backend (Nomad Variables, Vault, or a 0600 file of the local runtime).
"""

from __future__ import annotations

import typing as t
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa, x25519
    HAS_CRYPTOGRAPHY = True
    CRYPTOGRAPHY_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised by the modules' missing_required_lib path
    HAS_CRYPTOGRAPHY = False
    CRYPTOGRAPHY_IMPORT_ERROR = exc

#: Namespace of the session UUIDs this collection derives (uuid5).
SESSION_UUID_NAMESPACE = uuid.UUID("6f1c2a6e-9b4e-5b1e-8d7a-3c2b1a0f9e11")


class SSHKeypair(t.NamedTuple):
    private_key: str  # OpenSSH PEM ("-----BEGIN OPENSSH PRIVATE KEY-----"); SECRET
    public_key: str  # one authorized_keys line: "<type> <base64> <comment>"

    def __repr__(self) -> str:  # keep the private key out of tracebacks and debug output
        return "SSHKeypair(public_key=%r, private_key=<hidden>)" % self.public_key


def generate_keypair(key_type: str = "ed25519", key_bits: int = 3072,
                     comment: str = "backendai-cluster") -> SSHKeypair:
    """Make a new keypair (``ed25519``, or ``rsa`` of ``key_bits`` ≥ 2048)."""
    if not HAS_CRYPTOGRAPHY:
        raise RuntimeError("the cryptography Python library is required to generate SSH keys")
    if key_type == "ed25519":
        key: t.Any = ed25519.Ed25519PrivateKey.generate()
    elif key_type == "rsa":
        if key_bits < 2048:
            raise ValueError("RSA keys must have at least 2048 bits")
        key = rsa.generate_private_key(public_exponent=65537, key_size=key_bits)
    else:
        raise ValueError("key_type must be ed25519 or rsa")
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode("ascii")
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode("ascii")
    return SSHKeypair(private, "%s %s" % (public, comment) if comment else public)


def derive_session_id(name: str, public_key: str) -> str:
    """The session ID: unique per creation (it depends on the fresh key) yet reproducible from it."""
    return str(uuid.uuid5(SESSION_UUID_NAMESPACE, "%s\n%s" % (name, " ".join(public_key.split()[:2]))))


def derive_kernel_id(session_id: str, hostname: str, is_main: bool) -> str:
    """A container's kernel ID; main1's equals the session ID (as in Backend.AI)."""
    if is_main:
        return session_id
    return str(uuid.uuid5(uuid.UUID(session_id), hostname))


def wireguard_public_key(private_key: bytes) -> bytes:
    """The X25519 public key of a WireGuard private key (what ``wg pubkey`` prints, as 32 bytes)."""
    if not HAS_CRYPTOGRAPHY:
        raise RuntimeError("cryptography is required for WireGuard public keys: %s" % CRYPTOGRAPHY_IMPORT_ERROR)
    public = x25519.X25519PrivateKey.from_private_bytes(private_key).public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def wireguard_peers(cluster_key: bytes, agents: t.Sequence[str],
                    agent_keys: t.Optional[t.Mapping[str, bytes]] = None) -> t.Tuple[str, t.Tuple[bytes, ...]]:
    """(the cluster's tunnel prefix, each agent's WireGuard public key): what the control node, which holds the
    cluster key, puts into a session's parameters; every agent derives its own private key from its agent key.
    ``agent_keys``: the agents' keys (``derive_agent_key``) if the caller has them already."""
    agent_keys = agent_keys or {}
    return net.tunnel_prefix(cluster_key), tuple(
        wireguard_public_key(net.wireguard_private_key(agent_keys.get(a) or net.derive_agent_key(cluster_key, a)))
        for a in agents)
