#!/usr/bin/env python3
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the generator core (issue 2): prints numbers and ratios against the targets.

* plan + render time of a 1,024-container multi-node session over 10,000 agents (target ≤ 0.25 s);
* minified job bytes per container for N = 64 and N = 1,024 (target ≤ 3 KB per container), and the
  ratio of the two job sizes (target ≤ 17: linear growth gives 1024 / 64 = 16).

Run: .venv/bin/python benchmarks/plan_render.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import typing as t

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "collections"))

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.hcl import render_hcl  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import dumps, register_request, render_job  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session  # noqa: E402

TIME_TARGET_S = 0.25
BYTES_TARGET = 3072
RATIO_TARGET = 17.0


def make_agents(count: int) -> t.List[t.Dict[str, t.Any]]:
    """A fleet of mixed nodes, mostly busy: free capacity varies from node to node (deterministic)."""
    return [{"name": "node-%05d" % i, "datacenter": "dc%d" % (i % 3 + 1), "cpu": 1000 * (1 + (i * 7) % 6),
             "memory": 2048 * (1 + (i * 3) % 5), "gpu": (i % 4 == 0) * 2} for i in range(count)]


def spec(n: int, mode: str = "multi-node", strategy: str = "concentrated") -> t.Dict[str, t.Any]:
    return {"name": "bench-%d" % n, "image": "python:3.11-slim", "command": ["python", "train.py"],
            "cluster_size": n, "cluster_mode": mode, "resources": {"cpu": 1000, "memory": 2048},
            "placement": {"strategy": strategy}, "mounts": [{"source": "/data", "target": "/home/work/data"}]}


def best_of(repeat: int, fn: t.Callable[[], t.Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    agents = make_agents(10000)
    print("plan + render, 1,024 containers over 10,000 agents (best of %d):" % args.repeat)
    for strategy in ("concentrated", "dispersed"):
        s = spec(1024, strategy=strategy)
        plan = plan_session(s, agents)
        assert plan.placed, plan.reason
        seconds = best_of(args.repeat, lambda: dumps(register_request(render_job(plan_session(s, agents))), pretty=False))
        hcl_seconds = best_of(args.repeat, lambda: render_hcl(render_job(plan)))
        print("  %-12s %.3f s  (target %.2f s, %.0f%% of it)  agents used %d; HCL rendering %.3f s more"
              % (strategy, seconds, TIME_TARGET_S, 100 * seconds / TIME_TARGET_S, len(plan.agents_used), hcl_seconds))
    sizes = {}
    for n in (64, 1024):
        plan = plan_session(spec(n), [{"name": "big", "cpu": 10 ** 7, "memory": 10 ** 8}])
        sizes[n] = len(dumps(register_request(render_job(plan)), pretty=False).encode("utf-8"))
    print("minified register-request bytes:")
    for n, size in sizes.items():
        print("  N=%-5d %9d bytes  %6.0f bytes per container (target ≤ %d)" % (n, size, size / n, BYTES_TARGET))
    # Across agents every group carries the agents' underlay addresses in its cni args (Nomad does not
    # interpolate cni args, so they cannot live once in job Meta): about 13 bytes per agent per container.
    for n in (64, 1024):
        plan = plan_session(spec(n), agents)
        size = len(dumps(register_request(render_job(plan)), pretty=False).encode("utf-8"))
        print("  N=%-5d %9d bytes  %6.0f bytes per container over %d agents (no target: grows with the agents)"
              % (n, size, size / n, len(plan.agents_used)))
    ratio = sizes[1024] / sizes[64]
    print("  size ratio N=1024 / N=64: %.2f (linear = 16.00, target ≤ %.0f)" % (ratio, RATIO_TARGET))
    return 0


if __name__ == "__main__":
    sys.exit(main())
