#!/usr/bin/env python3
"""Bring-up and teardown time of the local runtime, against a minimal shell baseline.

For each size N: create_session() until every container's sshd sends its banner (and
main1's published port does), then destroy_session(); and a minimal shell script that
only does, for N containers, ip netns add + CNI ADD (loopback, bridge, firewall) + sshd,
waits until every sshd accepts a TCP connection, then tears down.  Needs root.

    sudo python3 benchmarks/local_bringup.py --sizes 16,64 --repeat 3

``--engine IMAGE`` measures sessions of a container image instead, through the local backend as the session module
runs it (``LocalBackend.present`` until it returns RUNNING: namespaces, the CNI plugin, the containers started as the
job's tasks by ``_local.task_start``, every container's sshd answering, the status read back; then ``absent``),
against N ``podman run -d`` of the same image started in parallel into namespaces made and attached by the plain CNI
chain (loopback, bridge, firewall), alternately, one of each per round (target: up <= 1.2x the baseline, the median
of the rounds' ratios), e.g. ``--engine localhost/backendai-cluster/test-busybox:bookworm --sizes 16,64``
(``scripts/build-images test-busybox``). Each container asks for this machine's CPU over N (the largest session of
N containers that fits here: the engine's CPU quota is a hard one) and 64 MB.

``--against REV`` instead compares this tree's runtime with the one of an older commit REV (checked
out into a temporary git worktree, removed afterwards): for each size and round, one session with
each tree's own copy of this benchmark (``--json --no-baseline --repeat 1``), alternately, so that both
see the same machine load. It prints the medians and the ratio this/REV of bring-up ("up") and of its
network phase. Target (issue: session networks on one plugin): up within 10 % of the runtime before
the plugin, i.e. ratio <= 1.10 for N = 16 and N = 64, e.g. ``--against 9505143``.
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
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt  # noqa: E402

import local_session_dict  # noqa: E402  (tests/: a session given as a dict)
from revision import alternately  # noqa: E402  (benchmarks/, the script's own folder)
from ansible_collections.backendai.cluster.plugins.module_utils._local.cni import prune_shared_chains  # noqa: E402

IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"

BASELINE = r"""#!/bin/bash
# Minimal bring-up: netns + CNI ADD (loopback, bridge, firewall) + sshd, N containers.
set -eu
N=$1; KEY=$2; WORK=$3; BR=baibench0; NET=baibench
now() { date +%s.%N; }
conf() {  # $1 = plugin json, $2 = prevResult json or empty
  printf '{"cniVersion":"1.0.0","name":"%s"%s,%s' "$NET" "${2:+,\"prevResult\":$2}" "${1#\{}"
}
BRIDGE='{"type":"bridge","bridge":"'$BR'","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.231.254.0/24"}]],"dataDir":"'$WORK'/ipam"}}'
FW='{"type":"firewall","backend":"iptables"}'
cni() {  # $1 = command, $2 = container, $3 = plugin type, $4 = conf
  CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$2 CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni \
    /usr/lib/cni/$3 <<<"$4"
}
cat > "$WORK/sshd_config" <<EOF
Port 2200
HostKey $KEY
AuthorizedKeysFile $KEY.pub
PidFile none
UsePAM no
StrictModes no
EOF
made_privsep=; [ -d /run/sshd ] || { mkdir /run/sshd; made_privsep=1; }
t0=$(now)
for i in $(seq 1 $N); do echo "netns add bench$i"; done | ip -batch -
for i in $(seq 1 $N); do
  ( cni ADD bench$i loopback '{"cniVersion":"1.0.0","name":"'$NET'","type":"loopback"}' >/dev/null
    r=$(cni ADD bench$i bridge "$(conf "$BRIDGE")")
    cni ADD bench$i firewall "$(conf "$FW" "$r")" > "$WORK/res$i"
    if [ -n "${ENGINE_IMAGE:-}" ]; then
      podman run -d --name bench-$$-$i --network ns:/run/netns/bench$i "$ENGINE_IMAGE" sleep 600 >/dev/null
    else
      ip netns exec bench$i /usr/sbin/sshd -D -e -f "$WORK/sshd_config" 2>/dev/null &
    fi
  ) &
done
wait_pids=$(jobs -p); for p in $wait_pids; do wait $p; done
for i in $(seq 1 $N); do
  [ -z "${ENGINE_IMAGE:-}" ] || break  # podman run -d returned once the container started
  ip=$(grep -o '"address": "[0-9.]*' "$WORK/res$i" | cut -d'"' -f4)
  until (exec 3<>/dev/tcp/$ip/2200) 2>/dev/null; do :; done
done
t1=$(now)
for i in $(seq 1 $N); do
  [ -z "${ENGINE_IMAGE:-}" ] || podman rm --force --time 0 bench-$$-$i >/dev/null
  ip netns pids bench$i | xargs -r kill -9
  ( cni DEL bench$i firewall "$(conf "$FW" "$(cat "$WORK/res$i")")"
    cni DEL bench$i bridge "$(conf "$BRIDGE")"
    cni DEL bench$i loopback '{"cniVersion":"1.0.0","name":"'$NET'","type":"loopback"}' ) &
done
wait
for i in $(seq 1 $N); do echo "netns delete bench$i"; done | ip -batch -
ip link delete $BR
t2=$(now)
[ -z "$made_privsep" ] || rmdir /run/sshd
echo "up=$(echo "$t1 - $t0" | bc) down=$(echo "$t2 - $t1" | bc)"
"""


def make_session(name: str, size: int, key: str) -> dict[str, Any]:
    hosts = ["main1"] + ["sub%d" % i for i in range(1, size)]
    sid = str(uuid.uuid4())
    with open(key) as f:
        private = f.read()
    with open(key + ".pub") as f:
        public = f.read()
    containers = []
    for rank, host in enumerate(hosts):
        env = {"BACKENDAI_CLUSTER_HOST": host, "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
               "BACKENDAI_CLUSTER_SIZE": str(size), "WORLD_RANK": str(rank), "MASTER_ADDR": "main1",
               "BACKENDAI_SESSION_ID": sid,
               "TF_CONFIG": json.dumps({"cluster": {"worker": ["%s:12345" % h for h in hosts]},
                                        "task": {"type": "worker", "index": rank}})}
        containers.append({"hostname": host, "role": "main" if rank == 0 else "sub", "idx": max(rank, 1),
                           "agent": "local", "env": env, "command": [], "publish": rank == 0})
    return {"name": name, "session_id": sid, "containers": containers, "mounts": [],
            "ssh": {"port": 2200, "key_type": "ed25519", "private_key": private, "public_key": public}}


def bench_runtime(size: int, repeat: int, key: str, state_root: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"up": [], "down": [], "network": [], "ready": []}
    for i in range(repeat):
        name = "bench-%d-%d" % (size, i)
        t = time.monotonic()
        res = local_session_dict.create_session(make_session(name, size, key), state_root)
        out["up"].append(time.monotonic() - t)
        out["network"].append(res["timings"]["network"])
        out["ready"].append(res["timings"]["containers_ready"])
        t = time.monotonic()
        rt.destroy_session(name, state_root)
        out["down"].append(time.monotonic() - t)
    return out


def bench_engine(size: int, repeat: int, image: str, state_root: str) -> dict[str, list[float]]:
    """Sessions of ``image`` through the local backend as the session module runs it (the job's tasks on podman)."""
    from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend, local_agent
    from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job
    task = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                     (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
    out: dict[str, list[float]] = {"up": [], "down": [], "network": [], "ready": []}
    cpu = local_agent().cpu // size  # MHz: the machine shared by the session's containers
    for i in range(repeat):
        name = "bench-%d-%d" % (size, i)
        backend = LocalBackend(state_root, task=task)
        spec = {"name": name, "image": image, "cluster_size": size, "resources": {"cpu": cpu, "memory": 64}}
        t = time.monotonic()
        backend.present(spec)
        out["up"].append(time.monotonic() - t)
        with open(os.path.join(state_root, name, "session.json")) as f:
            timings = json.load(f)["timings"]
        out["network"].append(timings["network"])
        out["ready"].append(timings["containers_ready"])
        t = time.monotonic()
        backend.absent(name)
        out["down"].append(time.monotonic() - t)
    return out


def bench_baseline(size: int, repeat: int, key: str, work: str, image: str = "") -> dict[str, list[float]]:
    script = os.path.join(work, "baseline.sh")
    with open(script, "w") as f:
        f.write(BASELINE)
    out: dict[str, list[float]] = {"up": [], "down": []}
    with open(IP_FORWARD) as f:
        forward = f.read().strip()
    try:
        for i in range(repeat):
            run = os.path.join(work, "run%d-%d" % (size, i))
            os.makedirs(run)
            env = dict(os.environ, ENGINE_IMAGE=image, CONTAINERS_CONF=engine_conf()) if image else None
            proc = subprocess.run(["bash", script, str(size), key, run], stdout=subprocess.PIPE, text=True,
                                  check=True, env=env)
            fields = dict(kv.split("=") for kv in proc.stdout.split())
            out["up"].append(float(fields["up"]))
            out["down"].append(float(fields["down"]))
    finally:
        # what the baseline does not clean: the plugins' shared chains and ip_forward
        prune_shared_chains()
        if forward == "0":  # the bridge plugin's isGateway turned it on for the whole host
            with open(IP_FORWARD, "w") as f:
                f.write("0\n")
    return out


ENGINE_TARGET = 1.2  # up(engine session) / up(N parallel podman run), same round


def engine_rounds(size: int, repeat: int, image: str, key: str, work: str, baseline: bool) -> dict[str, Any]:
    """``repeat`` rounds of one engine session and one baseline run each (alternately: both see the same load);
    the ratio of each round, and the load average (1 min) at each round's start."""
    engine: dict[str, Any] = {"up": [], "down": [], "network": [], "ready": [], "ratio": [], "load": []}
    base: dict[str, list[float]] = {"up": [], "down": []}
    for i in range(repeat):
        engine["load"].append(os.getloadavg()[0])
        one = bench_engine(size, 1, image, os.path.join(work, "state%d" % i))
        for k, v in one.items():
            engine[k] += v
        if baseline:
            os.makedirs(os.path.join(work, "base%d-%d" % (size, i)))
            b = bench_baseline(size, 1, key, os.path.join(work, "base%d-%d" % (size, i)), image)
            for k, v in b.items():
                base[k] += v
            engine["ratio"].append(one["up"][0] / b["up"][0])
    out = {"engine-%d" % size: engine}
    if baseline:
        out["baseline-%d" % size] = base
    return out


def engine_conf() -> str:
    """The containers.conf the local backend runs podman with (``scripts/build-images --conf`` writes it)."""
    return subprocess.run([sys.executable, os.path.join(REPO, "scripts", "build-images"), "--conf"],
                          capture_output=True, text=True, check=True).stdout.strip()


AGAINST_TARGET = 1.10  # up(this tree) / up(REV), same run


def _one_run(tree: str, size: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "local_bringup.py"), "--json",
                           "--no-baseline", "--repeat", "1", "--sizes", str(size)],
                          stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout)["runtime-%d" % size]


def compare_against(rev: str, sizes: list[int], repeat: int) -> int:
    """This tree against commit ``rev``, alternately (see the module docstring)."""
    rounds = alternately(rev, repeat, lambda tree: {size: _one_run(tree, size) for size in sizes})
    runs = {(label, size): {k: [x for r in results for x in r[size][k]] for k in ("up", "network")}
            for label, results in rounds.items() for size in sizes}
    print("%-8s %6s %8s %8s   (median of %d, seconds; alternately)" % ("tree", "N", "up", "network", repeat))
    met = True
    for size in sizes:
        med = {label: {k: statistics.median(v) for k, v in runs[(label, size)].items()} for label in ("this", rev)}
        for label in ("this", rev):
            print("%-8s %6d %8.2f %8.2f" % (label[:8], size, med[label]["up"], med[label]["network"]))
        ratio = med["this"]["up"] / med[rev]["up"]
        met = met and ratio <= AGAINST_TARGET
        print("%-8s %6d %8.2f %8.2f   up ratio %.2f (target <= %.2f)" % (
            "ratio", size, ratio, med["this"]["network"] / med[rev]["network"], ratio, AGAINST_TARGET))
    print("target %s" % ("met" if met else "NOT met"))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    ap.add_argument("--against", metavar="REV", help="compare with the runtime of commit REV (see above)")
    ap.add_argument("--engine", metavar="IMAGE", help="sessions of this container image, against plain podman runs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    if args.against:
        return compare_against(args.against, [int(s) for s in args.sizes.split(",")], args.repeat)
    results: dict[str, Any] = {}
    work = tempfile.mkdtemp(prefix="bai-bench-")  # kept when a run fails: its sessions' journals are in it
    key = os.path.join(work, "id")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            if args.engine:
                results.update(engine_rounds(size, args.repeat, args.engine, key, work, not args.no_baseline))
                continue
            results["runtime-%d" % size] = bench_runtime(size, args.repeat, key, os.path.join(work, "state"))
            if not args.no_baseline:
                results["baseline-%d" % size] = bench_baseline(size, args.repeat, key, work)
    except BaseException:
        print("local_bringup: failed; its sessions' state is kept in %s (destroy_session with that state root)" % work,
              file=sys.stderr)
        raise
    shutil.rmtree(work)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print("%-14s %8s %8s %8s %8s   (median of %d, seconds)" % ("", "up", "down", "network", "ready", args.repeat))
    for label, r in results.items():
        cells = ["%8.2f" % statistics.median(r[k]) if k in r else "%8s" % "-"
                 for k in ("up", "down", "network", "ready")]
        print("%-14s %s" % (label, " ".join(cells)))
    for label, r in results.items():
        if "ratio" in r:
            ratio = statistics.median(r["ratio"])
            print("%s: up / baseline up %s (median %.2f; target <= %.2f: %s); load average %s" % (
                label, ", ".join("%.2f" % x for x in r["ratio"]), ratio, ENGINE_TARGET,
                "met" if ratio <= ENGINE_TARGET else "NOT met", ", ".join("%.1f" % x for x in r["load"])))
    return 0


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        sys.exit(main())
