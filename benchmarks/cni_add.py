#!/usr/bin/env python3
"""CNI ADD time per container: the session network plugin against the plain reference chain, same run.

Inside an agent namespace of its own (nothing is touched on this machine's namespace), for each
round: one container is ADDed through the agent's ``backendai.conflist`` (loopback, the
``backendai`` plugin with its signed CNI_ARGS; portmap is skipped without port mappings, as the
runtime does), one through the same conflist with ``"identity": "nomad"`` (the plugin then reads
the allocation and its job's allocations from the local Nomad agent's API: here the Nomad API
double of tests/support/nomad_double, started inside the agent's namespace at 127.0.0.1, standing in for
the agent's local Nomad; CNI_CONTAINERID is the allocation ID, as Nomad calls CNI), and one
through the plain chain Nomad's bridge mode runs (loopback, bridge + host-local, firewall),
alternately, so that all see the same machine load. The first ADD of each chain also makes its
bridge (and, for the plugin, the session's rules): reported apart. Everything is DELeted and the
namespaces removed at the end. Needs root.

    sudo .venv/bin/python benchmarks/cni_add.py --containers 24

Targets: median ADD of the plugin / median ADD of the plain chain <= 1.5; median ADD with the
allocation look-up / median ADD without it (the local runtime's admission, what every ADD did
before the look-up) <= 1.5.

``--scale 2,1024 [--rounds 7]`` instead measures the ADD of a container of a dispersed session of N containers on N
agents (args version 4, the look-up against the double, no underlay encryption): the session's job is the one
``render_job`` makes (signed), registered in the double with a node per agent; the container is the one the
plan put on the bench agent, so its ADD is the session's first on the agent: the two list-stub look-ups, the
agent table (once per session on an agent) and the session's bridge and VXLAN device to its N-1 peers (a forwarding
entry per peer and the session's peer set, its one VXLAN rule; underlay addresses in 127.1.0.0/16: nothing leaves
the bench agent's namespace). It is DELeted after each ADD (the session leaves the agent), and the sizes take
turns in each round, the order reversed every other round (each size follows the other's teardown as often).
Reported per N: the median ADD, the bytes the ADD read from the double (look-ups and table
apart), and what ``GET /v1/allocation/:id``, the look-up before, would have read (Nomad's Allocation with its
embedded Job); and the load average before and after (the machine may be shared: more rounds steady the medians).
Targets: look-up bytes <= 16 KB at every N; median ADD at the largest N / at the smallest <= 1.2.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import typing as t
import urllib.request
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
from ansible_collections.backendai.cluster.plugins.module_utils._local import agent_network as lnet  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (  # noqa: E402
    CNI_PATH,
    Attachment,
    cni_add,
    cni_del,
)

from nomad_double.server import NomadAPIDouble  # noqa: E402

AGENT_IP = "127.0.0.1"
AGENT_NAME = "bench"
TOKEN = "bench-read-job-token"
KINDS = ("plugin", "lookup", "plain")


def in_netns(netns: str, call: t.Callable[[], t.Any]) -> t.Any:
    """``call()`` in a thread moved into network namespace ``netns`` (setns(2); sockets it makes stay there)."""
    libc, out = ctypes.CDLL(None, use_errno=True), []

    def run() -> None:
        fd = os.open("/run/netns/" + netns, os.O_RDONLY)
        try:
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                raise OSError(ctypes.get_errno(), "setns")
            out.append(call())
        finally:
            os.close(fd)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    return out[0]


def register(double: NomadAPIDouble, groups: int) -> t.List[str]:
    """A job of ``groups`` groups pinned to the bench agent in the double; their allocation IDs, in group order."""
    job = {"ID": "bench", "Name": "bench", "Type": "service", "Datacenters": ["dc1"], "TaskGroups": [
        {"Name": "g%d" % i, "Count": 1, "Networks": [{"Mode": "cni/backendai"}],
         "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": AGENT_NAME, "Operand": "="}],
         "Tasks": [{"Name": "main", "Driver": "docker", "Config": {"image": "busybox:1.36"},
                    "Resources": {"CPU": 10, "MemoryMB": 16}}]} for i in range(groups)]}
    req = urllib.request.Request(double.url + "/v1/jobs", data=json.dumps({"Job": job}).encode(), method="PUT",
                                 headers={"X-Nomad-Token": TOKEN})
    with urllib.request.urlopen(req, timeout=30):
        pass
    by_group = {a["TaskGroup"]: a["ID"] for a in double.allocations_of("bench")}
    return [by_group["g%d" % i] for i in range(groups)]


def plain_conf(work: str) -> dict:
    return {"cniVersion": "1.0.0", "name": "plain", "plugins": [
        {"type": "loopback"},
        {"type": "bridge", "bridge": "baibenchplain", "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.231.254.0/24"}]], "dataDir": work + "/ipam"}},
        {"type": "firewall", "backend": "iptables"}]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--containers", type=int, default=24, help="containers per chain")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    tag = uuid.uuid4().hex[:6]
    agent = "bai-bench-%s" % tag
    names = {kind: ["bai-bench-%s-%s%02d" % (tag, {"plugin": "s", "lookup": "n", "plain": "r"}[kind], i)
                    for i in range(args.containers)] for kind in KINDS}
    times: dict = {kind: [] for kind in KINDS}
    double = NomadAPIDouble(token=TOKEN)
    double.add_node(AGENT_NAME, address=AGENT_IP)
    with tempfile.TemporaryDirectory(prefix="bai-cni-bench-") as work:
        made = [agent] + [n for kind in KINDS for n in names[kind]]
        conflist = lnet.install(work, [(AGENT_NAME, AGENT_IP, 1500)], egress=False, uplinks=[])[AGENT_NAME]
        with open(conflist, encoding="utf-8") as f:
            plugin_conf = json.load(f)
        with open(os.path.join(work, "nomad.token"), "w", encoding="ascii") as f:
            f.write(TOKEN + "\n")
        key = net.signing_key(net.read_key(os.path.join(work, "network.key")), AGENT_NAME)
        # the session the plugin chains attach to: one for the local runtime's, one for the look-up's (other VNIs)
        params = {"plugin": net.make_params(str(uuid.uuid4()), 7, [AGENT_IP]),
                  "lookup": net.make_params(str(uuid.uuid4()), 8, [AGENT_IP])}
        atts: dict = {kind: [] for kind in KINDS}
        confs: dict = {"plain": plain_conf(work)}
        try:
            subprocess.run(["ip", "-batch", "-"], input="".join("netns add %s\n" % n for n in made), text=True,
                           check=True)
            subprocess.run(["ip", "-n", agent, "link", "set", "lo", "up"], check=True)
            in_netns(agent, double.start)  # the double listens at 127.0.0.1 of the agent's namespace
            allocs = in_netns(agent, lambda: register(double, args.containers))
            confs["plugin"] = plugin_conf
            confs["lookup"] = json.loads(json.dumps(plugin_conf))
            confs["lookup"]["plugins"][1].update(identity="nomad", nomadAddr=double.url,
                                                 nomadTokenFile=os.path.join(work, "nomad.token"))
            for i in range(args.containers):
                for kind in KINDS:
                    ns, container, cni_args = names[kind][i], names[kind][i], ""
                    if kind != "plain":
                        if kind == "lookup":
                            container = allocs[i]
                        cni_args = net.nomad_cni_args(net.job_args(key, "default", "bench", "g%d" % i, params[kind]),
                                                      "global", "default", "bench", "g%d" % i, allocs[i])
                    att = Attachment(container, "/run/netns/" + ns, work, agent_netns="/run/netns/" + agent,
                                     cni_args=cni_args,
                                     cni_path=(os.path.join(work, "bin") + os.pathsep + CNI_PATH) if kind != "plain"
                                     else CNI_PATH)
                    t0 = time.perf_counter()
                    cni_add(confs[kind], att, os.path.join(work, container + ".json"))
                    times[kind].append(time.perf_counter() - t0)
                    atts[kind].append(att)
        finally:
            for kind in KINDS:
                for att in atts[kind]:
                    cni_del(confs[kind], att, os.path.join(work, att.container_id + ".json"))
            double.stop()
            subprocess.run(["ip", "-force", "-batch", "-"], input="".join("netns del %s\n" % n for n in made),
                           text=True, check=False)
    print("CNI ADD per container, %d containers per chain (seconds)" % args.containers)
    label = {"plugin": "plugin (no look-up: the local runtime's admission)",
             "lookup": "plugin with the allocation look-up (Nomad API double)", "plain": "plain bridge chain"}
    for kind in KINDS:
        rest = times[kind][1:]
        print("  %-55s first %.4f   median of the rest %.4f   min %.4f   max %.4f"
              % (label[kind], times[kind][0], statistics.median(rest), min(rest), max(rest)))
    med = {kind: statistics.median(times[kind][1:]) for kind in KINDS}
    print("  ratio plugin/plain (median of the rest): %.2f   (target <= 1.5)" % (med["plugin"] / med["plain"]))
    print("  ratio look-up/no look-up (median of the rest): %.2f   (target <= 1.5)" % (med["lookup"] / med["plugin"]))
    print("  ratio look-up/plain (median of the rest): %.2f" % (med["lookup"] / med["plain"]))
    print("  ratio plugin/plain (first ADD, which makes the bridge and rules): %.2f"
          % (times["plugin"][0] / times["plain"][0]))
    return 0


def _register_rendered(double: NomadAPIDouble, job: dict) -> None:
    req = urllib.request.Request(double.url + "/v1/jobs", data=json.dumps({"Job": job}).encode(), method="PUT",
                                 headers={"X-Nomad-Token": TOKEN})
    with urllib.request.urlopen(req, timeout=600):
        pass


def scale(sizes: t.List[int], rounds: int) -> int:
    """See the module's docstring (``--scale``)."""
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import JobNetwork
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session, render_session
    from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec

    tag = uuid.uuid4().hex[:6]
    agent = "bai-bench-%s" % tag
    peers = ["peer-%05d" % i for i in range(max(sizes) - 1)]
    ips = {AGENT_NAME: AGENT_IP}
    ips.update({p: net.ip4_text(0x7F010000 + i + 1) for i, p in enumerate(peers)})
    double = NomadAPIDouble(token=TOKEN)
    for name, ip in ips.items():
        double.add_node(name, cpu=1000, memory=2048, address=ip)
    times: dict = {(n, k): [] for n in sizes for k in (0, 1)}
    load_before = "%.2f, %.2f, %.2f" % os.getloadavg()
    read: dict = {}
    embedded: dict = {}
    with tempfile.TemporaryDirectory(prefix="bai-cni-scale-") as work:
        conflist = lnet.install(work, [(AGENT_NAME, AGENT_IP, 1500)], egress=False, uplinks=[])[AGENT_NAME]
        with open(conflist, encoding="utf-8") as f:
            conf = json.load(f)
        with open(os.path.join(work, "nomad.token"), "w", encoding="ascii") as f:
            f.write(TOKEN + "\n")
        cluster_key = net.read_key(os.path.join(work, "network.key"))
        made = [agent] + ["%s-c%d-%d" % (agent, n, k) for n in sizes for k in (0, 1)]
        atts: dict = {}
        try:
            subprocess.run(["ip", "-batch", "-"], input="".join("netns add %s\n" % n for n in made), text=True,
                           check=True)
            subprocess.run(["ip", "-n", agent, "link", "set", "lo", "up"], check=True)
            in_netns(agent, double.start)
            conf["plugins"][1].update(identity="nomad", nomadAddr=double.url,
                                      nomadTokenFile=os.path.join(work, "nomad.token"))
            for i, n in enumerate(sorted(sizes, reverse=True)):
                spec = {"name": "scale-%d" % n, "image": "python:3.11-slim", "cluster_size": n,
                        "cluster_mode": "multi-node", "resources": {"cpu": 100, "memory": 128},
                        "placement": {"strategy": "dispersed"}, "network": {"underlay_encryption": "none"}}
                # room for one container on every agent but the bench agent's two: the dispersed extreme, and a second
                # container on the bench agent that joins the session's network there
                agents = [{"name": a, "cpu": 100, "memory": 128} for a in peers[:n - 2]]
                agents.insert(0, {"name": AGENT_NAME, "cpu": 200, "memory": 256})
                plan = plan_session(parse_spec(spec), agents)
                assert plan.placed and len(plan.agents_used) == n - 1, plan.reason
                network = JobNetwork(slot=i * 16, slots=16, underlay=ips, key=cluster_key)
                rendered = render_session(plan, "", "", network, with_hcl=False)
                for path, items in rendered.table:
                    double.model.put_variable("default", path, items, None, None)
                job = t.cast(dict, rendered.job)
                in_netns(agent, lambda: _register_rendered(double, job))
                mine = [g for g in job["TaskGroups"] if g["Meta"]["backendai_agent"] == AGENT_NAME]
                assert len(mine) == 2, [g["Name"] for g in mine]
                atts[n] = []
                for k, group in enumerate(mine):
                    alloc, = [a["ID"] for a in double.allocations_of(job["ID"]) if a["TaskGroup"] == group["Name"]]
                    embedded[n] = len(json.dumps(double.model.allocation(alloc), separators=(",", ":")))
                    cni_args = net.nomad_cni_args(group["Networks"][0]["CNI"]["Args"], "global", "default", job["ID"],
                                                  group["Name"], alloc)
                    atts[n].append(Attachment(alloc, "/run/netns/%s-c%d-%d" % (agent, n, k), work,
                                              agent_netns="/run/netns/" + agent, cni_args=cni_args,
                                              cni_path=os.path.join(work, "bin") + os.pathsep + CNI_PATH))
            for r in range(rounds):
                for n in (sizes if r % 2 == 0 else sizes[::-1]):  # each size after the other's teardown as often
                    for k, att in enumerate(atts[n]):  # the session's first ADD on the agent, then the second's
                        double.clear_requests()
                        t0 = time.perf_counter()
                        cni_add(conf, att, os.path.join(work, "scale-%d-%d.json" % (n, k)))
                        times[n, k].append(time.perf_counter() - t0)
                        reqs = double.requests
                        read[n, k] = (sum(r.response_bytes for r in reqs if r.path == "/v1/allocations"),
                                      sum(r.response_bytes for r in reqs if r.path.startswith("/v1/var/")))
                    for k, att in reversed(list(enumerate(atts[n]))):
                        cni_del(conf, att, os.path.join(work, "scale-%d-%d.json" % (n, k)))
        finally:
            for n, pair in atts.items():
                for k, att in enumerate(pair):
                    cni_del(conf, att, os.path.join(work, "scale-%d-%d.json" % (n, k)))
            double.stop()
            subprocess.run(["ip", "-force", "-batch", "-"], input="".join("netns del %s\n" % n for n in made),
                           text=True, check=False)
    print("CNI ADD of a container of a session of N containers on N-1 agents, 2 of them on the bench agent: the "
          "session's first ADD there (table read, bridge, VXLAN to N-2 peers) and the second's; %d rounds; load average "
          "%s before, %.2f, %.2f, %.2f after" % ((rounds, load_before) + os.getloadavg()))
    for n in sizes:
        for k, what in ((0, "first "), (1, "second")):
            print("  N=%-5d %s median %.4f s  min %.4f  max %.4f   read: look-ups %5d B (target <= 16384), agent table "
                  "%5d B" % (n, what, statistics.median(times[n, k]), min(times[n, k]), max(times[n, k]),
                             read[n, k][0], read[n, k][1]))
        print("  N=%-5d GET /v1/allocation/:id (the look-up before) would have read %d B" % (n, embedded[n]))
    lo, hi = min(sizes), max(sizes)
    for k, what in ((1, "second (joins the session's network on the agent)"), (0, "first (sets it up: linear in peers)")):
        print("  ratio median ADD N=%d / N=%d, %s: %.2f  (target <= 1.2)"
              % (hi, lo, what, statistics.median(times[hi, k]) / statistics.median(times[lo, k])))
    return 0


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        if "--scale" in sys.argv:
            scale_ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
            scale_ap.add_argument("--scale", required=True, help="session sizes, e.g. 2,1024")
            scale_ap.add_argument("--rounds", type=int, default=7)
            scale_args = scale_ap.parse_args()
            if os.geteuid() != 0:
                print("needs root", file=sys.stderr)
                sys.exit(2)
            sys.exit(scale([int(x) for x in scale_args.scale.split(",")], scale_args.rounds))
        sys.exit(main())
