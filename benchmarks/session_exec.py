#!/usr/bin/env python3
"""How long ``session_exec`` takes to run ``hostname`` in every container of a large local session (target <= 2 s for
64), against two baselines: the same number of plain ``podman exec`` at once, and of plain ``runc exec`` at once.

One session of N containers (default 64) of the test busybox image on this machine (the local backend, engine
containers). Rounds alternate, in the same run: **exec** is what the module does after its options are parsed (the
session's containers read from the runtime and one ``podman inspect`` of them, the selection, the command through
every container's exec channel at once (``_local.exec_channel``; ``runc exec`` where a container has none), the
results and the summary: ``_local.session_exec.LocalExec`` with ``_session.session_exec``),
checked to have every container's hostname; **podman** is N ``podman exec <container> hostname`` started at once with
the same containers.conf and waited for (the engine's own exec, which the module used before); **runc** is N plain
``runc exec <container id> hostname`` at once (the module's fallback, and its way in before the exec channel).
Needs root, podman with runc and the test images (``scripts/build-images test-busybox``).

    python3 benchmarks/session_exec.py --size 64 --repeat 5
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
import typing as t

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
import images  # noqa: E402  (tests/: the images built from Debian packages)
import local_session_dict  # noqa: E402  (tests/: the Nomad job's renderer, as the session module hands it over)
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local.session_exec import LocalExec  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as plan  # noqa: E402

NAME = "bench-exec"


def exec_round(root: str, size: int) -> float:
    start = time.monotonic()
    request = plan.parse_request({"name": NAME, "command": "hostname"})
    runner = LocalExec(root)
    targets, idle = plan.select(runner.containers(NAME), request)
    result = plan.summarise(request, runner.run(request, targets) + idle, 0.0, "local")
    took = time.monotonic() - start
    assert len(result["containers"]) == size and all(c["stdout"] == c["hostname"] + "\n" for c in result["containers"])
    return took


def baseline_round(conf: str, engines: t.List[str]) -> float:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CONTAINERS_CONF": conf}
    start = time.monotonic()
    procs = [subprocess.Popen(["podman", "exec", e, "hostname"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env) for e in engines]
    outs = [p.communicate()[0] for p in procs]
    took = time.monotonic() - start
    assert all(p.returncode == 0 for p in procs) and all(outs)
    return took


def runc_round(ids: t.List[str]) -> float:
    start = time.monotonic()
    procs = [subprocess.Popen(["runc", "exec", i, "hostname"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL) for i in ids]
    outs = [p.communicate()[0] for p in procs]
    took = time.monotonic() - start
    assert all(p.returncode == 0 for p in procs) and all(outs)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    image = images.image("test-busybox")
    execs, bases, runcs = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-exec-") as root, machine_lock():
        backend = LocalBackend(root, task=local_session_dict.TASK)
        made = backend.present({"name": NAME, "image": image, "cluster_size": args.size,
                                "resources": {"cpu": 50, "memory": 64}})
        assert made["session"]["state"] == "RUNNING", made["session"]["reason"]
        try:
            with open(os.path.join(root, NAME, "session.json"), encoding="utf-8") as f:
                info = json.load(f)
            engines = [c["engine"] for c in info["containers"]]
            ids = subprocess.run(["podman", "container", "inspect", "--format", "{{.Id}}"] + engines, check=True,
                                 stdout=subprocess.PIPE, env={"PATH": os.environ.get("PATH", ""),
                                                              "CONTAINERS_CONF": info["engine"]["conf"]}
                                 ).stdout.decode().split()
            for i in range(args.repeat):
                execs.append(exec_round(root, args.size))
                bases.append(baseline_round(info["engine"]["conf"], engines))
                runcs.append(runc_round(ids))
                print("round %d: session_exec %.2f s, %d plain podman exec %.2f s, %d plain runc exec %.2f s (load %.2f)"
                      % (i + 1, execs[-1], args.size, bases[-1], args.size, runcs[-1], os.getloadavg()[0]), flush=True)
        finally:
            backend.absent(NAME)
    e, b, r = statistics.median(execs), statistics.median(bases), statistics.median(runcs)
    load = os.getloadavg()
    print("N=%d, median of %d: session_exec of hostname %.2f s (target <= 2); %d plain podman exec at once %.2f s "
          "(session_exec / podman %.2f); %d plain runc exec at once %.2f s (session_exec / runc %.2f); "
          "load average %.2f %.2f %.2f" % (args.size, args.repeat, e, args.size, b, e / b, args.size, r, e / r, *load))


if __name__ == "__main__":
    main()
