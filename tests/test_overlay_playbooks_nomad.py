# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad path of a multi-node session, for real on the agents' side: playbooks/create_session.yml and
destroy_session.yml against the Nomad API double, with three agents that are network namespaces of this
machine (local agents) as inventory hosts. The role backendai.cluster.overlay_agent runs on exactly the
agents of the plan (inside their namespaces: overlay_agent_netns) before the job is submitted; the real CNI
plugins then join two "tasks" on different agents through the installed conflist, as Nomad would; destroy
removes everything from every agent, also after a create whose job submission failed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import typing as t
import uuid

import pytest
import yaml

from module_helpers import ENV_VARS, NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import run_playbook, task_results

from ansible_collections.backendai.cluster.plugins.module_utils import _local_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local_cni import Attachment, cni_add, cni_del, result_ipv4
from ansible_collections.backendai.cluster.plugins.module_utils._overlay import (
    conflist_text,
    device_names,
    isolation_rule,
    plan_overlay,
    render_conflist,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"),
                                reason="needs root and the CNI plugins (scripts/setup)")

AGENTS = ["agent1", "agent2", "agent3"]
NETWORK = "backendai-ovl"


class Agents:
    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.root = os.path.join(tmp, "agents")
        made = _local_agents.create_agents([{"name": a, "cpu": 2000, "memory": 4096} for a in AGENTS], self.root)
        self.local = {a["name"]: a["local"] for a in made["agents"]}
        self.cni = {a: os.path.join(tmp, "cni", a) for a in AGENTS}
        self.ipam = {a: os.path.join(tmp, "ipam", a) for a in AGENTS}
        self.inventory = os.path.join(tmp, "inventory.yml")
        hosts = {a: {"backendai_underlay_ip": self.local[a]["underlay_ip"], "overlay_agent_netns": self.local[a]["netns"],
                     "overlay_agent_cni_config_dir": self.cni[a], "overlay_agent_ipam_data_dir": self.ipam[a]}
                 for a in AGENTS}
        conn = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        inventory = {"all": {"hosts": {"localhost": conn},
                             "children": {"agents": {"hosts": hosts, "vars": dict(conn, ansible_become=False,
                                                                                  overlay_agent_reload_nomad=False)}}}}
        with open(self.inventory, "w", encoding="utf-8") as f:
            yaml.safe_dump(inventory, f)

    def run(self, *argv: str, check: bool = False) -> t.List[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, check=check).stdout

    def links(self, agent: str) -> t.Set[str]:
        return {link["ifname"] for link in json.loads(self.run("ip", "-n", self.local[agent]["netns"], "-j", "link", "show"))}

    def has_rule(self, agent: str) -> bool:
        bridge = device_names(NETWORK)[0]
        return subprocess.run(["ip", "netns", "exec", self.local[agent]["netns"], "iptables", "-w", "-C", "FORWARD"]
                              + isolation_rule(bridge, NETWORK), capture_output=True).returncode == 0

    def assert_bare(self) -> None:
        for a in AGENTS:
            assert self.links(a) == {"lo", "eth0"}, (a, self.links(a))
            assert not self.has_rule(a)
            assert not os.path.exists(os.path.join(self.cni[a], NETWORK + ".conflist"))
            assert not os.path.exists(os.path.join(self.ipam[a], NETWORK))


@pytest.fixture
def agents(tmp_path: t.Any) -> t.Iterator[Agents]:
    made = Agents(str(tmp_path))
    try:
        yield made
    finally:
        _local_agents.destroy_agents(made.root, force=True)
        assert not [ns for ns in (made.local[a]["netns"] for a in AGENTS) if os.path.exists("/run/netns/" + ns)]


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    for a in AGENTS:
        # The double schedules a cni/<network> group only on nodes that fingerprint that network, as Nomad does;
        # a real client does once the role has installed the conflist and reloaded it (disabled here).
        double.add_node(a, cpu=2000, memory=4096, cni_networks=[NETWORK])
    return double


def play(agents: Agents, nomad: NomadAPIDouble, playbook: str, *extra: str, check: bool = False) -> subprocess.CompletedProcess:
    env = {var: "" for var in ENV_VARS}
    env.update(NOMAD_ADDR=nomad.url, NOMAD_TOKEN=NOMAD_TOKEN)
    session = {"name": "ovl", "image": "python:3.11-slim", "cluster_size": 6, "cluster_mode": "multi-node",
               "resources": {"cpu": 1000, "memory": 1024}}
    return run_playbook(playbook, "-i", agents.inventory, "-e", json.dumps({"session": session}),
                        "-e", "overlay_state_dir=" + os.path.join(agents.tmp, "overlays"), "-e", "wait_timeout=20", *extra,
                        env=env, check=check)


def changed(proc: subprocess.CompletedProcess) -> t.Dict[str, int]:
    return {host: s["changed"] for host, s in json.loads(proc.stdout)["stats"].items()}


def join(agents: Agents, agent: str, name: str) -> t.Tuple[Attachment, t.Dict[str, t.Any], str]:
    """What Nomad does for a task in network mode cni/<overlay>: CNI ADD with the agent's installed conflist."""
    with open(os.path.join(agents.cni[agent], NETWORK + ".conflist"), encoding="utf-8") as f:
        netconf = json.load(f)
    netconf["plugins"][1]["ipam"]["dataDir"] = agents.ipam[agent]  # (Nomad's default is /var/lib/cni/networks)
    subprocess.run(["ip", "netns", "add", name], check=True)
    att = Attachment(name, "/run/netns/" + name, agents.tmp, agent_netns="/run/netns/" + agents.local[agent]["netns"])
    return att, netconf, result_ipv4(cni_add(netconf, att, os.path.join(agents.tmp, name + ".json")))


def test_multinode_overlay_on_exactly_the_plan_agents_then_destroy(agents: Agents, nomad: NomadAPIDouble) -> None:
    nomad.add_node("agent4", cpu=100, memory=100)  # too small: not in the plan, never touched
    check = play(agents, nomad, "create_session.yml", check=True)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert nomad.stored_job("ovl") is None and not os.path.exists(os.path.join(agents.tmp, "overlays", "ovl.json"))
    agents.assert_bare()

    created = play(agents, nomad, "create_session.yml")
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    job = nomad.stored_job("ovl")
    assert job is not None
    assert {tg["Networks"][0]["Mode"] for tg in job["TaskGroups"]} == {"cni/" + NETWORK}
    with open(os.path.join(agents.tmp, "overlays", "ovl.json"), encoding="utf-8") as f:
        record = json.load(f)
    ips = {a: agents.local[a]["underlay_ip"] for a in AGENTS}
    assert record == {"network": NETWORK, "agents": AGENTS, "subnet": "", "underlay_ips": ips,
                      "counts": {a: 2 for a in AGENTS}}
    bridge, vxlan = device_names(NETWORK)
    layout = plan_overlay(NETWORK, AGENTS, ips, underlay_mtu=1500)
    for a in AGENTS:
        assert {bridge, vxlan} <= agents.links(a) and agents.has_rule(a)
        with open(os.path.join(agents.cni[a], NETWORK + ".conflist"), encoding="utf-8") as f:
            assert f.read() == conflist_text(render_conflist(layout[a]))
    again = play(agents, nomad, "create_session.yml")
    assert again.returncode == 0 and set(changed(again).values()) == {0}, changed(again)

    # two "tasks" on agents 1 and 3 join the overlay through the installed conflist and talk across agents
    joined = [join(agents, "agent1", "ovl-task-a-" + uuid.uuid4().hex[:6]),
              join(agents, "agent3", "ovl-task-b-" + uuid.uuid4().hex[:6])]
    try:
        for (_att, _conf, address), agent in zip(joined, ("agent1", "agent3")):
            rng = layout[agent].range  # the agent's own block of the session subnet
            assert ipaddress.IPv4Address(rng.start) <= ipaddress.IPv4Address(address) <= ipaddress.IPv4Address(rng.end)
        server = subprocess.Popen(["ip", "netns", "exec", joined[1][0].container_id, sys.executable, "-c",
                                   "import socket; s = socket.create_server(('0.0.0.0', 7777)); print('up', flush=True); "
                                   "c, _ = s.accept(); c.sendall(c.recv(100).upper())"], stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        client = subprocess.run(["ip", "netns", "exec", joined[0][0].container_id, sys.executable, "-c",
                                 "import socket; c = socket.create_connection(('%s', 7777), timeout=5); c.sendall(b'hi'); "
                                 "print(c.recv(100).decode())" % joined[1][2]], capture_output=True, text=True, timeout=30)
        assert client.stdout.strip() == "HI", client.stderr
        server.wait(timeout=10)
    finally:
        for att, netconf, _ip in joined:
            assert cni_del(netconf, att, os.path.join(agents.tmp, att.container_id + ".json")) == []
            subprocess.run(["ip", "netns", "delete", att.container_id], check=True)

    destroyed = play(agents, nomad, "destroy_session.yml")
    assert destroyed.returncode == 0, destroyed.stdout[-3000:] + destroyed.stderr[-3000:]
    assert nomad.stored_job("ovl") is None and not os.path.exists(os.path.join(agents.tmp, "overlays", "ovl.json"))
    agents.assert_bare()
    twice = play(agents, nomad, "destroy_session.yml")
    assert twice.returncode == 0 and set(changed(twice).values()) == {0}, changed(twice)


def test_destroy_after_a_create_whose_submission_failed(agents: Agents, nomad: NomadAPIDouble) -> None:
    nomad.fail_next("POST", "^/v1/jobs$", status=400, body="injected: job rejected", times=None)
    created = play(agents, nomad, "create_session.yml")
    assert created.returncode != 0
    assert "register job" in json.dumps(task_results(created)["Submit the session (the next task waits for its containers and shows what is pending)"])
    assert nomad.stored_job("ovl") is None
    assert all(device_names(NETWORK)[1] in agents.links(a) for a in AGENTS), "the overlay was set up before submitting"
    nomad.clear_faults()
    destroyed = play(agents, nomad, "destroy_session.yml")
    assert destroyed.returncode == 0, destroyed.stdout[-3000:] + destroyed.stderr[-3000:]
    agents.assert_bare()
    assert not os.path.exists(os.path.join(agents.tmp, "overlays", "ovl.json"))
