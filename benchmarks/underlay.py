#!/usr/bin/env python3
"""Session traffic between agents, plain VXLAN against VXLAN inside WireGuard, in the same run.

Two local agents (network namespaces on an underlay of their own, made and removed here), and in each
round two sessions of 4 containers (two per agent), one with ``underlay_encryption: none`` and one with
``wireguard``, made alternately, so both see the same machine load:

* throughput: iperf3 (Debian's package) from main1 (agent1) to sub2 (agent2), ``--seconds`` each;
* round-trip time: a UDP ping-pong of 64 bytes between the same two containers, median of 200;
* bring-up of the session network: the local runtime's CNI ADD of the 4 containers (``timings.network``:
  claim, sign, and the plugin's ADD of every container; for the encrypted session on an agent that carries no
  other, that includes making the agent's WireGuard interface and its peers), per container.

The WireGuard mode is the one that runs (wireguard-go on a kernel without the module). Needs root.

    sudo .venv/bin/python benchmarks/underlay.py --rounds 3 --seconds 3

Target: bring-up per container with WireGuard / plain <= 1.5 (the ``benchmarks/cni_add.py`` target for one
container's ADD; here the ADDs of a multi-node session, the first on each agent included).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt  # noqa: E402

import local_session_dict  # noqa: E402  (tests/: a session given as a dict)
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair  # noqa: E402

HOSTS = {"main1": "agent1", "sub1": "agent1", "sub2": "agent2", "sub3": "agent2"}
PING = """
import socket, statistics, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
rtts = []
for i in range(int(sys.argv[2]) + 20):
    t0 = time.perf_counter(); s.sendto(b"x" * 64, (sys.argv[1], 7777)); s.recvfrom(100)
    if i >= 20:
        rtts.append(time.perf_counter() - t0)
print(statistics.median(rtts) * 1000)
"""
ECHO = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 7777)); s.settimeout(30)
print("ready", flush=True)
try:
    while True:
        data, peer = s.recvfrom(100); s.sendto(data, peer)
except socket.timeout:
    pass
"""


def session(name: str, keys: t.Any, agents: t.Mapping[str, t.Any], encryption: str) -> t.Dict[str, t.Any]:
    sid = str(uuid.uuid4())
    containers = [{"hostname": h, "role": "main" if h == "main1" else "sub", "idx": i if i else 1, "agent": a,
                   "env": {"BACKENDAI_SESSION_ID": sid}, "command": []} for i, (h, a) in enumerate(HOSTS.items())]
    return {"name": name, "session_id": sid, "containers": containers, "mounts": [],
            "agents": {a: agents[a] for a in set(HOSTS.values())}, "underlay_encryption": encryption,
            "ssh": {"port": 2200, "private_key": keys.private_key, "public_key": keys.public_key}}


def in_netns(ns: str, *argv: str, **kw: t.Any) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(["nsenter", "--net=/run/netns/" + ns, "--"] + list(argv), capture_output=True, text=True,
                          **kw)


def measure(info: t.Mapping[str, t.Any], seconds: int) -> t.Dict[str, float]:
    by_host = {c["hostname"]: c for c in info["containers"]}
    src, dst = by_host["main1"]["netns"], by_host["sub2"]["netns"]
    server = subprocess.Popen(["nsenter", "--net=/run/netns/" + dst, "--", "iperf3", "-s", "-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    echo = subprocess.Popen(["nsenter", "--net=/run/netns/" + dst, "--", sys.executable, "-c", ECHO],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        out = in_netns(src, "iperf3", "-c", by_host["sub2"]["address"], "-t", str(seconds), "-J", check=True).stdout
        bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
        rtt = float(in_netns(src, sys.executable, "-c", PING, by_host["sub2"]["address"], "200", check=True).stdout)
    finally:
        for proc in (server, echo):
            proc.kill()
            proc.wait()
    return {"mbit": bps / 1e6, "rtt_ms": rtt, "add_ms": info["timings"]["network"] * 1000 / len(HOSTS)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args()
    for tool in ("iperf3", "wg", "wireguard-go"):
        if not shutil.which(tool):
            sys.exit("%s is not installed (scripts/setup installs it)" % tool)
    tmp = tempfile.mkdtemp(prefix="bai-underlay-")
    agents_root, state_root = os.path.join(tmp, "agents"), os.path.join(tmp, "sessions")
    made = local_agents.create_agents([{"name": a, "cpu": 8000, "memory": 8192} for a in ("agent1", "agent2")],
                                      agents_root)
    agents = {a["name"]: a["local"] for a in made["agents"]}
    keys = generate_keypair()
    results: t.Dict[str, t.List[t.Dict[str, float]]] = {"none": [], "wireguard": []}
    mode = ""
    try:
        for r in range(args.rounds):
            for enc in (("none", "wireguard") if r % 2 == 0 else ("wireguard", "none")):
                name = "bench-%s-%d" % (enc, r)
                info = local_session_dict.create_session(session(name, keys, agents, enc), state_root)
                try:
                    if enc == "wireguard" and not mode:
                        with open(os.path.join(agents_root, "local", "state", "agent1", "wireguard.json"),
                                  encoding="utf-8") as f:
                            mode = json.load(f)["mode"]
                    results[enc].append(measure(info, args.seconds))
                finally:
                    rt.destroy_session(name, state_root)
    finally:
        local_agents.destroy_agents(agents_root, force=True)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {enc: {k: statistics.median(x[k] for x in rows) for k in rows[0]} for enc, rows in results.items()}
    print("underlay between two local agents, %d rounds, medians (WireGuard mode: %s)" % (args.rounds, mode))
    print("%-10s %14s %10s %22s" % ("", "iperf3 Mbit/s", "RTT ms", "CNI ADD ms/container"))
    for enc in ("none", "wireguard"):
        print("%-10s %14.0f %10.3f %22.1f" % (enc, med[enc]["mbit"], med[enc]["rtt_ms"], med[enc]["add_ms"]))
    ratio = med["wireguard"]["add_ms"] / med["none"]["add_ms"]
    print("ratios wireguard/none: throughput %.3f, RTT %.2f, CNI ADD %.2f (target <= 1.5: %s)" % (
        med["wireguard"]["mbit"] / med["none"]["mbit"], med["wireguard"]["rtt_ms"] / med["none"]["rtt_ms"], ratio,
        "met" if ratio <= 1.5 else "NOT met"))
    return 0


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        raise SystemExit(main())
