# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The network of a local session: the same ``backendai`` CNI plugin and config a Nomad agent has.

An *agent* here is either this machine (a session without local agents: ``host_agent()``) or a
local agent, a network namespace made by ``_local_agents`` (``fabric_agent()``). Each has what
the ``overlay_agent`` role installs on a Nomad client: the plugin (``_cni_plugin``), one static
``backendai.conflist``, its own agent key (``keys/<agent>.key``, derived from the cluster key
``network.key`` that this machine, the control node here, holds), and the plugin's state dir. The
plugin's config says ``"identity": "local"``: there is no Nomad to ask about an allocation, the
local runtime is its own authority and builds CNI_ARGS itself. A session:

1. claims a *slot* (its VNI and subnet, unique among the sessions of those agents) with an
   exclusive create of ``<slots>/<n>``, the analogue of the check-and-set claim in Nomad Variables;
2. signs each container's network parameters with its agent's key (``_session_network.job_args``
   with ``signing_key(cluster key, agent)``);
3. runs CNI ADD of each container through the agent's conflist, with ``CNI_ARGS`` built exactly as
   Nomad's client builds them (``IgnoreUnknown``, the job's args, then ``NOMAD_*``) and, for a
   local agent, inside the agent's namespace (``CNI_NETNS`` is the container's).

Teardown is CNI DEL of each container (no CNI_ARGS, as Nomad calls it): the plugin removes the
session's bridge, VXLAN device, rules and IPAM data from an agent with its last container there.
Then the slot is released. Every step is journaled before it is made.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import ipaddress
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._network._cni_plugin import plugin_files
from ansible_collections.backendai.cluster.plugins.module_utils._files import ensure_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (
    CNI_PATH,
    Attachment,
    cni_add,
    cni_del,
    result_ipv4,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    Journal,
    LocalRuntimeError,
    SessionPaths,
    flocked,
    read_json,
)

if TYPE_CHECKING:  # local_agents installs agents through this module: it loads no planning code
    from ansible_collections.backendai.cluster.plugins.module_utils._local.session import LocalSession

#: This machine as an agent (sessions without local agents). Under /run: like the links it
#: describes, it does not outlive a reboot.
HOST_AGENT_DIR = "/run/backendai-cluster/agent"
HOST_UNDERLAY_IP = "127.0.0.1"  # a session on one agent has no VXLAN: the address only names the agent
LOCAL_REGION = "local"
LOCAL_NAMESPACE = "local"
CNI_WORKERS = 8


@dataclass(frozen=True)
class LocalAgent:
    """One agent's installation of the session network plugin."""

    name: str
    netns: str  # "" = this machine's namespace
    root: str   # bin/, lib/, network.key, keys/, slots/ (shared by the agents of a fabric)
    conflist: str
    underlay_ip: str
    underlay_mtu: int

    @property
    def cni_path(self) -> str:
        return os.path.join(self.root, "bin") + os.pathsep + CNI_PATH

    @property
    def key_file(self) -> str:
        """The cluster key (this machine is the local agents' control node)."""
        return os.path.join(self.root, "network.key")

    @property
    def agent_key_file(self) -> str:
        """The only key the agent's plugin reads."""
        return agent_key_file(self.root, self.name)

    @property
    def slots_dir(self) -> str:
        return os.path.join(self.root, "slots")


def agent_key_file(root: str, name: str) -> str:
    return os.path.join(root, "keys", name + ".key")


def wireguard_interface(root: str, name: str) -> str:
    """A local agent's WireGuard interface: a name no other agent on this machine has (wireguard-go's UAPI socket,
    ``/var/run/wireguard/<name>.sock``, is in one directory for every network namespace)."""
    return "baiwg" + hashlib.sha256(("%s\0%s" % (root, name)).encode()).hexdigest()[:10]


def install(root: str, agents: list[tuple[str, str, int]], egress: bool, uplinks: list[str],
            portmap: bool = True, lock: bool = True) -> dict[str, str]:
    """Install the plugin, the cluster key, and per agent its key and conflist under ``root`` (idempotent).

    ``agents``: (name, underlay IP, underlay MTU). Returns agent name -> conflist path.
    ``lock``: False when the caller holds ``root``'s lock already."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    with flocked(root) if lock else contextlib.nullcontext():
        for path, (text, mode) in plugin_files(os.path.join(root, "lib"), os.path.join(root, "bin")).items():
            ensure_file(path, text, mode=mode)
        key_file = os.path.join(root, "network.key")
        if not os.path.exists(key_file):
            ensure_file(key_file, net.generate_key() + "\n", mode=0o600)
        try:
            cluster_key = net.read_key(key_file)
        except net.NetworkError as e:
            raise LocalRuntimeError(str(e)) from None
        os.makedirs(os.path.join(root, "keys"), mode=0o700, exist_ok=True)
        out = {}
        for name, ip, mtu in agents:
            own_key = agent_key_file(root, name)
            ensure_file(own_key, net.derive_agent_key(cluster_key, name).hex() + "\n", mode=0o600)
            conf = net.static_conflist(ip, own_key, os.path.join(root, "state", name), egress=egress,
                                       uplinks=uplinks, underlay_mtu=mtu, portmap=portmap, agent_name=name,
                                       identity="local", wireguard_interface=wireguard_interface(root, name))
            path = os.path.join(root, "cni", name, net.NETWORK_NAME + ".conflist")
            ensure_file(path, json.dumps(conf, indent=2, sort_keys=True) + "\n")
            out[name] = path
        os.makedirs(os.path.join(root, "slots"), mode=0o700, exist_ok=True)
    return out


def host_agent(root: str = HOST_AGENT_DIR) -> LocalAgent:
    """This machine as the agent of sessions without local agents: no egress (that would mean turning on
    forwarding for the whole machine), main1 published by portmap on 127.0.0.1."""
    conflist = install(root, [("local", HOST_UNDERLAY_IP, net.DEFAULT_UNDERLAY_MTU)], egress=False, uplinks=[])["local"]
    return LocalAgent("local", "", root, conflist, HOST_UNDERLAY_IP, net.DEFAULT_UNDERLAY_MTU)


def fabric_agent(name: str, info: dict[str, Any]) -> LocalAgent:
    """A local agent made by ``_local_agents`` (its fabric installed the plugin when it made the agents)."""
    root = info["state_dir"]
    conflist = os.path.join(root, "cni", name, net.NETWORK_NAME + ".conflist")
    if not os.path.isfile(conflist):
        raise LocalRuntimeError("local agent %s has no session network config (%s); recreate the agents with "
                                "playbooks/local_agents.yml" % (name, conflist))
    return LocalAgent(name, info["netns"], root, conflist, str(info["underlay_ip"]), int(info["underlay_mtu"]))


# ---------------------------------------------------------------------------- slots

def _slot_owner(paths: SessionPaths, session_id: str) -> dict[str, str]:
    return {"state_dir": paths.root, "session_id": session_id}


def _stale(owner: Any) -> bool:
    """A claim whose session is gone (its state dir removed, or now another session's)."""
    if not isinstance(owner, dict) or not owner.get("state_dir"):
        return False
    info = read_json(os.path.join(owner["state_dir"], "session.json"))
    journal = os.path.join(owner["state_dir"], "journal")
    if isinstance(info, dict):
        return info.get("session_id") != owner.get("session_id")
    return not os.path.exists(journal)


def claim_slot(slots_dir: str, owner: dict[str, str], start: int, avoid: list[ipaddress.IPv4Network]) -> int:
    """The first free slot from ``start`` on, claimed by an exclusive create (stale claims are taken back)."""
    count = net.slot_count()
    for i in range(count):
        slot = (start + i) % count
        subnet = ipaddress.IPv4Network(net.slot_network(slot)[1])
        if any(subnet.overlaps(a) for a in avoid):
            continue
        path = os.path.join(slots_dir, str(slot))
        for _attempt in (0, 1):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
                if _stale(read_json(path)):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    continue
                break
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(owner, f)
            return slot
    raise LocalRuntimeError("no free session network slot left in %s (%d slots)" % (slots_dir, count))


def release_slots(slots_dir: str, owner: dict[str, str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(slots_dir):
            path = os.path.join(slots_dir, name)
            if read_json(path) == owner:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


# ---------------------------------------------------------------------------- up and down

def _alloc_id(session_id: str, host: str) -> str:
    return str(uuid.uuid5(uuid.UUID(session_id), host))


def bring_up(session: LocalSession, paths: SessionPaths, names: dict[str, Any], mappings: dict[str, list[dict[str, Any]]],
             host_networks: list[ipaddress.IPv4Network], journal: Journal) -> tuple[dict[str, str], dict[str, Any]]:
    """Claim a slot, then CNI ADD of every container; returns (addresses, network facts)."""
    host_agent_of = {c.hostname: c.agent for c in session.containers}
    order = list(dict.fromkeys(host_agent_of.values()))
    if session.agents:
        agents = {a: fabric_agent(a, session.agents[a]) for a in order}
    else:
        agents = {"local": host_agent()}
        order = ["local"]
        host_agent_of = {h: "local" for h in host_agent_of}
    owner = _slot_owner(paths, session.session_id)
    journal.record("slot", slots_dir=agents[order[0]].slots_dir, owner=owner)
    start = int(uuid.UUID(session.session_id)) % net.slot_count()
    slot = claim_slot(agents[order[0]].slots_dir, owner, start, host_networks if not session.agents else [])
    # imported here: local_agents (which installs agents through this module) loads no planning code at once
    from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import wireguard_peers
    try:
        cluster_key = net.read_key(agents[order[0]].key_file)
        encryption = session.underlay_encryption if len(order) > 1 else "none"
        prefix, wg_keys = wireguard_peers(cluster_key, order) if encryption == "wireguard" else ("", ())
        params = net.make_params(session.session_id, slot, [agents[a].underlay_ip for a in order],
                                 underlay_mtu=min(agents[a].underlay_mtu for a in order), encryption=encryption,
                                 wg_keys=wg_keys, tunnel_prefix=prefix)
        keys = {a: net.signing_key(cluster_key, a) for a in order}  # each group signed for its own agent
    except net.NetworkError as e:
        raise LocalRuntimeError(str(e)) from None
    hosts = session.hostnames
    journal.record("network", hosts=hosts, netns=[names["netns"][h] for h in hosts], mappings=mappings,
                   agents={h: {"name": host_agent_of[h], "netns": agents[host_agent_of[h]].netns,
                               "conflist": agents[host_agent_of[h]].conflist,
                               "cni_path": agents[host_agent_of[h]].cni_path} for h in hosts})

    # the CNI runtime reads each agent's installed config, as Nomad does (once per agent)
    netconfs = {a: _conflist(agents[a].conflist) for a in order}

    def attach(host: str) -> str:
        agent = agents[host_agent_of[host]]
        args = net.job_args(keys[agent.name], LOCAL_NAMESPACE, session.name, host, params)
        cni_args = net.nomad_cni_args(args, LOCAL_REGION, LOCAL_NAMESPACE, session.name, host,
                                      _alloc_id(session.session_id, host))
        att = _attachment(paths, names["netns"][host], agent.netns, agent.cni_path, mappings.get(host, []), cni_args)
        return result_ipv4(cni_add(netconfs[agent.name], att, paths.cni_cache(host)))

    with ThreadPoolExecutor(max_workers=max(1, min(CNI_WORKERS, len(hosts)))) as pool:
        addresses = dict(zip(hosts, pool.map(attach, hosts)))
    return addresses, {"subnet": params.subnet, "vni": params.vni, "spans": params.spans,
                       "underlay_encryption": params.encryption}


def _conflist(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _attachment(paths: SessionPaths, netns: str, agent_netns: str, cni_path: str,
                port_mappings: list[dict[str, Any]], cni_args: str = "") -> Attachment:
    """Container ``netns`` behind the agent in ``agent_netns`` ("" = this machine)."""
    return Attachment(netns, netns_path(netns), paths.root, port_mappings=list(port_mappings),
                      agent_netns=netns_path(agent_netns) if agent_netns else "", cni_args=cni_args,
                      cni_path=cni_path)


def network_down(paths: SessionPaths, entry: dict[str, Any]) -> list[str]:
    """CNI DEL of every container in its agent (skipped where the agent's namespace is gone: its
    links and rules went with it)."""
    def detach(pair: tuple[str, str]) -> list[str]:
        host, ns = pair
        agent = entry["agents"][host]
        if agent["netns"] and not os.path.exists(netns_path(agent["netns"])):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(paths.cni_cache(host))
            return []
        try:
            netconf = _conflist(agent["conflist"])
        except (OSError, ValueError) as e:
            return ["CNI DEL of %s: cannot read %s: %s" % (host, agent["conflist"], e)]
        att = _attachment(paths, ns, agent["netns"], agent["cni_path"], entry.get("mappings", {}).get(host, []))
        return cni_del(netconf, att, paths.cni_cache(host))

    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=min(CNI_WORKERS, max(1, len(entry["hosts"])))) as pool:
        for errs in pool.map(detach, zip(entry["hosts"], entry["netns"])):
            errors += errs
    return errors
