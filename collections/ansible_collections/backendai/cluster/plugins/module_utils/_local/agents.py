# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Local agents: several agent "hosts" on this machine, for multi-node sessions of the local runtime.

Public API::

    create_agents(agents, state_root, fabric="local", underlay_subnet=..., underlay_mtu=1500) -> dict
    destroy_agents(state_root, fabric="local", force=False) -> dict

Each agent is a network namespace with its own address on an underlay: a bridge (``ul0``) inside
a namespace of its own, the agents' ``eth0`` being veth peers of its ports. Nothing is created in
the host's namespace. A session's containers on an agent are namespaces behind it: the CNI
plugins run inside the agent's namespace (``CNI_NETNS`` is the container's), and the session's
VXLAN devices in the agents' namespaces join them across agents (see ``_local.agent_network``).

The result lists the agents as the session modules take them (``{name, cpu, memory, gpu,
datacenter}``) plus a ``local`` mapping (namespace, underlay address and MTU, CNI config dir)
that the local backend needs. Every side effect is journaled before it is made (``journal`` in
``<state_root>/<fabric>/``), so ``destroy_agents`` also cleans up after a killed ``create_agents``.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_AGENTS_ROOT
from ansible_collections.backendai.cluster.plugins.module_utils._local import agent_network as _local_network
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import LOCAL_AGENT_NAME, delete_netns, netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.run import ip_batch, run
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    Journal,
    LocalRuntimeError,
    flocked,
    read_json,
)

DEFAULT_FABRIC = "local"
UNDERLAY_SUBNET = "10.230.0.0/24"
UNDERLAY_MTU = 1500
UNDERLAY_BRIDGE = "ul0"
AGENTS_FILE = "agents.json"
_FABRIC_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def fabric_dir(state_root: str, fabric: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(state_root)), fabric)


def _digest(state_dir: str) -> str:
    return hashlib.sha256(state_dir.encode()).hexdigest()[:6]


def namespaces(state_dir: str, names: t.List[str]) -> t.Dict[str, str]:
    """Network namespace names: ``""`` -> the underlay, agent name -> the agent."""
    d = _digest(state_dir)
    out = {"": "bai-ul-" + d}
    out.update({n: "bai-ag-%s-%s" % (d, n) for n in names})
    return out


def _validate(agents: t.Any, underlay_subnet: str, underlay_mtu: t.Any) -> t.Dict[str, t.Any]:
    def fail(msg: str) -> LocalRuntimeError:
        return LocalRuntimeError("invalid local agents: " + msg)

    if not isinstance(agents, list) or not agents:
        raise fail("agents must be a non-empty list of {name, cpu, memory, gpu, datacenter}")
    try:
        net = ipaddress.IPv4Network(underlay_subnet)
    except ValueError as e:
        raise fail("underlay_subnet: %s" % e) from None
    hosts = list(net.hosts())
    if len(agents) > len(hosts):
        raise fail("%d agents do not fit in the underlay subnet %s" % (len(agents), net))
    if isinstance(underlay_mtu, bool) or not isinstance(underlay_mtu, int) or not 1280 <= underlay_mtu <= 65535:
        raise fail("underlay_mtu must be an integer from 1280 to 65535, got %r" % (underlay_mtu,))
    out = []
    seen: t.Set[str] = set()
    for i, a in enumerate(agents):
        if not isinstance(a, dict):
            raise fail("agents[%d] must be a mapping" % i)
        name = a.get("name")
        if not isinstance(name, str) or not LOCAL_AGENT_NAME.match(name):
            raise fail("agents[%d].name must match [a-z][a-z0-9-]{0,30}, got %r" % (i, name))
        if name in seen:
            raise fail("agent %s is listed twice" % name)
        seen.add(name)
        item = {"name": name}
        for key, default in (("cpu", None), ("memory", None), ("gpu", 0)):
            value = a.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail("agents[%d].%s must be an integer >= 0, got %r" % (i, key, value))
            item[key] = value
        dc = a.get("datacenter", "dc1")
        if not isinstance(dc, str) or not dc:
            raise fail("agents[%d].datacenter must be a non-empty string" % i)
        item["datacenter"] = dc
        item["underlay_ip"] = str(hosts[i])
        out.append(item)
    return {"underlay_subnet": str(net), "underlay_mtu": underlay_mtu, "agents": out}


def _listing(state_dir: str, fabric: str, desired: t.Dict[str, t.Any]) -> t.List[t.Dict[str, t.Any]]:
    ns = namespaces(state_dir, [a["name"] for a in desired["agents"]])
    return [{"name": a["name"], "cpu": a["cpu"], "memory": a["memory"], "gpu": a["gpu"], "datacenter": a["datacenter"],
             "local": {"fabric": fabric, "state_dir": state_dir, "netns": ns[a["name"]], "underlay_ip": a["underlay_ip"],
                       "underlay_mtu": desired["underlay_mtu"],
                       "cni_config_dir": os.path.join(state_dir, "cni", a["name"])}}
            for a in desired["agents"]]


def sessions_on(state_dir: str) -> t.List[str]:
    """The sessions (their IDs) whose network is on an agent of this fabric, as its plugin records them."""
    return sorted({os.path.basename(p)[:-len(".json")]
                   for p in glob.glob(os.path.join(state_dir, "state", "*", "sessions", "*.json"))})


def _healthy(state_dir: str, desired: t.Dict[str, t.Any]) -> bool:
    ns = namespaces(state_dir, [a["name"] for a in desired["agents"]])
    return all(os.path.exists(netns_path(n)) for n in ns.values())


def create_agents(agents: t.Any, state_root: str = DEFAULT_AGENTS_ROOT, fabric: str = DEFAULT_FABRIC,
                  underlay_subnet: str = UNDERLAY_SUBNET, underlay_mtu: t.Any = UNDERLAY_MTU,
                  check_mode: bool = False) -> t.Dict[str, t.Any]:
    """Make the agents (idempotent: the same definition on healthy agents changes nothing)."""
    if not isinstance(fabric, str) or not _FABRIC_RE.match(fabric):
        raise LocalRuntimeError("invalid local agents name %r: 1-32 letters, digits, '-' or '_'" % (fabric,))
    desired = _validate(agents, underlay_subnet, underlay_mtu)
    if os.geteuid() != 0:
        raise LocalRuntimeError("local agents need root (they are network namespaces); run with become: true or sudo")
    state_dir = fabric_dir(state_root, fabric)
    current = read_json(os.path.join(state_dir, AGENTS_FILE))
    if current == desired and _healthy(state_dir, desired):
        return {"changed": False, "agents": _listing(state_dir, fabric, desired), "state_dir": state_dir}
    if check_mode:
        return {"changed": True, "agents": _listing(state_dir, fabric, desired), "state_dir": state_dir}
    if os.path.isdir(state_dir):
        if current is not None and current != desired and sessions_on(state_dir):
            raise LocalRuntimeError("local agents %s exist with another definition and carry sessions (%s); destroy "
                                    "those sessions first" % (fabric, ", ".join(sessions_on(state_dir))))
        destroy_agents(state_root, fabric, force=True)
    os.makedirs(os.path.dirname(state_dir), mode=0o700, exist_ok=True)
    os.mkdir(state_dir, 0o700)
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        journal = Journal(os.path.join(state_dir, "journal"))
        try:
            _build(state_dir, desired, journal)
        except BaseException:
            journal.close()
            _teardown(state_dir)
            raise
        journal.close()
    finally:
        os.close(fd)
    return {"changed": True, "agents": _listing(state_dir, fabric, desired), "state_dir": state_dir}


def _build(state_dir: str, desired: t.Dict[str, t.Any], journal: Journal) -> None:
    names = [a["name"] for a in desired["agents"]]
    ns = namespaces(state_dir, names)
    taken = [n for n in ns.values() if os.path.exists(netns_path(n))]
    if taken:
        raise LocalRuntimeError("network namespace %s already exists" % ", ".join(taken))
    journal.record("netns", names=list(ns.values()))
    ip_batch(["netns add %s" % n for n in ns.values()], what="ip netns add")
    mtu = desired["underlay_mtu"]
    prefix = ipaddress.IPv4Network(desired["underlay_subnet"]).prefixlen
    lines = ["link set lo up", "link add %s mtu %d type bridge" % (UNDERLAY_BRIDGE, mtu), "link set %s up" % UNDERLAY_BRIDGE]
    for i, name in enumerate(names):
        lines += ["link add p%d mtu %d type veth peer name eth0 mtu %d netns %s" % (i, mtu, mtu, ns[name]),
                  "link set p%d master %s up" % (i, UNDERLAY_BRIDGE)]
    ip_batch(lines, netns=ns[""])
    for a in desired["agents"]:
        ip_batch(["link set lo up", "addr add %s/%d dev eth0" % (a["underlay_ip"], prefix), "link set eth0 up"],
                 netns=ns[a["name"]])
        # inside the agent's own namespace (as the role sets it on a Nomad client): egress is routed
        run(["ip", "netns", "exec", ns[a["name"]], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    # each agent's WireGuard interface, made by its plugin with the first encrypted session and removed here
    journal.record("wireguard", interfaces={ns[n]: _local_network.wireguard_interface(state_dir, n) for n in names})
    _local_network.install(state_dir, [(a["name"], a["underlay_ip"], mtu) for a in desired["agents"]],
                           egress=True, uplinks=["eth0"], lock=False)  # _build runs under the fabric's lock
    write_file(os.path.join(state_dir, AGENTS_FILE), json.dumps(desired, indent=1, sort_keys=True), durable=True)


def _teardown(state_dir: str) -> t.List[str]:
    errors: t.List[str] = []
    for entry in reversed(Journal.replay(os.path.join(state_dir, "journal"))):
        if entry["op"] == "wireguard":
            errors += remove_wireguard(entry["interfaces"])
        elif entry["op"] == "netns":
            errors += delete_netns(entry["names"])
    if not errors:
        shutil.rmtree(state_dir, ignore_errors=True)
    return errors


WIREGUARD_RUN_DIR = "/var/run/wireguard"


def wireguard_processes(interface: str) -> t.List[int]:
    """The wireguard-go processes serving ``interface`` (its command line is ``wireguard-go <interface>``)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if len(argv) >= 2 and os.path.basename(argv[0]) == b"wireguard-go" and argv[-2:] in (
                    [interface.encode(), b""], [interface.encode()]):
                out.append(int(pid))
    return out


def remove_wireguard(interfaces: t.Mapping[str, str]) -> t.List[str]:
    """Each agent's WireGuard interface (netns -> name) goes: deleting the link ends its wireguard-go, which removes
    its UAPI socket; a wireguard-go left (its namespace already deleted: the process keeps it alive) is ended, and
    a socket left by a killed one removed."""
    errors = []
    for netns, name in interfaces.items():
        if os.path.exists(netns_path(netns)):
            run(["ip", "-n", netns, "link", "delete", name], check=False)
        deadline = time.monotonic() + 1.0
        while wireguard_processes(name) and time.monotonic() < deadline:
            for pid in wireguard_processes(name):  # (SIGTERM: it removes its socket as it ends)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            time.sleep(0.02)
        if wireguard_processes(name):
            errors.append("wireguard-go of %s (pid %s) does not end" % (name, ", ".join(map(str, wireguard_processes(name)))))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(WIREGUARD_RUN_DIR, name + ".sock"))
    return errors


def destroy_agents(state_root: str = DEFAULT_AGENTS_ROOT, fabric: str = DEFAULT_FABRIC, force: bool = False,
                   check_mode: bool = False) -> t.Dict[str, t.Any]:
    """Remove the agents (idempotent). Refused while sessions are on them, unless ``force``."""
    if not isinstance(fabric, str) or not _FABRIC_RE.match(fabric):
        raise LocalRuntimeError("invalid local agents name %r" % (fabric,))
    state_dir = fabric_dir(state_root, fabric)
    if not os.path.isdir(state_dir):
        return {"changed": False, "state_dir": state_dir}
    if os.geteuid() != 0:
        raise LocalRuntimeError("local agents need root (they are network namespaces); run with become: true or sudo")
    with flocked(state_dir):  # (sessions install their CNI configs under this lock)
        busy = sessions_on(state_dir)
        if busy and not force:
            raise LocalRuntimeError("the local agents %s still carry sessions (CNI networks %s); destroy those "
                                    "sessions first" % (fabric, ", ".join(busy)))
        if check_mode:
            return {"changed": True, "state_dir": state_dir}
        errors = _teardown(state_dir)
    if errors:
        raise LocalRuntimeError("destroy of the local agents %s incomplete (run it again): %s" % (fabric, "; ".join(errors)))
    return {"changed": True, "state_dir": state_dir}
