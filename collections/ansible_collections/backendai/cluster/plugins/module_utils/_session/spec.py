# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session spec: validation and normalisation of the user's YAML into a frozen :class:`SessionSpec`.

``parse_spec(raw)`` either returns a fully defaulted spec or raises :class:`SpecError` listing
every problem at once, each naming its field path, the value given and what is allowed.
Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
import typing as t
from dataclasses import dataclass, field

from ansible_collections.backendai.cluster.plugins.module_utils._errors import Problem, SpecError

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A role name becomes a hostname prefix (<role><idx>): a DNS label that must not end in a digit,
# or "worker1" + idx 1 and "worker" + idx 11 would both be "worker11".
ROLE_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,30}[a-z])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: What every container's hostname (``<role><idx>``, see ROLE_RE) is: a DNS label.
HOSTNAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
#: The only network mode: every session is on its own private network (``_session_network``).
NETWORK_MODE_AUTO = "auto"
NETWORK_MODE_HELP = (
    "must be auto (every session gets a private network of its own on the backendai CNI network; bridge would "
    "put it on Nomad's shared bridge with every other allocation of the agent, and a cni/<name> network of "
    "your own is not private to the session, so neither is offered)")
PORT_LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

MAX_CLUSTER_SIZE = 4096
DRIVERS = ("docker", "podman")
CLUSTER_MODES = ("single-node", "multi-node")
KEY_TYPES = ("ed25519", "rsa")
SECRET_BACKENDS = ("nomad-variables", "vault")
STRATEGIES = ("concentrated", "dispersed")

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
        "mode": {"type": "str", "choices": [NETWORK_MODE_AUTO], "default": NETWORK_MODE_AUTO}}},
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


# --- a small collecting validator -------------------------------------------------------------

_MISSING = object()


class _Checker:
    """Collects problems while reading a nested mapping."""

    def __init__(self) -> None:
        self.problems: t.List[Problem] = []

    def bad(self, path: str, message: str, value: t.Any = _MISSING) -> None:
        if value is _MISSING:
            self.problems.append(Problem(path, message))
        else:
            self.problems.append(Problem(path, message, value, True))

    def mapping(self, raw: t.Any, path: str, allowed: t.Sequence[str]) -> t.Dict[str, t.Any]:
        """Return ``raw`` as a dict (empty when absent or wrong); report unknown keys."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.bad(path, "must be a mapping", raw)
            return {}
        for key in raw:
            if key not in allowed:
                self.bad("%s.%s" % (path, key), "unknown key; allowed keys: %s" % ", ".join(allowed))
        return raw

    def integer(self, raw: t.Dict[str, t.Any], key: str, path: str, default: int, low: int,
                high: t.Optional[int] = None, unit: str = "") -> int:
        value = raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        where = "%s.%s" % (path, key)
        allowed = "an integer ≥ %d" % low if high is None else "an integer from %d to %d" % (low, high)
        if unit:
            allowed += " (%s)" % unit
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and re.match(r"^[0-9]+$", value.strip()):
                value = int(value)
            else:
                self.bad(where, "must be " + allowed, value)
                return default
        if value < low or (high is not None and value > high):
            self.bad(where, "must be " + allowed, value)
            return default
        return value

    def string(self, raw: t.Dict[str, t.Any], key: str, path: str, default: t.Optional[str] = None,
               pattern: t.Optional[t.Pattern[str]] = None, allowed: str = "", required: bool = False) -> str:
        value = raw.get(key, _MISSING)
        where = "%s.%s" % (path, key)
        if value is _MISSING or value is None:
            if required:
                self.bad(where, "is required" + (": " + allowed if allowed else ""))
            return default or ""
        if not isinstance(value, str) or not value:
            self.bad(where, "must be a non-empty string" + (" (%s)" % allowed if allowed else ""), value)
            return default or ""
        if pattern is not None and not pattern.match(value):
            self.bad(where, "must be %s" % allowed, value)
            return default or ""
        return value

    def choice(self, raw: t.Dict[str, t.Any], key: str, path: str, choices: t.Sequence[str], default: str) -> str:
        value = raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if value not in choices:
            self.bad("%s.%s" % (path, key), "must be one of: %s" % ", ".join(choices), value)
            return default
        return value

    def boolean(self, raw: t.Dict[str, t.Any], key: str, path: str, default: bool) -> bool:
        value = raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            self.bad("%s.%s" % (path, key), "must be true or false", value)
            return default
        return value

    def command(self, raw: t.Dict[str, t.Any], key: str, path: str) -> t.Optional[t.Tuple[str, ...]]:
        value = raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.bad("%s.%s" % (path, key), "must be a list of strings (argv, e.g. [python, train.py])", value)
            return None
        return tuple(value)

    def env(self, raw: t.Dict[str, t.Any], key: str, path: str) -> t.Dict[str, str]:
        value = raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            return {}
        if not isinstance(value, dict):
            self.bad("%s.%s" % (path, key), "must be a mapping of variable names to values", value)
            return {}
        out: t.Dict[str, str] = {}
        for name, val in value.items():
            where = "%s.%s.%s" % (path, key, name)
            if not isinstance(name, str) or not ENV_NAME_RE.match(name):
                self.bad(where, "is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
                continue
            if name in RESERVED_ENV:
                self.bad(where, "is set by the cluster session itself and cannot be overridden; "
                                "reserved names: %s" % ", ".join(sorted(RESERVED_ENV)))
                continue
            if isinstance(val, bool):
                val = "true" if val else "false"
            if isinstance(val, (int, float)):
                val = str(val)
            if not isinstance(val, str):
                self.bad(where, "must be a string, number or boolean", val)
                continue
            out[name] = val
        return out

    def resources(self, raw: t.Any, path: str, base: Resources) -> Resources:
        res = self.mapping(raw, path, _keys("resources"))
        return Resources(
            cpu=self.integer(res, "cpu", path, base.cpu, 1, unit="MHz per container"),
            memory=self.integer(res, "memory", path, base.memory, 1, unit="MB per container"),
            gpu=self.integer(res, "gpu", path, base.gpu, 0, unit="GPU devices per container"),
        )


TOP_KEYS = _keys()


def parse_spec(raw: t.Any, path: str = "session") -> SessionSpec:
    """Validate ``raw`` (the ``session`` variable) and return the normalised spec.

    Raises :class:`SpecError` with every problem found.
    """
    c = _Checker()
    if not isinstance(raw, dict):
        raise SpecError([Problem(path, "must be a mapping with at least name and image", raw, True)])
    top = c.mapping(raw, path, TOP_KEYS)

    name = c.string(top, "name", path, pattern=NAME_RE, required=True,
                    allowed="1 to 64 letters, digits, '-' or '_' (it is the Nomad job ID)")
    image = c.string(top, "image", path, required=True, allowed="the container image, e.g. python:3.11-slim")
    driver = c.choice(top, "driver", path, *_choices("driver"))
    command = c.command(top, "command", path) or ()
    cluster_mode = c.choice(top, "cluster_mode", path, *_choices("cluster_mode"))
    resources = c.resources(top.get("resources"), path + ".resources", Resources())
    mounts = _parse_mounts(c, top.get("mounts"), path + ".mounts")

    ssh_raw = c.mapping(top.get("ssh"), path + ".ssh", _keys("ssh"))
    key_type = c.choice(ssh_raw, "key_type", path + ".ssh", *_choices("ssh", "key_type"))
    if key_type == "rsa":
        key_bits = c.integer(ssh_raw, "key_bits", path + ".ssh", _default("ssh", "key_bits"), 2048, 16384, unit="RSA key size in bits")
    else:
        key_bits = 0
        if ssh_raw.get("key_bits") is not None:
            c.bad(path + ".ssh.key_bits", "is only allowed with key_type rsa (ed25519 keys have a fixed size)",
                  ssh_raw.get("key_bits"))
    ssh_port = c.integer(ssh_raw, "port", path + ".ssh", _default("ssh", "port"), 1, 65535, unit="sshd port in every container")
    ssh = SSHSpec(key_type=key_type, key_bits=key_bits, port=ssh_port)

    secrets = _parse_secrets(c, top.get("secrets"), path + ".secrets")

    net_raw = c.mapping(top.get("network"), path + ".network", _keys("network"))
    network_mode = net_raw.get("mode") if net_raw.get("mode") is not None else _default("network", "mode")
    if network_mode not in _choices("network", "mode")[0]:
        c.bad(path + ".network.mode", NETWORK_MODE_HELP, network_mode)
        network_mode = _default("network", "mode")

    master_port = c.integer(top, "master_port", path, _default("master_port"), 1, 65535, unit="MASTER_PORT")
    if master_port == ssh_port:
        c.bad(path + ".master_port", "must differ from ssh.port (%d)" % ssh_port, master_port)
    env = c.env(top, "env", path)

    placement = c.mapping(top.get("placement"), path + ".placement", _keys("placement"))
    strategy = c.choice(placement, "strategy", path + ".placement", *_choices("placement", "strategy"))
    datacenters = _parse_string_list(c, top.get("datacenters"), path + ".datacenters")
    ports = _parse_ports(c, top.get("ports"), path + ".ports", (ssh_port, master_port))
    mpi = c.mapping(top.get("mpi"), path + ".mpi", _keys("mpi"))
    mpi_slots = c.integer(mpi, "slots", path + ".mpi", _default("mpi", "slots"), 1, 4096, unit="OpenMPI slots per container")

    size_given = top.get("cluster_size") is not None
    cluster_size = c.integer(top, "cluster_size", path, _default("cluster_size"), 1, MAX_CLUSTER_SIZE,
                             unit="containers in total, main included")
    base = Role("main", 1, image, command, resources, tuple(sorted(env.items())))
    if top.get("roles") is not None:
        roles = _parse_roles(c, top.get("roles"), path + ".roles", base)
        total = sum(r.replicas for r in roles)
        if roles and size_given and total != cluster_size:
            c.bad(path + ".cluster_size", "must equal the sum of roles[].replicas (%d)" % total, cluster_size)
        if roles and total > MAX_CLUSTER_SIZE:
            c.bad(path + ".roles", "replicas add up to %d; at most %d containers" % (total, MAX_CLUSTER_SIZE))
        cluster_size = total
        heterogeneous = True
    else:
        roles = [base]
        if cluster_size > 1:
            roles.append(Role("sub", cluster_size - 1, image, command, resources, base.env))
        heterogeneous = False

    if c.problems:
        raise SpecError(c.problems)
    return SessionSpec(
        name=name, image=image, command=command, driver=driver, cluster_size=cluster_size,
        cluster_mode=cluster_mode, resources=resources, mounts=mounts, ssh=ssh, secrets=secrets,
        network_mode=network_mode, master_port=master_port, env=tuple(sorted(env.items())),
        roles=tuple(roles), strategy=strategy, datacenters=datacenters, ports=ports, mpi_slots=mpi_slots,
        heterogeneous=heterogeneous,
    )


#: Mount targets the container runtime owns (and everything below them).
RESERVED_TARGETS = ("/proc", "/sys", "/dev")


def kernel_fs(target: str) -> str:
    """The reserved directory ``target`` is or lies below ('' if none)."""
    norm = posixpath.normpath("/" + target.lstrip("/"))
    for top in RESERVED_TARGETS:
        if norm == top or norm.startswith(top + "/"):
            return top
    return ""


def _parse_mounts(c: _Checker, raw: t.Any, path: str) -> t.Tuple[Mount, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.bad(path, "must be a list of {source, target, read_only}", raw)
        return ()
    out = []
    targets = set()
    for i, item in enumerate(raw):
        where = "%s[%d]" % (path, i)
        m = c.mapping(item, where, _keys("mounts"))
        if not m:
            if not isinstance(item, dict):
                continue
        src = c.string(m, "source", where, required=True, allowed="an absolute host path")
        dst = c.string(m, "target", where, required=True, allowed="an absolute path in the container")
        for key, val in (("source", src), ("target", dst)):
            if val and (not val.startswith("/") or "/../" in val + "/" or "\n" in val):
                c.bad("%s.%s" % (where, key), "must be an absolute path without '..'", val)
        if dst and dst.startswith("/") and kernel_fs(dst):
            c.bad(where + ".target", "must not be %s or below it: the container runtime provides /proc, /sys and /dev "
                  "(a mount there replaces them: ps and the like fail inside, and Docker refuses it when the task "
                  "starts); choose another target" % kernel_fs(dst), dst)
        if dst in targets:
            c.bad(where + ".target", "is mounted twice", dst)
        targets.add(dst)
        out.append(Mount(src, dst, c.boolean(m, "read_only", where, _default("mounts", "read_only"))))
    return tuple(out)


def _parse_secrets(c: _Checker, raw: t.Any, path: str) -> SecretsSpec:
    s = c.mapping(raw, path, _keys("secrets"))
    backend = c.choice(s, "backend", path, *_choices("secrets", "backend"))
    if backend == "nomad-variables":
        for key in ("mount", "path", "role"):
            if s.get(key) is not None:
                c.bad("%s.%s" % (path, key),
                      "is only used with backend vault (Nomad Variables are always stored at nomad/jobs/<job>)",
                      s.get(key))
        return SecretsSpec()
    seg = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
    return SecretsSpec(
        backend=backend,
        mount=c.string(s, "mount", path, default=_default("secrets", "mount"), pattern=seg, allowed="a Vault KV v2 mount, e.g. secret"),
        path=c.string(s, "path", path, default="", pattern=seg, allowed="a KV path such as backendai/sessions"),
        role=c.string(s, "role", path, default="", pattern=re.compile(r"^[A-Za-z0-9_.-]+$"),
                      allowed="a Vault role name"),
    )


def _parse_string_list(c: _Checker, raw: t.Any, path: str) -> t.Tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        c.bad(path, "must be a list of non-empty strings", raw)
        return ()
    return tuple(raw)


def _parse_ports(c: _Checker, raw: t.Any, path: str, taken: t.Tuple[int, ...]) -> t.Tuple[PublishedPort, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.bad(path, "must be a list of {label, port} that main1 publishes", raw)
        return ()
    out = []
    labels = {"ssh"}
    for i, item in enumerate(raw):
        where = "%s[%d]" % (path, i)
        p = c.mapping(item, where, _keys("ports"))
        if not p:
            continue
        label = c.string(p, "label", where, required=True, pattern=PORT_LABEL_RE,
                         allowed="a lowercase port label ([a-z][a-z0-9_]*), not ssh")
        if p.get("port") is None:
            c.bad(where + ".port", "is required: the container port main1 publishes")
        port = c.integer(p, "port", where, 0, 1, 65535, unit="container port")
        if label in labels:
            c.bad(where + ".label", "is used twice (ssh is reserved for the session's sshd)", label)
        labels.add(label)
        if port in taken:
            c.bad(where + ".port", "collides with the ssh port or master_port", port)
        out.append(PublishedPort(label, port))
    return tuple(out)


def _parse_roles(c: _Checker, raw: t.Any, path: str, base: Role) -> t.List[Role]:
    if not isinstance(raw, list) or not raw:
        c.bad(path, "must be a non-empty list of {name, replicas, image?, command?, resources?, env?}", raw)
        return []
    roles: t.List[Role] = []
    seen: t.Set[str] = set()
    base_env = dict(base.env)
    for i, item in enumerate(raw):
        where = "%s[%d]" % (path, i)
        r = c.mapping(item, where, _keys("roles"))
        if not r:
            continue
        name = c.string(r, "name", where, required=True, pattern=ROLE_RE,
                        allowed="a lowercase DNS label of at most 32 characters that does not end in a "
                                "digit (hostnames are <role><idx>)")
        if name in seen:
            c.bad(where + ".name", "is used by two roles", name)
        seen.add(name)
        replicas = c.integer(r, "replicas", where, _default("roles", "replicas"), 1, MAX_CLUSTER_SIZE, unit="containers of this role")
        if name == "main" and replicas != 1:
            c.bad(where + ".replicas", "must be 1 for role main (there is exactly one main1)", replicas)
        env = dict(base_env)
        env.update(c.env(r, "env", where))
        roles.append(Role(
            name=name, replicas=replicas,
            image=c.string(r, "image", where, default=base.image, allowed="a container image"),
            command=c.command(r, "command", where) or base.command,
            resources=c.resources(r.get("resources"), where + ".resources", base.resources),
            env=tuple(sorted(env.items())),
        ))
    names = [r.name for r in roles]
    if names and "main" not in names:
        c.bad(path, "must contain exactly one role named main (with replicas 1)", names)
    # main1 comes first in the global order whatever the spec order; other roles keep spec order.
    roles.sort(key=lambda r: r.name != "main")
    return roles
