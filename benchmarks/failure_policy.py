#!/usr/bin/env python3
"""How fast a gang heals itself (docs/failure-policy.md), on the local backend with engine containers.

A session of N containers (default 8) of a small image, ``failure.policy: restart_all``; every command prints a line
and beats its heartbeat. One rank's command (the last container's) is killed with -9 from inside its container;
the kill's moment is read from the kernel's uptime clock in the same shell that kills. Then the benchmark reads
every container's gang status file (``$NOMAD_ALLOC_DIR/backendai/gang``, under the container's directory here)
every 10 ms, on the same clock, and reports:

* **know**: from the death to the moment the last container's supervisor left ``running`` (it knows; target
  <= 3 s);
* **again**: from there to the moment the last command runs again at generation 1 (target <= 5 s for 8 containers).

Baseline, in the same run: what heals the same failure today without a policy (``none``): ``state: present``
repairing the session, from the death (its container's host pid killed) to ``present`` returning with every
container up again; started the moment the death happened, which no operator matches. The ratio is
heal (know + again) / repair. With ``--flat``, each round also heals with the broadcast sent by the teller to every
member directly (the supervisors' fan-out set to N instead of ``_session.gang.FANOUT``: what the gang did before the
broadcast tree), and the ratio tree / flat of "know" is given. Needs root, podman and the test images
(``scripts/build-images test-busybox``).

    python3 benchmarks/failure_policy.py --size 8 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
import images  # noqa: E402  (tests/: the images built from Debian packages)
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import STATUS_FILE, parse_status  # noqa: E402

TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
#: Each container's CPU (MHz): its supervisor runs in its cgroup, under its quota, as a rank's would.
CPU = 500
#: what this run gives each container (``--cpu``; the machine holds N x this)
CPU_MHZ = [CPU]
RANK = ('echo "start $BACKENDAI_CLUSTER_HOST ${BACKENDAI_RESTART_COUNT:-0}"; '
        'while :; do touch "${BACKENDAI_HEARTBEAT_FILE:-/tmp/hb}"; sleep 0.2; done')


def uptime() -> float:
    with open("/proc/uptime", encoding="ascii") as f:
        return float(f.read().split()[0])


def spec(name: str, size: int, policy: str) -> t.Dict[str, t.Any]:
    return {"name": name, "image": images.image("test-busybox"), "cluster_size": size,
            "resources": {"cpu": CPU_MHZ[0], "memory": 64}, "command": ["sh", "-c", RANK],
            "failure": {"policy": policy, "max_restarts": 10}}


def records(paths: SessionPaths) -> t.Dict[str, t.Dict[str, t.Any]]:
    with open(paths.session_json, encoding="utf-8") as f:
        return {c["hostname"]: c for c in json.load(f)["containers"]}


def gangs(paths: SessionPaths, hosts: t.Sequence[str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    out = {}
    for h in hosts:
        try:
            with open(os.path.join(paths.container_dir(h), "alloc", STATUS_FILE), encoding="utf-8") as f:
                out[h] = parse_status(f.read())
        except OSError:
            out[h] = {}
    return out


def heal(state_root: str, size: int) -> t.Tuple[float, float]:
    """(know, again) in seconds, for one kill -9 under restart_all."""
    name = "bench-heal"
    b = LocalBackend(state_root, (tempfile.gettempdir(),), TASK)
    paths = SessionPaths(os.path.abspath(state_root), name)
    b.present(spec(name, size, "restart_all"))
    try:
        hosts = list(records(paths))
        deadline = time.monotonic() + 60
        while not all(g.get("state") == "running" for g in gangs(paths, hosts).values()):
            if time.monotonic() > deadline:
                raise SystemExit("the gang did not start: %s" % gangs(paths, hosts))
            time.sleep(0.05)
        victim = hosts[-1]
        got = images.podman("exec", records(paths)[victim]["engine"], "%s/bin/sh" % nomad_job.RUNTIME_MOUNT, "-c",
                            "read u _ < /proc/uptime; kill -9 $(cat /run/backendai/gang/pid); echo $u")
        death = float(got.stdout.split()[-1])
        knew: t.Dict[str, float] = {}
        again: t.Dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(again) < len(hosts):
            now = uptime()
            for h, g in gangs(paths, hosts).items():
                if h not in knew and (g.get("state") != "running" or g.get("generation", 0) >= 1):
                    knew[h] = now
                if h not in again and g.get("state") == "running" and g.get("generation", 0) >= 1:
                    again[h] = now
            if time.monotonic() > deadline:
                raise SystemExit("the gang did not restart: %s" % gangs(paths, hosts))
            time.sleep(0.01)
        return max(knew.values()) - death, max(again.values()) - max(knew.values())
    finally:
        b.absent(name)


def heal_flat(state_root: str, size: int) -> t.Tuple[float, float]:
    """:func:`heal` with a fan-out of N: the teller's children are every other member (no relay)."""
    tree = gang.GANG_SCRIPT
    gang.GANG_SCRIPT = tree.replace(" K=%d\"" % gang.FANOUT, " K=%d\"" % size)
    assert gang.GANG_SCRIPT != tree
    try:
        return heal(state_root, size)
    finally:
        gang.GANG_SCRIPT = tree


def repair(state_root: str, size: int) -> float:
    """Seconds from a kill -9 (no policy) to ``present`` returning with the session repaired."""
    name = "bench-repair"
    b = LocalBackend(state_root, (tempfile.gettempdir(),), TASK)
    paths = SessionPaths(os.path.abspath(state_root), name)
    s = spec(name, size, "none")
    b.present(s)
    try:
        victim = list(records(paths))[-1]
        death = uptime()
        os.kill(records(paths)[victim]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while b.info(name=name)[0]["state"] != "DEGRADED":
            if time.monotonic() > deadline:
                raise SystemExit("the session did not become DEGRADED")
            time.sleep(0.01)
        got = b.present(s)["session"]
        if got["state"] != "RUNNING":
            raise SystemExit("present did not repair the session: %s" % got["state"])
        return uptime() - death
    finally:
        b.absent(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--flat", action="store_true", help="also heal with the flat broadcast (fan-out N)")
    parser.add_argument("--cpu", type=int, default=CPU, help="MHz per container (default %(default)s)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    CPU_MHZ[0] = args.cpu
    knows, agains, repairs, flats = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-heal-") as root:
        for i in range(args.repeat):
            with machine_lock():
                k, a = heal(os.path.join(root, "h%d" % i), args.size)
                knows.append(k)
                agains.append(a)
                if not args.no_baseline:
                    repairs.append(repair(os.path.join(root, "r%d" % i), args.size))
                if args.flat:
                    flats.append(heal_flat(os.path.join(root, "f%d" % i), args.size)[0])
            print("round %d: know %.2f s, again %.2f s%s%s" % (i + 1, k, a, ", repair by present %.2f s" % repairs[-1]
                                                                if repairs else "",
                                                                ", flat broadcast: know %.2f s" % flats[-1]
                                                                if flats else ""), flush=True)
    load = os.getloadavg()
    k, a = statistics.median(knows), statistics.median(agains)
    print("N=%d, median of %d: death -> every container knows %.2f s (target <= 3), -> every command running again "
          "%.2f s more (target <= 5); load average %.2f %.2f %.2f" % (args.size, args.repeat, k, a, *load))
    if flats:
        f = statistics.median(flats)
        print("flat broadcast (fan-out N): know %.2f s; tree (fan-out %d) / flat = %.2f" % (f, gang.FANOUT, k / f))
    if repairs:
        r = statistics.median(repairs)
        print("baseline (policy none, present repairs at once): %.2f s; heal / repair = %.2f" % (r, (k + a) / r))


if __name__ == "__main__":
    main()
