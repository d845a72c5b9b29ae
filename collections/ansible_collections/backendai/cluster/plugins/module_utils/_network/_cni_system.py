# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The system side of the ``backendai`` CNI plugin on an agent: its config, JSON, commands and files, iptables
rules and links. Stdlib only. (Its name is not ``agent``: an agent is a machine running containers, a Nomad node.)

Installed next to ``_cni_plugin.py`` (the CNI protocol: admission, the session's life on the agent, the
delegation to ``bridge``/``host-local``) and ``_session_network.py`` (the parameters and their MAC); see
``_cni_plugin`` for what the rules and links are for. Everything here is started or read once per ADD or
DEL of a container, so it imports nothing slow either (see ``json_loads`` and ``run``).
"""

from __future__ import annotations

import _socket  # built in: the forwarding entries go over netlink (see fdb_append)
import _thread  # built in: threading costs ~5-9 ms to import (functools, _weakrefset), about a tenth of an ADD
import hashlib
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import typing as t

try:
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
except ImportError:  # installed on an agent: _session_network.py lies next to this file
    import _session_network as net  # type: ignore[no-redef]

SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FORWARD_CHAIN = "BACKENDAI-FORWARD"
VXLAN_CHAIN = "BACKENDAI-VXLAN"
NAT_CHAIN = "BACKENDAI-POSTROUTING"
COMMENT = "backendai session %s"

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
    """``json.loads(text)``, NaN and Infinity refused; ValueError when ``text`` is not one JSON value."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _c_make_scanner is None:  # not CPython
        import json
        return json.loads(text, parse_constant=_ScanContext.parse_constant)
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = _c_make_scanner(_ScanContext)(text, start)
    except StopIteration:
        raise ValueError("no JSON value at character %d" % start) from None
    if text[end:].strip(_JSON_SPACE):
        raise ValueError("extra data after the JSON value at character %d" % end)
    return value


def json_dumps(value: t.Any) -> str:
    """``json.dumps(value)`` (ASCII, ``", "``/``": "`` separators, keys in insertion order)."""
    if _c_make_encoder is None:  # not CPython
        import json
        return json.dumps(value, default=_not_json)
    return "".join(_c_make_encoder({}, _not_json, _c_encode_string, None, ": ", ", ", False, False, True)(value, 0))


def _not_json(value: t.Any) -> t.Any:
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


# ---------------------------------------------------------------------------- helpers

class Completed:
    def __init__(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def which(name: str, path: str) -> str:
    if "/" in name:
        return name
    for d in path.split(os.pathsep):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    raise PluginError(E_SYSTEM, "%s is not installed (not in %s)" % (name, path))


def drain(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def run(argv: t.Sequence[str], stdin: str = "", check: bool = True,
        env: t.Optional[t.Mapping[str, str]] = None) -> Completed:
    """Run ``argv`` with ``stdin``; stdout and stderr through memory files (posix_spawn: what subprocess does
    for us costs more to import than the plugin's whole work)."""
    env = dict(env) if env is not None else {"PATH": SANE_PATH}
    fds = [os.memfd_create(n) for n in ("stdin", "stdout", "stderr")]
    try:
        os.write(fds[0], stdin.encode())
        os.lseek(fds[0], 0, os.SEEK_SET)
        pid = os.posix_spawn(which(argv[0], env.get("PATH") or SANE_PATH), list(argv), env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)])
        status = os.waitpid(pid, 0)[1]
        proc = Completed(os.waitstatus_to_exitcode(status), drain(fds[1]), drain(fds[2]))
    finally:
        for fd in fds:
            os.close(fd)
    if check and proc.returncode != 0:
        raise PluginError(E_SYSTEM, "%s failed" % " ".join(argv[:3]),
                          (proc.stderr or proc.stdout).decode("utf-8", "replace").strip() + ("\n" + stdin if stdin else ""))
    return proc


def cni_error(out: str, stderr: bytes) -> str:
    """What a CNI plugin that failed says: its error result's ``msg: details`` (CNI spec, "Error"), else its
    output as it is. ``out`` is its stdout, stripped."""
    detail = out or stderr.decode("utf-8", "replace").strip()
    try:
        err = json_loads(out)
        detail = "%s%s" % (err.get("msg", out), (": " + err["details"]) if err.get("details") else "")
    except (ValueError, AttributeError):
        pass
    return detail


def beside(background: t.Callable[[], t.Any], foreground: t.Callable[[], None]) -> t.Any:
    """``background()`` in a thread of its own while ``foreground()`` runs in this one; ``background``'s result once
    both have ended. ``foreground``'s error comes first: ``background`` is waited for, and its own error dropped;
    then ``background``'s. What a session's first ADD on an agent does only because the session spans many agents (the
    agent table's read and check, a forwarding entry per peer) runs beside what every ADD does (the look-up of the
    group's other allocations, the rules), not after it: each waits mostly on another process or the kernel, and
    the first ADD of a 1,024-agent session no longer adds one to the other (benchmarks/cni_add.py --scale). Where
    no thread can be started, one after the other."""
    done = _thread.allocate_lock()
    done.acquire()
    outcome: t.List[t.Tuple[t.Any, t.Optional[BaseException]]] = []

    def run() -> None:
        try:
            outcome.append((background(), None))
        except BaseException as e:  # (re-raised in the caller's thread below)
            outcome.append((None, e))
        finally:
            done.release()

    try:
        _thread.start_new_thread(run, ())
    except RuntimeError:  # no thread to be had (the process's or the machine's limit): here, first
        run()
    try:
        foreground()
    finally:
        done.acquire()  # nothing of the background outlives the call, whatever the foreground did
    value, error = outcome[0]
    if error is not None:
        raise error
    return value


def write_file(path: str, text: str, mode: int = 0o600) -> None:
    """``text`` into ``<path>.<pid>.tmp``, renamed over ``path``: a reader sees the old file or the whole new one.
    A writer killed in between leaves the temporary file; :func:`remove_file` takes it with ``path``."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def read_json(path: str) -> t.Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json_loads(f.read())
    except (OSError, ValueError):
        return None


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def touch(path: str, mode: int = 0o600) -> None:
    """An empty file at ``path``: made in one step, so it needs no temporary file."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, mode))


def temp_files(path: str) -> t.List[str]:
    """The ``<path>.<pid>.tmp`` files beside ``path``: :func:`write_file` calls killed before their rename, or
    (outside the agent lock) one in progress."""
    folder, name = os.path.split(path)
    prefix = name + "."
    return [os.path.join(folder, other) for other in listdir(folder)
            if other.startswith(prefix) and other.endswith(".tmp") and other[len(prefix):-4].isdigit()]


def remove_file(path: str) -> None:
    """``path`` and its :func:`temp_files`. Only under the agent lock: every write_file call holds it, so no
    temporary file found then is still being written."""
    for tmp in temp_files(path):
        unlink(tmp)
    unlink(path)


def listdir(path: str) -> t.List[str]:
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
        self.underlay_mtu = int(conf.get("underlayMTU", net.DEFAULT_UNDERLAY_MTU))
        self.vxlan_port = int(conf.get("vxlanPort", net.VXLAN_PORT))
        self.egress = bool(conf.get("egress", True))
        self.uplinks = [str(u) for u in conf.get("uplinks") or []]
        self.cni_version = str(conf.get("cniVersion", net.CNI_VERSION))
        self.name = str(conf.get("name", net.NETWORK_NAME))
        if not os.path.isabs(self.state_dir) or not os.path.isabs(self.key_file):
            raise PluginError(E_CONFIG, "stateDir and keyFile must be absolute paths")
        # Who confirms an allocation's identity (see _session_network): the local Nomad agent unless the config
        # says it is the local runtime's agent; a config without "identity" (an older role's) is Nomad's.
        self.identity = str(conf.get("identity", "nomad"))
        self.agent_name = str(conf.get("agentName") or "")
        self.nomad_addr = str(conf.get("nomadAddr") or net.DEFAULT_NOMAD_ADDR)
        self.nomad_token_file = str(conf.get("nomadTokenFile") or "")
        self.nomad_ca_file = str(conf.get("nomadCACert") or "")
        # https with a client certificate (Nomad's tls.verify_https_client), and the explicit opt-in to plain http
        # to an address off loopback (_cni_nomad.NomadAgent refuses it otherwise)
        self.nomad_cert_file = str(conf.get("nomadClientCert") or "")
        self.nomad_key_file = str(conf.get("nomadClientKey") or "")
        self.nomad_plain_http = conf.get("nomadAllowPlainHTTP", False) is True
        if bool(self.nomad_cert_file) != bool(self.nomad_key_file):
            raise PluginError(E_CONFIG, "nomadClientCert and nomadClientKey go together: set both or neither")
        if self.identity not in net.IDENTITY_SOURCES:
            raise PluginError(E_CONFIG, "identity must be one of %s, got %r"
                              % (", ".join(net.IDENTITY_SOURCES), self.identity))
        # The agent's one WireGuard interface (sessions with underlay encryption): its name, UDP port, and how it
        # runs (kernel, userspace = wireguard-go, or auto: the kernel module where it loads, else wireguard-go).
        wg = conf.get("wireguard") or {}
        self.wg_interface = str(wg.get("interface") or net.WIREGUARD_INTERFACE)
        self.wg_port = int(wg.get("port") or net.WIREGUARD_PORT)
        self.wg_mode = str(wg.get("mode") or "auto")
        if self.wg_mode not in net.WIREGUARD_MODES + ("auto",) or not 0 < len(self.wg_interface) <= 15:
            raise PluginError(E_CONFIG, "wireguard.mode must be auto, kernel or userspace and wireguard.interface an "
                              "interface name of at most 15 characters, got %r, %r" % (self.wg_mode, self.wg_interface))

    def require_agent_name(self) -> None:
        """The agent's Nomad node name, which admission through Nomad checks an allocation's node against. Asked for
        there, not when the config is read: DEL needs no name, and a session attached under an older role's config
        (which has none) must still come down."""
        if self.identity == "nomad" and not self.agent_name:
            raise PluginError(E_CONFIG, "agentName (this agent's Nomad node name) must be set in the backendai "
                              "plugin's config: the overlay_agent role writes it (re-run it; local agents made by an "
                              "earlier release: recreate them with playbooks/local_agents.yml)")

    def path(self, *parts: str) -> str:
        return os.path.join(self.state_dir, *parts)


# ---------------------------------------------------------------------------- iptables

def save_rules(family: str = "iptables") -> t.Dict[str, t.List[str]]:
    """Every table's chains and rules (one iptables-save, or ip6tables-save with ``family`` ``ip6tables``)."""
    out: t.Dict[str, t.List[str]] = {}
    table = ""
    for line in run([family + "-save"]).stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            out[table] = []
        elif table and line.startswith((":", "-A ")):
            out[table].append(line)
    return out


def restore_rules(lines: t.Mapping[str, t.Sequence[str]], family: str = "iptables") -> None:
    """One iptables-restore --noflush (``family``: or ip6tables) for every table with lines."""
    script = "".join("*%s\n%s\nCOMMIT\n" % (table, "\n".join(rules)) for table, rules in lines.items() if rules)
    if script:
        run([family + "-restore", "-w", "--noflush"], script)


def has_chain(saved: t.Sequence[str], chain: str) -> bool:
    return any(line.startswith(":%s " % chain) for line in saved)


def base_rules(cfg: Config, uplinks: t.Sequence[str]) -> t.Dict[str, t.List[str]]:
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
#: ip6tables: session VXLAN inside WireGuard is IPv6 between tunnel addresses; its rules are in mangle only.
TABLES6 = {"mangle": (FORWARD_CHAIN, VXLAN_CHAIN)}


#: Where a session's IPv6 RETURN goes in the IPv6 VXLAN chain: after the agent-wide DROPs of what comes from
#: elsewhere than WireGuard and of what carries an extension header (base_rules6), before its final DROP.
SESSION_RULE6_AT = 3


def base_rules6(cfg: Config) -> t.Dict[str, t.List[str]]:
    """The agent-wide IPv6 rules (made with the first encrypted session, removed with the last session).

    The VXLAN chain is default-deny: VXLAN over IPv6 to this agent passes only by an encrypted session's own RETURN
    (its VNI from one of its peers' tunnel addresses, through WireGuard: ``session_rules6``); everything else is
    dropped, whatever its headers. Before any RETURN it drops what does not come from the WireGuard interface (whose
    peers WireGuard has authenticated, each only with its own tunnel address as source) and any packet with an
    extension header or a fragment header (``ipv6header`` in exact mode: anything but a bare upper-layer header):
    the VNI match reads a fixed offset that such a packet moves, and nothing of ours ever sends one (the overlay MTU
    leaves room for the headers, so VXLAN is never fragmented). Session VXLAN is never forwarded, and nothing is
    routed into or out of the WireGuard interface: only the agent itself speaks through it (its peers take what comes
    from it as the agent's, so a container that sends to a peer's tunnel address from the agent's, with a raw socket,
    where the agent forwards IPv6, would speak inside the tunnel as the agent)."""
    port, wg = str(cfg.vxlan_port), cfg.wg_interface
    return {"mangle": [
        ":%s - [0:0]" % FORWARD_CHAIN, ":%s - [0:0]" % VXLAN_CHAIN,
        "-A %s -p udp -m udp --dport %s -m comment --comment \"backendai: forwarded VXLAN of session networks\" -j DROP"
        % (FORWARD_CHAIN, port),
        "-A %s -o %s -m comment --comment \"backendai: nothing is routed into WireGuard\" -j DROP" % (FORWARD_CHAIN, wg),
        "-A %s -i %s -m comment --comment \"backendai: nothing is routed out of WireGuard\" -j DROP" % (FORWARD_CHAIN, wg),
        "-A %s ! -i %s -m comment --comment \"backendai: session VXLAN only from WireGuard\" -j DROP" % (VXLAN_CHAIN, wg),
        "-A %s -m ipv6header ! --header prot -m comment --comment \"backendai: session VXLAN has no extension header "
        "nor fragment\" -j DROP" % VXLAN_CHAIN,
        "-A %s -m comment --comment \"backendai: VXLAN of no session of this agent's peers\" -j DROP" % VXLAN_CHAIN,
        "-I FORWARD 1 -j %s" % FORWARD_CHAIN,
        "-I INPUT 1 -p udp -m udp --dport %s -j %s" % (port, VXLAN_CHAIN)]}


def session_rules6(cfg: Config, st: t.Mapping[str, t.Any]) -> t.Dict[str, t.List[str]]:
    """An encrypted session's IPv6 rule: its VNI only from its peers' tunnel addresses (its IPv6 peer set,
    :func:`sets_up`), through WireGuard, in a packet with no extension header (``-I`` at SESSION_RULE6_AT: after the
    chain's first DROPs, before its last)."""
    comment = "--comment \"%s\"" % (COMMENT % st["sid"])
    if not st.get("wg_peers"):
        return {"mangle": []}
    return {"mangle": ["-I %s %d -i %s -m set --match-set %s src -m u32 --u32 \"%s\" -m comment %s -j RETURN"
                       % (VXLAN_CHAIN, SESSION_RULE6_AT, cfg.wg_interface, net.peer_set_names(st["sid"])[1],
                          net.vni_match6(st["vni"]), comment)]}


def session_rules(cfg: Config, st: t.Mapping[str, t.Any]) -> t.Dict[str, t.List[str]]:
    """The session's own rules (``-I`` lines: before the agent-wide DROPs of the chain)."""
    comment = "--comment \"%s\"" % (COMMENT % st["sid"])
    mangle = ["-I %s 2 -i %s -o %s -m comment %s -j RETURN" % (FORWARD_CHAIN, st["bridge"], st["bridge"], comment)]
    # its VNI only from its agents: one rule and the session's peer set (sets_up), whatever the number of agents (a
    # rule per peer made the first ADD of a session on 1,024 agents ~40 ms longer); an encrypted session accepts no
    # IPv4 VXLAN at all: its VNI falls to the chain's DROP (see session_rules6)
    if st["peers"] and st.get("encryption") != "wireguard":
        mangle.append("-I %s 1 -m set --match-set %s src -m u32 --u32 \"%s\" -m comment %s -j RETURN"
                      % (VXLAN_CHAIN, net.peer_set_names(st["sid"])[0], net.vni_match(st["vni"]), comment))
    nat = []
    if cfg.egress:
        nat.append("-A %s -s %s ! -d %s -m comment %s -j MASQUERADE" % (NAT_CHAIN, st["subnet"], st["subnet"], comment))
    return {"mangle": mangle, "filter": [], "nat": nat}


def uplinks_of(cfg: Config) -> t.List[str]:
    if cfg.uplinks or not cfg.egress:
        return cfg.uplinks
    routes = json_loads(run(["ip", "-j", "-4", "route", "show", "default"]).stdout.decode() or "[]")
    return sorted({r["dev"] for r in routes if r.get("dev")})


def rules_up(cfg: Config, st: t.Mapping[str, t.Any], first_session: bool) -> None:
    sets_up(st)  # (before the rules that name them)
    _rules_up(session_rules(cfg, st), TABLES, lambda: base_rules(cfg, uplinks_of(cfg)), first_session, "iptables")
    if st.get("encryption") == "wireguard":
        _rules_up(session_rules6(cfg, st), TABLES6, lambda: base_rules6(cfg), first_session, "ip6tables")


def _rules_up(mine: t.Mapping[str, t.List[str]], tables: t.Mapping[str, t.Tuple[str, ...]],
              make_base: t.Callable[[], t.Dict[str, t.List[str]]], first_session: bool, family: str) -> None:
    all_saved = save_rules(family)
    base: t.Optional[t.Dict[str, t.List[str]]] = None  # the agent-wide rules (and the uplinks) only when missing
    script = {}
    for table, chains in tables.items():
        saved = all_saved.get(table, [])
        lines = []
        if not has_chain(saved, chains[0]):
            base = base or make_base()
            lines += base[table]
        elif first_session:  # left over by a killed teardown: start from the agent-wide rules again
            lines += delete_lines(saved, lambda rule: "backendai session " in rule)
        lines += mine[table]
        script[table] = lines
    restore_rules(script, family)


def delete_lines(saved: t.Sequence[str], pick: t.Callable[[str], bool]) -> t.List[str]:
    return ["-D " + line[3:] for line in saved if line.startswith("-A ") and pick(line)]


def rules_down(sid: str, last_session: bool, encrypted: bool = True) -> None:
    """The session's rules go (IPv6 too when it was ``encrypted``); with the last session, the agent-wide chains."""
    _rules_down(sid, last_session, TABLES, "iptables")
    if encrypted or last_session:
        _rules_down(sid, last_session, TABLES6, "ip6tables")


def _rules_down(sid: str, last_session: bool, tables: t.Mapping[str, t.Tuple[str, ...]], family: str) -> None:
    all_saved = save_rules(family)
    script = {}
    for table, chains in tables.items():
        saved = all_saved.get(table, [])
        if last_session:
            lines = delete_lines(saved, lambda rule: any(("-j %s" % c) in rule for c in chains))
            lines += ["-F %s" % c for c in chains if has_chain(saved, c)]
            lines += ["-X %s" % c for c in chains if has_chain(saved, c)]
        else:
            lines = delete_lines(saved, lambda rule: (COMMENT % sid) in rule)
        script[table] = lines
    restore_rules(script, family)


# ---------------------------------------------------------------------------- netlink

# What a session's first ADD on an agent does once per peer agent goes to the kernel over netlink from this process,
# many requests a message and one acknowledgement per batch: a forwarding entry per peer (``bridge fdb append``) and
# an address per peer in the session's peer set (``ipset add``). Through the tools, a process each and a line
# parsed per peer: ~20 ms (``bridge -batch``) and ~5-10 ms (``ipset restore``) at 1,023 peers, the ADD of a
# 1,024-agent session 1.4x a 2-agent session's; this way ~5 ms and ~0.5 ms, the kernel's own work
# (benchmarks/cni_add.py --scale). The formats are the kernel's stable ABI: linux/netlink.h, rtnetlink.h,
# neighbour.h, netfilter/nfnetlink.h and netfilter/ipset/ip_set.h.
_NETLINK_ROUTE, _NETLINK_NETFILTER = 0, 12
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_NLM_F_DUMP, _NLM_F_CREATE, _NLM_F_APPEND = 0x300, 0x400, 0x800
_NLA_F_NESTED, _NLA_F_NET_BYTEORDER = 0x8000, 0x4000
#: Requests a batch: under the socket's send buffer (~200 KB) at the largest message (ipset's, ~28 KB).
_BATCH = 1024


def _u16(v: int) -> bytes:
    return v.to_bytes(2, sys.byteorder)


def _u32(v: int) -> bytes:
    return v.to_bytes(4, sys.byteorder)


def _attr(kind: int, payload: bytes) -> bytes:
    """A netlink attribute (``kind`` with its flags), padded to 4 bytes."""
    return _u16(4 + len(payload)) + _u16(kind) + payload + b"\0" * (-len(payload) % 4)


def _attrs(data: bytes) -> t.Iterator[t.Tuple[int, bytes]]:
    """(type without flags, payload) of the attributes in ``data``."""
    at = 0
    while at + 4 <= len(data):
        length = int.from_bytes(data[at:at + 2], sys.byteorder)
        if length < 4:
            return
        yield int.from_bytes(data[at + 2:at + 4], sys.byteorder) & 0x3FFF, data[at + 4:at + length]
        at += (length + 3) & ~3


class _Netlink:
    """A netlink socket of ``protocol`` in this process's network namespace."""

    def __init__(self, protocol: int) -> None:
        self.sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, protocol)
        self.sock.bind((0, 0))
        self.seq = 0

    def __enter__(self) -> "_Netlink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _message(self, kind: int, flags: int, payload: bytes, heads: t.Optional[t.Dict[t.Any, bytes]] = None) -> bytes:
        """A request: its header (through ``heads``, a cache of its first 8 bytes, when many are made), ``payload``."""
        self.seq += 1
        key = (len(payload), kind, flags)
        head = heads.get(key) if heads is not None else None
        if head is None:
            head = _u32(16 + len(payload)) + _u16(kind) + _u16(flags | _NLM_F_REQUEST)
            if heads is not None:
                heads[key] = head
        return head + _u32(self.seq) + b"\0\0\0\0" + payload

    def call(self, requests: t.Sequence[t.Tuple[int, int, bytes]], what: t.Callable[[int, int], str],
             ok: t.Tuple[int, ...] = ()) -> None:
        """Send ``requests`` ((type, flags, payload)), ``_BATCH`` a message, each batch's last one acknowledged; at
        the first error (an errno not in ``ok``), NetlinkError(errno, ``what(index of the request, errno)``)."""
        for start in range(0, len(requests), _BATCH):
            batch = requests[start:start + _BATCH]
            first, heads = self.seq + 1, {}  # type: int, t.Dict[t.Any, bytes]
            last = batch[-1]
            self.sock.sendall(b"".join([self._message(kind, flags, payload, heads) for kind, flags, payload in batch[:-1]]
                                       + [self._message(last[0], last[1] | _NLM_F_ACK, last[2])]))
            self._answers(lambda seq, err: err in ok or self._fail(err, what(start + seq - first, err)))

    def dump(self, kind: int, payload: bytes) -> t.List[bytes]:
        """The payloads of the answers to a dump request."""
        self.sock.sendall(self._message(kind, _NLM_F_DUMP | _NLM_F_ACK, payload))
        out: t.List[bytes] = []
        self._answers(lambda seq, err: self._fail(err, "netlink dump") if err else True, out)
        return out

    @staticmethod
    def _fail(err: int, what: str) -> bool:
        raise NetlinkError(err, what)

    def _answers(self, error: t.Callable[[int, int], t.Any], parts: t.Optional[t.List[bytes]] = None) -> None:
        """Read until the acknowledgement of the last request sent (or a dump's end), calling ``error(seq, errno)``
        for each error or acknowledgement and putting a dump's answers into ``parts``."""
        while True:
            data, at = self.sock.recv(1 << 20), 0
            while at + 16 <= len(data):
                length = int.from_bytes(data[at:at + 4], sys.byteorder)
                kind = int.from_bytes(data[at + 4:at + 6], sys.byteorder)
                seq = int.from_bytes(data[at + 8:at + 12], sys.byteorder)
                if kind == _NLMSG_ERROR:
                    err = -int.from_bytes(data[at + 16:at + 20], sys.byteorder, signed=True)
                    if err:
                        error(seq, err)
                    if seq == self.seq and (err or parts is None):
                        return
                elif kind == _NLMSG_DONE:
                    return
                elif parts is not None:
                    parts.append(data[at + 16:at + length])
                at += max(16, (length + 3) & ~3)


class NetlinkError(PluginError):
    def __init__(self, errno: int, what: str) -> None:
        super().__init__(E_SYSTEM, "%s failed" % what, _IPSET_ERRORS.get(errno) or os.strerror(errno))
        self.errno = errno


# rtnetlink: neighbour.h
_RTM_NEWNEIGH = 28
_AF_BRIDGE = 7
_NUD_PERMANENT = 0x80
_NTF_SELF = 0x02
_NDA_DST, _NDA_LLADDR = 1, 2


def fdb_append(device: str, dests: t.Sequence[str]) -> None:
    """What ``bridge fdb append 00:00:00:00:00:00 dev DEVICE dst D`` does for each of ``dests`` (IPv4 or IPv6
    addresses): the VXLAN device ``device`` floods to each of them."""
    head = bytes((_AF_BRIDGE, 0)) + _u16(0) + _socket.if_nametoindex(device).to_bytes(4, sys.byteorder, signed=True) \
        + _u16(_NUD_PERMANENT) + bytes((_NTF_SELF, 0)) + _attr(_NDA_LLADDR, b"\0" * 6)
    flags, pton = _NLM_F_CREATE | _NLM_F_APPEND, _socket.inet_pton
    v4, v6 = head + _u16(8) + _u16(_NDA_DST), head + _u16(20) + _u16(_NDA_DST)
    requests = [(_RTM_NEWNEIGH, flags, v6 + pton(_socket.AF_INET6, dst) if ":" in dst else v4 + pton(_socket.AF_INET, dst))
                for dst in dests]
    with _Netlink(_NETLINK_ROUTE) as nl:
        nl.call(requests, lambda i, _err: "fdb append dev %s dst %s" % (device, dests[i]))


# nfnetlink: ipset (netfilter/ipset/ip_set.h)
_NFNL_SUBSYS_IPSET = 6
_IPSET_PROTOCOL = 6  # what every kernel with ipset speaks (its minimum; 7 adds only what this does not use)
_IPSET_CMD_CREATE, _IPSET_CMD_DESTROY, _IPSET_CMD_FLUSH, _IPSET_CMD_LIST, _IPSET_CMD_ADD = 2, 3, 4, 7, 9
_IPSET_ATTR_PROTOCOL, _IPSET_ATTR_SETNAME, _IPSET_ATTR_TYPENAME, _IPSET_ATTR_REVISION = 1, 2, 3, 4
_IPSET_ATTR_FAMILY, _IPSET_ATTR_FLAGS, _IPSET_ATTR_DATA, _IPSET_ATTR_ADT, _IPSET_ATTR_LINENO = 5, 6, 7, 8, 9
_IPSET_ATTR_IP, _IPSET_ATTR_HASHSIZE, _IPSET_ATTR_MAXELEM = 1, 18, 19
_IPSET_ATTR_IPADDR_IPV4, _IPSET_ATTR_IPADDR_IPV6 = 1, 2
_IPSET_FLAG_LIST_SETNAME = 1 << 1
_IPSET_HASH_IP_REVISION = 1  # hash:ip with counters' support (Linux 3.11): the oldest still made by ipset 7
_NFPROTO = {"inet": 2, "inet6": 10}
_IPSET_ERR_BUSY = 4100
_IPSET_ERRORS = {4097: "ipset: kernel protocol error", 4098: "ipset: no such set type or revision in the kernel",
                 4099: "ipset: the kernel's maximal number of sets is reached", _IPSET_ERR_BUSY:
                 "ipset: the set is in use by a kernel component", 4101: "ipset: a set of that name exists, of "
                 "another type or size", 4103: "ipset: the set exists"}


def _ipset_request(cmd: int, attrs: bytes) -> t.Tuple[int, int, bytes]:
    """(type, flags, payload) of an ipset request: nfgenmsg (AF_INET, version 0, res_id 0), protocol, ``attrs``."""
    return ((_NFNL_SUBSYS_IPSET << 8) | cmd, 0,
            bytes((2, 0, 0, 0)) + _attr(_IPSET_ATTR_PROTOCOL, bytes((_IPSET_PROTOCOL,))) + attrs)


def _setname(name: str) -> bytes:
    return _attr(_IPSET_ATTR_SETNAME, name.encode("ascii") + b"\0")


def _ipset_members(family: str, addresses: t.Sequence[str]) -> bytes:
    """The ``IPSET_ATTR_DATA`` of each address (its ``IPSET_ATTR_IP`` holding it), one after the other."""
    af, kind, size = ((_socket.AF_INET6, _IPSET_ATTR_IPADDR_IPV6, 16) if family == "inet6"
                      else (_socket.AF_INET, _IPSET_ATTR_IPADDR_IPV4, 4))
    address = _attr(kind | _NLA_F_NET_BYTEORDER, b"\0" * size)
    head = _attr(_IPSET_ATTR_DATA | _NLA_F_NESTED, _attr(_IPSET_ATTR_IP | _NLA_F_NESTED, address))[:-size]
    pton = _socket.inet_pton
    return b"".join([head + pton(af, a) for a in addresses])


def ipset_fill(name: str, family: str, addresses: t.Sequence[str]) -> None:
    """What ``ipset -exist restore`` of ``create NAME hash:ip family FAMILY``, ``flush NAME`` and ``add NAME A`` for
    each address does (a set left by a killed ADD of the same session is emptied and filled again)."""
    size = 64
    while size < len(addresses):
        size *= 2
    create = (_setname(name) + _attr(_IPSET_ATTR_TYPENAME, b"hash:ip\0")
              + _attr(_IPSET_ATTR_REVISION, bytes((_IPSET_HASH_IP_REVISION,)))
              + _attr(_IPSET_ATTR_FAMILY, bytes((_NFPROTO[family],)))
              + _attr(_IPSET_ATTR_DATA | _NLA_F_NESTED,
                      _attr(_IPSET_ATTR_HASHSIZE | _NLA_F_NET_BYTEORDER, size.to_bytes(4, "big"))
                      + _attr(_IPSET_ATTR_MAXELEM | _NLA_F_NET_BYTEORDER, max(65536, len(addresses)).to_bytes(4, "big"))))
    requests = [_ipset_request(_IPSET_CMD_CREATE, create), _ipset_request(_IPSET_CMD_FLUSH, _setname(name))]
    for start in range(0, len(addresses), _BATCH):
        requests.append(_ipset_request(_IPSET_CMD_ADD, _setname(name) + _attr(_IPSET_ATTR_LINENO, _u32(0)) + _attr(
            _IPSET_ATTR_ADT | _NLA_F_NESTED, _ipset_members(family, addresses[start:start + _BATCH]))))
    with _Netlink(_NETLINK_NETFILTER) as nl:
        nl.call(requests, lambda i, _err: "ipset %s %s" % (("create", "flush")[i] if i < 2 else "add", name))


def ipset_destroy(name: str) -> bool:
    """``ipset destroy NAME``: True when it is gone (or was not there), False while the kernel still uses it."""
    with _Netlink(_NETLINK_NETFILTER) as nl:
        try:
            nl.call([_ipset_request(_IPSET_CMD_DESTROY, _setname(name))], lambda _i, _err: "ipset destroy %s" % name,
                    ok=(2,))  # ENOENT: no such set
        except NetlinkError as e:
            if e.errno == _IPSET_ERR_BUSY:
                return False
            raise
    return True


def ipset_names() -> t.List[str]:
    """``ipset list -n``: the names of this network namespace's sets."""
    kind, _flags, payload = _ipset_request(_IPSET_CMD_LIST, _attr(_IPSET_ATTR_FLAGS | _NLA_F_NET_BYTEORDER,
                                                                  _IPSET_FLAG_LIST_SETNAME.to_bytes(4, "big")))
    with _Netlink(_NETLINK_NETFILTER) as nl:
        parts = nl.dump(kind, payload)
    return sorted({value.rstrip(b"\0").decode("ascii", "replace") for part in parts
                   for kind, value in _attrs(part[4:]) if kind == _IPSET_ATTR_SETNAME})


# ---------------------------------------------------------------------------- peer sets

def peer_sets(st: t.Mapping[str, t.Any]) -> t.List[t.Tuple[str, str, t.List[str]]]:
    """(name, ipset family, addresses) of the session's peer sets: its VXLAN's sources, which its rules accept (one
    rule per set, its VNI from an address in the set). Plain VXLAN: the peers' underlay addresses (IPv4); inside
    WireGuard: the peers' tunnel addresses (IPv6). None for a session on one agent."""
    v4, v6 = net.peer_set_names(st["sid"])
    if st.get("encryption") == "wireguard":
        return [(v6, "inet6", [tun for _key, tun, _ul in st.get("wg_peers") or []])] if st.get("wg_peers") else []
    return [(v4, "inet", list(st["peers"]))] if st["peers"] else []


def sets_up(st: t.Mapping[str, t.Any]) -> None:
    """The session's peer sets, made and filled (a hash of addresses: the rule's look-up is O(1) in the peers)."""
    for name, family, addresses in peer_sets(st):
        ipset_fill(name, family, addresses)


def sets_down(st: t.Mapping[str, t.Any], last_session: bool) -> None:
    """The peer sets of the session recorded as ``st`` go (after its rules: :func:`rules_down`); with the agent's last
    session, every peer set of the plugin (what a killed teardown left; none where the kernel has no ipset). A
    session on one agent has none, so its DEL needs no ipset in the kernel. iptables-nft drops a deleted rule's
    reference to its set after the commit (the kernel's nf_tables destroy work), so a set may be busy for a moment
    after its rule went: tried again for ~2 s."""
    names = [name for name, _family, _addresses in peer_sets(st)]
    if last_session:
        try:
            names = sorted(set(names) | {n for n in ipset_names() if net.is_peer_set_name(n)})
        except NetlinkError:
            pass  # (no ipset in this kernel: no set was ever made)
    for name in names:
        for attempt in range(100):
            if ipset_destroy(name):
                break
            if attempt == 99:
                raise PluginError(E_SYSTEM, "ipset destroy %s failed" % name, _IPSET_ERRORS[_IPSET_ERR_BUSY])
            time.sleep(0.02)


# ---------------------------------------------------------------------------- links

def check_subnet(st: t.Mapping[str, t.Any]) -> None:
    subnet = net.net4(st["subnet"])
    for link in json_loads(run(["ip", "-j", "-4", "addr", "show"]).stdout.decode() or "[]"):
        for a in link.get("addr_info", []):
            iface = net.net4("%s/%s" % (a["local"], a["prefixlen"]), strict=False)
            if link["ifname"] != st["bridge"] and net.overlaps(iface, subnet):
                raise PluginError(E_CONFLICT, "the session subnet %s overlaps %s/%s on %s of this agent"
                                  % (st["subnet"], a["local"], a["prefixlen"], link["ifname"]))


def bridge_mac(session_id: str, underlay_ip: str) -> str:
    """The session bridge's own MAC on an agent: fixed, or Linux gives a bridge the lowest MAC of its ports, which
    changes as containers come and go, and the bridge plugin's CHECK (Nomad's, after a client restart) fails on it.
    Locally administered, and different on every agent of the session (they share one layer 2)."""
    digest = hashlib.sha256(("bridge-mac\0%s\0%s" % (session_id, underlay_ip)).encode()).hexdigest()
    return "02:" + ":".join(digest[i:i + 2] for i in range(0, 10, 2))


#: IPv6's minimum link MTU (RFC 8200): Linux gives a device of a smaller MTU no IPv6 at all.
IPV6_MIN_MTU = 1280


def links_up(cfg: Config, st: t.Mapping[str, t.Any]) -> None:
    """The session's bridge and, when it spans agents, its VXLAN device: between underlay addresses, or, encrypted,
    between tunnel addresses over the agent's WireGuard interface (``dev``: it routes only there). Its forwarding
    entries: :func:`flood_up`."""
    br, vx, mtu = st["bridge"], st["vxlan"], st["mtu"]
    # Neither device has an IPv6 address of its own (addrgenmode none: no link-local address, so no DAD, router
    # solicitation or MLD report of theirs): the session network is IPv4, and what the bridge itself sends is flooded
    # to every port, the VXLAN device's copy to every peer agent (at 1,023 peers, ~10 ms of kernel time in the first
    # ADD). IPv6 between containers is bridged as before. A device made with an MTU below IPv6's minimum (1,280: VXLAN
    # inside WireGuard over an IPv6 underlay of 1,400) has no IPv6 at all, and the kernel refuses its addrgenmode
    # (EAFNOSUPPORT, ``addrconf_notify`` adds no inet6 device below IPV6_MIN_MTU): there is nothing to turn off.
    no_v6_addr = ["link set dev %s addrgenmode none"] if mtu >= IPV6_MIN_MTU else []
    lines = ["link add %s address %s mtu %d type bridge" % (br, bridge_mac(st["sid"], cfg.underlay_ip), mtu)]
    lines += [x % br for x in no_v6_addr] + ["addr add %s/%d dev %s" % (st["gateway"], st["prefixlen"], br)]
    encrypted = st.get("encryption") == "wireguard"
    if st["peers"]:
        lines.append("link add %s mtu %d type vxlan id %d local %s dstport %d%s"
                     % (vx, mtu, st["vni"], st["tunnel"] if encrypted else cfg.underlay_ip, cfg.vxlan_port,
                        " dev %s" % cfg.wg_interface if encrypted else ""))
        lines += [x % vx for x in no_v6_addr]
        lines += ["link set %s master %s" % (vx, br),
                  # multicast is not flooded to the other agents (broadcast, so ARP, and unicast are): each container
                  # coming up sends a few IPv6 frames (MLD, DAD, RS), which the VXLAN device copied to every peer,
                  # ~20 ms of an ADD's kernel time at 1,023 peers and N^2 packets for a session start
                  "link set dev %s type bridge_slave mcast_flood off" % vx, "link set %s up" % vx]
    lines.append("link set %s up" % br)
    run(["ip", "-batch", "-"], "".join(x + "\n" for x in lines))


def flood_up(st: t.Mapping[str, t.Any]) -> None:
    """The session's VXLAN device floods to each of its peers (their underlay addresses, or inside WireGuard their
    tunnel addresses): a forwarding entry per peer, after :func:`links_up`."""
    if st["peers"]:
        encrypted = st.get("encryption") == "wireguard"
        fdb_append(st["vxlan"], [tun for _key, tun, _ul in st["wg_peers"]] if encrypted else st["peers"])


def session_up(cfg: Config, st: t.Mapping[str, t.Any], first_session: bool) -> None:
    """The session's links, then its forwarding entries (a thread of their own: ~5-10 ms of the kernel's work at
    1,023 peers) beside its peer sets and rules (iptables-save and -restore: ~6-10 ms of waiting for them). Both are
    in place when this returns, before any container of the session is attached: a container's first frame to a
    peer (its ARP request) is flooded to every peer."""
    links_up(cfg, st)
    beside(lambda: flood_up(st), lambda: rules_up(cfg, st, first_session))


# ---------------------------------------------------------------------------- WireGuard

def wireguard_record(cfg: Config) -> t.Any:
    """What the plugin recorded of the agent's WireGuard interface (``stateDir/wireguard.json``): interface, mode,
    public key; None before the first encrypted session."""
    return read_json(cfg.path("wireguard.json"))


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def _make_wireguard(cfg: Config) -> str:
    """The interface, made: with the kernel module, else (``auto``) wireguard-go, which puts itself in the
    background once the interface is up (its UAPI socket is ``/var/run/wireguard/<interface>.sock``)."""
    name = cfg.wg_interface
    if cfg.wg_mode in ("kernel", "auto"):
        made = run(["ip", "link", "add", name, "type", "wireguard"], check=cfg.wg_mode == "kernel")
        if made.returncode == 0:
            return "kernel"
    run(["wireguard-go", name])  # (no LOG_LEVEL: then its daemon keeps none of our stdio)
    return "userspace"


def wireguard_up(cfg: Config, st: t.Mapping[str, t.Any], sessions: t.Mapping[str, t.Mapping[str, t.Any]]) -> None:
    """Under the lock: the agent's WireGuard interface (made with the first encrypted session on the agent, with
    this agent's key and its tunnel address), and the session's peers on it: each peer's public key, its tunnel address as its only allowed IP, its underlay
    address as endpoint. Idempotent. An interface found missing while sessions are recorded (wireguard-go killed)
    is made again with every recorded session's peers. Refused when the session was signed with another public key
    for this agent than the one its agent key gives (the cluster key changed since)."""
    name = cfg.wg_interface
    record = wireguard_record(cfg)
    if not link_exists(name):
        mode = _make_wireguard(cfg)
        try:
            private = net.wireguard_private_key(net.read_key(cfg.key_file))
        except net.NetworkError as e:
            raise PluginError(E_CONFIG, str(e)) from None
        run(["wg", "set", name, "private-key", "/dev/stdin", "listen-port", str(cfg.wg_port)],
            net.wg_key_text(private) + "\n")
        public = run(["wg", "show", name, "public-key"]).stdout.decode().strip()
        run(["ip", "link", "set", name, "mtu", str(net.wireguard_mtu(cfg.underlay_mtu)), "up"])
        record = {"interface": name, "mode": mode, "public_key": public, "port": cfg.wg_port}
        write_file(cfg.path("wireguard.json"), json_dumps(record))
        _set_peers(name, cfg.wg_port, [p for other in sessions.values() for p in other.get("wg_peers") or []])
    elif not isinstance(record, dict):  # the interface is there, its record not (a state dir made anew): read it
        record = {"interface": name, "mode": "kernel" if _kernel_link(name) else "userspace", "port": cfg.wg_port,
                  "public_key": run(["wg", "show", name, "public-key"]).stdout.decode().strip()}
        write_file(cfg.path("wireguard.json"), json_dumps(record))
    if record.get("public_key") != st["wg_key"]:
        raise PluginError(E_CONFLICT, "this agent's WireGuard public key is not the one session %s was signed with "
                          "(was the cluster key changed after the session was made? recreate the session)" % st["sid"])
    run(["ip", "addr", "replace", "%s/48" % st["tunnel"], "dev", name, "nodad"])
    _set_peers(name, cfg.wg_port, st["wg_peers"])


def _kernel_link(name: str) -> bool:
    """Whether ``name`` is the kernel's WireGuard device (wireguard-go's is a ``tun``)."""
    shown = json_loads(run(["ip", "-j", "-d", "link", "show", "dev", name]).stdout.decode() or "[]")
    return bool(shown) and (shown[0].get("linkinfo") or {}).get("info_kind") == "wireguard"


def _set_peers(name: str, port: int, peers: t.Sequence[t.Sequence[str]]) -> None:
    argv = ["wg", "set", name]
    for key, tun, underlay in peers:
        argv += ["peer", key, "allowed-ips", "%s/128" % tun, "endpoint", "%s:%d" % (underlay, port)]
    if len(argv) > 3:
        run(argv)


def wireguard_prune(cfg: Config, sessions: t.Mapping[str, t.Mapping[str, t.Any]]) -> None:
    """Under the lock: the peers no session on this agent uses any more go; with the last encrypted session, the
    interface (and so its wireguard-go, which ends when its link is deleted and removes its UAPI socket): like a
    session's bridge, nothing of WireGuard is on an agent that carries no encrypted session."""
    if not any(st.get("encryption") == "wireguard" for st in sessions.values()):
        run(["ip", "link", "delete", cfg.wg_interface], check=False)
        remove_file(cfg.path("wireguard.json"))
        return
    if not link_exists(cfg.wg_interface):
        return
    keep = {p[0] for st in sessions.values() for p in st.get("wg_peers") or []}
    have = run(["wg", "show", cfg.wg_interface, "peers"], check=False).stdout.decode().split()
    argv = ["wg", "set", cfg.wg_interface]
    for key in have:
        if key not in keep:
            argv += ["peer", key, "remove"]
    if len(argv) > 3:
        run(argv, check=False)


def links_down(st: t.Mapping[str, t.Any]) -> None:
    run(["ip", "-force", "-batch", "-"], "link delete %s\nlink delete %s\n" % (st["vxlan"], st["bridge"]), check=False)
