# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``backendai`` CNI plugin: every cluster session's network on an agent. Stdlib only.

Installed on every agent (Nomad clients by the ``overlay_agent`` role; local agents and this
machine by the local backend) as four files next to each other: this one (the CNI protocol,
admission, a session's life on the agent, the delegation), ``_cni_system.py`` (what it does to the
agent: config, JSON, commands, files, iptables rules and links), ``_cni_nomad.py`` (the look-up
of the allocation in the local Nomad agent) and ``_session_network.py`` (the parameters, the keys
and the MAC); a small ``backendai`` executable in the CNI path calls :func:`main`.
The agent has ONE network config (``backendai.conflist``: loopback, this plugin, portmap); a task
group joins its session's network through the parameters in its CNI_ARGS (see
``_session_network``), which are admitted only with a valid MAC, made for this agent, over the
allocation's identity as the local Nomad agent reports it (``_cni_nomad``; on the local
runtime's agents, as the runtime wrote it).

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
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_nomad as nomad
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
except ImportError:  # installed on an agent: the other files lie next to this one
    import _cni_system as system  # type: ignore[no-redef]
    import _cni_nomad as nomad  # type: ignore[no-redef]
    import _session_network as net  # type: ignore[no-redef]

Config, PluginError = system.Config, system.PluginError
E_ENV, E_CONFIG, E_ADMISSION = system.E_ENV, system.E_CONFIG, system.E_ADMISSION
E_CONFLICT, E_SYSTEM = system.E_CONFLICT, system.E_SYSTEM
SUPPORTED_VERSIONS = ["0.4.0", "1.0.0"]
#: The plugin's version: the collection's (tests/test_release_metadata.py checks it against galaxy.yml).
PLUGIN_VERSION = "0.2.0"
#: What the plugin prints when run with no CNI_COMMAND, as the reference plugins do (skel's "about"). The Nomad
#: client runs every executable of its cni_path with no arguments and, from the first word that parses as a
#: semantic version, sets the node attribute plugins.cni.version.backendai (client/fingerprint/plugins_cni.go,
#: Nomad 1.5+); a plugin that exits non-zero or prints no version gets no attribute, and the planner and the
#: job's constraint leave that node out.
ABOUT = "CNI backendai plugin v%s" % PLUGIN_VERSION
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ID_CHARS = _ALNUM | frozenset("_.:-")
_IFNAME_CHARS = _ALNUM | frozenset("_.-")
_NAME_CHARS = _ALNUM | frozenset("_.-")


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


def plain_name(value: t.Any, what: str) -> str:
    """``value`` if it is a plain file name (what CNI_PATH is searched for, a link name): PluginError otherwise. Every
    name the plugin reads back from its state and hands on goes through here: a ``../x`` or ``/x`` would make
    ``os.path.join`` leave the CNI path, and the plugin runs as root."""
    if not (isinstance(value, str) and 0 < len(value) <= 64 and value[0] in _ALNUM and _NAME_CHARS.issuperset(value)):
        raise PluginError(E_CONFIG, "%s %r is not a plain name: refused" % (what, value))
    return value


def _trusted(cfg: Config, sid: str, st: t.Any) -> t.Dict[str, t.Any]:
    """The session record ``st`` of ``sid``, if it is what ``_session_state`` writes in everything the plugin acts on
    by it (the session ID, its link names, the delegated plugins and their data directory); PluginError otherwise.
    The state directory is root's, but a record is read back to delete links and files and to run plugins as root:
    a record planted through a mount that reached the state directory must not choose what."""
    delegate = st.get("delegate") if isinstance(st, dict) else None
    ipam = delegate.get("ipam") if isinstance(delegate, dict) else None
    problem = ""
    if not (isinstance(sid, str) and net._is_uuid(sid) and st.get("sid") == sid):
        problem = "its session ID"
    elif (st.get("bridge"), st.get("vxlan")) != net.link_names(sid):
        problem = "its link names"
    elif not isinstance(ipam, dict) or delegate.get("bridge") != st["bridge"] \
            or ipam.get("dataDir") != cfg.path("ipam", sid):
        problem = "its delegated plugin configuration"
    if problem:
        raise PluginError(E_SYSTEM, "the state record of session %r on this agent is not the plugin's (%s): refused "
                          "to act on it (was the state directory %s reachable by anything else?)"
                          % (sid, problem, cfg.path()))
    plain_name(delegate.get("type"), "the delegated plugin type")
    plain_name(ipam.get("type"), "the delegated IPAM plugin type")
    return st


def _session_record(cfg: Config, sid: str) -> t.Optional[t.Dict[str, t.Any]]:
    st = system.read_json(cfg.path("sessions", plain_name(sid, "the session ID") + ".json"))
    return _trusted(cfg, sid, st) if isinstance(st, dict) else None


def _sessions(cfg: Config) -> t.Dict[str, t.Dict[str, t.Any]]:
    out = {}
    for name in system.listdir(cfg.path("sessions")):
        if name.endswith(".json"):
            st = system.read_json(cfg.path("sessions", name))
            if isinstance(st, dict):
                out[name[:-5]] = _trusted(cfg, name[:-5], st)
    return out


def _members(cfg: Config, sid: str) -> t.List[str]:
    return system.listdir(cfg.path("sessions", sid + ".d"))


# ---------------------------------------------------------------------------- the session on this agent

def _session_state(cfg: Config, adm: "net.Admission") -> t.Dict[str, t.Any]:
    p = adm.params
    lay = net.layout(p, cfg.underlay_ip)
    if p.mtu > cfg.underlay_mtu - net.overhead(p.encryption) and p.spans:
        raise PluginError(E_CONFLICT, "the session MTU %d does not fit this agent's underlay MTU %d minus %d"
                          % (p.mtu, cfg.underlay_mtu, net.overhead(p.encryption)))
    return {"sid": p.session_id, "vni": p.vni, "subnet": p.subnet, "agents": list(p.agents), "mtu": p.mtu,
            "namespace": adm.namespace, "job": adm.job_id, "table": adm.table.digest if adm.table else "",
            "bridge": lay.bridge, "vxlan": lay.vxlan,
            "gateway": lay.gateway, "prefixlen": lay.prefixlen, "peers": list(lay.peers),
            # underlay encryption: this agent's public key and tunnel address, the peers' (key, tunnel, underlay)
            "encryption": p.encryption if p.spans else "none", "wg_key": lay.wg_key, "tunnel": lay.tunnel,
            "wg_peers": [list(peer) for peer in lay.wg_peers],
            "delegate": {"cniVersion": cfg.cni_version, "name": cfg.name, "type": "bridge", "bridge": lay.bridge,
                         "isGateway": False, "ipMasq": False, "hairpinMode": True, "mtu": p.mtu,
                         "ipam": {"type": "host-local", "dataDir": cfg.path("ipam", p.session_id),
                                  "ranges": [[{"subnet": p.subnet, "rangeStart": lay.range_start,
                                               "rangeEnd": lay.range_end, "gateway": lay.gateway}]],
                                  "routes": [{"dst": "0.0.0.0/0"}]}}}


def _same(a: t.Mapping[str, t.Any], b: t.Mapping[str, t.Any]) -> bool:
    keys = ("vni", "subnet", "agents", "mtu", "namespace", "job", "encryption", "wg_peers")
    return all(a.get(k) == b.get(k) for k in keys) and a.get("table", "") == b.get("table", "")


def _with_table(cfg: Config, adm: "net.Admission") -> t.Tuple["net.Admission", t.Optional[t.Dict[str, t.Any]]]:
    """A version 4 admission's agents: (the admission, the session's record on this agent) if the session is here
    already with the table its args sign (nothing read: an ADD of a session's second container on an agent reads
    no table); else (the admission with the agents of its table, read from the local Nomad agent and checked
    against the signed digest, None). Versions 1 to 3: (adm, None), the agents are in the args."""
    ref = adm.table
    if ref is None:
        return adm, None
    p = adm.params
    have = _session_record(cfg, p.session_id)  # checked as every record the plugin acts on (_trusted)
    if have is not None and have.get("table") == ref.digest and (
            have.get("vni"), have.get("subnet"), have.get("mtu"), have.get("namespace"), have.get("job")) == (
            p.vni, p.subnet, p.mtu, adm.namespace, adm.job_id):
        return adm, have
    try:
        if ref.count == 1:  # a session on one agent: its table is this agent alone (the digest says whether it is)
            return net.resolve_table(adm, [{"agents": net.encode_agents([cfg.underlay_ip])}]), None
        if cfg.identity != "nomad":
            raise PluginError(E_ADMISSION, "backendai session network: admission refused: args version 4 keep the "
                              "agents in Nomad variables, which only an agent with identity nomad reads")
        return net.resolve_table(adm, nomad.agent_table(nomad.NomadAgent(cfg), ref)), None
    except net.NetworkError as e:
        raise PluginError(E_ADMISSION, "backendai session network: admission refused: %s" % e) from None


def _ensure_session(cfg: Config, want: t.Dict[str, t.Any]) -> None:
    """Under the lock: the session's bridge, VXLAN device and rules on this agent (made once)."""
    have = system.read_json(cfg.path("sessions", want["sid"] + ".json"))
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
    system.check_subnet(want)
    # Recorded before anything is made: whatever a killed ADD made, the DEL of its container removes.
    system.write_file(cfg.path("sessions", want["sid"] + ".json"), system.json_dumps(want))
    if want["encryption"] == "wireguard":  # the tunnel first: the VXLAN device is bound to its interface
        system.wireguard_up(cfg, want, sessions)
    system.session_up(cfg, want, first_session=not sessions)


def _remove_session(cfg: Config, sid: str) -> None:
    """Under the lock: the session's links, rules and IPAM data go; with the last session, the agent-wide chains."""
    try:
        os.rmdir(cfg.path("sessions", sid + ".d"))
    except FileNotFoundError:
        pass
    record = cfg.path("sessions", sid + ".json")
    st = _session_record(cfg, sid)
    if st is not None:  # else an ADD killed before the session was recorded made nothing but the record
        system.links_down(st)
        others = {k: v for k, v in _sessions(cfg).items() if k != sid}
        system.rules_down(sid, last_session=not others, encrypted=st.get("encryption") == "wireguard")
        system.sets_down(st, last_session=not others)
        if st.get("encryption") == "wireguard":
            system.wireguard_prune(cfg, others)
        ipam = cfg.path("ipam", sid)
        if os.path.isdir(ipam):
            for root, dirs, files in os.walk(ipam, topdown=False):
                for f in files:
                    system.unlink(os.path.join(root, f))
                for d in dirs:
                    os.rmdir(os.path.join(root, d))
            os.rmdir(ipam)
    system.remove_file(record)


# ---------------------------------------------------------------------------- delegation

def _delegate(command: str, conf: t.Mapping[str, t.Any], env: t.Mapping[str, str],
              prev: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Optional[t.Dict[str, t.Any]]:
    conf = dict(conf)
    if prev is not None:
        conf["prevResult"] = prev
    plugin = None
    plain_name(conf.get("type"), "the delegated plugin type")
    for d in (env.get("CNI_PATH") or "").split(os.pathsep):
        if d and os.access(os.path.join(d, conf["type"]), os.X_OK):
            plugin = os.path.join(d, conf["type"])
            break
    if plugin is None:
        raise PluginError(E_CONFIG, "the %s plugin is not in CNI_PATH (%s)" % (conf["type"], env.get("CNI_PATH")))
    denv = {k: v for k, v in env.items() if k.startswith("CNI_") and k != "CNI_ARGS"}
    denv.update(CNI_COMMAND=command, PATH=env.get("PATH") or system.SANE_PATH)
    proc = system.run([plugin], system.json_dumps(conf), check=False, env=denv)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        raise PluginError(E_SYSTEM, "%s %s: %s" % (conf["type"], command, system.cni_error(out, proc.stderr)))
    return system.json_loads(out) if out else None


# ---------------------------------------------------------------------------- commands

def _admission(cfg: Config, env: t.Mapping[str, str],
               also: t.Callable[["net.Admission"], t.Any] = lambda adm: None) -> t.Tuple["net.Admission", t.Any]:
    """The allocation's admission: on a Nomad client with its identity as the local Nomad agent has it, after
    the look-ups (``_cni_nomad``); on a local agent with the identity in CNI_ARGS (the local runtime's own). With
    ``also(admission)``'s result: run once the MAC is checked, in a thread beside the look-up of the group's other
    allocations (the admission's last step, whose refusal comes first: ``_cni_system.beside``)."""
    try:
        key = net.network_mac_key(net.read_key(cfg.key_file))
    except net.NetworkError as e:
        raise PluginError(E_CONFIG, str(e)) from None
    try:
        cni_args = net.parse_cni_args(env.get("CNI_ARGS", ""))
        if cfg.identity == "local":
            adm = net.admit(key, cni_args)
            return adm, also(adm)
        identity, api = nomad.confirmed_identity(cfg, cni_args, env.get("CNI_CONTAINERID", ""))
        adm = net.admit(key, cni_args, identity)
    except net.NetworkError as e:
        raise PluginError(E_ADMISSION, "backendai session network: admission refused: %s" % e) from None
    return adm, system.beside(lambda: also(adm), lambda: nomad.check_only_live(api, identity, adm.alloc_id))


def cmd_add(cfg: Config, env: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
    # with the agents: a version 4 session's first ADD on this agent reads its table beside the group's look-up
    adm, have = _admission(cfg, env, lambda admitted: _with_table(cfg, admitted))[1]
    cid = env.get("CNI_CONTAINERID", "")
    cfile = _container_file(cfg, cid)
    ifname = env.get("CNI_IFNAME", "")
    if not (0 < len(ifname) <= 15 and _IFNAME_CHARS.issuperset(ifname)) or not env.get("CNI_NETNS"):
        raise PluginError(E_ENV, "CNI_IFNAME and CNI_NETNS must be set")
    try:
        want = have if have is not None else _session_state(cfg, adm)
    except net.NetworkError as e:
        raise PluginError(E_ADMISSION, "backendai session network: %s" % e) from None
    with _locked(cfg):
        again = _re_add(cfile, adm, want, env["CNI_IFNAME"])
        # The container is recorded first: its DEL then removes whatever this ADD made, even if killed.
        system.write_file(cfile, system.json_dumps({"sid": want["sid"], "ifname": env["CNI_IFNAME"],
                                                    "alloc": adm.alloc_id, "group": adm.group}))
        os.makedirs(cfg.path("sessions", want["sid"] + ".d"), mode=0o700, exist_ok=True)
        system.touch(cfg.path("sessions", want["sid"] + ".d", cid))
        try:
            _ensure_session(cfg, want)
        except BaseException:
            _forget(cfg, cid, want["sid"])
            raise
    try:
        if again:  # the earlier attachment's address and veth go first (its netns, with the veth, is gone)
            _delegate("DEL", want["delegate"], env)
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


def _re_add(cfile: str, adm: "net.Admission", want: t.Mapping[str, t.Any], ifname: str) -> bool:
    """Under the lock: whether this ADD attaches again a container that is attached already (False: a first ADD).

    Nomad runs ADD again for the same allocation, with the same container ID (its alloc ID), when CHECK of an
    existing netns failed: it destroys the netns without DEL and makes it anew (``client/allocrunner/
    network_hook.go``, ``ErrCNICheckFailed``). That is admitted and made anew, the earlier attachment's address
    released first; anything else attached under the ID is a conflict."""
    member = system.read_json(cfile)
    if not isinstance(member, dict):
        return False
    if adm.alloc_id and member.get("alloc") == adm.alloc_id and member.get("sid") == want["sid"] \
            and member.get("ifname", ifname) == ifname:
        return True
    raise PluginError(E_CONFLICT, "container %s is already attached (DEL it first)" % os.path.basename(cfile)[:-5])


def _forget(cfg: Config, cid: str, sid: str) -> None:
    """Under the lock: the container goes; with the session's last container, the session goes."""
    system.unlink(cfg.path("sessions", sid + ".d", cid))
    system.remove_file(_container_file(cfg, cid))
    if not _members(cfg, sid):
        _remove_session(cfg, sid)


def cmd_del(cfg: Config, env: t.Mapping[str, str]) -> None:
    cid = env.get("CNI_CONTAINERID", "")
    cfile = _container_file(cfg, cid)
    member = system.read_json(cfile)
    if not isinstance(member, dict):  # never added here, already deleted, or its ADD killed before the record
        if system.temp_files(cfile):  # only then: an unknown container's DEL changes nothing on the agent
            with _locked(cfg):
                system.remove_file(cfile)
        return  # DEL is idempotent
    if not net._is_uuid(str(member.get("sid"))):
        raise PluginError(E_SYSTEM, "the state record of container %s on this agent names no session ID (%r): refused "
                          "to act on it" % (cid, member.get("sid")))
    st = _session_record(cfg, member["sid"])
    if st is not None:
        denv = dict(env)
        if not denv.get("CNI_IFNAME"):
            denv["CNI_IFNAME"] = member.get("ifname", "eth0")
        _delegate("DEL", st["delegate"], denv)
    with _locked(cfg):
        _forget(cfg, cid, member["sid"])


def cmd_check(cfg: Config, env: t.Mapping[str, str], prev: t.Optional[t.Mapping[str, t.Any]]) -> None:
    adm = _admission(cfg, env)[0]
    member = system.read_json(_container_file(cfg, env.get("CNI_CONTAINERID", "")))
    if not isinstance(member, dict) or member.get("sid") != adm.params.session_id:
        raise PluginError(E_CONFLICT, "container %s is not attached to session %s on this agent"
                          % (env.get("CNI_CONTAINERID"), adm.params.session_id))
    st = _session_record(cfg, adm.params.session_id)
    if st is None:
        raise PluginError(E_SYSTEM, "session %s has no network on this agent" % adm.params.session_id)
    if adm.table is not None and st.get("table") != adm.table.digest:
        raise PluginError(E_CONFLICT, "session %s is on this agent with another agent table than its args sign"
                          % adm.params.session_id)
    links = {link["ifname"] for link in system.json_loads(system.run(["ip", "-j", "link", "show"]).stdout.decode() or "[]")}
    names = [st.get("bridge")] + ([st.get("vxlan")] if st.get("peers") else [])
    if st.get("encryption") == "wireguard":  # e.g. its wireguard-go was killed
        names.append(cfg.wg_interface)
    for name in names:
        if name not in links:
            raise PluginError(E_SYSTEM, "link %s of session %s is missing on this agent" % (name, adm.params.session_id))
    if prev is None:
        raise PluginError(E_CONFIG, "CHECK needs prevResult")
    _delegate("CHECK", st["delegate"], env, prev)


def _emit(text: str) -> None:
    """The plugin's result or error on stdout, as the CNI spec says."""
    sys.stdout.write(text + "\n")


def main() -> int:
    env = dict(os.environ)
    command = env.get("CNI_COMMAND", "")
    version = net.CNI_VERSION
    try:
        if command == "VERSION":
            _emit(system.json_dumps({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}))
            return 0
        if not command:
            sys.stderr.write(ABOUT + "\n")
            return 0
        try:
            conf = system.json_loads(sys.stdin.read())
        except ValueError as e:
            raise PluginError(E_CONFIG, "the network config on stdin is not JSON: %s" % e) from None
        version = str(conf.get("cniVersion", version))
        cfg = Config(conf)
        if command == "ADD":
            result = cmd_add(cfg, env)
            result["cniVersion"] = version
            _emit(system.json_dumps(result))
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
        _emit(system.json_dumps({"cniVersion": version, "code": e.code, "msg": e.msg, "details": e.details}))
        return 1
    except OSError as e:
        _emit(system.json_dumps({"cniVersion": version, "code": E_SYSTEM, "msg": "backendai plugin: %s" % e, "details": ""}))
        return 1


# ---------------------------------------------------------------------------- installing it

SHIM = """#!/usr/bin/python3 -IS
# backendai.cluster session network CNI plugin (see %(lib)s/_cni_plugin.py)
import sys
sys.path.insert(0, %(lib)r)
import _cni_plugin
sys.exit(_cni_plugin.main())
"""


#: What an installation holds besides the shim (the overlay_agent role's ``overlay_agent_plugin_files``).
PLUGIN_MODULES = ("_session_network.py", "_cni_system.py", "_cni_nomad.py", "_cni_plugin.py")


def plugin_files(lib_dir: str, bin_dir: str) -> t.Dict[str, t.Tuple[str, int]]:
    """path -> (text, mode) of an installation: the three modules in ``lib_dir``, the executable in ``bin_dir``."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in PLUGIN_MODULES:
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
