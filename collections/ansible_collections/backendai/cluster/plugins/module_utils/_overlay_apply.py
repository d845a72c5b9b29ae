# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Applies a session overlay (``_overlay``) to an agent: links, flood entries, CNI config, isolation.

Shared by the ``backendai.cluster.overlay`` module (a real agent, run by the ``agent`` role) and
the local runtime (an agent that is a network namespace of this machine): ``AgentHost(netns)``
runs ``ip``, ``bridge`` and ``iptables`` on the agent, or inside the named network namespace.
Everything is read first and only the difference is applied, so a second run changes nothing;
with ``check_mode`` nothing is run and the commands that would be are returned.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._files import ensure_file
from ansible_collections.backendai.cluster.plugins.module_utils._overlay import (
    AgentOverlay,
    OverlayError,
    conflist_text,
    delete_commands,
    isolation_rule,
    observe,
    parse_flood,
    parse_links,
    plan_changes,
)

SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class AgentHost:
    """Runs the agent's networking commands, on this machine or in network namespace ``netns``."""

    def __init__(self, netns: str = "", env: t.Optional[t.Mapping[str, str]] = None) -> None:
        self.netns = netns
        self.env = dict(env or {"PATH": SANE_PATH})

    def run(self, argv: t.Sequence[str], stdin: str = "", check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=self.env, check=False)
        if check and proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip()
            raise OverlayError("%s failed: %s%s" % (" ".join(argv[:4]), detail, ("\n" + stdin) if stdin else ""))
        return proc

    def _tool(self, tool: str) -> t.List[str]:
        return [tool, "-n", self.netns] if self.netns else [tool]

    def links(self) -> t.Dict[str, t.Dict[str, t.Any]]:
        return parse_links(self.run(self._tool("ip") + ["-d", "-j", "link", "show"]).stdout.decode())

    def flood(self, vxlan: str) -> t.Tuple[str, ...]:
        return parse_flood(self.run(self._tool("bridge") + ["-j", "fdb", "show", "dev", vxlan]).stdout.decode(), vxlan)

    def addresses(self) -> t.List[t.Tuple[str, ipaddress.IPv4Interface]]:
        out = []
        for link in json.loads(self.run(self._tool("ip") + ["-j", "-4", "addr", "show"]).stdout.decode() or "[]"):
            for a in link.get("addr_info", []):
                out.append((link["ifname"], ipaddress.IPv4Interface("%s/%s" % (a["local"], a["prefixlen"]))))
        return out

    def link_of(self, address: str) -> t.Tuple[str, int]:
        """(name, MTU) of the link holding ``address`` (the underlay device)."""
        names = [name for name, iface in self.addresses() if str(iface.ip) == address]
        if not names:
            raise OverlayError("no interface on the agent%s has the underlay address %s"
                               % (" (netns %s)" % self.netns if self.netns else "", address))
        return names[0], int(self.links()[names[0]]["mtu"])

    def batch(self, tool: str, lines: t.Sequence[str]) -> None:
        if lines:
            self.run(self._tool(tool) + ["-batch", "-"], stdin="".join(line + "\n" for line in lines))

    def iptables(self, args: t.Sequence[str], check: bool = True) -> bool:
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return self.run(prefix + ["iptables", "-w"] + list(args), check=check).returncode == 0


def remove_path(path: str, check_mode: bool = False) -> bool:
    if not os.path.lexists(path):
        return False
    if not check_mode:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return True


def _check_subnet(ov: AgentOverlay, host: AgentHost) -> None:
    net = ipaddress.IPv4Network(ov.subnet)
    for name, iface in host.addresses():
        if name != ov.bridge and iface.network.overlaps(net):
            raise OverlayError("subnet %s of overlay %s overlaps %s on %s of agent %s; give the session another "
                               "subnet (overlay_subnet)" % (ov.subnet, ov.network, iface, name, ov.agent))


def apply_overlay(ov: AgentOverlay, host: AgentHost, conflist_path: str = "", conflist: t.Optional[t.Mapping[str, t.Any]] = None,
                  check_mode: bool = False) -> t.Dict[str, t.Any]:
    """Bring the agent to ``ov``: bridge, VXLAN device, flood entries, isolation rule (egress), CNI config."""
    if ov.egress:
        _check_subnet(ov, host)
    links = host.links()
    flood = host.flood(ov.vxlan) if ov.vxlan in links else ()
    changes = plan_changes(ov, observe(ov, links, flood))
    commands = changes.lines()
    if not check_mode:
        host.batch("ip", changes.ip)
        host.batch("bridge", changes.fdb)
    if ov.egress:
        rule = isolation_rule(ov.bridge, ov.network)
        if not host.iptables(["-C", "FORWARD"] + rule, check=False):
            commands.append("iptables -I FORWARD 1 " + " ".join(rule))
            if not check_mode:
                host.iptables(["-I", "FORWARD", "1"] + rule)
    changed = bool(commands)
    if conflist_path and conflist is not None:
        if ensure_file(conflist_path, conflist_text(conflist), check_mode):
            commands.append("write " + conflist_path)
            changed = True
    return {"changed": changed, "commands": commands}


def remove_overlay(network: str, bridge: str, vxlan: str, host: AgentHost, conflist_path: str = "",
                   ipam_dir: str = "", egress: bool = True, check_mode: bool = False) -> t.Dict[str, t.Any]:
    """Remove the session's overlay from the agent (idempotent): CNI config, links, isolation rule
    (``egress``: the agent routes), IPAM data."""
    commands = []
    if conflist_path and remove_path(conflist_path, check_mode):
        commands.append("remove " + conflist_path)
    lines = delete_commands(bridge, vxlan, host.links())
    if not check_mode:
        host.batch("ip", lines)
    commands += ["ip " + line for line in lines]
    rule = isolation_rule(bridge, network)
    while egress and host.iptables(["-C", "FORWARD"] + rule, check=False):
        commands.append("iptables -D FORWARD " + " ".join(rule))
        if check_mode:
            break
        host.iptables(["-D", "FORWARD"] + rule)
    if ipam_dir and remove_path(ipam_dir, check_mode):
        commands.append("remove " + ipam_dir)
    return {"changed": bool(commands), "commands": commands}
