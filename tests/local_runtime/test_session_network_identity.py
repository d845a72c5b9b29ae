"""Admission on a Nomad client: the real plugin in real namespaces asks the Nomad API double about each allocation.

Local agents stand for Nomad clients ``agent1`` and ``agent2``: their plugin config says ``"identity": "nomad"``
and names the local Nomad agent's API at ``127.0.0.1`` inside the agent's namespace, where a relay passes each
connection on to the Nomad API double (on this machine's loopback). The double holds the jobs and allocations the
attacks need (``/v1/allocation/:id`` and ``/v1/job/:id/allocations``, ``nomad_double/server.py``); every CNI_ARGS
is built as Nomad's client builds it (``_session_network.nomad_cni_args``: a value holding ``;`` skipped), and
CNI_CONTAINERID is the allocation ID, as Nomad's client calls CNI (``networking_cni.go``: ``cni.Setup(ctx,
alloc.ID, ...)``).

Every refusal has its control: the same plugin, run the same way, admits the legitimate allocation, so each test
would fail if its defence were missing rather than because the request was malformed. Each refusal leaves the
agent as it was and the reason in the plugin's error (which Nomad logs).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import subprocess
import threading
import typing as t
import urllib.request
import uuid

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_network_attacks import World, _plugin

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """setns(2) into a network namespace (os.setns is Python 3.12+); moves the calling thread only."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


TOKEN = "8d3c1f0e-5b7a-4c2e-9f1d-000000000019"
NS = "team-a"
SLOT = 1300


class Relay:
    """A TCP listener on 127.0.0.1 inside network namespace ``netns`` that passes each connection on to
    ``127.0.0.1:port`` of this machine (the plugin runs in the agent's namespace, the double on this loopback)."""

    def __init__(self, netns: str, port: int) -> None:
        self.port, self.stopping = port, False
        made: list[socket.socket] = []

        def listen_inside() -> None:  # setns moves only this thread
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            target = os.open("/run/netns/" + netns, os.O_RDONLY)
            try:
                setns(target)
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                sock.listen(32)
                made.append(sock)
            finally:
                setns(own)
                os.close(own)
                os.close(target)

        th = threading.Thread(target=listen_inside)
        th.start()
        th.join()
        self.sock = made[0]
        self.address = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, name="relay-" + netns, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.stopping:
                conn.close()
                return
            threading.Thread(target=self._pass, args=(conn,), daemon=True).start()

    def _pass(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", self.port), timeout=10) as up:
            conn.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request:  # a GET: the head is all
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            up.sendall(request)
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    return
                conn.sendall(chunk)

    def close(self) -> None:
        # The socket listens in the agent's namespace, so a connection from here cannot wake its accept(), nor does
        # close(): shutdown() does (accept() returns EINVAL), where the two took the 5 s join every time.
        self.stopping = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the relay's accept() was not woken"


def group(name: str, node: str, count: int = 1) -> dict[str, t.Any]:
    return {"Name": name, "Count": count,
            "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}],
            "Networks": [{"Mode": "cni/backendai"}],
            "Tasks": [{"Name": "main", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                       "Resources": {"CPU": 100, "MemoryMB": 64}}]}


class Cluster:
    """The double's jobs, the agents' Nomad-mode configs, the session's parameters and its agents' keys."""

    def __init__(self, w: World, double: NomadAPIDouble, tmp: str) -> None:
        self.w, self.double, self.tmp = w, double, tmp
        self.cluster_key = net.read_key(os.path.join(w.fabric, "network.key"))
        self.params = net.make_params(str(uuid.uuid4()), SLOT, [w.agents[a]["underlay_ip"] for a in ("agent1", "agent2")])
        self.relays = {a: Relay(w.agents[a]["netns"], double.port) for a in ("agent1", "agent2")}
        token_file = os.path.join(tmp, "nomad.token")
        with open(token_file, "w", encoding="ascii") as f:
            f.write(TOKEN + "\n")
        self.confs = {}
        for a in ("agent1", "agent2"):
            with open(os.path.join(w.fabric, "cni", a, "backendai.conflist"), encoding="utf-8") as f:
                conf = json.load(f)
            conf["plugins"][1].update(identity="nomad", agentName=a, nomadAddr=self.relays[a].address,
                                      nomadTokenFile=token_file)
            self.confs[a] = conf

    def register(self, job_id: str, groups: list[dict[str, t.Any]]) -> dict[str, str]:
        """group -> its newest allocation ID."""
        body = {"Job": {"ID": job_id, "Name": job_id, "Namespace": NS, "Type": "service", "Datacenters": ["dc1"],
                        "TaskGroups": groups}}
        req = urllib.request.Request(self.double.url + "/v1/jobs", data=json.dumps(body).encode(), method="PUT",
                                     headers={"X-Nomad-Token": TOKEN})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        out = {}
        for alloc in self.double.allocations_of(job_id, NS):
            out[alloc["TaskGroup"]] = alloc["ID"]
        return out

    def args(self, group_name: str, agent: str, job_id: str = "train-42", key: t.Optional[bytes] = None) -> dict[str, str]:
        """The session's args as the control node signs them for ``group_name`` of ``job_id`` pinned to ``agent``."""
        return net.job_args(key or net.signing_key(self.cluster_key, agent), NS, job_id, group_name, self.params)

    def plugin(self, agent: str, command: str, alloc_id: str, netns: str, cni_args: str) -> dict[str, t.Any]:
        return _plugin(self.w, agent, command, alloc_id, netns, cni_args, conf=self.confs[agent])

    def close(self) -> None:
        for relay in self.relays.values():
            relay.close()


@pytest.fixture(scope="module")
def world(run_dir: str, keypair: tuple[str, str]) -> t.Iterator[World]:
    w = World(run_dir, keypair)
    try:
        for a in ("agent1", "agent2"):  # the tables the plugin's rules use, loaded: "as before" compares rules only
            for table in ("filter", "mangle", "nat"):
                for op in ("-N", "-X"):
                    subprocess.run(["ip", "netns", "exec", w.agents[a]["netns"], "iptables", "-w", "-t", table, op,
                                    "BAI-T-LOAD"], check=True, capture_output=True)
        yield w
    finally:
        w.close()


@pytest.fixture
def cluster(world: World, nomad_double_factory: t.Any, tmp_path: t.Any) -> t.Iterator[Cluster]:
    double = nomad_double_factory(token=TOKEN, namespaces=["default", NS])
    for a in ("agent1", "agent2", "agent3"):
        double.add_node(a, address=world.agents[a]["underlay_ip"])
    c = Cluster(world, double, str(tmp_path))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def netns(world: World) -> t.Iterator[t.Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = "bai-t-%s-i%d" % (world.tag, len(made))
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return name

    yield make
    for name in made:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def refused(r: dict[str, t.Any], reason: str) -> None:
    assert r["rc"] != 0 and r["out"]["code"] == 101, r
    assert "admission refused" in r["out"]["msg"] and reason in r["out"]["msg"], r["out"]["msg"]


def interfaces(netns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", netns, "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [x["ifname"] for x in json.loads(out)]


def admitted_then_deleted(c: Cluster, agent: str, alloc_id: str, ns: str, cni_args: str) -> None:
    ok = c.plugin(agent, "ADD", alloc_id, ns, cni_args)
    assert ok["rc"] == 0, ok
    assert c.plugin(agent, "DEL", alloc_id, ns, "")["rc"] == 0


# ---------------------------------------------------------------------------- the attacks

def test_a_semicolon_job_id_naming_the_victim_in_its_args_is_refused(cluster: Cluster, netns: t.Any) -> None:
    """Job ``evil;x`` in the victim's namespace: Nomad skips its NOMAD_JOB_ID (the ``;``), so the copied args'
    own ``NOMAD_JOB_ID=train-42`` stays in CNI_ARGS; the plugin checks the MAC against the job Nomad reports."""
    c = cluster
    victim = c.register("train-42", [group("main1", "agent1"), group("sub1", "agent1")])
    evil = c.register("evil;x", [group("sub1", "agent1")])
    before, ns = c.w.agent_state("agent1"), netns()
    forged = dict(c.args("sub1", "agent1"), NOMAD_JOB_ID="train-42")
    cni_args = net.nomad_cni_args(forged, "global", NS, "evil;x", "sub1", evil["sub1"])
    assert "NOMAD_JOB_ID=train-42" in cni_args and "evil" not in cni_args  # what the plugin is shown
    refused(c.plugin("agent1", "ADD", evil["sub1"], ns, cni_args), "not admitted for job 'evil;x', group 'sub1'")
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    # control: the victim's own allocation with the same args is admitted
    admitted_then_deleted(c, "agent1", victim["sub1"], ns,
                          net.nomad_cni_args(c.args("sub1", "agent1"), "global", NS, "train-42", "sub1", victim["sub1"]))
    assert c.w.agent_state("agent1") == before


def test_a_nomad_1_9_style_arg_set_is_refused(cluster: Cluster, netns: t.Any) -> None:
    """Nomad 1.9 adds no NOMAD_* keys: a job's args pass unchanged, so they may name the victim's namespace, job,
    group, even its allocation. Without NOMAD_ALLOC_ID nothing is admitted; naming another allocation than the
    container's own (CNI_CONTAINERID, which Nomad sets to the allocation ID on every version) is refused too."""
    c = cluster
    victim = c.register("train-42", [group("main1", "agent1")])
    evil = c.register("evil", [group("main1", "agent1")])
    before, ns = c.w.agent_state("agent1"), netns()
    own = dict(c.args("main1", "agent1"), NOMAD_NAMESPACE=NS, NOMAD_JOB_ID="train-42", NOMAD_GROUP_NAME="main1")
    no_keys = "IgnoreUnknown=true;" + ";".join("%s=%s" % kv for kv in c.args("main1", "agent1").items())
    refused(c.plugin("agent1", "ADD", evil["main1"], ns, no_keys), "lack NOMAD_ALLOC_ID")
    named = "IgnoreUnknown=true;" + ";".join("%s=%s" % kv for kv in own.items())
    refused(c.plugin("agent1", "ADD", evil["main1"], ns, named), "lack NOMAD_ALLOC_ID")
    victims = named + ";NOMAD_ALLOC_ID=" + victim["main1"]
    refused(c.plugin("agent1", "ADD", evil["main1"], ns, victims), "is not the allocation NOMAD_ALLOC_ID names")
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    admitted_then_deleted(c, "agent1", victim["main1"], ns,
                          net.nomad_cni_args(c.args("main1", "agent1"), "global", NS, "train-42", "main1", victim["main1"]))


def test_args_copied_from_another_group_are_refused(cluster: Cluster, netns: t.Any) -> None:
    c = cluster
    victim = c.register("train-42", [group("main1", "agent1"), group("sub1", "agent1")])
    before, ns = c.w.agent_state("agent1"), netns()
    copied = net.nomad_cni_args(c.args("main1", "agent1"), "global", NS, "train-42", "sub1", victim["sub1"])
    refused(c.plugin("agent1", "ADD", victim["sub1"], ns, copied), "group 'sub1'")
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    admitted_then_deleted(c, "agent1", victim["sub1"], ns,
                          net.nomad_cni_args(c.args("sub1", "agent1"), "global", NS, "train-42", "sub1", victim["sub1"]))


def test_a_second_allocation_of_a_group_is_refused(cluster: Cluster, netns: t.Any) -> None:
    """``nomad job scale`` (a token with only scale-job) adds an allocation to a session's group: same job, group,
    args and agent, so the MAC holds; Nomad's list of the job's allocations shows two live ones."""
    c = cluster
    first = c.register("train-42", [group("main1", "agent1")])["main1"]
    c.register("train-42", [group("main1", "agent1", count=2)])
    allocs = [a["ID"] for a in c.double.allocations_of("train-42", NS) if a["TaskGroup"] == "main1"]
    second, = [a for a in allocs if a != first]
    before, ns = c.w.agent_state("agent1"), netns()
    args = c.args("main1", "agent1")
    refused(c.plugin("agent1", "ADD", second, ns, net.nomad_cni_args(args, "global", NS, "train-42", "main1", second)),
            "has another live allocation (%s)" % first)
    assert c.w.agent_state("agent1") == before and interfaces(ns) == ["lo"]
    # control: once the first is gone (stopped), the group's one live allocation is admitted
    c.double.set_alloc_status(first, "complete")
    admitted_then_deleted(c, "agent1", second, ns, net.nomad_cni_args(args, "global", NS, "train-42", "main1", second))


def test_a_key_derived_for_another_agent_forges_nothing(cluster: Cluster, netns: t.Any) -> None:
    """Agent1's key stolen: the thief signs args for its own job on agent2 (and for the victim's group on agent2).
    Agent2's plugin refuses both: it checks with agent2's key, which agent1's does not give."""
    c = cluster
    victim = c.register("train-42", [group("sub2", "agent2")])
    evil = c.register("evil", [group("g", "agent2")])
    before, ns = c.w.agent_state("agent2"), netns()
    stolen = net.network_mac_key(net.read_key(os.path.join(c.w.fabric, "keys", "agent1.key")))
    assert stolen == net.signing_key(c.cluster_key, "agent1")
    forged = net.nomad_cni_args(c.args("g", "agent2", job_id="evil", key=stolen), "global", NS, "evil", "g", evil["g"])
    refused(c.plugin("agent2", "ADD", evil["g"], ns, forged), "MAC does not match")
    forged = net.nomad_cni_args(c.args("sub2", "agent2", key=stolen), "global", NS, "train-42", "sub2", victim["sub2"])
    refused(c.plugin("agent2", "ADD", victim["sub2"], ns, forged), "MAC does not match")
    assert c.w.agent_state("agent2") == before and interfaces(ns) == ["lo"]
    # control: the thief's own job signed with agent2's key would be admitted (the key is what refused it)
    admitted_then_deleted(c, "agent2", evil["g"], ns, net.nomad_cni_args(
        c.args("g", "agent2", job_id="evil"), "global", NS, "evil", "g", evil["g"]))
    assert c.w.agent_state("agent2") == before


def test_an_allocation_nomad_does_not_run_here_or_any_more_is_refused(cluster: Cluster, netns: t.Any) -> None:
    c = cluster
    victim = c.register("train-42", [group("main1", "agent1"), group("sub2", "agent2")])
    ns = netns()
    on_agent2 = net.nomad_cni_args(c.args("sub2", "agent2"), "global", NS, "train-42", "sub2", victim["sub2"])
    refused(c.plugin("agent1", "ADD", victim["sub2"], ns, on_agent2), "runs on node 'agent2', not on this agent")
    args = net.nomad_cni_args(c.args("main1", "agent1"), "global", NS, "train-42", "main1", victim["main1"])
    c.double.set_alloc_status(victim["main1"], "failed")
    refused(c.plugin("agent1", "ADD", victim["main1"], ns, args), "is not live")
    gone = str(uuid.uuid4())
    refused(c.plugin("agent1", "ADD", gone, ns, args.replace(victim["main1"], gone)), "knows no allocation")


def test_re_add_of_the_same_allocation_after_its_netns_was_destroyed_is_admitted_and_leaks_nothing(
        cluster: Cluster, netns: t.Any) -> None:
    """Nomad's recovery from a failed CHECK: the netns destroyed without DEL, made anew under the same name, ADD run
    again with the same allocation (container) ID."""
    c = cluster
    alloc = c.register("train-42", [group("main1", "agent1")])["main1"]
    before, ns = c.w.agent_state("agent1"), netns()
    args = net.nomad_cni_args(c.args("main1", "agent1"), "global", NS, "train-42", "main1", alloc)
    first = c.plugin("agent1", "ADD", alloc, ns, args)
    assert first["rc"] == 0, first
    subprocess.run(["ip", "netns", "del", ns], check=True)  # no DEL: the veth goes with the netns
    subprocess.run(["ip", "netns", "add", ns], check=True)
    again = c.plugin("agent1", "ADD", alloc, ns, args)
    assert again["rc"] == 0, again
    assert "eth0" in interfaces(ns)
    state = c.w.agent_state("agent1")
    # the earlier address was released first: host-local holds one reservation (a file named by the address)
    held = [f for f in state["files"] if f.startswith("ipam/") and os.path.basename(f)[:1].isdigit()]
    assert [os.path.basename(f) for f in held] == [again["out"]["ips"][0]["address"].split("/")[0]], state["files"]
    bridge = net.link_names(c.params.session_id)[0]
    assert len([x for x in state["links"] if x.startswith("veth")]) == len(
        [x for x in before["links"] if x.startswith("veth")]) + 1, state["links"]
    assert bridge in state["links"]
    assert c.plugin("agent1", "DEL", alloc, ns, "")["rc"] == 0
    assert c.w.agent_state("agent1") == before


def test_del_under_an_older_roles_config_without_an_agent_name_still_takes_the_session_down(
        cluster: Cluster, netns: t.Any) -> None:
    """An agent whose conflist an earlier release wrote (no ``identity``, no ``agentName``: Nomad identity by
    default) refuses ADD with the config error, but its DEL still removes what an attached session made: the agent
    name is asked for by the look-up, not when the config is read (a session left behind by a benchmark run across
    trees showed a DEL refused for the missing name, its bridge and rules leaked)."""
    c = cluster
    alloc = c.register("train-42", [group("main1", "agent1")])["main1"]
    before, ns = c.w.agent_state("agent1"), netns()
    args = net.nomad_cni_args(c.args("main1", "agent1"), "global", NS, "train-42", "main1", alloc)
    assert c.plugin("agent1", "ADD", alloc, ns, args)["rc"] == 0
    assert c.w.agent_state("agent1") != before
    older = json.loads(json.dumps(c.confs["agent1"]))
    for key in ("identity", "agentName", "nomadAddr", "nomadTokenFile"):
        older["plugins"][1].pop(key, None)
    again = _plugin(c.w, "agent1", "ADD", alloc, ns, args, conf=older)
    assert again["rc"] != 0 and "agentName" in again["out"]["msg"], again
    gone = _plugin(c.w, "agent1", "DEL", alloc, ns, "", conf=older)
    assert gone["rc"] == 0, gone
    assert c.w.agent_state("agent1") == before
