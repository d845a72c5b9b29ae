"""Attacks on the session network, with the real plugins in real namespaces on local agents.

Three local agents carry session B (main1, sub1 on agent1; sub2, sub3 on agent2) and session A
(main1 on agent1; sub1, sub2 on agent3). A host on the underlay that is not an agent ("stranger")
and an allocation on Nomad's own bridge network of agent1 (Nomad's conflist and NOMAD-ADMIN rule,
``client/allocrunner/cni/bridge.go`` and ``networking_iptables.go``) stand beside them.

Every refusal has its control: the same forged VXLAN packet sent by one of B's own agents *is*
delivered, a port that is "closed" across sessions is open within one, so each test would fail
if the defence were missing rather than the packet being malformed.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import typing as t
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import images  # tests/support/images.py: podman as the tests run it
import local_session_dict  # tests/support/local_session_dict.py: a session given as a dict, brought up by the runtime
from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents
from ansible_collections.backendai.cluster.plugins.module_utils._local import agent_network as lnet
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import Attachment, cni_add, cni_del
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import wireguard_peers

from conftest import PROBE, make_session

PORT = 2200
UNDERLAY = "10.230.0.0/24"
STRANGER_IP = "10.230.0.200"
NOMAD_SUBNET = "172.26.64.0/20"  # Nomad's default bridge_network_subnet
LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[2]))); s.settimeout(float(sys.argv[4]))
if sys.argv[1] == "tcp":
    s.listen(8)
print("ready", flush=True)
got = []
try:
    while True:
        if sys.argv[1] == "udp":
            data, peer = s.recvfrom(65535); got.append([data.decode(errors="replace"), peer[0]])
            s.settimeout(float(sys.argv[3]))
        else:
            c, peer = s.accept(); got.append(["conn", peer[0]]); c.close()
except socket.timeout:
    pass
print(__import__("json").dumps(got), flush=True)
"""
SEND = """
import socket, sys
for dst in sys.argv[2:]:
    s = socket.socket(socket.AF_INET6 if ":" in dst else socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(3):
        s.sendto(bytes.fromhex(sys.argv[1]), (dst, 4789))
print("sent")
"""
#: Raw IPv4 with any source address (the underlay attacker spoofing an agent): argv = src, dst, hex UDP payload.
SEND_SPOOFED = """
import socket, struct, sys
src, dst, payload = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
udp = struct.pack("!HHHH", 4789, 4789, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 7, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
for _ in range(3):
    s.sendto(ip + udp, (dst, 0))
print("sent")
"""
#: IPv6/UDP VXLAN (to port 4789, or the entry's port), three times each entry of the JSON list [ifname, dst MAC, src6,
#: dst6, hex VXLAN payload, (port)]: with an ifname, as a raw Ethernet frame out of it (AF_PACKET, from the interface's
#: own MAC: any source address, no route needed); without, through an ordinary UDP socket (the netns's routes, the
#: kernel's source). Prints what became of each entry ("sent" or the error: in a container, the send may be refused).
SEND6 = """
import json, socket, struct, sys
def frame(src_mac, dst_mac, src, dst, payload, dport):
    s6, d6 = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    udp = struct.pack("!HHHH", 4789, dport, 8 + len(payload), 0) + payload
    data = s6 + d6 + struct.pack("!I3xB", len(udp), 17) + udp + (b"\\0" if len(udp) % 2 else b"")
    c = sum(struct.unpack("!%dH" % (len(data) // 2), data)); c = (c >> 16) + (c & 0xFFFF); c = ~(c + (c >> 16)) & 0xFFFF
    udp = udp[:6] + struct.pack("!H", c or 0xFFFF) + udp[8:]
    return dst_mac + src_mac + b"\\x86\\xdd" + struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + s6 + d6 + udp
outcomes = []
for ifname, mac, src, dst, payload, *port in json.loads(sys.argv[1]):
    payload, dport = bytes.fromhex(payload), int(port[0]) if port else 4789
    try:
        if ifname:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((ifname, 0))
            data = frame(s.getsockname()[4], bytes.fromhex(mac.replace(":", "")), src, dst, payload, dport)
            for _ in range(3):
                s.send(data)
        else:
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            for _ in range(3):
                s.sendto(payload, (dst, dport))
        outcomes.append("sent")
    except OSError as e:
        outcomes.append(e.strerror or repr(e))
print(json.dumps(outcomes))
"""


def ns_python(netns: str, code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", "--net=/run/netns/" + netns, "--", sys.executable, "-c", code] + list(args),
                          capture_output=True, text=True, timeout=timeout, check=False)


class Listener:
    """What ``netns`` gets on ``port``, until ``seconds`` pass with nothing (``first``: for the first datagram)."""

    def __init__(self, netns: str, proto: str, port: int, seconds: float, first: float | None = None) -> None:
        self.proc = subprocess.Popen(["nsenter", "--net=/run/netns/" + netns, "--", sys.executable, "-c", LISTEN,
                                      proto, str(port), str(seconds), str(first or seconds)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def result(self) -> list[list[str]]:
        out, _ = self.proc.communicate(timeout=30)
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        """End it now, where it only had to answer (what it got is not looked at)."""
        self.proc.kill()
        self.proc.communicate(timeout=30)


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF


def vxlan_packet(vni: int, dst_mac: str, src_ip: str, dst_ip: str, dport: int, text: str) -> bytes:
    """A VXLAN payload: header with ``vni``, an Ethernet frame to ``dst_mac`` carrying IPv4/UDP to ``dst_ip``."""
    data = text.encode()
    udp = struct.pack("!HHHH", 5555, dport, 8 + len(data), 0) + data
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src_ip),
                     socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex("02aabbccddee") + b"\x08\x00"
    return struct.pack("!B3xI", 0x08, vni << 8) + eth + ip + udp


class World:
    def __init__(self, run_dir: str, keypair: tuple[str, str]) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.root = os.path.join(run_dir, "agents-" + self.tag)
        self.state_root = os.path.join(run_dir, "net-" + self.tag)
        agents = [{"name": "agent%d" % i, "cpu": 8000, "memory": 8192} for i in (1, 2, 3)]
        self.agents = {a["name"]: a["local"] for a in local_agents.create_agents(agents, self.root)["agents"]}
        self.fabric = os.path.join(self.root, "local")
        self.keypair = keypair
        self.made: list[str] = []
        self.sessions: dict[str, dict[str, t.Any]] = {}

    # ----------------------------------------------------------- sessions
    def session(self, name: str, placement: dict[str, str]) -> dict[str, t.Any]:
        s = make_session(name, self.keypair, size=len(placement), port=PORT)
        for c in s["containers"]:
            c["agent"] = placement[c["hostname"]]
        s["agents"] = {a: self.agents[a] for a in set(placement.values())}
        info = local_session_dict.create_session(s, self.state_root)
        info["by_host"] = {c["hostname"]: c for c in info["containers"]}
        self.sessions[name] = info
        return info

    def netns(self, session: str, host: str) -> str:
        return self.sessions[session]["by_host"][host]["netns"]

    def addr(self, session: str, host: str) -> str:
        return self.sessions[session]["by_host"][host]["address"]

    def mac(self, netns: str, ifname: str = "eth0") -> str:
        out = subprocess.run(["ip", "-n", netns, "-j", "link", "show", ifname], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)[0]["address"]

    # ----------------------------------------------------------- other hosts
    def add_stranger(self) -> None:
        """A host on the underlay that is not an agent."""
        ns, ul = "bai-t-%s-x" % self.tag, local_agents.namespaces(self.fabric, [])[""]
        self.made.append(ns)
        subprocess.run(["ip", "netns", "add", ns], check=True)
        cmds = ["link add xs%s type veth peer name eth0 netns %s" % (self.tag, ns), "link set xs%s master ul0 up" % self.tag]
        subprocess.run(["ip", "-n", ul, "-batch", "-"], input="\n".join(cmds) + "\n", text=True, check=True)
        subprocess.run(["ip", "-n", ns, "-batch", "-"], text=True, check=True,
                       input="link set lo up\naddr add %s/24 dev eth0\nlink set eth0 up\n" % STRANGER_IP)
        self.stranger = ns

    def add_nomad_alloc(self, agent: str) -> None:
        """An allocation on Nomad's own bridge network of ``agent`` (Nomad's bridge conflist, its NOMAD-ADMIN rule)."""
        ns = "bai-t-%s-nomad" % self.tag
        self.made.append(ns)
        subprocess.run(["ip", "netns", "add", ns], check=True)
        agent_ns = self.agents[agent]["netns"]
        self.nomad_conf = {"cniVersion": "0.4.0", "name": "nomad", "plugins": [
            {"type": "loopback"},
            {"type": "bridge", "bridge": "nomad", "ipMasq": True, "isGateway": True, "forceAddress": True,
             "hairpinMode": False, "ipam": {"type": "host-local", "ranges": [[{"subnet": NOMAD_SUBNET}]],
                                            "routes": [{"dst": "0.0.0.0/0"}],
                                            "dataDir": os.path.join(self.root, "nomad-ipam")}},
            {"type": "firewall", "backend": "iptables", "iptablesAdminChainName": "NOMAD-ADMIN"},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}]}
        for args in (["-N", "NOMAD-ADMIN"], ["-A", "NOMAD-ADMIN", "-o", "nomad", "-d", NOMAD_SUBNET, "-j", "ACCEPT"]):
            subprocess.run(["ip", "netns", "exec", agent_ns, "iptables", "-w"] + args, check=True)
        self.nomad_att = Attachment(ns, "/run/netns/" + ns, self.state_root, agent_netns="/run/netns/" + agent_ns)
        os.makedirs(self.state_root, exist_ok=True)
        result = cni_add(self.nomad_conf, self.nomad_att, os.path.join(self.root, "nomad-cache.json"))
        self.nomad_alloc, self.nomad_ip = ns, result["ips"][0]["address"].split("/")[0]

    # ----------------------------------------------------------- agents
    def agent_state(self, agent: str) -> dict[str, t.Any]:
        ns = self.agents[agent]["netns"]
        links = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show"], capture_output=True, text=True,
                                          check=True).stdout)
        rules = subprocess.run(["ip", "netns", "exec", ns, "iptables-save"], capture_output=True, text=True,
                               check=True).stdout
        state = os.path.join(self.fabric, "state", agent)
        files = sorted(os.path.relpath(os.path.join(d, f), state) for d, _, fs in os.walk(state) for f in fs
                       if f != "lock")
        return {"links": sorted(x["ifname"] for x in links),
                "rules": sorted(x for x in rules.splitlines() if x.startswith(("-A", ":"))), "files": files}

    def close(self) -> None:
        for name in list(self.sessions):
            rt.destroy_session(name, self.state_root)
        if hasattr(self, "nomad_att"):
            cni_del(self.nomad_conf, self.nomad_att, os.path.join(self.root, "nomad-cache.json"))
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        local_agents.destroy_agents(self.root, force=True)


@pytest.fixture(scope="module")
def world(run_dir: str, keypair: tuple[str, str]) -> t.Iterator[World]:
    w = World(run_dir, keypair)
    try:
        w.add_stranger()
        w.add_nomad_alloc("agent1")
        w.session("sb", {"main1": "agent1", "sub1": "agent1", "sub2": "agent2", "sub3": "agent2"})
        w.session("sa", {"main1": "agent1", "sub1": "agent3", "sub2": "agent3"})
        yield w
    finally:
        w.close()


def _key(w: World, agent: str) -> bytes:
    """What the control node (here: this machine) signs the groups pinned to ``agent`` with."""
    return net.signing_key(net.read_key(os.path.join(w.fabric, "network.key")), agent)


def _params(w: World, session: str) -> net.NetworkParams:
    """The session's parameters as the control node signed them (underlay encryption on: args version 3)."""
    info = w.sessions[session]
    order = list(dict.fromkeys(c["agent"] for c in info["containers"]))
    prefix, keys = wireguard_peers(net.read_key(os.path.join(w.fabric, "network.key")), order)
    return net.NetworkParams(info["session_id"], info["vni"], info["subnet"],
                             tuple(w.agents[a]["underlay_ip"] for a in order), 1500 - 150, "wireguard", keys, prefix)


def _tunnel(w: World, agent: str) -> str:
    """``agent``'s tunnel address (where B's VXLAN to it goes, inside WireGuard)."""
    p = _params(w, "sb")
    return net.layout(p, w.agents[agent]["underlay_ip"]).tunnel


KILLED_AT_RENAME = """
import os, signal
_rename, _calls = os.replace, [0]
def _killed_at(src, dst):
    _calls[0] += 1
    if _calls[0] == %d:
        os.kill(os.getpid(), signal.SIGKILL)
    _rename(src, dst)
os.replace = _killed_at
"""


def _plugin(w: World, agent: str, command: str, container: str, netns: str, cni_args: str,
            prev: dict[str, t.Any] | None = None, killed_at_rename: int = 0,
            conf: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """Run the agent's ``backendai`` plugin once, as libcni would (loopback left out), with the agent's conflist
    (or ``conf``); with ``killed_at_rename`` N, SIGKILLed when its Nth atomic write is about to rename its
    temporary file."""
    if conf is None:
        with open(os.path.join(w.fabric, "cni", agent, "backendai.conflist"), encoding="utf-8") as f:
            conf = json.load(f)
    plugin = dict(conf["plugins"][1], cniVersion=conf["cniVersion"], name=conf["name"])
    if prev is not None:
        plugin["prevResult"] = prev
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": "/run/netns/" + netns, "CNI_IFNAME": "eth0", "CNI_ARGS": cni_args,
           "CNI_PATH": os.path.join(w.fabric, "bin") + ":/usr/lib/cni"}
    argv = [os.path.join(w.fabric, "bin", "backendai")]
    if killed_at_rename:
        with open(argv[0], encoding="utf-8") as f:
            shim = f.read()
        patched = shim.replace("import _cni_plugin\n", KILLED_AT_RENAME % killed_at_rename + "import _cni_plugin\n")
        argv = shim.splitlines()[0][2:].split() + ["-c", patched]  # the shim's own interpreter line
    proc = subprocess.run(["nsenter", "--net=/run/netns/" + w.agents[agent]["netns"], "--"] + argv,
                          input=json.dumps(plugin), env=env, capture_output=True, text=True, check=False)
    return {"rc": proc.returncode, "out": json.loads(proc.stdout) if proc.stdout.strip() else None, "err": proc.stderr}


# ---------------------------------------------------------------------------- 1. admission

def test_admission_refuses_copied_tampered_and_missing_parameters(world: World) -> None:
    w = world
    key, params = _key(w, "agent1"), _params(w, "sb")
    b_main1 = net.job_args(key, lnet.LOCAL_NAMESPACE, "sb", "main1", params)
    evil_ns = "bai-t-%s-evil" % w.tag
    w.made.append(evil_ns)
    subprocess.run(["ip", "netns", "add", evil_ns], check=True)
    before = w.agent_state("agent1")

    def tampered(**change: str) -> dict[str, str]:
        assert all(b_main1.get(k) != v for k, v in change.items()), change  # a change, not B's own value
        return dict(b_main1, **change)

    # another /24 than B's own (the local runtime picks B's subnet itself, and 10.200.99.0/24 can be it)
    other_subnet = "10.200.98.0/24" if params.subnet == "10.200.99.0/24" else "10.200.99.0/24"

    cases = {
        "B's parameters in another job": net.nomad_cni_args(b_main1, "local", lnet.LOCAL_NAMESPACE, "evil", "main1", "a1"),
        "B's parameters in another namespace": net.nomad_cni_args(b_main1, "local", "other", "sb", "main1", "a2"),
        "a job naming itself B in its args": net.nomad_cni_args(
            dict(b_main1, NOMAD_JOB_ID="sb", NOMAD_NAMESPACE=lnet.LOCAL_NAMESPACE), "local", lnet.LOCAL_NAMESPACE,
            "evil", "main1", "a3"),
        "another subnet": net.nomad_cni_args(tampered(BAI_NET=other_subnet), "local", lnet.LOCAL_NAMESPACE, "sb",
                                             "main1", "a4"),
        "the stranger added to the agents": net.nomad_cni_args(
            tampered(BAI_AGENTS=net.encode_agents(params.agents + (STRANGER_IP,))), "local", lnet.LOCAL_NAMESPACE, "sb",
            "main1", "a5"),
        "another VNI": net.nomad_cni_args(tampered(BAI_VNI=str(params.vni + 1)), "local", lnet.LOCAL_NAMESPACE, "sb",
                                          "main1", "a6"),
        "no parameters": net.nomad_cni_args({}, "local", lnet.LOCAL_NAMESPACE, "evil", "main1", "a7"),
        "a client that adds no NOMAD_* (older than 1.10)": "IgnoreUnknown=true;" + ";".join(
            "%s=%s" % kv for kv in b_main1.items()),
    }
    for what, cni_args in cases.items():
        r = _plugin(w, "agent1", "ADD", "evil-" + uuid.uuid4().hex[:8], evil_ns, cni_args)
        assert r["rc"] != 0 and r["out"]["code"] == 101, (what, r)
        assert "admission refused" in r["out"]["msg"], (what, r["out"])
    assert w.agent_state("agent1") == before, "a refused ADD changed the agent"
    links = json.loads(subprocess.run(["ip", "-n", evil_ns, "-j", "link", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    assert [x["ifname"] for x in links] == ["lo"], "a refused ADD gave the namespace an interface"
    # control: the right job and group are admitted by the same plugin run the same way
    ok = _plugin(w, "agent1", "ADD", "ctl-" + w.tag, evil_ns,
                 net.nomad_cni_args(b_main1, "local", lnet.LOCAL_NAMESPACE, "sb", "main1", "a8"))
    assert ok["rc"] == 0, ok
    assert _plugin(w, "agent1", "DEL", "ctl-" + w.tag, evil_ns, "")["rc"] == 0
    assert w.agent_state("agent1") == before


def test_check_re_admits_and_finds_the_links(world: World) -> None:
    """CHECK (what Nomad runs after a client restart) passes for a live container and fails for another
    job's copy of its parameters or when the session's bridge is gone."""
    w = world
    info = w.sessions["sb"]
    main1 = info["by_host"]["main1"]
    with open(os.path.join(info["state_dir"], "cni", "main1.json"), encoding="utf-8") as f:
        prev = json.load(f)["result"]
    args = net.job_args(_key(w, "agent1"), lnet.LOCAL_NAMESPACE, "sb", "main1", _params(w, "sb"))

    def check(job: str, prev_result: dict[str, t.Any] | None = prev) -> dict[str, t.Any]:
        return _plugin(w, "agent1", "CHECK", main1["netns"], main1["netns"],
                       net.nomad_cni_args(args, "local", lnet.LOCAL_NAMESPACE, job, "main1", "x"), prev_result)

    ok = check("sb")
    assert ok["rc"] == 0, ok
    # a port with the lowest MAC coming and going does not change the bridge (Linux gives a bridge without a MAC
    # of its own the lowest of its ports'), so the bridge plugin's CHECK still matches the cached result
    agent_ns, bridge = w.agents["agent1"]["netns"], info["bridge"]
    subprocess.run(["ip", "-n", agent_ns, "-batch", "-"], text=True, check=True, input=(
        "link add baitlow address 00:00:00:00:00:01 type veth peer name baitlow2\nlink set baitlow master %s up\n"
        % bridge))
    try:
        again = check("sb")
    finally:
        subprocess.run(["ip", "-n", agent_ns, "link", "del", "baitlow"], check=False)
    assert again["rc"] == 0, again
    refused = check("evil")
    assert refused["rc"] != 0 and refused["out"]["code"] == 101, refused
    assert check("sb", None)["out"]["msg"] == "CHECK needs prevResult"


# ---------------------------------------------------------------------------- 2. and 3. forged VXLAN

#: The agent of each of B's containers, and the other agent of B.
AGENT_OF_B = {"main1": "agent1", "sub1": "agent1", "sub2": "agent2", "sub3": "agent2"}
OTHER_AGENT_OF_B = {"agent1": "agent2", "agent2": "agent1"}
Send = t.Callable[[str, str, bytes], None]


def _forge_and_listen(w: World, sends: t.Mapping[str, Send], targets: t.Sequence[str] = tuple(AGENT_OF_B),
                      control: bool = True, flush: t.Callable[[], None] = lambda: None) -> dict[str, list[str]]:
    """Forge B's-VNI frames to each B container in ``targets``: for each (text, send) of ``sends``, one frame per
    container carrying that text, sent by ``send(container, its agent, VXLAN payload)`` (or, where ``send`` only
    collects, by ``flush``, which runs after every send); the texts each container got.

    With ``control``, a frame with the text "control" goes last to each container from B's other agent, through
    WireGuard. One listening window serves every send: a listener ends 3 s after the last datagram it got, so the
    control arriving means every forged frame, sent before it, had its time to arrive."""
    vni = w.sessions["sb"]["vni"]
    listeners = {h: Listener(w.netns("sb", h), "udp", 9999, 3.0, first=15.0 if control else 3.0) for h in targets}
    macs = {h: w.mac(w.netns("sb", h)) for h in targets}

    def send_all(sends: t.Mapping[str, Send]) -> None:
        for text, send in sends.items():
            for host in targets:
                peer = "sub3" if host != "sub3" else "sub2"
                send(host, AGENT_OF_B[host], vxlan_packet(vni, macs[host], w.addr("sb", peer), w.addr("sb", host), 9999,
                                                          text))

    send_all(sends)
    flush()
    if control:
        send_all({"control": _through_wireguard(w)})
    return {h: sorted({text for text, _src in lis.result()}) for h, lis in listeners.items()}


def _sender(netns: str, code: str, *args: str) -> None:
    p = ns_python(netns, code, *args)
    assert p.returncode == 0, p.stderr


def _sent6(netns: str, entries: t.Sequence[t.Sequence[str]]) -> None:
    """SEND6 of ``entries`` from ``netns`` as this machine's root: every one must be sent."""
    p = ns_python(netns, SEND6, json.dumps(entries))
    assert p.returncode == 0 and json.loads(p.stdout) == ["sent"] * len(entries), (p.stdout, p.stderr)


def _through_wireguard(w: World) -> Send:
    """The control: B's other agent sends to the container's agent's tunnel address, i.e. inside WireGuard."""
    return lambda host, agent, pkt: _sender(w.agents[OTHER_AGENT_OF_B[agent]]["netns"], SEND, pkt.hex(),
                                            _tunnel(w, agent))


#: Which of the markers (JSON list) any frame on any interface of the netns carries, from "ready" until a line (or EOF)
#: on stdin: the frames that reached an agent, whatever its rules then do with them (AF_PACKET sees a frame first).
SEEN = """
import json, select, socket, sys
markers = [m.encode() for m in json.loads(sys.argv[1])]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
print("ready", flush=True)
seen = set()
def take():
    frame = s.recv(65535)
    seen.update(m.decode() for m in markers if m in frame)
while True:
    ready = select.select([s, sys.stdin], [], [])[0]
    if sys.stdin in ready:  # the end: what is queued still counts
        s.setblocking(False)
        try:
            while True:
                take()
        except BlockingIOError:
            break
    take()
print(json.dumps(sorted(seen)), flush=True)
"""


@contextlib.contextmanager
def _seen_on(netns: str, markers: t.Sequence[str]) -> t.Iterator[t.Callable[[], list[str]]]:
    """What :data:`SEEN` finds in ``netns`` while the block runs: ``seen()`` after the block."""
    proc = subprocess.Popen(["nsenter", "--net=/run/netns/" + netns, "--", sys.executable, "-c", SEEN,
                             json.dumps(list(markers))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield lambda: out
        out += json.loads(proc.communicate("end\n", timeout=30)[0].strip().splitlines()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _ipv6_forwarding(namespaces: t.Sequence[str]) -> t.Iterator[None]:
    """IPv6 forwarding on in ``namespaces`` (agents'), as it was after."""
    def sysctl(ns: str, *arg: str) -> str:
        return subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n"] + list(arg), capture_output=True, text=True,
                              check=True).stdout.strip()
    before = {ns: sysctl(ns, "net.ipv6.conf.all.forwarding") for ns in namespaces}
    try:
        for ns in namespaces:
            sysctl(ns, "-w", "net.ipv6.conf.all.forwarding=1")
        yield
    finally:
        for ns, value in before.items():
            sysctl(ns, "-w", "net.ipv6.conf.all.forwarding=" + value)


#: IPv6 all-nodes (ff02::1) on Ethernet: the agent's bridge takes it in, and a VXLAN socket is bound to any address.
ALL_NODES_MAC = "33:33:00:00:00:01"


def test_vxlan_over_ipv6_from_another_sessions_containers_never_arrives(world: World) -> None:
    """Encrypted, B's VXLAN is IPv6 between its agents' tunnel addresses, taken only from WireGuard. A's containers
    send B's VXLAN to B's agents over IPv6 every way they have. As root of their network namespace with every
    capability (more than a container's root): raw frames to their gateway (A's bridge on their agent) for each B
    agent's tunnel address, and to all nodes (ff02::1: a VXLAN socket is bound to any address), from each agent's
    tunnel address (what an agent's WireGuard or B's rule could take for a peer). A's main1 is on agent1, an agent of B
    (to agent1's tunnel address: delivered locally; to agent2's: routed by agent1 into WireGuard, from agent1's address
    as agent2 expects); A's sub1 is on agent3, no agent of B (routed by agent3 into WireGuard to agent1, its peer
    through A). agent1 and agent3 forward IPv6 for the window: not the namespaces' default, but an agent may route
    IPv6, and the plugin must not count on it not doing so. Inside A's main1's container, as the session user and as
    root (Nomad's default capabilities: no NET_RAW, no NET_ADMIN): the same through an ordinary UDP socket (to each
    tunnel address, and to all nodes on eth0) and a raw one, whatever the container lets through. 0 frames reach B's
    containers. And not VXLAN: A's main1 sends a datagram to agent2's tunnel address as agent1 (routed by agent1),
    A's sub1 one to agent1's as agent3: neither arrives (an agent routes nothing into its WireGuard).

    What stops them (each turned off, with the others that stop the same frames, the test failed): the IPv6 FORWARD
    DROPs of VXLAN and of anything into WireGuard on agent1 and agent3 (frames routed into WireGuard; the datagrams:
    the latter alone); on agent1, the VXLAN chain's DROP of what does not come from WireGuard and the session rule's
    own WireGuard match (frames delivered there); B's peer set in that rule (A's sub1 through agent3 from agent3's
    address, which agent1's WireGuard takes from agent3; and the container's all-nodes datagram, which the session
    user can send). WireGuard's allowed IPs drop a source of another agent than the one that sent it.

    Controls: every forged frame sent from a network namespace reached its agent (seen there before its rules), the
    same frames from B's other agent through WireGuard are delivered (sent last, in the same listening window), and
    each datagram sent by the agent itself arrives.
    IPv4 VXLAN from another session's containers is tested where B's VXLAN is IPv4, without underlay encryption
    (``test_session_network_peer_sets.py``): encrypted, B receives no IPv4 VXLAN at all, whatever the rules."""
    w = world
    tunnel = {a: _tunnel_of(w, "sa" if a == "agent3" else "sb", a) for a in w.agents}
    gateway = {a: w.mac(w.agents[a]["netns"], w.sessions["sa"]["bridge"]) for a in ("agent1", "agent3")}
    a_agent = {h: w.sessions["sa"]["by_host"][h]["agent"] for h in ("main1", "sub1")}
    batches: dict[tuple[str, str], list[list[str]]] = {}

    def collect(sender: str, user: str, entries: t.Callable[[str], list[list[str]]]) -> Send:
        return lambda host, agent, pkt: batches.setdefault((sender, user), []).extend(
            e + [pkt.hex()] for e in entries(agent))

    def raw(sender: str, source: str, to_all: bool) -> t.Callable[[str], list[list[str]]]:
        """A frame from ``source``'s tunnel address to all nodes, or through ``sender``'s gateway to the B agent's."""
        return lambda agent: [["eth0", ALL_NODES_MAC, tunnel[source], "ff02::1"] if to_all else
                              ["eth0", gateway[a_agent[sender]], tunnel[source], tunnel[agent]]]

    sends: dict[str, Send] = {}
    for sender in ("main1", "sub1"):
        for source in sorted(w.agents):
            for to_all in (False, True):
                text = "A's %s, its netns's root, from %s's tunnel address to %s" % (
                    sender, source, "all nodes" if to_all else "B's agent's")
                sends[text] = collect(sender, "netns", raw(sender, source, to_all))
    netns_texts = dict(sends)
    for user in ("work", "root"):
        sends["A's main1's container, as %s" % user] = collect("main1", user, lambda agent: [
            ["", "", "", tunnel[agent]], ["", "", "", "ff02::1%eth0"]] + [
                raw("main1", OTHER_AGENT_OF_B[agent], to_all)(agent)[0] for to_all in (False, True)])
    in_container: dict[str, set[str]] = {}
    # and not VXLAN: a datagram to another agent's tunnel address, as the agent it is routed through (which that
    # agent's WireGuard takes from it), to a port where anything could listen
    routed = {"agent2": ("main1", "agent1"), "agent1": ("sub1", "agent3")}  # to: (from A's, as and through)
    for to, (sender, via) in routed.items():
        batches.setdefault((sender, "netns"), []).append(
            ["eth0", gateway[via], tunnel[via], tunnel[to], ("routed by " + via).encode().hex(), "9998"])

    def flush() -> None:
        def run(key: tuple[str, str]) -> None:
            sender, user = key
            if user == "netns":
                _sent6(w.netns("sa", sender), batches[key])
                return
            engine = w.sessions["sa"]["by_host"][sender]["engine"]
            p = images.podman("exec", "--user", user, engine, "python3", "-c", SEND6, json.dumps(batches[key]),
                              check=False)
            assert p.returncode == 0, p.stderr
            for entry, outcome in zip(batches[key], json.loads(p.stdout)):
                kind = "%s to %s" % ("raw" if entry[0] else "udp", "all nodes" if entry[3].startswith("ff02") else
                                     "a tunnel address")
                in_container.setdefault("%s, %s" % (user, kind), set()).add(outcome)
        with ThreadPoolExecutor(max_workers=len(batches)) as pool:
            list(pool.map(run, batches))
        for to, (_a, via) in routed.items():  # the datagrams' control: the agent itself sends it, through WireGuard
            _sent6(w.agents[via]["netns"], [["", "", "", tunnel[to], b"control".hex(), "9998"]])

    with _ipv6_forwarding([w.agents[a]["netns"] for a in ("agent1", "agent3")]), \
            _seen_on(w.agents["agent1"]["netns"], [t_ for t_ in netns_texts if "main1" in t_]) as seen1, \
            _seen_on(w.agents["agent3"]["netns"], [t_ for t_ in netns_texts if "sub1" in t_]) as seen3:
        plain = {to: subprocess.Popen(["nsenter", "--net=/run/netns/" + w.agents[to]["netns"], "--", sys.executable,
                                       "-c", LISTEN6, "9998", "3.0", "15.0"], stdout=subprocess.PIPE, text=True)
                 for to in routed}
        try:
            assert all(p.stdout is not None and p.stdout.readline().strip() == "ready" for p in plain.values())
            got = _forge_and_listen(w, sends, flush=flush)
            out = {to: p.communicate(timeout=30)[0].strip().splitlines()[-1] for to, p in plain.items()}
            routed_got = {to: {bytes.fromhex(x).decode() for x in json.loads(text)} for to, text in out.items()}
        finally:
            for p in plain.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert all("control" in texts for texts in got.values()), "a control was not delivered: the test proves nothing"
    assert sorted(seen1() + seen3()) == sorted(netns_texts), \
        "a forged frame did not reach its agent (the test proves nothing for it): seen %s" % (seen1() + seen3())
    assert got == {h: ["control"] for h in got}, \
        "B's VXLAN over IPv6 from A's containers reached B: %s (in the container: %s)" % (
            got, {k: sorted(v) for k, v in in_container.items()})
    assert routed_got == {to: {"control"} for to in routed}, \
        "A's containers sent into WireGuard as their agent: %s" % routed_got


def test_forged_vxlan_from_a_host_on_the_underlay_never_arrives(world: World) -> None:
    """The stranger on the underlay knows B's VNI, agents, MACs and addresses: plain VXLAN to B's agents, VXLAN with
    another agent of B as its outer source (raw socket), and IPv6 VXLAN from another agent's tunnel address to an
    agent's tunnel address put on the wire as an Ethernet frame to the agent (as if it had left WireGuard): 0 frames
    reach B's containers. Only what arrives through WireGuard (authenticated by the peer's key) is delivered."""
    w = world
    other = {"agent1": "agent2", "agent2": "agent1"}
    attacks = {
        "plain": lambda host, agent, pkt: _sender(w.stranger, SEND, pkt.hex(), w.agents[agent]["underlay_ip"]),
        "spoofed outer source": lambda host, agent, pkt: _sender(
            w.stranger, SEND_SPOOFED, w.agents[other[agent]]["underlay_ip"], w.agents[agent]["underlay_ip"], pkt.hex()),
        "spoofed tunnel address": lambda host, agent, pkt: _sent6(
            w.stranger, [["eth0", w.mac(w.agents[agent]["netns"]), _tunnel(w, other[agent]), _tunnel(w, agent),
                          pkt.hex()]]),
    }
    got = _forge_and_listen(w, attacks)
    assert all("control" in texts for texts in got.values()), "a control was not delivered: the test proves nothing"
    assert got == {h: ["control"] for h in got}, "VXLAN from the underlay reached B: %s" % got


def test_a_host_on_the_underlay_cannot_join_with_a_wireguard_of_its_own(world: World) -> None:
    """The stranger runs WireGuard itself, with agent1's public key (public: it is in every job) as its peer,
    agent2's tunnel address as its own, and sends B's VXLAN to agent1's tunnel address: agent1 never completes a
    handshake with a key that is not a session peer's, and 0 frames arrive."""
    w = world
    p = _params(w, "sb")
    one, two = (net.layout(p, w.agents[a]["underlay_ip"]) for a in ("agent1", "agent2"))
    name = "baiwgx" + w.tag
    key = subprocess.run(["wg", "genkey"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["ip", "netns", "exec", w.stranger, "wireguard-go", name], capture_output=True, check=True)
    try:
        subprocess.run(["ip", "netns", "exec", w.stranger, "wg", "set", name, "private-key", "/dev/stdin", "peer",
                        one.wg_key, "allowed-ips", one.tunnel + "/128", "endpoint",
                        "%s:%d" % (w.agents["agent1"]["underlay_ip"], net.WIREGUARD_PORT)],
                       input=key + "\n", text=True, check=True)
        subprocess.run(["ip", "-n", w.stranger, "-batch", "-"], text=True, check=True,
                       input="addr add %s/48 dev %s nodad\nlink set %s up\n" % (two.tunnel, name, name))
        got = _forge_and_listen(w, {"own wireguard": lambda host, agent, pkt: _sender(w.stranger, SEND, pkt.hex(),
                                                                                      one.tunnel)},
                                ("main1", "sub1"), control=False)
        assert got == {h: [] for h in got}, "VXLAN through the stranger's own WireGuard reached B: %s" % got
        shakes = subprocess.run(["ip", "netns", "exec", w.stranger, "wg", "show", name, "latest-handshakes"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert shakes == [one.wg_key, "0"], shakes  # agent1 answered no handshake
    finally:
        subprocess.run(["ip", "-n", w.stranger, "link", "del", name], capture_output=True, check=False)
        for _ in range(100):
            if not local_agents.wireguard_processes(name):
                break
            __import__("time").sleep(0.02)


#: Raw IPv6 (IPPROTO_RAW: the header is ours) from ``src`` to ``dst`` through whatever route the netns has (WireGuard
#: here): for each (shape, hex payload) of the JSON list, three times UDP to ``dport`` carrying the payload, after the
#: extension headers of the shape. argv = JSON list, src6, dst6, dport.
SEND_SHAPED6 = """
import json, os, socket, struct, sys
pairs, src, dst, dport = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
s6, d6 = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
def options(nh, size):  # an options header of ``size`` bytes: one skippable option (type 0x1e) filling it
    return struct.pack("!BBBB", nh, size // 8 - 1, 0x1E, size - 4) + b"\\0" * (size - 4)
def frag(nh, offset, more, ident):
    return struct.pack("!BBHI", nh, 0, (offset // 8) << 3 | more, ident)
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
for shape, payload in pairs:
    payload = bytes.fromhex(payload)
    udp = struct.pack("!HHHH", 4789, dport, 8 + len(payload), 0) + payload
    data = s6 + d6 + struct.pack("!I3xB", len(udp), 17) + udp + (b"\\0" if len(udp) % 2 else b"")
    c = sum(struct.unpack("!%dH" % (len(data) // 2), data)); c = (c >> 16) + (c & 0xFFFF); c = ~(c + (c >> 16)) & 0xFFFF
    udp = udp[:6] + struct.pack("!H", c or 0xFFFF) + udp[8:]
    ident = struct.unpack("!I", os.urandom(4))[0]
    packets = {  # (next header of the IPv6 header, what follows it) per packet
        "plain": [(17, udp)],
        "destination options, 8 bytes": [(60, options(17, 8) + udp)],
        "destination options, 24 bytes": [(60, options(17, 24) + udp)],
        "hop-by-hop options": [(0, options(17, 8) + udp)],
        "atomic fragment": [(44, frag(17, 0, 0, ident) + udp)],
        "two fragments": [(44, frag(17, 0, 1, ident) + udp[:48]), (44, frag(17, 48, 0, ident) + udp[48:])],
    }[shape]
    for _ in range(3):
        for nh, rest in packets:
            s.sendto(struct.pack("!IHBB", 6 << 28, len(rest), nh, 64) + s6 + d6 + rest, (dst, 0))
print("sent")
"""
LISTEN6 = """
import json, socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("::", int(sys.argv[1]))); s.settimeout(float(sys.argv[3] if len(sys.argv) > 3 else sys.argv[2]))
print("ready", flush=True)
got = []
try:
    while True:
        got.append(s.recvfrom(65535)[0].hex())
        s.settimeout(float(sys.argv[2]))
except socket.timeout:
    pass
print(json.dumps(got), flush=True)
"""
SHAPES6 = ("destination options, 8 bytes", "destination options, 24 bytes", "hop-by-hop options", "atomic fragment",
           "two fragments")


def _tunnel_of(w: World, session: str, agent: str) -> str:
    return net.layout(_params(w, session), w.agents[agent]["underlay_ip"]).tunnel


def test_vxlan_with_extension_headers_through_wireguard_never_reaches_a_session_of_which_the_sender_is_no_agent(
        world: World) -> None:
    """agent2 is an agent of B, not of A; it shares B, and so a WireGuard peering, with agent1, where A's main1 runs.
    It sends A's VNI to agent1's tunnel address through WireGuard, as plain UDP and behind each shape of extension
    headers (destination options of 8 and 24 bytes, hop-by-hop options, an atomic fragment, two real fragments):
    0 frames reach A's main1. Controls: A's own peer agent3 delivers the plain packet; each shape, sent by agent2 to a
    plain UDP port of agent1's tunnel address, arrives (the kernel accepts it; only the VXLAN chain refuses it).

    Each shape carries its own text, so one listening window tells them apart. The control is sent after every shape
    (by the time it arrives each shape was sent), and the listener ends only 3 s after the last datagram it got."""
    w = world
    one = _tunnel_of(w, "sa", "agent1")
    attacker, peer = _tunnel_of(w, "sb", "agent2"), _tunnel_of(w, "sa", "agent3")

    def pkt(text: str) -> bytes:
        return vxlan_packet(w.sessions["sa"]["vni"], w.mac(w.netns("sa", "main1")), w.addr("sa", "sub1"),
                            w.addr("sa", "main1"), 9999, text)

    forged = {shape: pkt("forged " + shape) for shape in ("plain",) + SHAPES6}
    lis = Listener(w.netns("sa", "main1"), "udp", 9999, 3.0)
    _sender(w.agents["agent2"]["netns"], SEND_SHAPED6, json.dumps([[k, v.hex()] for k, v in forged.items()]),
            attacker, one, "4789")
    _sender(w.agents["agent3"]["netns"], SEND_SHAPED6, json.dumps([["plain", pkt("control").hex()]]), peer, one, "4789")
    got = {text for text, _src in lis.result()}
    assert "control" in got, "A's own peer's VXLAN was not delivered: the test proves nothing"
    assert got == {"control"}, "VXLAN of A from agent2 (no agent of A) reached A's main1: %s" % sorted(got)
    # each shape is well-formed: it reaches a plain socket of agent1's tunnel address
    plain = {shape: pkt("to a plain socket " + shape) for shape in SHAPES6}
    lis6 = subprocess.Popen(["nsenter", "--net=/run/netns/" + w.agents["agent1"]["netns"], "--", sys.executable,
                             "-c", LISTEN6, "9998", "3.0"], stdout=subprocess.PIPE, text=True)
    assert lis6.stdout is not None and lis6.stdout.readline().strip() == "ready"
    _sender(w.agents["agent2"]["netns"], SEND_SHAPED6, json.dumps([[k, v.hex()] for k, v in plain.items()]),
            attacker, one, "9998")
    out, _ = lis6.communicate(timeout=30)
    arrived = json.loads(out.strip().splitlines()[-1])
    assert {shape: arrived.count(p.hex()) for shape, p in plain.items()} == {shape: 3 for shape in plain}, \
        "a shape did not reach agent1: %s" % arrived


CAPTURE = """
import json, socket, struct, sys, time
marker, seconds = sys.argv[1].encode(), float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL, every interface of the netns
s.settimeout(0.2)
print("ready", flush=True)
seen, kinds, frames, end = False, set(), 0, time.time() + seconds
while time.time() < end:
    try:
        frame = s.recv(65535)
    except socket.timeout:
        continue
    frames += 1
    seen = seen or marker in frame
    if frame[12:14] == b"\\x08\\x00":
        ihl = (frame[14] & 15) * 4
        src, dst, proto = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34]), frame[23]
        sport, dport = struct.unpack("!HH", frame[14 + ihl:18 + ihl]) if proto in (6, 17) else (0, 0)
        kinds.add("%d %s:%d>%s:%d" % (proto, src, sport, dst, dport))
    elif frame[12:14] == b"\\x86\\xdd" and frame[20] == 17:
        kinds.add("udp6 >%d" % struct.unpack("!H", frame[56:58])[0])
print(json.dumps({"marker": seen, "frames": frames, "kinds": sorted(kinds)}), flush=True)
"""
EXCHANGE = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(20):
    s.sendto(sys.argv[2].encode() * 8, (sys.argv[1], 9999)); time.sleep(0.02)
print("sent")
"""


def _capture(w: World, marker: str, exchange: t.Callable[[], None]) -> dict[str, t.Any]:
    underlay = local_agents.namespaces(w.fabric, [])[""]
    cap = subprocess.Popen(["nsenter", "--net=/run/netns/" + underlay, "--", sys.executable, "-c", CAPTURE, marker,
                            "2.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert cap.stdout is not None and cap.stdout.readline().strip() == "ready"
        exchange()
        out, _ = cap.communicate(timeout=30)
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    return json.loads(out.strip().splitlines()[-1])


def test_the_underlay_sees_only_wireguard_between_agents(world: World) -> None:
    """A capture of every frame on the underlay while B's main1 (agent1) sends a marker to B's sub2 (agent2): the
    marker never appears; what crosses is UDP between the agents' WireGuard ports, no VXLAN."""
    w = world
    marker = "MARKER-" + uuid.uuid4().hex[:12]
    lis = Listener(w.netns("sb", "sub2"), "udp", 9999, 3.0)
    got = _capture(w, marker, lambda: _sender(w.netns("sb", "main1"), EXCHANGE, w.addr("sb", "sub2"), marker))
    received = lis.result()
    assert received and all(marker in data for data, _peer in received), "the marker did not cross: proves nothing"
    assert not got["marker"], "the marker crossed the underlay in plaintext"
    underlay_ips = {a["underlay_ip"] for a in w.agents.values()}
    ipv4 = [k for k in got["kinds"] if not k.startswith("udp6")]
    assert ipv4 and all(k.startswith("17 ") for k in ipv4), got["kinds"]
    for kind in ipv4:
        src, dst = kind.split()[1].split(">")
        assert {src.split(":")[0], dst.split(":")[0]} <= underlay_ips, kind
        assert src.split(":")[1] == dst.split(":")[1] == str(net.WIREGUARD_PORT), kind
    assert not [k for k in got["kinds"] if k.endswith(">4789")], got["kinds"]
    # control: the same capture sees a marker sent in plaintext on the underlay
    plain = _capture(w, marker, lambda: _sender(w.stranger, EXCHANGE, w.agents["agent1"]["underlay_ip"], marker))
    assert plain["marker"], "the capture does not see the underlay: the test proves nothing"


def test_a_killed_wireguard_go_makes_the_session_degraded_with_the_reason(world: World) -> None:
    """wireguard-go of agent3 (session A's only) is killed: the interface goes with it, A is DEGRADED naming it,
    CHECK of A's container there fails; recreating A (what ``state: present`` does) makes the interface again."""
    w = world
    wg = lnet.wireguard_interface(w.fabric, "agent3")
    pids = [p for p in local_agents.wireguard_processes(wg)]
    assert pids, "agent3 runs no wireguard-go for %s" % wg
    assert rt.session_status("sa", w.state_root)["state"] == "RUNNING"
    for pid in pids:
        os.kill(pid, 9)
    for _ in range(100):
        if subprocess.run(["ip", "-n", w.agents["agent3"]["netns"], "link", "show", wg], capture_output=True).returncode:
            break
        __import__("time").sleep(0.05)
    st = rt.session_status("sa", w.state_root)
    assert st["state"] == "DEGRADED", st["state"]
    failed = {c["hostname"]: c["reason"] for c in st["containers"] if c["state"] == "failed"}
    assert sorted(failed) == ["sub1", "sub2"] and all("WireGuard interface %s of agent agent3 is gone" % wg in r
                                                      for r in failed.values()), failed
    assert rt.session_status("sb", w.state_root)["state"] == "RUNNING"  # B has no container on agent3
    rt.destroy_session("sa", w.state_root)
    w.session("sa", {"main1": "agent1", "sub1": "agent3", "sub2": "agent3"})
    assert rt.session_status("sa", w.state_root)["state"] == "RUNNING" and local_agents.wireguard_processes(wg)
    assert _probe(w.netns("sa", "sub1"), w.addr("sa", "main1")) == "open"


# ---------------------------------------------------------------------------- 4. reachability

def _probe(netns: str, address: str, port: int = PORT) -> str:
    return ns_python(netns, PROBE, address, str(port)).stdout.split()[0]


def test_sessions_and_nomads_bridge_cannot_reach_each_other(world: World) -> None:
    w = world
    nomad_listener = Listener(w.nomad_alloc, "tcp", 8080, 12.0)
    pairs = {  # (from netns, to address, port): expected
        (w.netns("sa", "main1"), w.addr("sb", "main1"), PORT): "closed",  # same agent
        (w.netns("sa", "main1"), w.addr("sb", "sub2"), PORT): "closed",   # across agents
        (w.netns("sa", "sub1"), w.addr("sb", "main1"), PORT): "closed",   # from an agent B is not on
        (w.netns("sb", "main1"), w.addr("sa", "main1"), PORT): "closed",
        (w.netns("sb", "sub2"), w.addr("sa", "sub1"), PORT): "closed",
        (w.netns("sb", "main1"), w.nomad_ip, 8080): "closed",             # into Nomad's bridge
        (w.netns("sa", "main1"), w.nomad_ip, 8080): "closed",
        (w.nomad_alloc, w.addr("sb", "main1"), PORT): "closed",            # out of Nomad's bridge
        (w.nomad_alloc, w.addr("sa", "main1"), PORT): "closed",
        # controls: inside a session everything is open, and the Nomad allocation does listen
        (w.netns("sb", "main1"), w.addr("sb", "sub3"), PORT): "open",
        (w.netns("sa", "sub2"), w.addr("sa", "main1"), PORT): "open",
        (w.agents["agent1"]["netns"], w.nomad_ip, 8080): "open",
    }
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = dict(zip(pairs, pool.map(lambda k: _probe(*k), pairs)))
    wrong = {k: v for k, v in got.items() if v != pairs[k]}
    assert not wrong, wrong
    nomad_listener.stop()
    # main1's published port is reachable (the relay on this machine)
    for session in ("sa", "sb"):
        info = w.sessions[session]
        p = subprocess.run(["ssh", "-F", info["ssh_config"], "main1", "hostname"], capture_output=True, text=True,
                           timeout=30, check=False)
        assert p.stdout.strip() == "main1", p.stderr


# ---------------------------------------------------------------------------- 5. egress

def test_session_containers_reach_outside_the_session_through_their_agent(world: World) -> None:
    w = world
    listener = Listener(w.stranger, "tcp", 8080, 4.0)
    assert _probe(w.netns("sb", "sub2"), STRANGER_IP, 8080) == "open"
    assert _probe(w.netns("sa", "main1"), STRANGER_IP, 8080) == "open"
    peers = sorted(p for _, p in listener.result())
    # NAT'd: the stranger sees the agents, not the containers' session addresses
    assert peers == sorted([w.agents["agent2"]["underlay_ip"], w.agents["agent1"]["underlay_ip"]])


# ---------------------------------------------------------------------------- 6. DEL alone cleans an agent

def test_cni_del_of_every_container_leaves_nothing_on_any_agent(world: World) -> None:
    w = world
    before = {a: w.agent_state(a) for a in w.agents}
    info = w.session("sc", {"main1": "agent2", "sub1": "agent3", "sub2": "agent3"})
    during = {a: w.agent_state(a) for a in w.agents}
    assert during["agent2"] != before["agent2"] and during["agent3"] != before["agent3"]
    for c in info["containers"]:  # what Nomad's client does when an allocation stops: DEL, no CNI_ARGS
        agent = w.agents[c["agent"]]
        with open(os.path.join(w.fabric, "cni", c["agent"], "backendai.conflist"), encoding="utf-8") as f:
            conf = json.load(f)
        att = Attachment(c["netns"], "/run/netns/" + c["netns"], info["state_dir"],
                         agent_netns="/run/netns/" + agent["netns"], cni_path=os.path.join(w.fabric, "bin") + ":/usr/lib/cni")
        assert cni_del(conf, att, os.path.join(info["state_dir"], "cni", c["hostname"] + ".json")) == []
    assert {a: w.agent_state(a) for a in w.agents} == before
    rt.destroy_session("sc", w.state_root)  # the containers' processes and namespaces (DEL again: a no-op)
    del w.sessions["sc"]
    assert {a: w.agent_state(a) for a in w.agents} == before


@contextlib.contextmanager
def _claimed_slots(w: World, count: int, start: int) -> t.Iterator[list[tuple[dict[str, str], int]]]:
    """``count`` owners, each with a slot claimed from ``start`` on; released (and the owners removed) after.

    Owners look alive to claim_slot (a state dir with a journal): a claim whose state dir is gone is stale and
    taken back, so owner i+1 could take owner i's slot when a slot of the range is busy."""
    homes = [tempfile.mkdtemp(prefix="bai-t-owner-", dir=w.fabric) for _ in range(count)]
    owners = [{"state_dir": home, "session_id": str(uuid.uuid4())} for home in homes]
    try:
        for home in homes:
            open(os.path.join(home, "journal"), "w").close()
        yield [(o, lnet.claim_slot(os.path.join(w.fabric, "slots"), o, start + i, [])) for i, o in enumerate(owners)]
    finally:
        for o in owners:
            lnet.release_slots(os.path.join(w.fabric, "slots"), o)
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("rename", [1, 2], ids=["container-record", "session-record"])
def test_del_after_add_killed_mid_write_leaves_nothing(world: World, rename: int) -> None:
    """An ADD SIGKILLed between writing a state file's temporary copy and renaming it (the container's record
    is the first rename, the new session's the second): the container's DEL still leaves the agent as before."""
    w, agent = world, "agent3"
    before = w.agent_state(agent)
    name = "bai-t-%s-k%d" % (w.tag, rename)
    w.made.append(name)
    subprocess.run(["ip", "netns", "add", name], check=True)
    with _claimed_slots(w, 1, 1100) as claims:
        (owner, slot), = claims
        params = net.make_params(owner["session_id"], slot, [w.agents[agent]["underlay_ip"]])
        args = net.nomad_cni_args(net.job_args(_key(w, agent), "load", "killed", "g", params), "local", "load", "killed", "g",
                                  str(uuid.uuid4()))
        killed = _plugin(w, agent, "ADD", name, name, args, killed_at_rename=rename)
        assert killed["rc"] == -9, killed
        left = [f for f in w.agent_state(agent)["files"] if f not in before["files"]]
        assert any(f.endswith(".tmp") for f in left), left  # the kill landed between a write and its rename
        deleted = _plugin(w, agent, "DEL", name, name, "")
        assert deleted["rc"] == 0, deleted
        assert w.agent_state(agent) == before


# ---------------------------------------------------------------------------- 7. concurrency

@pytest.mark.parametrize("sessions", [1, 4])
def test_16_concurrent_adds_and_dels_on_one_agent(world: World, sessions: int) -> None:
    w = world
    agent = "agent3"
    before = w.agent_state(agent)
    key = _key(w, agent)
    names = ["bai-t-%s-%d-c%02d" % (w.tag, sessions, i) for i in range(16)]
    w.made += names
    subprocess.run(["ip", "-batch", "-"], input="".join("netns add %s\n" % n for n in names), text=True, check=True)
    try:
        with _claimed_slots(w, sessions, 1000) as claims:
            params = [net.make_params(o["session_id"], s, [w.agents[agent]["underlay_ip"]]) for o, s in claims]

            def add(i: int) -> dict[str, t.Any]:
                p = params[i % sessions]
                args = net.nomad_cni_args(net.job_args(key, "load", "job%d" % (i % sessions), "g%d" % i, p), "local",
                                          "load", "job%d" % (i % sessions), "g%d" % i, str(uuid.uuid4()))
                return _plugin(w, agent, "ADD", names[i], names[i], args)

            with ThreadPoolExecutor(max_workers=16) as pool:
                results = list(pool.map(add, range(16)))
            assert all(r["rc"] == 0 for r in results), [r for r in results if r["rc"]]
            addresses = [r["out"]["ips"][0]["address"] for r in results]
            assert len(set(addresses)) == 16
            # containers of one session reach each other across the bridge
            first, other = results[0]["out"]["ips"][0]["address"].split("/")[0], names[sessions]
            lis = Listener(names[0], "tcp", 7000, 4.0)
            assert _probe(other, first, 7000) == "open"
            lis.stop()
            with ThreadPoolExecutor(max_workers=16) as pool:
                dels = list(pool.map(lambda i: _plugin(w, agent, "DEL", names[i], names[i], ""), range(16)))
            assert all(r["rc"] == 0 for r in dels), [r for r in dels if r["rc"]]
            assert w.agent_state(agent) == before
    finally:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join("netns del %s\n" % n for n in names), text=True,
                       check=False, capture_output=True)
