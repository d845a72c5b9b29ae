#!/usr/bin/env python3
"""CNI ADD time per container: the session network plugin against the plain reference chain, same run.

Inside an agent namespace of its own (nothing is touched on this machine's namespace), for each
round: one container is ADDed through the agent's ``backendai.conflist`` (loopback, the
``backendai`` plugin with its signed CNI_ARGS; portmap is skipped without port mappings, as the
runtime does), one through the same conflist with ``"identity": "nomad"`` (the plugin then reads
the allocation and its job's allocations from the local Nomad agent's API: here the Nomad API
double of tests/nomad_double, started inside the agent's namespace at 127.0.0.1, standing in for
the agent's local Nomad; CNI_CONTAINERID is the allocation ID, as Nomad calls CNI), and one
through the plain chain Nomad's bridge mode runs (loopback, bridge + host-local, firewall),
alternately, so that all see the same machine load. The first ADD of each chain also makes its
bridge (and, for the plugin, the session's rules): reported apart. Everything is DELeted and the
namespaces removed at the end. Needs root.

    sudo .venv/bin/python benchmarks/cni_add.py --containers 24

Targets: median ADD of the plugin / median ADD of the plain chain <= 1.5; median ADD with the
allocation look-up / median ADD without it (the local runtime's admission, what every ADD did
before the look-up) <= 1.5.
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
sys.path.insert(0, os.path.join(REPO, "tests"))

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


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        sys.exit(main())
