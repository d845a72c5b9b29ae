# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The network of a local session whose containers sit behind local agents (``_local_agents``).

What a Nomad agent prepared by the ``agent`` role does, done by the local runtime on agents that
are network namespaces of this machine:

1. on each agent the plan uses: the session's bridge, a VXLAN device in it that floods to the
   other agents of the session (``_overlay``: one VNI per session, MTU = underlay - 50), and the
   session's CNI config (``<cni_config_dir>/<network>.conflist``, the agent's block of the session
   subnet for host-local IPAM, no gateway: the overlay is a private layer-2 network);
2. every container joined to it by the real CNI plugins run *inside the agent's namespace*
   (``CNI_NETNS`` is the container's), reading that conflist as a CNI runtime does.

A session on one agent (the plan's bridge network) gets the same bridge without a VXLAN device.
Every step is journaled before it is made; ``network_down`` and ``overlay_down`` undo the two
journal records, also for agents whose namespace is already gone.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.backendai.cluster.plugins.module_utils._local_cni import (
    Attachment,
    cni_add,
    cni_del,
    result_ipv4,
)
from ansible_collections.backendai.cluster.plugins.module_utils._local_netns import netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local_state import (
    Journal,
    LocalRuntimeError,
    SessionPaths,
    flocked,
    owner_env,
)
from ansible_collections.backendai.cluster.plugins.module_utils._overlay import (
    VNI_BASE,
    VNI_MAX,
    OverlayError,
    conflist_file,
    derive_vni,
    plan_overlay,
    render_conflist,
)
from ansible_collections.backendai.cluster.plugins.module_utils._overlay_apply import (
    AgentHost,
    apply_overlay,
    remove_overlay,
)

CNI_WORKERS = 8
_AGENT_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_AGENT_KEYS = ("netns", "underlay_ip", "underlay_mtu", "cni_config_dir", "state_dir")


def validate_agents(raw: Any, used: list[str]) -> dict[str, dict[str, Any]]:
    """The ``agents`` of a session dict: name -> its ``local`` mapping (see ``_local_agents``)."""
    if not isinstance(raw, dict):
        raise LocalRuntimeError("invalid session: agents must map agent names to local agents")
    out = {}
    for name in used:
        info = raw.get(name)
        if not isinstance(info, dict):
            raise LocalRuntimeError("invalid session: container placed on agent %r, which is not a local agent" % (name,))
        if not _AGENT_RE.match(name) or any(k not in info for k in _AGENT_KEYS):
            raise LocalRuntimeError("invalid session: agent %r needs %s (make the agents with local_agents)"
                                    % (name, ", ".join(_AGENT_KEYS)))
        try:
            ipaddress.IPv4Address(str(info["underlay_ip"]))
        except ValueError:
            raise LocalRuntimeError("invalid session: agent %s has no IPv4 underlay address" % name) from None
        if not os.path.exists(netns_path(str(info["netns"]))):
            raise LocalRuntimeError("local agent %s is not running (network namespace %s missing); create the agents "
                                    "with playbooks/local_agents.yml" % (name, info["netns"]))
        out[name] = {k: info[k] for k in _AGENT_KEYS}
    return out


def _free_vni(network: str, hosts: list[AgentHost]) -> int:
    """The network's derived VNI, or the next one that no VXLAN device on these agents uses."""
    used = set()
    for host in hosts:
        used |= {int(v["vni"]) for v in host.links().values() if v["kind"] == "vxlan" and v["vni"] is not None}
    vni = derive_vni(network)
    while vni in used:
        vni = vni + 1 if vni < VNI_MAX else VNI_BASE
    return vni


def bring_up(spec: dict[str, Any], paths: SessionPaths, names: dict[str, Any], subnet: ipaddress.IPv4Network,
             journal: Journal) -> dict[str, str]:
    """Overlay on every agent of the session, then CNI ADD of every container; returns the addresses."""
    agents: dict[str, dict[str, Any]] = spec["agents"]
    host_agent = {c["hostname"]: c["agent"] for c in spec["containers"]}
    order = list(dict.fromkeys(host_agent.values()))
    counts = {a: sum(1 for x in host_agent.values() if x == a) for a in order}
    network = names["network"]
    hosts = {a: AgentHost(agents[a]["netns"], env=owner_env(paths.root)) for a in order}
    netconfs: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as locks:
        for state_dir in sorted({agents[a]["state_dir"] for a in order}):  # VNIs are chosen under the agents' lock
            if os.path.isdir(state_dir):
                locks.enter_context(flocked(state_dir))
        try:
            layout = plan_overlay(network, order, {a: agents[a]["underlay_ip"] for a in order},
                                  underlay_mtu=min(int(agents[a]["underlay_mtu"]) for a in order), subnet=str(subnet),
                                  vni=_free_vni(network, list(hosts.values())), egress=False,
                                  names=(names["bridge"], names["vxlan"]), counts=counts)
        except OverlayError as e:
            raise LocalRuntimeError(str(e)) from None
        for a in order:
            ov = layout[a]
            conflist = os.path.join(agents[a]["cni_config_dir"], conflist_file(network))
            netconfs[a] = render_conflist(ov, ipam_data_dir=os.path.join(paths.ipam_dir, a))
            journal.record("overlay", agent=a, netns=agents[a]["netns"], network=network, bridge=ov.bridge,
                           vxlan=ov.vxlan, conflist=conflist)
            try:
                apply_overlay(ov, hosts[a], conflist, netconfs[a])
            except OverlayError as e:
                raise LocalRuntimeError("overlay on agent %s: %s" % (a, e)) from None
    hostnames = [c["hostname"] for c in spec["containers"]]
    journal.record("agent_network", hosts=hostnames, netns=[names["netns"][h] for h in hostnames], agents=host_agent,
                   agent_netns={a: agents[a]["netns"] for a in order}, netconfs=netconfs)

    def attach(host: str) -> str:
        ns = names["netns"][host]
        agent = host_agent[host]
        # the CNI runtime reads the agent's installed config, as Nomad does
        with open(os.path.join(agents[agent]["cni_config_dir"], conflist_file(network)), encoding="utf-8") as f:
            netconf = json.load(f)
        att = Attachment(ns, netns_path(ns), paths.root, agent_netns=netns_path(agents[agent]["netns"]))
        return result_ipv4(cni_add(netconf, att, paths.cni_cache(host)))

    with ThreadPoolExecutor(max_workers=max(1, min(CNI_WORKERS, len(hostnames)))) as pool:
        return dict(zip(hostnames, pool.map(attach, hostnames)))


def network_down(paths: SessionPaths, entry: dict[str, Any]) -> list[str]:
    """CNI DEL of every container, in its agent's namespace (skipped for an agent that is gone:
    its end of the veth went with it, and the IPAM leases are in the session's state dir)."""
    def detach(pair: tuple[str, str]) -> list[str]:
        host, ns = pair
        agent = entry["agents"][host]
        agent_ns = netns_path(entry["agent_netns"][agent])
        if not os.path.exists(agent_ns):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(paths.cni_cache(host))
            return []
        att = Attachment(ns, netns_path(ns), paths.root, agent_netns=agent_ns)
        return cni_del(entry["netconfs"][agent], att, paths.cni_cache(host))

    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=min(CNI_WORKERS, max(1, len(entry["hosts"])))) as pool:
        for errs in pool.map(detach, zip(entry["hosts"], entry["netns"])):
            errors += errs
    return errors


def overlay_down(paths: SessionPaths, entry: dict[str, Any]) -> list[str]:
    """Remove the session's CNI config, bridge and VXLAN device from one agent."""
    errors = []
    if os.path.exists(netns_path(entry["netns"])):
        try:
            remove_overlay(entry["network"], entry["bridge"], entry["vxlan"], AgentHost(entry["netns"], owner_env(paths.root)),
                           conflist_path=entry["conflist"], egress=False)
        except OverlayError as e:
            errors.append("overlay on agent %s: %s" % (entry["agent"], e))
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry["conflist"])
    return errors
