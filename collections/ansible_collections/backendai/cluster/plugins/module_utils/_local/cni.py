# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CNI plumbing of the local runtime: a CNI runtime for a conflist, as libcni (inside Nomad) is one.

The plugins of an agent's ``backendai.conflist`` (loopback, the session network plugin, portmap)
are executed directly with the CNI_* environment and the netconf on stdin, like libcni does:
ADD in list order, each plugin getting the previous result as ``prevResult``; the final
result is cached, and DEL runs the plugins in reverse order with that cached result as
``prevResult`` (without it the firewall plugin leaves its CNI-FORWARD rules behind).
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.backendai.cluster.plugins.module_utils._files import write_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.run import run
from ansible_collections.backendai.cluster.plugins.module_utils._network._cni_system import cni_error
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import (
    LocalRuntimeError,
    flocked,
    owner_env,
    read_json,
)

CNI_PATH = "/usr/lib/cni"
CNI_VERSION = "1.0.0"
PLUGINS = ("loopback", "backendai", "portmap")
REQUIRED_PLUGINS = ("loopback", "bridge", "host-local", "portmap")

# Chains shared by every user of these plugins on the host (Nomad included), and the only
# rules they hold when no container uses them; see prune_shared_chains().
_SHARED_SKELETON: dict[str, dict[str, set[str]]] = {
    "filter": {
        "CNI-FORWARD": {"CNI-ADMIN"},
        "CNI-ADMIN": set(),
        "CNI-ISOLATION-STAGE-1": {"RETURN"},
        "CNI-ISOLATION-STAGE-2": {"RETURN"},
    },
    "nat": {
        "CNI-HOSTPORT-DNAT": set(),
        "CNI-HOSTPORT-SETMARK": {"MARK"},
        "CNI-HOSTPORT-MASQ": {"MASQUERADE"},
    },
}
_ADDRESSING_FLAGS = {"-s", "--source", "-d", "--destination", "-i", "--in-interface",
                     "-o", "--out-interface", "--dport", "--dports", "--to-destination"}


@dataclass
class Attachment:
    """One container's attachment to the session network."""

    container_id: str
    netns_path: str
    owner: str  # the session's state dir, see owner_env()
    ifname: str = "eth0"
    port_mappings: list[dict[str, Any]] = field(default_factory=list)
    # The agent's network namespace the plugins run in (local agents, see _local_network); "" = this host's.
    agent_netns: str = ""
    # CNI_ARGS of ADD and CHECK (Nomad passes none on DEL), and the plugin search path.
    cni_args: str = ""
    cni_path: str = CNI_PATH


def _plugin_conf(netconf: dict[str, Any], plugin: dict[str, Any], att: Attachment,
                 prev: dict[str, Any] | None) -> dict[str, Any]:
    conf = dict(plugin)
    conf["cniVersion"] = netconf["cniVersion"]
    conf["name"] = netconf["name"]
    if prev is not None:
        conf["prevResult"] = prev
    if plugin.get("capabilities", {}).get("portMappings"):
        conf["runtimeConfig"] = {"portMappings": att.port_mappings}
    return conf


def find_plugin(cni_path: str, plugin_type: str) -> str:
    for d in cni_path.split(os.pathsep):
        if d and os.access(os.path.join(d, plugin_type), os.X_OK):
            return os.path.join(d, plugin_type)
    raise LocalRuntimeError("CNI plugin %s is not in %s" % (plugin_type, cni_path))


def _invoke(command: str, plugin: dict[str, Any], conf: dict[str, Any], att: Attachment) -> dict[str, Any] | None:
    env = dict(owner_env(att.owner), CNI_COMMAND=command, CNI_CONTAINERID=att.container_id,
               CNI_NETNS=att.netns_path, CNI_IFNAME=att.ifname, CNI_PATH=att.cni_path)
    if att.cni_args and command != "DEL":
        env["CNI_ARGS"] = att.cni_args
    argv = [find_plugin(att.cni_path, plugin["type"])]
    if att.agent_netns:
        argv = ["nsenter", "--net=" + att.agent_netns, "--"] + argv
    proc = run(argv, json.dumps(conf), env=env, check=False)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        raise LocalRuntimeError("CNI %s of plugin %s for %s failed: %s"
                                % (command, plugin["type"], att.container_id, cni_error(out, proc.stderr)))
    return json.loads(out) if out else None


def _plugins_for(netconf: dict[str, Any], att: Attachment) -> list[dict[str, Any]]:
    # portmap does nothing without mappings: only containers that publish a port run it.
    return [p for p in netconf["plugins"] if p["type"] != "portmap" or att.port_mappings]


def cni_add(netconf: dict[str, Any], att: Attachment, cache_path: str) -> dict[str, Any]:
    """ADD the container to the network; caches the result for DEL; returns it."""
    plugins = _plugins_for(netconf, att)
    prev: dict[str, Any] | None = None
    for plugin in plugins:
        prev = _invoke("ADD", plugin, _plugin_conf(netconf, plugin, att, prev), att)
    if prev is None:
        raise LocalRuntimeError("CNI ADD for %s returned no result" % att.container_id)
    write_file(cache_path, json.dumps({
        "containerId": att.container_id, "netns": att.netns_path, "ifname": att.ifname,
        "plugins": [p["type"] for p in plugins], "portMappings": att.port_mappings, "result": prev,
    }), mode=0o600)
    return prev


def cni_del(netconf: dict[str, Any], att: Attachment, cache_path: str) -> list[str]:
    """DEL the container from the network, plugins in reverse order; returns the errors.

    ``att.port_mappings`` must be those of the ADD (portmap's DEL needs them) unless the
    ADD's result was cached."""
    cache = read_json(cache_path)
    if isinstance(cache, dict) and isinstance(cache.get("result"), dict):
        prev: dict[str, Any] | None = cache["result"]
        types = list(cache.get("plugins") or PLUGINS)
        att.port_mappings = list(cache.get("portMappings") or [])
    else:  # ADD did not finish: the session network plugin finds the container in its own state
        prev = None
        types = [p["type"] for p in _plugins_for(netconf, att)]
    errors = []
    for plugin in reversed([p for p in netconf["plugins"] if p["type"] in types]):
        try:
            _invoke("DEL", plugin, _plugin_conf(netconf, plugin, att, prev), att)
        except LocalRuntimeError as e:
            errors.append(e.message)
    if not errors:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(cache_path)
    return errors


def result_ipv4(result: dict[str, Any]) -> str:
    for ip in result.get("ips", []):
        address = ipaddress.ip_interface(ip["address"])
        if address.version == 4:
            return str(address.ip)
    raise LocalRuntimeError("CNI result has no IPv4 address: %s" % json.dumps(result.get("ips")))


def _iptables_save(table: str) -> list[str]:
    return run(["iptables-save", "-t", table]).stdout.decode("utf-8", "replace").splitlines()


def _iptables_restore(table: str, commands: list[str]) -> None:
    if commands:
        script = "*%s\n%s\nCOMMIT\n" % (table, "\n".join(commands))
        proc = run(["iptables-restore", "--noflush"], script, check=False)
        if proc.returncode != 0:  # the script says which rule was refused
            raise LocalRuntimeError("iptables-restore failed: %s\n%s" % (proc.stderr.decode().strip(), script))


def _rules(lines: list[str]) -> tuple[set[str], list[tuple[str, list[str], str]]]:
    chains = {line[1:].split()[0] for line in lines if line.startswith(":")}
    rules = []
    for line in lines:
        if line.startswith("-A "):
            tokens = shlex.split(line)
            rules.append((tokens[1], tokens[2:], line))
    return chains, rules


def _target(tokens: list[str]) -> str:
    for flag in ("-j", "-g"):
        if flag in tokens:
            return tokens[tokens.index(flag) + 1]
    return ""


def prune_shared_chains() -> None:
    """Remove the plugins' shared chains (and the jumps to them) if they hold nothing but
    their skeleton, i.e. no container of any tool on this host uses them."""
    # Serialised with ADD phases (which recreate the chains) and with other prunes (two
    # concurrent ones could each see the other's rules and both leave the chains).
    with flocked(CNI_PATH):
        for table, skeleton in _SHARED_SKELETON.items():
            chains, rules = _rules(_iptables_save(table))
            if not _only_skeleton(skeleton, chains, [(c, t) for c, t, _line in rules]):
                continue
            present = [c for c in skeleton if c in chains]
            commands = ["-D " + line[3:] for chain, tokens, line in rules
                        if chain not in skeleton and _target(tokens) in skeleton]
            _iptables_restore(table, commands + ["-F " + c for c in present] + ["-X " + c for c in present])


def _only_skeleton(skeleton: dict[str, set[str]], chains: set[str], rules: list[tuple[str, list[str]]]) -> bool:
    if not any(c in chains for c in skeleton):
        return False
    for chain, tokens in rules:
        if chain in skeleton:
            if _target(tokens) not in skeleton[chain] or _ADDRESSING_FLAGS.intersection(tokens):
                return False
    return True
