#!/usr/bin/env python3
"""CNI ADD time per container: the session network plugin against the plain reference chain, same run.

Inside an agent namespace of its own (nothing is touched on this machine's namespace), for each
round: one container is ADDed through the agent's ``backendai.conflist`` (loopback, the
``backendai`` plugin with its signed CNI_ARGS; portmap is skipped without port mappings, as the
runtime does) and one through the plain chain Nomad's bridge mode runs (loopback, bridge +
host-local, firewall), alternately, so that both see the same machine load. The first ADD of
each chain also makes its bridge (and, for the plugin, the session's rules): reported apart.
Everything is DELeted and the namespaces removed at the end. Needs root.

    sudo .venv/bin/python benchmarks/cni_add.py --containers 24

Target: median ADD of the plugin / median ADD of the plain chain <= 1.5.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.backendai.cluster.plugins.module_utils._local import network as lnet  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import (  # noqa: E402
    CNI_PATH,
    Attachment,
    cni_add,
    cni_del,
)

AGENT_IP = "127.0.0.1"


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
    names = {kind: ["bai-bench-%s-%s%02d" % (tag, {"plugin": "s", "plain": "r"}[kind], i) for i in range(args.containers)]
             for kind in ("plugin", "plain")}
    times: dict = {"plugin": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="bai-cni-bench-") as work:
        made = [agent] + names["plugin"] + names["plain"]
        conflist = lnet.install(work, [("bench", AGENT_IP, 1500)], egress=False, uplinks=[])["bench"]
        with open(conflist, encoding="utf-8") as f:
            plugin_conf = json.load(f)
        key = net.read_key(os.path.join(work, "network.key"))
        params = net.make_params(str(uuid.uuid4()), 7, [AGENT_IP])
        atts: dict = {"plugin": [], "plain": []}
        try:
            subprocess.run(["ip", "-batch", "-"], input="".join("netns add %s\n" % n for n in made), text=True,
                           check=True)
            subprocess.run(["ip", "-n", agent, "link", "set", "lo", "up"], check=True)
            for i in range(args.containers):
                for kind in ("plugin", "plain"):
                    ns = names[kind][i]
                    cni_args = ""
                    if kind == "plugin":
                        cni_args = net.nomad_cni_args(net.job_args(key, "bench", "bench", "g%d" % i, params), "bench",
                                                      "bench", "bench", "g%d" % i, str(uuid.uuid4()))
                    att = Attachment(ns, "/run/netns/" + ns, work, agent_netns="/run/netns/" + agent,
                                     cni_args=cni_args,
                                     cni_path=(os.path.join(work, "bin") + os.pathsep + CNI_PATH) if kind == "plugin"
                                     else CNI_PATH)
                    t0 = time.perf_counter()
                    cni_add(plugin_conf if kind == "plugin" else plain_conf(work), att, os.path.join(work, ns + ".json"))
                    times[kind].append(time.perf_counter() - t0)
                    atts[kind].append(att)
        finally:
            for kind, conf in (("plugin", plugin_conf), ("plain", plain_conf(work))):
                for att in atts[kind]:
                    cni_del(conf, att, os.path.join(work, att.container_id + ".json"))
            subprocess.run(["ip", "-force", "-batch", "-"], input="".join("netns del %s\n" % n for n in made),
                           text=True, check=False)
    print("CNI ADD per container, %d containers per chain (seconds)" % args.containers)
    for kind in ("plugin", "plain"):
        rest = times[kind][1:]
        print("  %-7s first %.4f   median of the rest %.4f   min %.4f   max %.4f"
              % (kind, times[kind][0], statistics.median(rest), min(rest), max(rest)))
    ratio = statistics.median(times["plugin"][1:]) / statistics.median(times["plain"][1:])
    print("  ratio plugin/plain (median of the rest): %.2f   (target <= 1.5)" % ratio)
    print("  ratio plugin/plain (first ADD, which makes the bridge and rules): %.2f"
          % (times["plugin"][0] / times["plain"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
