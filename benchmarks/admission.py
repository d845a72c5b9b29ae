#!/usr/bin/env python3
# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of admission on Nomad (issue 12), against the in-test Nomad API double (not Nomad).

* Reading live capacity with 1,000 nodes and 10,000 allocations: requests and seconds of
  ``live_agents`` (nodes with resources + the filtered, paged allocation list; target ≤ 5 requests
  plus pages and ≤ 1 s) against the baseline measured in the same run, the previous way (the node
  list, then ``/v1/node/:id/allocations`` once per ready node). Both timings include the double's
  own work, which runs in this process.
* The 8-way contention case (8 creates at once, capacity for 4): seconds until every session is
  either RUNNING or failed cleanly, and the longest time any session had some containers live while
  others were not placed (sampled every 20 ms).

The creates sign their jobs with a temporary cluster network key made for the run (in a temporary
directory, removed at the end), as the tests do: no key on this machine is read or needed.

Run: .venv/bin/python benchmarks/admission.py [--nodes 1000] [--allocs 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import typing as t
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "collections"))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.backend import NomadBackend  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import (  # noqa: E402
    agent_from_summary,
    live_agents,
    summarize_node,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import (  # noqa: E402
    NomadClient,
    NomadConnection,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network import NetworkControl  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import generate_key  # noqa: E402
from nomad_double.server import NomadAPIDouble  # noqa: E402
from nomad_double.watch import HalfPlacedWatch  # noqa: E402

REQUEST_TARGET = 5  # plus one request per page of allocations
TIME_TARGET_S = 1.0
POLL = 0.2


def populate(double: NomadAPIDouble, nodes: int, allocs: int) -> None:
    """``nodes`` nodes and ``allocs`` running allocations spread over them (made directly in the double's
    state: its toy scheduler is not built for 10,000 placements)."""
    for i in range(nodes):
        double.add_node("node-%04d" % i, cpu=64000, memory=262144)
    group = {"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "docker", "Resources": {"CPU": 500, "MemoryMB": 512}}]}
    job = {"ID": "filler", "Name": "filler", "Namespace": "default", "Type": "service", "Priority": 50,
           "Datacenters": ["*"], "NodePool": "default", "TaskGroups": [group]}
    rec = {"job": job, "Version": 0, "Queued": {}, "CreateIndex": 1, "ModifyIndex": 1, "JobModifyIndex": 1, "SubmitTime": 0}
    node_list = sorted(double.model.nodes.values(), key=lambda n: n["Name"])  # test-side setup
    with double.model.lock:
        double.model.jobs[("default", "filler")] = rec
        for i in range(allocs):
            double.model.create_alloc(rec, group, i, node_list[i % len(node_list)], [], "bench", 100 + i)


def previous_live_agents(client: NomadClient) -> t.List[t.Dict[str, t.Any]]:
    """The way before issue 12: one ``/v1/node/:id/allocations`` request per ready node."""
    agents = []
    for stub in client.list_nodes(resources=True):
        if stub.get("Status") != "ready" or stub.get("SchedulingEligibility") != "eligible" or stub.get("Drain"):
            continue
        agents.append(agent_from_summary(summarize_node(stub, client.node_allocations(stub["ID"]))))
    return sorted(agents, key=lambda a: a["name"] or "")


def measure(double: NomadAPIDouble, read: t.Callable[[NomadClient], t.Any],
            repeat: int = 1) -> t.Tuple[int, float, float, t.Any]:
    """(requests, seconds, of which the double's own handling, result) of the best of ``repeat`` reads."""
    best = None
    for _ in range(repeat):
        client = NomadClient(NomadConnection(nomad_addr=double.url))
        double.clear_requests()
        busy = double.busy_seconds
        start = time.perf_counter()
        result = read(client)
        seconds = time.perf_counter() - start
        client.close()
        got = (len(double.requests), seconds, double.busy_seconds - busy, result)
        if best is None or got[1] < best[1]:
            best = got
    assert best is not None
    return best


def capacity(nodes: int, allocs: int, repeat: int) -> bool:
    with NomadAPIDouble() as double:
        populate(double, nodes, allocs)
        before_n, before_s, before_busy, before = measure(double, previous_live_agents)
        after_n, after_s, after_busy, after = measure(double, live_agents, repeat)
    pages = after_n - 1
    same = before == after
    print("live capacity, %d nodes / %d allocations (against the Nomad API double, in this process):" % (nodes, allocs))
    print("  before (one request per node): %5d requests  %7.3f s  (the double's own handling: %.3f s)"
          % (before_n, before_s, before_busy))
    print("  after  (nodes + paged filter): %5d requests  %7.3f s  (the double's own handling: %.3f s; "
          "1 node list + %d allocation pages; best of %d)" % (after_n, after_s, after_busy, pages, repeat))
    print("  ratio: %.0fx fewer requests, %.1fx faster; same agents: %s" % (before_n / after_n, before_s / after_s, same))
    client_s = after_s - after_busy
    ok = after_n <= REQUEST_TARGET + pages and client_s <= TIME_TARGET_S and same
    print("  target: <= %d requests plus pages, <= %.1f s: %d requests, %.3f s without the double's handling "
          "(%.3f s with it): %s" % (REQUEST_TARGET, TIME_TARGET_S, after_n, client_s, after_s, "met" if ok else "MISSED"))
    return ok


@contextlib.contextmanager
def temporary_network_key() -> t.Iterator[str]:
    """A cluster network key made for this run (the creates sign their jobs with it), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bai-bench-key-") as work:
        path = os.path.join(work, "network.key")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as f:
            f.write(generate_key() + "\n")
        print("(a temporary cluster network key for this run: %s, removed at the end)" % path)
        yield path


def contention(key_file: str) -> bool:
    with NomadAPIDouble(eval_delay=0.05) as double:
        double.add_node("n1", cpu=4000, memory=8192)
        double.add_node("n2", cpu=4000, memory=8192)
        spec = {"image": "python:3.11-slim", "cluster_size": 2, "resources": {"cpu": 1000, "memory": 1024}}

        def create(name: str) -> str:
            client = NomadClient(NomadConnection(nomad_addr=double.url))
            backend = NomadBackend(client, lambda: None, lambda *a: None, lambda msg: None, poll_interval=POLL,
                                   network=NetworkControl(key_file=key_file))
            try:
                return backend.present(dict(spec, name=name))["session"]["state"]
            except ModuleFailure as err:
                return "failed: " + str(err).split(":")[0]
            finally:
                client.close()

        with HalfPlacedWatch(double) as watch, ThreadPoolExecutor(8) as pool:
            start = time.perf_counter()
            states = list(pool.map(create, ["b%d" % i for i in range(8)]))
            settled = time.perf_counter() - start
    running = states.count("RUNNING")
    print("8 creates at once, capacity for 4 (against the Nomad API double, poll interval %.1f s):" % POLL)
    print("  settled (every session RUNNING or failed cleanly): %.3f s; %d RUNNING, %d failed PENDING"
          % (settled, running, sum(s.startswith("failed") for s in states)))
    print("  longest half-placed time of any session: %.3f s (target: <= one poll interval, %.1f s)" % (watch.worst, POLL))
    return running == 4 and watch.worst <= POLL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--allocs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ok = capacity(args.nodes, args.allocs, args.repeat)
    with temporary_network_key() as key_file:
        ok = contention(key_file) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
