# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``backendai`` CNI plugin: every cluster session's network on an agent. Stdlib only.

Installed on every agent (Nomad clients by the ``overlay_agent`` role; local agents and this
machine by the local backend) as two files next to each other, this one and
``_session_network.py``, started by a small ``backendai`` executable in the CNI path that calls
:func:`main`. The agent has ONE network config (``backendai.conflist``: loopback, this plugin,
portmap); a task group joins its session's network through the parameters in its CNI_ARGS
(see ``_session_network``), which are admitted only with a valid MAC over Nomad's identity of
the allocation.

Per session and agent, made by the session's first ADD on the agent and removed by its last
DEL (the plugin keeps which containers are where in ``stateDir``, so DEL needs no CNI_ARGS,
which Nomad does not pass on DEL):

* a bridge of its own holding the gateway address of the agent's block; with more than one
  agent, a VXLAN device in it that floods to exactly the other agents of the session;
* the container's veth and address: delegated to the reference ``bridge`` plugin with
  ``host-local`` IPAM (the agent's block of the session subnet), as flannel delegates;
* iptables rules (chains ``BACKENDAI-FORWARD`` and ``BACKENDAI-VXLAN`` in ``mangle``, where they
  run before any ``filter`` rule of another tool; ``BACKENDAI-FORWARD`` in ``filter`` to accept
  what passed; ``BACKENDAI-POSTROUTING`` in ``nat``; made with the first session on the agent
  and removed with the last):

  - forwarded VXLAN carrying a session VNI is dropped (no container, of a session or not,
    can send encapsulated frames through its agent to another agent);
  - VXLAN received with a session's VNI passes only from the session's own agents;
  - inside a session bridge everything passes (no firewall inside a session); into a session
    bridge from anywhere else only replies and published ports (DNAT) pass;
  - out of a session bridge only to the agent's uplinks (egress, NAT'd), never into another
    bridge (other sessions, Nomad's own ``nomad`` bridge, docker0, ...).

ADD and the session set-up/teardown run under one lock per agent (``stateDir/lock``); the
delegated ADD/DEL of containers run outside it, in parallel.
"""

from __future__ import annotations

# Started once for every container attached or detached: only cheap imports (no typing, subprocess,
# contextlib, json or re at run time), which keeps an ADD within 1.5 times the plain bridge chain's and a
# session's bring-up within 10 % of the plugin chain it replaced (benchmarks/cni_add.py, local_bringup.py).
import fcntl
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import typing as t

try:
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
except ImportError:  # installed on an agent: _session_network.py lies next to this file
    import _session_network as net  # type: ignore[no-redef]

SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SUPPORTED_VERSIONS = ["0.4.0", "1.0.0"]
FORWARD_CHAIN = "BACKENDAI-FORWARD"
VXLAN_CHAIN = "BACKENDAI-VXLAN"
NAT_CHAIN = "BACKENDAI-POSTROUTING"
COMMENT = "backendai session %s"
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ID_CHARS = _ALNUM | frozenset("_.:-")
_IFNAME_CHARS = _ALNUM | frozenset("_.-")

# CNI error codes (spec: 1-99 are the spec's, 100+ the plugin's).
E_ENV = 4
E_CONFIG = 7
E_TRY_LATER = 11
E_ADMISSION = 101
E_CONFLICT = 102
E_SYSTEM = 103


class PluginError(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


# ---------------------------------------------------------------------------- JSON

# The json package costs more to import (re, enum, functools, collections: ~13 ms of a ~40 ms ADD, once per
# container) than the plugin's own work; what it wraps, CPython's C scanner and encoder in ``_json``, costs
# nothing. So the plugin calls those two directly, as json.loads/json.dumps (with their defaults) do, and falls
# back to the json package on an interpreter without them. The unit tests compare both on every shape the
# plugin reads and writes.
try:
    from _json import make_encoder as _c_make_encoder, make_scanner as _c_make_scanner
    from _json import encode_basestring_ascii as _c_encode_string
except ImportError:  # pragma: no cover - not CPython
    _c_make_scanner = _c_make_encoder = _c_encode_string = None  # type: ignore[assignment]

_JSON_SPACE = " \t\n\r"


class _ScanContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder`` (its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo = None

    @staticmethod
    def parse_constant(name: str) -> t.Any:
        raise ValueError("%s is not valid JSON" % name)


def json_loads(text: t.Union[str, bytes]) -> t.Any:
    """``json_loads(text)``, NaN and Infinity refused; ValueError when ``text`` is not one JSON value."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _c_make_scanner is None:  # pragma: no cover - not CPython
        import json
        return json_loads(text)
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = _c_make_scanner(_ScanContext)(text, start)
    except StopIteration:
        raise ValueError("no JSON value at character %d" % start) from None
    if text[end:].strip(_JSON_SPACE):
        raise ValueError("extra data after the JSON value at character %d" % end)
    return value


def json_dumps(value: t.Any) -> str:
    """``json_dumps(value)`` (ASCII, ``", "``/``": "`` separators, keys in insertion order)."""
    if _c_make_encoder is None:  # pragma: no cover - not CPython
        import json
        return json_dumps(value)
    return "".join(_c_make_encoder({}, _not_json, _c_encode_string, None, ": ", ", ", False, False, True)(value, 0))


def _not_json(value: t.Any) -> t.Any:
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


# ---------------------------------------------------------------------------- helpers

class Completed:
    def __init__(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _which(name: str, path: str) -> str:
    if "/" in name:
        return name
    for d in path.split(os.pathsep):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    raise PluginError(E_SYSTEM, "%s is not installed (not in %s)" % (name, path))


def _drain(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _run(argv: t.Sequence[str], stdin: str = "", check: bool = True,
         env: t.Optional[t.Mapping[str, str]] = None) -> Completed:
    """Run ``argv`` with ``stdin``; stdout and stderr through memory files (posix_spawn: what subprocess does
    for us costs more to import than the plugin's whole work)."""
    env = dict(env) if env is not None else {"PATH": SANE_PATH}
    fds = [os.memfd_create(n) for n in ("stdin", "stdout", "stderr")]
    try:
        os.write(fds[0], stdin.encode())
        os.lseek(fds[0], 0, os.SEEK_SET)
        pid = os.posix_spawn(_which(argv[0], env.get("PATH") or SANE_PATH), list(argv), env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)])
        status = os.waitpid(pid, 0)[1]
        proc = Completed(os.waitstatus_to_exitcode(status), _drain(fds[1]), _drain(fds[2]))
    finally:
        for fd in fds:
            os.close(fd)
    if check and proc.returncode != 0:
        raise PluginError(E_SYSTEM, "%s failed" % " ".join(argv[:3]),
                          (proc.stderr or proc.stdout).decode("utf-8", "replace").strip() + ("\n" + stdin if stdin else ""))
    return proc


def _write(path: str, text: str, mode: int = 0o600) -> None:
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _read_json(path: str) -> t.Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json_loads(f.read())
    except (OSError, ValueError):
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _listdir(path: str) -> t.List[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


class Config:
    """The plugin's entry of the agent's conflist."""

    def __init__(self, conf: t.Mapping[str, t.Any]) -> None:
        try:
            self.underlay_ip = net.ip4_text(net.ip4(conf["underlayIP"]))
            self.state_dir = str(conf["stateDir"])
            self.key_file = str(conf["keyFile"])
        except (KeyError, ValueError) as e:  # (NetworkError is a ValueError)
            raise PluginError(E_CONFIG, "the backendai plugin needs underlayIP, stateDir and keyFile in its config",
                              str(e)) from None
        self.underlay_mtu = int(conf.get("underlayMTU", 1500))
        self.vxlan_port = int(conf.get("vxlanPort", net.VXLAN_PORT))
        self.egress = bool(conf.get("egress", True))
        self.uplinks = [str(u) for u in conf.get("uplinks") or []]
        self.cni_version = str(conf.get("cniVersion", net.CNI_VERSION))
        self.name = str(conf.get("name", net.NETWORK_NAME))
        if not os.path.isabs(self.state_dir) or not os.path.isabs(self.key_file):
            raise PluginError(E_CONFIG, "stateDir and keyFile must be absolute paths")

    def path(self, *parts: str) -> str:
        return os.path.join(self.state_dir, *parts)


class _locked:
    """The agent's lock: session set-up and teardown, and who is attached, change only under it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.fd = -1

    def __enter__(self) -> None:
        os.makedirs(self.cfg.path("sessions"), mode=0o700, exist_ok=True)
        os.makedirs(self.cfg.path("containers"), mode=0o700, exist_ok=True)
        self.fd = os.open(self.cfg.path("lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _container_file(cfg: Config, container_id: str) -> str:
    if not (0 < len(container_id or "") <= 128 and container_id[0] in _ALNUM and _ID_CHARS.issuperset(container_id)):
        raise PluginError(E_ENV, "CNI_CONTAINERID %r is not a container ID" % (container_id,))
    return cfg.path("containers", container_id + ".json")


def _sessions(cfg: Config) -> t.Dict[str, t.Dict[str, t.Any]]:
    out = {}
    for name in _listdir(cfg.path("sessions")):
        if name.endswith(".json"):
            st = _read_json(cfg.path("sessions", name))
            if isinstance(st, dict):
                out[name[:-5]] = st
    return out


def _members(cfg: Config, sid: str) -> t.List[str]:
    return _listdir(cfg.path("sessions", sid + ".d"))


# ---------------------------------------------------------------------------- iptables

def _save() -> t.Dict[str, t.List[str]]:
    """Every table's chains and rules (one iptables-save)."""
    out: t.Dict[str, t.List[str]] = {}
    table = ""
    for line in _run(["iptables-save"]).stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            out[table] = []
        elif table and line.startswith((":", "-A ")):
            out[table].append(line)
    return out


def _restore(lines: t.Mapping[str, t.Sequence[str]]) -> None:
    """One iptables-restore --noflush for every table with lines."""
    script = "".join("*%s\n%s\nCOMMIT\n" % (table, "\n".join(rules)) for table, rules in lines.items() if rules)
    if script:
        _run(["iptables-restore", "-w", "--noflush"], script)


def _has_chain(saved: t.Sequence[str], chain: str) -> bool:
    return any(line.startswith(":%s " % chain) for line in saved)


def _base_rules(cfg: Config, uplinks: t.Sequence[str]) -> t.Dict[str, t.List[str]]:
    """The agent-wide chains and jumps (made with the first session, removed with the last).

    The decisions are made in the ``mangle`` table, which the kernel runs before ``filter`` on
    the same hooks: the firewall plugin of Nomad's own bridge network puts its ``CNI-FORWARD``
    jump first in ``filter FORWARD`` whenever it is missing, and ``NOMAD-ADMIN`` accepts anything
    into the ``nomad`` bridge, so a rule of ours in ``filter`` could be overtaken. ``mangle`` only
    drops or returns; ``filter`` then accepts what passed, for hosts whose FORWARD policy is DROP."""
    port = str(cfg.vxlan_port)
    fwd = ["-A %s -p udp -m udp --dport %s -m u32 --u32 \"%s\" -m comment --comment \"backendai: forwarded "
           "VXLAN of session networks\" -j DROP" % (FORWARD_CHAIN, port, net.VNI_RANGE_MATCH),
           "-A %s -o bai+ -m conntrack --ctstate RELATED,ESTABLISHED,DNAT -j RETURN" % FORWARD_CHAIN,
           "-A %s -o bai+ -m comment --comment \"backendai: nothing else enters a session\" -j DROP" % FORWARD_CHAIN]
    if cfg.egress:
        fwd += ["-A %s -i bai+ -o %s -j RETURN" % (FORWARD_CHAIN, u) for u in uplinks]
    fwd.append("-A %s -i bai+ -m comment --comment \"backendai: sessions leave only by the uplinks\" -j DROP"
               % FORWARD_CHAIN)
    vxlan = ["-A %s -m u32 --u32 \"%s\" -m comment --comment \"backendai: VXLAN of a session from elsewhere\" -j DROP"
             % (VXLAN_CHAIN, net.VNI_RANGE_MATCH)]
    return {
        "mangle": [":%s - [0:0]" % FORWARD_CHAIN, ":%s - [0:0]" % VXLAN_CHAIN] + fwd + vxlan + [
            "-I FORWARD 1 -j %s" % FORWARD_CHAIN,
            "-I INPUT 1 -p udp -m udp --dport %s -j %s" % (port, VXLAN_CHAIN)],
        "filter": [":%s - [0:0]" % FORWARD_CHAIN, "-A %s -i bai+ -j ACCEPT" % FORWARD_CHAIN,
                   "-A %s -o bai+ -j ACCEPT" % FORWARD_CHAIN, "-I FORWARD 1 -j %s" % FORWARD_CHAIN],
        "nat": [":%s - [0:0]" % NAT_CHAIN, "-I POSTROUTING 1 -j %s" % NAT_CHAIN],
    }


TABLES = {"mangle": (FORWARD_CHAIN, VXLAN_CHAIN), "filter": (FORWARD_CHAIN,), "nat": (NAT_CHAIN,)}


def _session_rules(cfg: Config, st: t.Mapping[str, t.Any]) -> t.Dict[str, t.List[str]]:
    """The session's own rules (``-I`` lines: before the agent-wide DROPs of the chain)."""
    comment = "--comment \"%s\"" % (COMMENT % st["sid"])
    mangle = ["-I %s 2 -i %s -o %s -m comment %s -j RETURN" % (FORWARD_CHAIN, st["bridge"], st["bridge"], comment)]
    for peer in st["peers"]:
        mangle.append("-I %s 1 -s %s/32 -m u32 --u32 \"%s\" -m comment %s -j RETURN"
                      % (VXLAN_CHAIN, peer, net.vni_match(st["vni"]), comment))
    nat = []
    if cfg.egress:
        nat.append("-A %s -s %s ! -d %s -m comment %s -j MASQUERADE" % (NAT_CHAIN, st["subnet"], st["subnet"], comment))
    return {"mangle": mangle, "filter": [], "nat": nat}


def _uplinks(cfg: Config) -> t.List[str]:
    if cfg.uplinks or not cfg.egress:
        return cfg.uplinks
    routes = json_loads(_run(["ip", "-j", "-4", "route", "show", "default"]).stdout.decode() or "[]")
    return sorted({r["dev"] for r in routes if r.get("dev")})


def _rules_up(cfg: Config, st: t.Mapping[str, t.Any], first_session: bool) -> None:
    mine = _session_rules(cfg, st)
    all_saved = _save()
    base: t.Optional[t.Dict[str, t.List[str]]] = None  # the agent-wide rules (and the uplinks) only when missing
    script = {}
    for table, chains in TABLES.items():
        saved = all_saved.get(table, [])
        lines = []
        if not _has_chain(saved, chains[0]):
            base = base or _base_rules(cfg, _uplinks(cfg))
            lines += base[table]
        elif first_session:  # left over by a killed teardown: start from the agent-wide rules again
            lines += _delete_lines(saved, lambda rule: "backendai session " in rule)
        lines += mine[table]
        script[table] = lines
    _restore(script)


def _delete_lines(saved: t.Sequence[str], pick: t.Callable[[str], bool]) -> t.List[str]:
    return ["-D " + line[3:] for line in saved if line.startswith("-A ") and pick(line)]


def _rules_down(sid: str, last_session: bool) -> None:
    all_saved = _save()
    script = {}
    for table, chains in TABLES.items():
        saved = all_saved.get(table, [])
        if last_session:
            lines = _delete_lines(saved, lambda rule: any(("-j %s" % c) in rule for c in chains))
            lines += ["-F %s" % c for c in chains if _has_chain(saved, c)]
            lines += ["-X %s" % c for c in chains if _has_chain(saved, c)]
        else:
            lines = _delete_lines(saved, lambda rule: (COMMENT % sid) in rule)
        script[table] = lines
    _restore(script)


# ---------------------------------------------------------------------------- links

def _check_subnet(st: t.Mapping[str, t.Any]) -> None:
    subnet = net.net4(st["subnet"])
    for link in json_loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout.decode() or "[]"):
        for a in link.get("addr_info", []):
            iface = net.net4("%s/%s" % (a["local"], a["prefixlen"]), strict=False)
            if link["ifname"] != st["bridge"] and net.overlaps(iface, subnet):
                raise PluginError(E_CONFLICT, "the session subnet %s overlaps %s/%s on %s of this agent"
                                  % (st["subnet"], a["local"], a["prefixlen"], link["ifname"]))


def bridge_mac(session_id: str, underlay_ip: str) -> str:
    """The session bridge's own MAC on an agent: fixed, or Linux gives a bridge the lowest MAC of its ports, which
    changes as containers come and go, and the bridge plugin's CHECK (Nomad's, after a client restart) fails on it.
    Locally administered, and different on every agent of the session (they share one layer 2)."""
    digest = net._sha256(("bridge-mac\0%s\0%s" % (session_id, underlay_ip)).encode()).hexdigest()
    return "02:" + ":".join(digest[i:i + 2] for i in range(0, 10, 2))


def _links_up(cfg: Config, st: t.Mapping[str, t.Any]) -> None:
    br, vx, mtu = st["bridge"], st["vxlan"], st["mtu"]
    lines = ["link add %s address %s mtu %d type bridge" % (br, bridge_mac(st["sid"], cfg.underlay_ip), mtu),
             "addr add %s/%d dev %s" % (st["gateway"], st["prefixlen"], br)]
    if st["peers"]:
        lines += ["link add %s mtu %d type vxlan id %d local %s dstport %d"
                  % (vx, mtu, st["vni"], cfg.underlay_ip, cfg.vxlan_port),
                  "link set %s master %s" % (vx, br), "link set %s up" % vx]
    lines.append("link set %s up" % br)
    _run(["ip", "-batch", "-"], "".join(x + "\n" for x in lines))
    if st["peers"]:
        _run(["bridge", "-batch", "-"], "".join("fdb append 00:00:00:00:00:00 dev %s dst %s\n" % (vx, p)
                                                for p in st["peers"]))


def _links_down(st: t.Mapping[str, t.Any]) -> None:
    _run(["ip", "-force", "-batch", "-"], "link delete %s\nlink delete %s\n" % (st["vxlan"], st["bridge"]), check=False)


# ---------------------------------------------------------------------------- the session on this agent

def _session_state(cfg: Config, adm: "net.Admission") -> t.Dict[str, t.Any]:
    p = adm.params
    lay = net.layout(p, cfg.underlay_ip)
    if p.mtu > cfg.underlay_mtu - net.VXLAN_OVERHEAD_IPV4 and p.spans:
        raise PluginError(E_CONFLICT, "the session MTU %d does not fit this agent's underlay MTU %d minus %d"
                          % (p.mtu, cfg.underlay_mtu, net.VXLAN_OVERHEAD_IPV4))
    return {"sid": p.session_id, "vni": p.vni, "subnet": p.subnet, "agents": list(p.agents), "mtu": p.mtu,
            "namespace": adm.namespace, "job": adm.job_id, "bridge": lay.bridge, "vxlan": lay.vxlan,
            "gateway": lay.gateway, "prefixlen": lay.prefixlen, "peers": list(lay.peers),
            "delegate": {"cniVersion": cfg.cni_version, "name": cfg.name, "type": "bridge", "bridge": lay.bridge,
                         "isGateway": False, "ipMasq": False, "hairpinMode": True, "mtu": p.mtu,
                         "ipam": {"type": "host-local", "dataDir": cfg.path("ipam", p.session_id),
                                  "ranges": [[{"subnet": p.subnet, "rangeStart": lay.range_start,
                                               "rangeEnd": lay.range_end, "gateway": lay.gateway}]],
                                  "routes": [{"dst": "0.0.0.0/0"}]}}}


def _same(a: t.Mapping[str, t.Any], b: t.Mapping[str, t.Any]) -> bool:
    keys = ("vni", "subnet", "agents", "mtu", "namespace", "job")
    return all(a.get(k) == b.get(k) for k in keys)


def _ensure_session(cfg: Config, want: t.Dict[str, t.Any]) -> None:
    """Under the lock: the session's bridge, VXLAN device and rules on this agent (made once)."""
    have = _read_json(cfg.path("sessions", want["sid"] + ".json"))
    if isinstance(have, dict):
        if not _same(have, want):
            raise PluginError(E_CONFLICT, "session %s is already on this agent with other network parameters"
                              % want["sid"])
        return
    sessions = _sessions(cfg)
    subnet = net.net4(want["subnet"])
    for sid, other in sessions.items():
        if other["vni"] == want["vni"]:
            raise PluginError(E_CONFLICT, "VNI %d is in use on this agent by another session (job %r in namespace %r)"
                              % (want["vni"], other["job"], other["namespace"]))
        if net.overlaps(net.net4(other["subnet"]), subnet):
            raise PluginError(E_CONFLICT, "subnet %s is in use on this agent by another session (job %r in "
                              "namespace %r)" % (want["subnet"], other["job"], other["namespace"]))
    _check_subnet(want)
    # Recorded before anything is made: whatever a killed ADD made, the DEL of its container removes.
    _write(cfg.path("sessions", want["sid"] + ".json"), json_dumps(want))
    _links_up(cfg, want)
    _rules_up(cfg, want, first_session=not sessions)


def _remove_session(cfg: Config, sid: str) -> None:
    """Under the lock: the session's links, rules and IPAM data go; with the last session, the agent-wide chains."""
    try:
        os.rmdir(cfg.path("sessions", sid + ".d"))
    except FileNotFoundError:
        pass
    st = _read_json(cfg.path("sessions", sid + ".json"))
    if not isinstance(st, dict):
        return
    _links_down(st)
    _rules_down(sid, last_session=len(_sessions(cfg)) == 1)
    ipam = cfg.path("ipam", sid)
    if os.path.isdir(ipam):
        for root, dirs, files in os.walk(ipam, topdown=False):
            for f in files:
                _unlink(os.path.join(root, f))
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(ipam)
    _unlink(cfg.path("sessions", sid + ".json"))


# ---------------------------------------------------------------------------- delegation

def _delegate(command: str, conf: t.Mapping[str, t.Any], env: t.Mapping[str, str],
              prev: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Optional[t.Dict[str, t.Any]]:
    conf = dict(conf)
    if prev is not None:
        conf["prevResult"] = prev
    plugin = None
    for d in (env.get("CNI_PATH") or "").split(os.pathsep):
        if d and os.access(os.path.join(d, conf["type"]), os.X_OK):
            plugin = os.path.join(d, conf["type"])
            break
    if plugin is None:
        raise PluginError(E_CONFIG, "the %s plugin is not in CNI_PATH (%s)" % (conf["type"], env.get("CNI_PATH")))
    denv = {k: v for k, v in env.items() if k.startswith("CNI_") and k != "CNI_ARGS"}
    denv.update(CNI_COMMAND=command, PATH=env.get("PATH") or SANE_PATH)
    proc = _run([plugin], json_dumps(conf), check=False, env=denv)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        detail = out or proc.stderr.decode("utf-8", "replace").strip()
        try:
            err = json_loads(out)
            detail = "%s%s" % (err.get("msg", out), (": " + err["details"]) if err.get("details") else "")
        except (ValueError, AttributeError):
            pass
        raise PluginError(E_SYSTEM, "%s %s: %s" % (conf["type"], command, detail))
    return json_loads(out) if out else None


# ---------------------------------------------------------------------------- commands

def _admission(cfg: Config, env: t.Mapping[str, str]) -> "net.Admission":
    try:
        key = net.read_key(cfg.key_file)
    except net.NetworkError as e:
        raise PluginError(E_CONFIG, str(e)) from None
    try:
        return net.admit(key, net.parse_cni_args(env.get("CNI_ARGS", "")))
    except net.NetworkError as e:
        raise PluginError(E_ADMISSION, "backendai session network: admission refused: %s" % e) from None


def cmd_add(cfg: Config, env: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
    adm = _admission(cfg, env)
    cid = env.get("CNI_CONTAINERID", "")
    cfile = _container_file(cfg, cid)
    ifname = env.get("CNI_IFNAME", "")
    if not (0 < len(ifname) <= 15 and _IFNAME_CHARS.issuperset(ifname)) or not env.get("CNI_NETNS"):
        raise PluginError(E_ENV, "CNI_IFNAME and CNI_NETNS must be set")
    try:
        want = _session_state(cfg, adm)
    except net.NetworkError as e:
        raise PluginError(E_ADMISSION, "backendai session network: %s" % e) from None
    with _locked(cfg):
        if os.path.exists(cfile):
            raise PluginError(E_CONFLICT, "container %s is already attached (DEL it first)" % cid)
        # The container is recorded first: its DEL then removes whatever this ADD made, even if killed.
        _write(cfile, json_dumps({"sid": want["sid"], "ifname": env["CNI_IFNAME"], "alloc": adm.alloc_id,
                                  "group": adm.group}))
        os.makedirs(cfg.path("sessions", want["sid"] + ".d"), mode=0o700, exist_ok=True)
        _write(cfg.path("sessions", want["sid"] + ".d", cid), "")
        try:
            _ensure_session(cfg, want)
        except BaseException:
            _forget(cfg, cid, want["sid"])
            raise
    try:
        result = _delegate("ADD", want["delegate"], env)
    except BaseException:
        try:
            _delegate("DEL", want["delegate"], env)
        except PluginError:
            pass
        with _locked(cfg):
            _forget(cfg, cid, want["sid"])
        raise
    if result is None:  # pragma: no cover - the delegated ADD always prints a result
        raise AssertionError("no result after CNI ADD")
    return result


def _forget(cfg: Config, cid: str, sid: str) -> None:
    """Under the lock: the container goes; with the session's last container, the session goes."""
    _unlink(cfg.path("sessions", sid + ".d", cid))
    _unlink(_container_file(cfg, cid))
    if not _members(cfg, sid):
        _remove_session(cfg, sid)


def cmd_del(cfg: Config, env: t.Mapping[str, str]) -> None:
    cid = env.get("CNI_CONTAINERID", "")
    cfile = _container_file(cfg, cid)
    member = _read_json(cfile)
    if not isinstance(member, dict):
        return  # never added here, or already deleted: DEL is idempotent
    st = _read_json(cfg.path("sessions", member["sid"] + ".json"))
    if isinstance(st, dict):
        denv = dict(env)
        if not denv.get("CNI_IFNAME"):
            denv["CNI_IFNAME"] = member.get("ifname", "eth0")
        _delegate("DEL", st["delegate"], denv)
    with _locked(cfg):
        _forget(cfg, cid, member["sid"])


def cmd_check(cfg: Config, env: t.Mapping[str, str], prev: t.Optional[t.Mapping[str, t.Any]]) -> None:
    adm = _admission(cfg, env)
    member = _read_json(_container_file(cfg, env.get("CNI_CONTAINERID", "")))
    if not isinstance(member, dict) or member.get("sid") != adm.params.session_id:
        raise PluginError(E_CONFLICT, "container %s is not attached to session %s on this agent"
                          % (env.get("CNI_CONTAINERID"), adm.params.session_id))
    st = _read_json(cfg.path("sessions", adm.params.session_id + ".json"))
    if not isinstance(st, dict):
        raise PluginError(E_SYSTEM, "session %s has no network on this agent" % adm.params.session_id)
    links = {link["ifname"] for link in json_loads(_run(["ip", "-j", "link", "show"]).stdout.decode() or "[]")}
    for name in [st.get("bridge")] + ([st.get("vxlan")] if st.get("peers") else []):
        if name not in links:
            raise PluginError(E_SYSTEM, "link %s of session %s is missing on this agent" % (name, adm.params.session_id))
    if prev is None:
        raise PluginError(E_CONFIG, "CHECK needs prevResult")
    _delegate("CHECK", st["delegate"], env, prev)


def _emit(text: str) -> None:
    """The plugin's result or error on stdout, as the CNI spec says."""
    sys.stdout.write(text + "\n")


def main(argv: t.Optional[t.Sequence[str]] = None, stdin: t.Optional[t.IO[str]] = None) -> int:
    env = dict(os.environ)
    command = env.get("CNI_COMMAND", "")
    version = net.CNI_VERSION
    try:
        if command == "VERSION":
            _emit(json_dumps({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}))
            return 0
        try:
            conf = json_loads((stdin or sys.stdin).read())
        except ValueError as e:
            raise PluginError(E_CONFIG, "the network config on stdin is not JSON: %s" % e) from None
        version = str(conf.get("cniVersion", version))
        cfg = Config(conf)
        if command == "ADD":
            result = cmd_add(cfg, env)
            result["cniVersion"] = version
            _emit(json_dumps(result))
        elif command == "DEL":
            cmd_del(cfg, env)
        elif command == "CHECK":
            cmd_check(cfg, env, conf.get("prevResult"))
        elif command in ("STATUS", "GC"):
            pass
        else:
            raise PluginError(E_ENV, "unknown CNI_COMMAND %r" % command)
        return 0
    except PluginError as e:
        _emit(json_dumps({"cniVersion": version, "code": e.code, "msg": e.msg, "details": e.details}))
        return 1
    except OSError as e:
        _emit(json_dumps({"cniVersion": version, "code": E_SYSTEM, "msg": "backendai plugin: %s" % e, "details": ""}))
        return 1


# ---------------------------------------------------------------------------- installing it

SHIM = """#!/usr/bin/python3 -IS
# backendai.cluster session network CNI plugin (see %(lib)s/_cni_plugin.py)
import sys
sys.path.insert(0, %(lib)r)
import _cni_plugin
sys.exit(_cni_plugin.main())
"""


def plugin_files(lib_dir: str, bin_dir: str) -> t.Dict[str, t.Tuple[str, int]]:
    """path -> (text, mode) of an installation: the two modules in ``lib_dir``, the executable in ``bin_dir``."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in ("_session_network.py", "_cni_plugin.py"):
        out[os.path.join(lib_dir, name)] = (_source(os.path.join(here, name), name), 0o644)
    out[os.path.join(bin_dir, net.PLUGIN_TYPE)] = (SHIM % {"lib": lib_dir}, 0o755)
    return out


def _source(path: str, name: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:  # inside an Ansible module's zip: read it through the loader
        import pkgutil
        data = pkgutil.get_data("ansible_collections.backendai.cluster.plugins.module_utils._network", name)
        if data is None:
            raise
        return data.decode("utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
