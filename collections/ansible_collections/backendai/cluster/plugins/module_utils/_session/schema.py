# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session spec's schema (``SCHEMA``, what the doc fragment documents), its patterns and its types.

The frozen dataclasses (:class:`SessionSpec` and its parts) are what ``_session.spec.parse_spec``
returns and what every later step reads. Pure.
"""

from __future__ import annotations

import posixpath
import re
import typing as t
from dataclasses import dataclass, field

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A role name becomes a hostname prefix (<role><idx>): a DNS label that must not end in a digit,
# or "worker1" + idx 1 and "worker" + idx 11 would both be "worker11".
ROLE_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,30}[a-z])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The only network mode: every session is on its own private network (``_network._session_network``).
NETWORK_MODE_AUTO = "auto"
NETWORK_MODE_HELP = (
    "must be auto (every session gets a private network of its own on the backendai CNI network; bridge would "
    "put it on Nomad's shared bridge with every other allocation of the agent, and a cni/<name> network of "
    "your own is not private to the session, so neither is offered)")
PORT_LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
#: The session user's name: what useradd and Debian's adduser accept by default (NAME_REGEX), at most 32 long.
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
ROOT_USER = "root"
#: Names the user may not take: the privilege separation user sshd needs, and the overflow user.
RESERVED_USERS = ("sshd", "nobody")
#: Largest uid/gid: (uid_t)-1 means "unchanged" to setresuid and chown; 65534 is nobody's (the overflow id).
MAX_ID = 4294967294
NOBODY_ID = 65534

MAX_CLUSTER_SIZE = 4096
DRIVERS = ("docker", "podman")
CLUSTER_MODES = ("single-node", "multi-node")
KEY_TYPES = ("ed25519", "rsa")
SECRET_BACKENDS = ("nomad-variables", "vault")
#: How a multi-node session's VXLAN crosses the underlay between agents (``_network._session_network``).
UNDERLAY_ENCRYPTIONS = ("wireguard", "none")
STRATEGIES = ("concentrated", "dispersed")
#: What the gang does when a container's command fails (``_session.gang``, docs/failure-policy.md).
FAILURE_POLICIES = ("none", "fail", "restart_all", "restart_one")
#: Exit codes that never heal by running again: 2 (a usage error: argparse, getopt, shells' builtins), 126 (the
#: command cannot be executed), 127 (not found). The default of ``failure.fail_on_exit_codes``.
NO_RETRY_EXIT_CODES = (2, 126, 127)

#: Variables the session sets in every container; user ``env`` may not override them.
RESERVED_ENV = frozenset((
    "BACKENDAI_CLUSTER_HOST", "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_IDX",
    "BACKENDAI_CLUSTER_MODE", "BACKENDAI_CLUSTER_ROLE", "BACKENDAI_CLUSTER_SIZE",
    "BACKENDAI_CLUSTER_REPLICAS", "BACKENDAI_CLUSTER_LOCAL_RANK", "BACKENDAI_KERNEL_ID",
    "BACKENDAI_SESSION_ID", "WORLD_SIZE", "WORLD_RANK", "RANK", "LOCAL_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TF_CONFIG",
))


# --- the one schema ---------------------------------------------------------------------------
# Keys, types, defaults and choices of the spec, in the form of Ansible's option documentation.
# The validator below takes its allowed keys, choices and defaults from here, and the modules'
# documentation of ``spec`` (plugins/doc_fragments/session_spec.py) is checked against it by a test,
# so the two cannot drift. Types are what the documentation says; the checks themselves (ranges,
# patterns, cross-field rules) are in the code, which reports every problem at once.

SCHEMA: t.Dict[str, t.Dict[str, t.Any]] = {
    "name": {"type": "str", "required": True},
    "image": {"type": "str", "required": True},
    "driver": {"type": "str", "choices": list(DRIVERS), "default": "docker"},
    "command": {"type": "list", "elements": "str"},
    "cluster_size": {"type": "int", "default": 1},
    "cluster_mode": {"type": "str", "choices": list(CLUSTER_MODES), "default": "single-node"},
    "resources": {"type": "dict", "suboptions": {
        "cpu": {"type": "int", "default": 1000},
        "memory": {"type": "int", "default": 1024},
        "gpu": {"type": "int", "default": 0}}},
    "mounts": {"type": "list", "elements": "dict", "suboptions": {
        "source": {"type": "str", "required": True},
        "target": {"type": "str", "required": True},
        "read_only": {"type": "bool", "default": False}}},
    "ssh": {"type": "dict", "suboptions": {
        "key_type": {"type": "str", "choices": list(KEY_TYPES), "default": "ed25519"},
        "key_bits": {"type": "int", "default": 3072},
        "port": {"type": "int", "default": 2200}}},
    "secrets": {"type": "dict", "suboptions": {
        "backend": {"type": "str", "choices": list(SECRET_BACKENDS), "default": "nomad-variables"},
        "mount": {"type": "str", "default": "secret"},
        "path": {"type": "str"},
        "role": {"type": "str"}}},
    "network": {"type": "dict", "suboptions": {
        "mode": {"type": "str", "choices": [NETWORK_MODE_AUTO], "default": NETWORK_MODE_AUTO},
        "underlay_encryption": {"type": "str", "choices": list(UNDERLAY_ENCRYPTIONS), "default": "wireguard"}}},
    "master_port": {"type": "int", "default": 12345},
    "env": {"type": "dict"},
    "roles": {"type": "list", "elements": "dict", "suboptions": {
        "name": {"type": "str", "required": True},
        "replicas": {"type": "int", "default": 1},
        "image": {"type": "str"},
        "command": {"type": "list", "elements": "str"},
        "resources": {"type": "dict", "suboptions": {  # defaults: the session's resources
            "cpu": {"type": "int"}, "memory": {"type": "int"}, "gpu": {"type": "int"}}},
        "env": {"type": "dict"}}},
    "placement": {"type": "dict", "suboptions": {
        "strategy": {"type": "str", "choices": list(STRATEGIES), "default": "concentrated"}}},
    "datacenters": {"type": "list", "elements": "str"},
    "ports": {"type": "list", "elements": "dict", "suboptions": {
        "label": {"type": "str", "required": True},
        "port": {"type": "int", "required": True}}},
    "mpi": {"type": "dict", "suboptions": {
        "slots": {"type": "int", "default": 1}}},
    "user": {"type": "dict", "suboptions": {  # uid/gid default to 0 for name root
        "name": {"type": "str", "default": "work"},
        "uid": {"type": "int", "default": 1000},
        "gid": {"type": "int", "default": 1000},
        "allow_root": {"type": "bool", "default": False}}},
    "failure": {"type": "dict", "suboptions": {
        "policy": {"type": "str", "choices": list(FAILURE_POLICIES), "default": "none"},
        "max_restarts": {"type": "int", "default": 3},
        "window": {"type": "int", "default": 600},
        "fail_on_exit_codes": {"type": "list", "elements": "int", "default": list(NO_RETRY_EXIT_CODES)},
        "hang_timeout": {"type": "int", "default": 0},
        "rejoin_timeout": {"type": "int", "default": 360},
        "port": {"type": "int", "default": 2201}}},
    # seconds; unset: no limit, kept until removed; interactive containers too (docs/session-lifecycle.md)
    "max_run_time": {"type": "int"},
    "keep_after": {"type": "int"},
}


def _sub(*path: str) -> t.Dict[str, t.Any]:
    """The schema of the mapping at ``path`` (top level when empty)."""
    node = SCHEMA
    for key in path:
        node = node[key]["suboptions"]
    return node


def _keys(*path: str) -> t.Tuple[str, ...]:
    return tuple(_sub(*path))


def _default(*path: str) -> t.Any:
    return _sub(*path[:-1])[path[-1]].get("default")


def _choices(*path: str) -> t.Tuple[t.Sequence[str], str]:
    entry = _sub(*path[:-1])[path[-1]]
    return entry["choices"], entry["default"]


@dataclass(frozen=True)
class Resources:
    """Resources of ONE container: CPU in MHz, memory in MB, GPU devices."""

    cpu: int = _default("resources", "cpu")
    memory: int = _default("resources", "memory")
    gpu: int = _default("resources", "gpu")


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class SSHSpec:
    key_type: str = _default("ssh", "key_type")
    key_bits: int = 0  # rsa only; 0 for ed25519
    port: int = _default("ssh", "port")


@dataclass(frozen=True)
class SecretsSpec:
    backend: str = _default("secrets", "backend")
    mount: str = _default("secrets", "mount")  # vault KV v2 mount
    path: str = ""  # vault: path under the mount; nomad-variables: always nomad/jobs/<job>
    role: str = ""  # vault: workload identity role (empty = Nomad's default role)


@dataclass(frozen=True)
class UserSpec:
    """Who logins and the command run as in every container (Backend.AI's ``work`` user, its kernel-uid/gid)."""

    name: str = _default("user", "name")
    uid: int = _default("user", "uid")
    gid: int = _default("user", "gid")

    @property
    def home(self) -> str:
        return "/root" if self.is_root else "/home/" + self.name

    @property
    def is_root(self) -> bool:
        return self.name == ROOT_USER


@dataclass(frozen=True)
class PublishedPort:
    """A port main1 publishes outside the session network (label, container port)."""

    label: str
    port: int


@dataclass(frozen=True)
class Role:
    """A cluster role after defaults and per-role overrides are resolved."""

    name: str
    replicas: int
    image: str
    command: t.Tuple[str, ...]
    resources: Resources
    env: t.Tuple[t.Tuple[str, str], ...]


@dataclass(frozen=True)
class FailureSpec:
    """The session's failure policy (the spec's ``failure``; what each field means: docs/failure-policy.md)."""

    policy: str = _default("failure", "policy")
    #: restarts (of the gang, or of one container under restart_one) within ``window`` seconds before it gives up
    max_restarts: int = _default("failure", "max_restarts")
    window: int = _default("failure", "window")
    fail_on_exit_codes: t.Tuple[int, ...] = NO_RETRY_EXIT_CODES
    #: seconds the command's heartbeat file may stay unchanged (0: not watched)
    hang_timeout: int = _default("failure", "hang_timeout")
    #: seconds the gang waits for a container that is gone or does not answer to come back
    rejoin_timeout: int = _default("failure", "rejoin_timeout")
    #: the TCP port every container's supervisor listens on, on the session network
    port: int = _default("failure", "port")

    @property
    def active(self) -> bool:
        return self.policy != "none"


@dataclass(frozen=True)
class SessionSpec:
    name: str
    image: str
    command: t.Tuple[str, ...]
    driver: str
    cluster_size: int
    cluster_mode: str
    resources: Resources
    mounts: t.Tuple[Mount, ...]
    ssh: SSHSpec
    secrets: SecretsSpec
    network_mode: str  # "auto" (the only mode)
    master_port: int
    env: t.Tuple[t.Tuple[str, str], ...]
    roles: t.Tuple[Role, ...]
    strategy: str
    datacenters: t.Tuple[str, ...]
    ports: t.Tuple[PublishedPort, ...]
    mpi_slots: int
    heterogeneous: bool = field(default=False)
    user: UserSpec = field(default=UserSpec())
    #: wireguard (session VXLAN only inside WireGuard between agents) or none (an underlay encrypted already)
    underlay_encryption: str = field(default="wireguard")
    failure: FailureSpec = field(default=FailureSpec())
    #: seconds a session (interactive too) may run before it ends ERROR (0: no limit); ``_session.gang`` keeps the time
    max_run_time: int = field(default=0)
    #: seconds a finished session's containers, logs and network stay before they are removed (None: until
    #: ``state: absent``); see docs/session-lifecycle.md for who removes them on each backend
    keep_after: t.Optional[int] = field(default=None)

    @property
    def has_lifetime(self) -> bool:
        """Whether the session's time (``max_run_time``) or its end (``keep_after``) is kept: then every container's
        supervisor joins the gang, interactive ones too, and the session ends by itself (``_session.gang``)."""
        return bool(self.max_run_time) or self.keep_after is not None

    @property
    def supervised(self) -> bool:
        """Whether the gang's supervisor (``_session.gang``) runs in the containers: a failure policy other than none,
        or a lifetime (:attr:`has_lifetime`)."""
        return self.failure.active or self.has_lifetime

    @property
    def runs_a_command(self) -> bool:
        """Whether a container of the session runs a command (a batch session), rather than only sshd."""
        return bool(self.command) or any(r.command for r in self.roles)


#: Where the session's runtime bundle is mounted read-only in every container (``_nomad.job.RUNTIME_MOUNT``; the
#: local backend mounts it there too): its sshd and tools run as root.
RUNTIME_BUNDLE_TARGET = "/opt/backendai-runtime"
#: What the container start provides in every container, on both backends, and what a mount there would hide: the
#: runtime's kernel filesystems, the files the entrypoint writes (as root) into the image, the runtime bundle, the
#: sshd's own directories and the Nomad task's directories. The session user's ``~/.ssh`` is added per spec
#: (:func:`provided_target`). A mount target may not be one, hold one (``/``, ``/etc``, ``/run``, ``/opt``) or lie
#: inside one.
PROVIDED_TARGETS = (
    ("/proc", "the kernel's process filesystem (ps and the like fail without it; Docker refuses the mount)"),
    ("/sys", "the kernel's sysfs"),
    ("/dev", "the container's devices and its own terminals"),
    ("/etc/hosts", "the session's peer names (main1, sub1, ...), which the entrypoint writes"),
    ("/etc/passwd", "the session user's account, which the entrypoint writes"),
    ("/etc/group", "the session user's group, which the entrypoint writes"),
    ("/etc/shadow", "the accounts' passwords, which the entrypoint writes"),
    ("/etc/nsswitch.conf", "how names are looked up (files first, which ssh sub1 relies on)"),
    ("/etc/resolv.conf", "the resolver the container runtime sets"),
    ("/etc/hostname", "the container's hostname"),
    (RUNTIME_BUNDLE_TARGET, "the runtime bundle (the sshd and tools the entrypoint runs as root)"),
    ("/run/backendai", "the sshd's host key and configuration"),
    ("/run/sshd", "the sshd's privilege separation directory"),
    ("/local", "the task's local/ directory (Nomad's templates: the peers, the hosts script)"),
    ("/secrets", "the task's secrets/ directory (the session keypair)"),
    ("/alloc", "the allocation's shared directory (Nomad)"),
)


def provided_target(target: str, home: str) -> t.Tuple[str, str]:
    """(path, what it is) of what the container start provides that a mount at ``target`` would hide (``target`` is
    it, holds it or lies inside it), or ('', '') if none; ``home`` is the session user's home (its ``.ssh``)."""
    norm = posixpath.normpath("/" + target.lstrip("/"))
    ssh = (posixpath.join(home, ".ssh"), "the session user's SSH keys and configuration, which the entrypoint writes")
    for path, what in PROVIDED_TARGETS + (ssh,):
        if path_within(norm, path) or path_within(path, norm):
            return path, what
    return "", ""


#: Host paths no mount may reach, on either backend: what an agent holds for the session network (the
#: network key, the plugin's code and state) and what the local backend keeps (its sessions' state, keys and
#: staged mounts). A container that could read the key signs network args for any session; one that could
#: write the plugin's code runs as root on the agent. Home-relative ones (``~/...``) are matched in every home.
PROTECTED_SOURCES = (
    "/etc/backendai-cluster",         # the agent's network key (overlay_agent_key_file)
    "/usr/lib/backendai-cluster",     # the plugin's code (overlay_agent_plugin_dir), run as root by Nomad
    "/run/backendai-cluster",         # the plugin's state, the local runtime's container view
    "/run/backendai-cluster-mounts",  # the local runtime's staged mounts of every session
    "/opt/cni", "/usr/lib/cni", "/etc/cni",  # the CNI plugins and configs the Nomad client runs as root
    # the Nomad client's data directory (the Linux packages' data_dir, and a common other one): its allocations'
    # secrets/ dirs hold every session's keypair (client alloc_dir = <data_dir>/alloc, command/agent/agent.go)
    "/opt/nomad", "/var/lib/nomad",
)
#: Symbolic links every Linux distribution has (``/var/run -> /run``; merged ``/usr``): a path through one is
#: checked as the path it leads to. The rest needs the machine: each backend resolves real paths where they are
#: (``_local.session.mount_source``; the ``overlay_agent`` role on each agent for its data roots).
WELL_KNOWN_LINKS = (("/var/run", "/run"), ("/var/lock", "/run/lock"), ("/lib", "/usr/lib"), ("/lib64", "/usr/lib64"),
                    ("/lib32", "/usr/lib32"), ("/bin", "/usr/bin"), ("/sbin", "/usr/sbin"))
PROTECTED_HOME_SOURCES = (
    ".config/backendai-cluster",      # the control node's cluster key (network_key_file)
    ".local/state/backendai-cluster",  # the local backend's sessions and local agents (state_dir)
)
#: Homes (``/root``, ``/home/<user>``) hold the home-relative paths above; ``/home`` holds every home.
HOME_PARENT = "/home"
ROOT_HOME = "/root"


def path_within(path: str, top: str) -> bool:
    """``path`` is ``top`` or below it (both normalised)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def _home_depth(parts: t.Sequence[str]) -> int:
    """How many leading components of a path make a home (1: /root, 2: /home/<user>), 0 if it is in none."""
    if parts[:1] == [ROOT_HOME[1:]]:
        return 1
    if parts[:1] == [HOME_PARENT[1:]] and len(parts) >= 2:
        return 2
    return 0


def protected_source(source: str) -> str:
    """The protected path (see :data:`PROTECTED_SOURCES`) that a mount of ``source`` would expose, or ''.

    A mount exposes what lies below its source, so a source is refused when it is a protected path, lies
    below one, or is a directory above one (``/``, ``/etc``, ``/var``, ``/home``, a home, ``~/.config``). Pure:
    only the links of :data:`WELL_KNOWN_LINKS` are followed; a backend that can resolve the real path checks it
    again (``_local.session``, the ``overlay_agent`` role).
    """
    norm = posixpath.normpath("/" + source.lstrip("/"))
    for link, real in WELL_KNOWN_LINKS:
        if path_within(norm, link):
            norm = real + norm[len(link):]
            break
    for top in PROTECTED_SOURCES:
        if path_within(norm, top) or path_within(top, norm):
            return top
    parts = [p for p in norm.split("/") if p]
    depth = _home_depth(parts)
    for rel in PROTECTED_HOME_SOURCES:
        rel_parts = rel.split("/")
        n = len(rel_parts)
        below = any(parts[i:i + n] == rel_parts for i in range(len(parts)))
        above = norm == HOME_PARENT or (depth and rel_parts[:len(parts) - depth] == parts[depth:])
        if below or above:
            return "~/" + rel
    return ""
