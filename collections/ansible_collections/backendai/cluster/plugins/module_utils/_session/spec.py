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

from ansible_collections.backendai.cluster.plugins.module_utils._errors import Problem, SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import (
    ENV_NAME_RE,
    FailureSpec,
    MAX_CLUSTER_SIZE,
    MAX_ID,
    NAME_RE,
    NOBODY_ID,
    NETWORK_MODE_HELP,
    PORT_LABEL_RE,
    RESERVED_ENV,
    RESERVED_USERS,
    ROLE_RE,
    ROOT_USER,
    USER_NAME_RE,
    Mount,
    PublishedPort,
    Resources,
    Role,
    SecretsSpec,
    SessionSpec,
    SSHSpec,
    UserSpec,
    _choices,
    _default,
    path_within,
    provided_target,
    protected_source,
    _keys,
)

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
        value = _digits_as_int(value)
        if isinstance(value, bool) or not isinstance(value, int):
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
    underlay_encryption = c.choice(net_raw, "underlay_encryption", path + ".network",
                                   *_choices("network", "underlay_encryption"))

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
    user = _parse_user(c, top.get("user"), path + ".user")
    failure = _parse_failure(c, top.get("failure"), path + ".failure", (ssh_port, master_port) + tuple(p.port for p in ports))
    _check_mount_targets(c, mounts, path + ".mounts", user)

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

    max_run_time, keep_after = _parse_lifetime(c, top, path, roles, failure)
    if c.problems:
        raise SpecError(c.problems)
    return SessionSpec(
        name=name, image=image, command=command, driver=driver, cluster_size=cluster_size,
        cluster_mode=cluster_mode, resources=resources, mounts=mounts, ssh=ssh, secrets=secrets,
        network_mode=network_mode, master_port=master_port, env=tuple(sorted(env.items())),
        roles=tuple(roles), strategy=strategy, datacenters=datacenters, ports=ports, mpi_slots=mpi_slots,
        heterogeneous=heterogeneous, user=user, underlay_encryption=underlay_encryption, failure=failure,
        max_run_time=max_run_time, keep_after=keep_after,
    )


#: The longest ``max_run_time`` and ``keep_after``: 30 days (longer runs and retention are better left unset).
MAX_LIFETIME = 30 * 86400


def _parse_lifetime(c: _Checker, top: t.Dict[str, t.Any], path: str, roles: t.Sequence[Role],
                    failure: FailureSpec) -> t.Tuple[int, t.Optional[int]]:
    """``max_run_time`` (seconds, 0 when unset: no limit) and ``keep_after`` (seconds, None when unset: kept until
    removed). Both hold for interactive containers too (their supervisor keeps the time and the end: ``_session.gang``),
    but ``keep_after`` counts from the session's end, and a session where no container runs a command ends only when
    its time is up or its failure policy ends it: without either, ``keep_after`` would never start, and is refused."""
    max_run_time = c.integer(top, "max_run_time", path, 0, 1, MAX_LIFETIME,
                             unit="seconds a session may run before it ends ERROR; unset: no limit")
    keep_after: t.Optional[int] = None
    if top.get("keep_after") is not None:
        keep_after = c.integer(top, "keep_after", path, -1, 0, MAX_LIFETIME,
                               unit="seconds a finished session stays before it is removed; unset: until "
                                    "state=absent")
        keep_after = None if keep_after < 0 else keep_after
    if keep_after is not None and not max_run_time and not failure.active and not any(r.command for r in roles):
        c.bad(path + ".keep_after", "counts from the session's end, and a session where no container runs a command "
              "(an interactive session) ends only at its max_run_time or by its failure policy: set max_run_time (or "
              "a failure policy), or give the session a command", top.get("keep_after"))
    return max_run_time, keep_after


#: Bounds of the failure block's durations, in seconds: a window of a week at most, timeouts of a day.
MAX_WINDOW = 7 * 86400
MAX_TIMEOUT = 86400
#: The shortest hang and rejoin timeouts: a heartbeat is read once a second and a peer is probed once a second (two
#: missed answers make it gone), so anything shorter would fire on scheduling noise.
MIN_TIMEOUT = 5


def _parse_failure(c: _Checker, raw: t.Any, path: str, taken: t.Tuple[int, ...]) -> FailureSpec:
    """The failure policy: every field checked and named (see docs/failure-policy.md for what each means)."""
    f = c.mapping(raw, path, _keys("failure"))
    policy = c.choice(f, "policy", path, *_choices("failure", "policy"))
    max_restarts = c.integer(f, "max_restarts", path, _default("failure", "max_restarts"), 0, 1000,
                             unit="restarts within failure.window before the policy becomes fail")
    window = c.integer(f, "window", path, _default("failure", "window"), 1, MAX_WINDOW, unit="seconds")
    hang = f.get("hang_timeout")
    hang_timeout = 0
    if hang != 0:
        hang_timeout = c.integer(f, "hang_timeout", path, _default("failure", "hang_timeout"), MIN_TIMEOUT, MAX_TIMEOUT,
                                 unit="seconds; 0 turns the heartbeat watch off")
    rejoin_timeout = c.integer(f, "rejoin_timeout", path, _default("failure", "rejoin_timeout"), MIN_TIMEOUT, MAX_TIMEOUT,
                               unit="seconds the gang waits for a container that is gone to come back")
    port = c.integer(f, "port", path, _default("failure", "port"), 1, 65535,
                     unit="the port the containers' supervisors listen on, on the session network")
    if port in taken:
        c.bad(path + ".port", "collides with ssh.port, master_port or a published port (%s)"
              % ", ".join(str(p) for p in sorted(set(taken))), port)
    codes = _default("failure", "fail_on_exit_codes")
    raw_codes = f.get("fail_on_exit_codes")
    if raw_codes is not None:
        if not isinstance(raw_codes, list) or not all(
                not isinstance(x, bool) and isinstance(x, int) and 1 <= x <= 255 for x in raw_codes):
            c.bad(path + ".fail_on_exit_codes", "must be a list of exit codes from 1 to 255 (e.g. [2, 126, 127]; [] "
                  "retries every code)", raw_codes)
        else:
            codes = sorted(set(raw_codes))
    return FailureSpec(policy=policy, max_restarts=max_restarts, window=window, fail_on_exit_codes=tuple(codes),
                       hang_timeout=hang_timeout, rejoin_timeout=rejoin_timeout, port=port)


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
        guarded = protected_source(src) if src and src.startswith("/") else ""
        if guarded:
            c.bad(where + ".source", "must not be %s, below it or a directory above it: it holds the session network's "
                  "key, code or state (a container that reads the key can join any session); mount a data directory "
                  "instead" % guarded, src)
        if dst in targets:
            c.bad(where + ".target", "is mounted twice", dst)
        targets.add(dst)
        out.append(Mount(src, dst, c.boolean(m, "read_only", where, _default("mounts", "read_only"))))
    return tuple(out)


def _check_mount_targets(c: _Checker, mounts: t.Sequence[Mount], path: str, user: UserSpec) -> None:
    """No mount may hide what the container start provides (``schema.PROVIDED_TARGETS``, the user's ``~/.ssh``)."""
    for i, m in enumerate(mounts):
        if not m.target.startswith("/"):
            continue
        hidden, what = provided_target(m.target, user.home)
        if hidden:
            norm = posixpath.normpath("/" + m.target.lstrip("/"))
            relation = "is" if norm == hidden else "holds" if path_within(hidden, norm) else "lies inside"
            c.bad("%s[%d].target" % (path, i), "%s %s, which the container start provides: %s. A mount there would "
                  "hide it; choose another target" % (relation, hidden, what), m.target)


def _digits_as_int(value: t.Any) -> t.Any:
    """The integer a string of digits stands for (YAML and templating give numbers as strings); else ``value``."""
    if isinstance(value, str) and re.match(r"^[0-9]+$", value.strip()):
        return int(value)
    return value


def _parse_user(c: _Checker, raw: t.Any, path: str) -> UserSpec:
    """The session user: any name but root, or root when ``allow_root`` says so; root's ids are 0, nobody else's."""
    u = c.mapping(raw, path, _keys("user"))
    name = c.string(u, "name", path, default=_default("user", "name"), pattern=USER_NAME_RE,
                    allowed="a user name: a lowercase letter or '_', then up to 31 lowercase letters, digits, "
                            "'_' or '-' (e.g. work)")
    allow_root = c.boolean(u, "allow_root", path, _default("user", "allow_root"))
    if name in RESERVED_USERS:
        c.bad(path + ".name", "is a system account the containers need (%s); choose another name, e.g. work"
              % ", ".join(RESERVED_USERS), name)
    if name == ROOT_USER:
        if not allow_root:
            c.bad(path + ".name", "is root: logins and the command would run with every privilege of the container; "
                  "set user.allow_root: true to allow that, or use an unprivileged name such as work", name)
        for key in ("uid", "gid"):
            if u.get(key) is not None and _digits_as_int(u.get(key)) != 0:
                c.bad("%s.%s" % (path, key), "must be 0 for user root (or omitted)", u.get(key))
        return UserSpec(name, 0, 0)
    ids = []
    for key in ("uid", "gid"):
        value = _digits_as_int(u.get(key))  # "65534" (a templated id) is nobody's id as much as 65534
        if value == 0 and not isinstance(value, bool):
            c.bad("%s.%s" % (path, key), "is root's %s: an unprivileged user needs an id from 1 to %d (only user.name "
                  "root, with user.allow_root: true, runs as 0)" % (key, MAX_ID), value)
            value = _default("user", key)
        elif value == NOBODY_ID:
            c.bad("%s.%s" % (path, key), "is nobody's %s (65534, the overflow id); choose another id from 1 to %d"
                  % (key, MAX_ID), value)
            value = _default("user", key)
        else:
            value = c.integer(u, key, path, _default("user", key), 1, MAX_ID,
                              unit="the user's %s, e.g. the owner of the mounted data" % key)
        ids.append(value)
    return UserSpec(name, ids[0], ids[1])


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
