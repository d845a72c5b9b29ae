"""Multi-node sessions of the local runtime: engine containers of the example image behind local agents, joined by
the session network.

Three local agents (network namespaces on a private underlay of MTU 1400) carry a 6-container
session that cannot fit on one of them, placed by the real planner through the local backend.
Checked: the spread and per-agent LOCAL_RANK, ssh by hostname between every pair across agents,
the session network's devices on each agent (the claimed VNI, a VXLAN device between tunnel
addresses over the agent's WireGuard interface, flood entries to exactly the other agents' tunnel
addresses, MTU 1400 - 80 - 70, the agent's address block), the DF bit and a 20 MB transfer without any
fragmentation on the underlay, mpirun over ssh and a torch-style env:// rendezvous with one rank per
container as the session user, their traffic carried by the agents' WireGuard interfaces (counters grow),
isolation from a second session on the same agents, and that
destroy (also after a creator killed half-way) leaves nothing on any agent.
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import typing as t
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import local_backend
from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents
import local_session_dict  # tests/support/local_session_dict.py: a session given as a dict, brought up by the runtime
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._local import session as local_session
from ansible_collections.backendai.cluster.plugins.module_utils._local.agent_network import wireguard_interface
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair, wireguard_peers

from conftest import PROBE
from rendezvous import RENDEZVOUS

UNDERLAY_MTU = 1400
OVERLAY_MTU = UNDERLAY_MTU - 80 - 70  # WireGuard (IPv6 outer), then VXLAN over the IPv6 tunnel addresses
HOSTS = ["main1", "sub1", "sub2", "sub3", "sub4", "sub5"]
AGENT_OF = {"main1": "agent1", "sub1": "agent1", "sub2": "agent2", "sub3": "agent2", "sub4": "agent3", "sub5": "agent3"}


def spec(name: str, size: int = 6, cpu: int = 1000, **extra: t.Any) -> dict[str, t.Any]:
    out = {"name": name, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": size, "cluster_mode": "multi-node",
           "resources": {"cpu": cpu, "memory": 512}}
    out.update(extra)
    return out


class Fabric:
    def __init__(self, root: str, agents: list[dict[str, t.Any]]) -> None:
        self.root = root
        self.agents = agents
        self.netns = {a["name"]: a["local"]["netns"] for a in agents}
        self.state_dir = os.path.join(root, "local")

    def ip(self, agent: str, *args: str) -> t.Any:
        out = subprocess.run(["ip", "-n", self.netns[agent], "-j", "-d"] + list(args), capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out or "[]")

    def links(self, agent: str) -> dict[str, dict[str, t.Any]]:
        return {link["ifname"]: link for link in self.ip(agent, "link", "show")}

    def flood(self, agent: str, vxlan: str) -> list[str]:
        """Where the VXLAN device floods to (its all-zero-MAC FDB entries)."""
        out = subprocess.run(["bridge", "-n", self.netns[agent], "-j", "fdb", "show", "dev", vxlan], capture_output=True,
                             text=True, check=True).stdout
        return sorted(e["dst"] for e in json.loads(out or "[]") if e["mac"] == "00:00:00:00:00:00")

    def frag_creates(self, agent: str) -> int:
        text = subprocess.run(["ip", "netns", "exec", self.netns[agent], "cat", "/proc/net/snmp"], capture_output=True,
                              text=True, check=True).stdout
        head, values = [line.split() for line in text.splitlines() if line.startswith("Ip:")][:2]
        return int(dict(zip(head, values))["FragCreates"])

    def conflists(self) -> list[str]:
        return sorted(f for a in self.agents for f in os.listdir(a["local"]["cni_config_dir"]))

    def iptables(self, agent: str, family: str = "iptables") -> list[str]:
        out = subprocess.run(["ip", "netns", "exec", self.netns[agent], family + "-save"], capture_output=True,
                             text=True, check=True).stdout
        # a table's built-in chains with their default policy show once anything loaded the table in the namespace
        # (a rule added and removed): the kernel's default, not something left behind
        return [line for line in out.splitlines() if line.startswith((":", "-A")) and not re.match(
            r":(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ACCEPT \[", line)]

    def wireguard_bytes(self) -> dict[str, int]:
        """Per agent, the bytes its WireGuard interface received and sent, over all its peers (``wg show IF transfer``)."""
        out = {}
        for agent, ns in self.netns.items():
            text = subprocess.run(["ip", "netns", "exec", ns, "wg", "show", wireguard_interface(self.state_dir, agent),
                                   "transfer"], capture_output=True, text=True, check=True).stdout
            out[agent] = sum(int(rx) + int(tx) for _peer, rx, tx in (line.split() for line in text.splitlines()))
        return out

    def sessions_on_agents(self) -> list[str]:
        return local_agents.sessions_on(os.path.join(self.root, "local"))

    def snapshot(self) -> dict[str, t.Any]:
        """The links, iptables rules, CNI configs and processes of every agent, and the sessions its plugin holds."""
        inodes = {os.stat("/run/netns/" + ns).st_ino for ns in self.netns.values()}
        procs = []
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and os.stat("/proc/%s/ns/net" % pid).st_ino in inodes:
                    procs.append(pid)
            except OSError:
                pass
        return {"links": {a: sorted(self.links(a)) for a in self.netns}, "conflists": self.conflists(), "processes": procs,
                "iptables": {a: self.iptables(a) + self.iptables(a, "ip6tables") for a in self.netns},
                "sessions": self.sessions_on_agents()}

    def assert_bare(self) -> None:
        """No session left on any agent: only lo and eth0, the one static CNI config, no rule of the plugin,
        no process inside."""
        snap = self.snapshot()
        assert snap["links"] == {a: ["eth0", "lo"] for a in self.netns}
        assert snap["conflists"] == ["backendai.conflist"] * len(self.agents)
        assert snap["processes"] == [] and snap["sessions"] == []
        assert not [line for rules in snap["iptables"].values() for line in rules if "BACKENDAI" in line]


@pytest.fixture(scope="module")
def fabric(run_dir: str) -> t.Iterator[Fabric]:
    root = os.path.join(run_dir, "agents-" + uuid.uuid4().hex[:8])
    agents = [{"name": "agent%d" % i, "cpu": 2000, "memory": 2048} for i in (1, 2, 3)]
    made = local_agents.create_agents(agents, root, underlay_mtu=UNDERLAY_MTU)
    assert made["changed"] is True
    again = local_agents.create_agents(agents, root, underlay_mtu=UNDERLAY_MTU)
    assert again["changed"] is False and again["agents"] == made["agents"]
    f = Fabric(root, made["agents"])
    yield f
    f.assert_bare()
    assert local_agents.destroy_agents(root)["changed"] is True
    assert local_agents.destroy_agents(root)["changed"] is False
    assert not [n for n in f.netns.values() if os.path.exists("/run/netns/" + n)]
    assert not os.path.exists(os.path.join(root, "local"))


class Live:
    """A session made through the local backend, with what the tests need to look inside."""

    def __init__(self, state_root: str, result: dict[str, t.Any]) -> None:
        self.state_root = state_root
        self.view = result["session"]
        self.plan = result["plan"]
        with open(os.path.join(state_root, self.view["name"], "session.json"), encoding="utf-8") as f:
            self.info = json.load(f)
        self.by_host = {c["hostname"]: c for c in self.info["containers"]}

    def ssh(self, host: str, command: str, stdin: t.Optional[bytes] = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", self.info["ssh_config"], host, command], input=stdin, capture_output=True,
                              timeout=timeout, check=False)

    def python_in(self, host: str, code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        pid = self.by_host[host]["pid"]
        return subprocess.run(["nsenter", "-t", str(pid), "-n", "--", sys.executable, "-c", code] + list(args),
                              capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def mn_root(run_dir: str) -> str:
    return os.path.join(run_dir, uuid.uuid4().hex[:8])


@pytest.fixture(scope="module")
def mn(fabric: Fabric, mn_root: str) -> t.Iterator[Live]:
    result = backend(mn_root).present(spec("mn"), agents=fabric.agents)
    try:
        yield Live(mn_root, result)
    finally:
        backend(mn_root).absent("mn")


def backend(state_root: str) -> local_backend.LocalBackend:
    """The local backend as the session module makes it (the Nomad job's renderer for the engine's container start)."""
    return local_backend.LocalBackend(state_root, task=local_session_dict.TASK)


def test_spread_over_agents_with_per_agent_local_rank(mn: Live) -> None:
    assert mn.plan["mode"] == "multi-node" and mn.plan["network_mode"].startswith("cni/")
    assert {c["hostname"]: c["agent"] for c in mn.view["containers"]} == AGENT_OF
    assert mn.view["state"] == "RUNNING" and mn.view["mode"] == "multi-node"
    p = mn.ssh("main1", "for h in %s; do ssh $h 'env -0 | base64 -w0'; echo; done" % " ".join(HOSTS))
    assert p.returncode == 0, p.stderr
    envs = [base64.b64decode(line).decode() for line in p.stdout.decode().splitlines()]
    assert len(envs) == len(HOSTS)
    for rank, (host, text) in enumerate(zip(HOSTS, envs)):
        env = dict(item.split("=", 1) for item in text.split("\0") if "=" in item)
        assert env["BACKENDAI_CLUSTER_HOST"] == host and env["BACKENDAI_CLUSTER_MODE"] == "multi-node"
        assert env["BACKENDAI_CLUSTER_HOSTS"] == ",".join(HOSTS) and env["WORLD_SIZE"] == "6"
        assert (env["RANK"], env["WORLD_RANK"]) == (str(rank), str(rank))
        assert env["LOCAL_RANK"] == str(rank % 2), "LOCAL_RANK counts per agent"


def test_ssh_by_hostname_between_every_pair_across_agents(mn: Live) -> None:
    loop = "for h in %s; do ssh $h hostname 2>&1; done" % " ".join(HOSTS)
    # every container runs its loop at the same time (the pairs are independent)
    p = mn.ssh("main1", "for s in %s; do ssh $s '%s' > /tmp/pairs.$s & done; wait; for s in %s; do echo $s: "
                        "$(cat /tmp/pairs.$s); done" % (" ".join(HOSTS), loop, " ".join(HOSTS)))
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == ["%s: %s" % (h, " ".join(HOSTS)) for h in HOSTS]


def test_overlay_devices_addresses_and_mtu(mn: Live, fabric: Fabric) -> None:
    vxlan = mn.info["vxlan"]
    underlay = {a["name"]: a["local"]["underlay_ip"] for a in fabric.agents}
    for agent in fabric.netns:
        links = fabric.links(agent)
        vx = links[vxlan]
        assert vx["linkinfo"]["info_data"]["id"] == mn.info["vni"] >= net.VNI_BASE
        order = [underlay[a] for a in dict.fromkeys(AGENT_OF.values())]
        prefix, keys = wireguard_peers(net.read_key(os.path.join(fabric.state_dir, "network.key")),
                                       list(dict.fromkeys(AGENT_OF.values())))
        params = net.NetworkParams(mn.info["session_id"], mn.info["vni"], mn.info["subnet"], tuple(order), OVERLAY_MTU,
                                   "wireguard", keys, prefix)
        lay = net.layout(params, underlay[agent])
        # session VXLAN runs between tunnel addresses over the agent's WireGuard interface, never the underlay's
        wg = wireguard_interface(fabric.state_dir, agent)
        assert mn.info["underlay_encryption"] == "wireguard"
        assert ipaddress.IPv6Address(vx["linkinfo"]["info_data"]["local6"]) == ipaddress.IPv6Address(lay.tunnel)
        assert links[wg]["mtu"] == UNDERLAY_MTU - net.WIREGUARD_OVERHEAD
        assert vx["mtu"] == OVERLAY_MTU and links[vx["master"]]["mtu"] == OVERLAY_MTU
        assert sorted(map(ipaddress.IPv6Address, fabric.flood(agent, vxlan))) == sorted(
            ipaddress.IPv6Address(tun) for _key, tun, _ul in lay.wg_peers)
        lo, hi = (int.from_bytes(bytes(map(int, ip.split("."))), "big") for ip in (lay.range_start, lay.range_end))
        for host, c in mn.by_host.items():
            if AGENT_OF[host] == agent:
                assert lo <= int.from_bytes(bytes(map(int, c["address"].split("."))), "big") <= hi
    for host in HOSTS:
        p = mn.python_in(host, "import socket, fcntl, struct; s = socket.socket();"
                               "print(struct.unpack('16sI', fcntl.ioctl(s, 0x8921, struct.pack('16sI', b'eth0', 0)))[1])")
        assert p.stdout.strip() == str(OVERLAY_MTU), p.stderr


DF_SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: the DF bit, never fragment
for size in map(int, sys.argv[2:]):
    try:
        s.sendto(bytes(size), (sys.argv[1], 9999)); print(size, "sent")
    except OSError as e:
        print(size, "EMSGSIZE" if e.errno == 90 else e)
"""
DF_RECV = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999)); s.settimeout(10)
print("ready", flush=True)
data, _ = s.recvfrom(65535); print(len(data), flush=True)
"""


def test_df_bit_and_20mb_transfer_cross_agents_without_fragmentation(mn: Live, fabric: Fabric) -> None:
    before = {a: fabric.frag_creates(a) for a in fabric.netns}
    recv = subprocess.Popen(["nsenter", "-t", str(mn.by_host["sub5"]["pid"]), "-n", "--", sys.executable, "-c", DF_RECV],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        biggest = OVERLAY_MTU - 28  # IPv4 20 + UDP 8
        sent = mn.python_in("main1", DF_SEND, mn.by_host["sub5"]["address"], str(biggest + 1), str(biggest))
        assert sent.stdout.split("\n")[:2] == ["%d EMSGSIZE" % (biggest + 1), "%d sent" % biggest], sent.stderr
        assert recv.stdout.readline().strip() == str(biggest), "a full-MTU DF datagram must cross agents"
    finally:
        recv.kill()
        recv.wait()
    blob = os.urandom(20 * 1000 * 1000)
    p = mn.ssh("sub1", "ssh sub4 'cat > /tmp/blob && sha256sum /tmp/blob && wc -c < /tmp/blob'", stdin=blob)
    assert p.returncode == 0, p.stderr
    digest, _name, size = p.stdout.decode().split()
    assert (digest, int(size)) == (hashlib.sha256(blob).hexdigest(), len(blob))
    assert {a: fabric.frag_creates(a) for a in fabric.netns} == before, "VXLAN packets were fragmented on the underlay"


def test_sessions_on_the_same_agents_are_isolated(mn: Live, fabric: Fabric, mn_root: str) -> None:
    result = backend(mn_root).present(spec("other", size=3, cpu=1500), agents=fabric.agents)
    try:
        other = Live(mn_root, result)
        assert sorted(c["agent"] for c in other.view["containers"]) == ["agent1", "agent2", "agent3"]
        assert other.info["vxlan"] != mn.info["vxlan"]
        port = str(mn.info["ssh_port"])
        # (session, from, to, what the probe must find); every probe at once: a dropped SYN takes the probe's timeout
        probes = [(other, src, other.by_host[dst]["address"], "open")  # same session across agents: open
                  for src, dst in (("main1", "sub2"), ("sub1", "sub1"))]
        for c in other.by_host.values():  # another session, on the same and on other agents: closed
            probes += [(other, "main1", c["address"], "open")] + [(mn, src, c["address"], "closed") for src in ("main1", "sub3")]
        probes += [(other, "sub1", c["address"], "closed") for c in mn.by_host.values()]
        with ThreadPoolExecutor(len(probes)) as pool:
            got = list(pool.map(lambda p: p[0].python_in(p[1], PROBE, p[2], port).stdout, probes))
        assert [out.split(" ")[0].strip() for out in got] == [want for *_x, want in probes], list(zip(probes, got))
    finally:
        assert backend(mn_root).absent("other")["changed"] is True


def test_backend_is_idempotent_and_pending_says_why(mn: Live, fabric: Fabric, mn_root: str) -> None:
    again = backend(mn_root).present(spec("mn"), agents=fabric.agents)
    assert again["changed"] is False and again["session"]["session_id"] == mn.view["session_id"]
    with pytest.raises(Exception, match="PENDING on the local agents: the eligible agents together can hold only 6 of 7"):
        backend(mn_root).present(spec("toobig", size=7), agents=fabric.agents)
    with pytest.raises(Exception, match="local agents"):
        backend(mn_root).present(spec("nolocal"), agents=[{"name": "x", "cpu": 9000, "memory": 9000}])
    assert not os.path.exists(os.path.join(mn_root, "toobig")) and not os.path.exists(os.path.join(mn_root, "nolocal"))


def test_agents_are_not_removed_under_a_session(mn: Live, fabric: Fabric) -> None:
    with pytest.raises(rt.LocalRuntimeError, match="still carry sessions"):
        local_agents.destroy_agents(fabric.root)
    assert mn.ssh("sub3", "hostname").stdout.decode().strip() == "sub3"


# ------------------------------------------------------------------ distributed jobs across agents, as the user

def assert_went_through_wireguard(mn: Live, fabric: Fabric, before: dict[str, int], at_least: int) -> None:
    """The session says its VXLAN is inside WireGuard, and every agent's WireGuard interface carried at least
    ``at_least`` more bytes since ``before`` (the job's traffic between agents has no other way: the tunnel
    addresses the VXLAN devices use exist only on those interfaces, see test_overlay_devices_addresses_and_mtu)."""
    assert mn.info["underlay_encryption"] == "wireguard"
    grew = {a: n - before[a] for a, n in fabric.wireguard_bytes().items()}
    assert all(n >= at_least for n in grew.values()), grew


def test_mpirun_over_ssh_runs_one_rank_per_container_across_agents_as_the_user(mn: Live, fabric: Fabric) -> None:
    """OpenMPI (the example image's) launched from main1 by the session user reaches every other container (two per agent) with
    `ssh subN orted ...`; the hostfile is the session's (``main1 slots=1`` per container, in global order: the
    local runtime writes none, so it is made from BACKENDAI_CLUSTER_HOSTS, the injected list)."""
    before = fabric.wireguard_bytes()
    p = mn.ssh("main1", "echo $BACKENDAI_CLUSTER_HOSTS | tr , '\\n' | sed 's/$/ slots=1/' > ~/hostfile && "
                        "mpirun --hostfile ~/hostfile -np %d --mca btl self,tcp --mca btl_tcp_if_include eth0 "
                        "--mca oob_tcp_if_include eth0 sh -c 'echo $(uname -n) $(id -u) $OMPI_COMM_WORLD_RANK'; "
                        "s=$?; rm -f ~/hostfile; exit $s" % len(HOSTS), timeout=180)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    ranks = sorted((line.split() for line in out.splitlines()), key=lambda r: int(r[2]))
    assert [(host, rank) for host, _uid, rank in ranks] == [(h, str(i)) for i, h in enumerate(HOSTS)], out
    assert len({uid for _h, uid, _r in ranks}) == 1 and ranks[0][1] != "0", "every rank runs as the session user"
    assert_went_through_wireguard(mn, fabric, before, 10000)


def test_env_rendezvous_across_agents_finds_main1(mn: Live, fabric: Fabric) -> None:
    """tests/support/rendezvous.py's torch-style ``env://`` rendezvous, one rank per container started over ssh from
    main1 at the same time: MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK are only the injected ones."""
    before = fabric.wireguard_bytes()
    script = base64.b64encode(RENDEZVOUS.encode()).decode()
    p = mn.ssh("main1", "for h in %s; do ssh $h 'echo %s | base64 -d > ~/rdv.py && python3 ~/rdv.py; rm -f ~/rdv.py' "
                        "> /tmp/rdv.$h 2>&1 & done; wait; for h in %s; do echo $h: $(cat /tmp/rdv.$h); rm /tmp/rdv.$h; done"
               % (" ".join(HOSTS), script, " ".join(HOSTS)), timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == ["main1: rendezvous complete: [1, 2, 3, 4, 5]"] + [
        "%s: rank %d joined main1" % (h, i) for i, h in enumerate(HOSTS) if i], p.stdout.decode()
    assert_went_through_wireguard(mn, fabric, before, 1000)


# ------------------------------------------------------------------ destroy

def _runtime_session(name: str, fabric: Fabric, keypair: tuple[str, str], size: int = 6) -> dict[str, t.Any]:
    """A session of ``size`` containers over the three agents: 6 is two on each, 3 one on each."""
    plan = build_plan(parse_spec(spec(name, size=size, cpu=6000 // size)), parse_agents(fabric.agents), str(uuid.uuid4()))
    return local_session_dict.session_dict(local_session.local_session(plan, SSHKeypair(keypair[0], keypair[1]),
                                                                       local_backend.local_agents(fabric.agents)))


def test_destroy_leaves_nothing_and_is_idempotent(fabric: Fabric, state_root: str, keypair: t.Any, helpers: t.Any) -> None:
    on_agents = fabric.snapshot()
    before = helpers.host_snapshot()
    session = _runtime_session("gone", fabric, keypair)
    r = local_session_dict.create_session(session, state_root)
    assert r["state"] == "RUNNING" and r["vxlan"]
    assert fabric.conflists() == on_agents["conflists"], "sessions install no CNI config"
    assert all(r["vxlan"] in fabric.links(a) for a in fabric.netns)
    assert rt.destroy_session("gone", state_root)["changed"] is True
    assert rt.destroy_session("gone", state_root)["changed"] is False
    assert fabric.snapshot() == on_agents
    helpers.assert_clean(before, state_root, [session])


# journal records of a 3-agent session: begin, netns, slot, network, engine, relay, ready
@pytest.mark.parametrize("kill", ["records:2", "records:3", "records:4", "records:5", "after:0.25", "after:0.4"])
def test_destroy_after_creator_killed(kill: str, fabric: Fabric, state_root: str, keypair: t.Any, helpers: t.Any) -> None:
    """A session of one container on each agent (every agent's share of the session network, the relay) whose creator
    is SIGKILLed at a journal record or after a delay: destroy leaves nothing on any agent nor on the host. (Several
    containers on one bridge are the single-node creator-killed tests'; the whole spread's destroy is
    test_destroy_leaves_nothing_and_is_idempotent's.)"""
    on_agents = fabric.snapshot()
    before = helpers.host_snapshot()
    session = _runtime_session("killed", fabric, keypair, size=3)
    proc = helpers.start_creator(session, state_root, kill)
    proc.wait(timeout=60)
    if kill.startswith("records:"):
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    existed = os.path.isdir(os.path.join(state_root, "killed"))
    assert rt.destroy_session("killed", state_root)["changed"] is existed
    assert fabric.snapshot() == on_agents
    helpers.assert_clean(before, state_root, [session])
