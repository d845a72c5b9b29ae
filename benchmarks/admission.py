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

* Cluster scale (issue 24): 16, 64 and 100 creates at once on 1,000 nodes with capacity for all
  (2-container sessions): sessions/s, requests per session, lock-acquire attempts per session, bytes
  read per create, the admission lock's median hold time and the sessions admitted per hold (batch admission:
  the holder's own and those it admitted, in its two passes), lock-acquire attempts counting refused ones and those that started a
  hold (not a holder's writes of its grants), for this tree's client and, in the same
  run against the same double, for the client of ``--against REV`` (default ``main``: the figures
  before issue 24), run from a temporary worktree of REV in a subprocess.
* The double itself: the slowest answer in a burst of 400 connections with its listen backlog and with
  socketserver's default of 5 (SYNs dropped and sent again a second later).

The creates sign their jobs with a temporary cluster network key made for the run (in a temporary
directory, removed at the end), as the tests do: no key on this machine is read or needed.

Run: .venv/bin/python benchmarks/admission.py [--nodes 1000] [--allocs 10000] [--scale 16,64,100] [--against main]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import typing as t
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
#: ``--client-tree TREE``: the collection (the client under test) comes from TREE; the double stays this tree's
CLIENT_TREE = sys.argv[sys.argv.index("--client-tree") + 1] if "--client-tree" in sys.argv else os.path.join(HERE, os.pardir)
sys.path.insert(0, os.path.join(CLIENT_TREE, "collections"))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "support"))
sys.path.insert(0, HERE)

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nomad_backend import NomadBackend  # noqa: E402
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
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl  # noqa: E402
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


SPEC = {"image": "python:3.11-slim", "cluster_size": 2, "resources": {"cpu": 1000, "memory": 1024}}
LOCK = "/v1/var/backendai-cluster/admission"


def creator(double: NomadAPIDouble, key_file: str, cache_dir: t.Optional[str] = None) -> t.Callable[[str], str]:
    """A create of one 2-container session by its own client: RUNNING, or "failed: <why>". With ``cache_dir``
    (and a client that has it), the creates share a node catalogue there (``_nomad.capacity``)."""
    options: t.Dict[str, t.Any] = {}
    if cache_dir and "node_catalogue" in inspect.signature(NomadBackend).parameters:
        from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import NodeCatalogue
        options["node_catalogue"] = NodeCatalogue(cache_dir)

    def create(name: str) -> str:
        client = NomadClient(NomadConnection(nomad_addr=double.url))
        backend = NomadBackend(client, lambda: None, lambda *a: None, lambda msg: None, poll_interval=POLL,
                               network=NetworkControl(key_file=key_file), **options)
        try:
            return backend.present(dict(SPEC, name=name))["session"]["state"]
        except ModuleFailure as err:
            return "failed: " + str(err)[:300]
        finally:
            client.close()
    return create


def contention(key_file: str) -> bool:
    with NomadAPIDouble(eval_delay=0.05) as double:
        double.add_node("n1", cpu=4000, memory=8192)
        double.add_node("n2", cpu=4000, memory=8192)
        create = creator(double, key_file)

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


def holds_and_attempts(requests: t.Sequence[t.Any]) -> t.Tuple[t.List[float], int]:
    """(seconds from each granted lock-acquire's answer to the release that followed it, one holder at a time; the
    acquire attempts: refused ones and those that started a hold, not a holder's own writes of its grants)."""
    events = sorted([(r.finished, "acquired") for r in requests
                     if r.path == LOCK and "lock-acquire" in r.query and r.status == 200] +
                    [(r.started, "released") for r in requests
                     if r.path == LOCK and "lock-release" in r.query and r.status == 200])
    holds, since = [], None
    for at, kind in events:
        if kind == "acquired" and since is None:
            since = at
        elif kind == "released" and since is not None:
            holds.append(at - since)
            since = None
    refused = sum(r.path == LOCK and "lock-acquire" in r.query and r.status != 200 for r in requests)
    return holds, refused + len(holds) + (since is not None)


def endpoint(request: t.Any) -> str:
    """A request's endpoint with its IDs and names folded (``GET /v1/job/:id``), and its query's keys."""
    path = re.sub(r"/v1/(job|evaluation|allocation|node)/[^/]+", r"/v1/\1/:id", request.path)
    path = re.sub(r"/v1/var/nomad/jobs/.*", "/v1/var/nomad/jobs/:job", path)
    path = re.sub(r"/(admission-queue|network/slots)/[^/]+$", r"/\1/:entry", path)
    keys = sorted(k for k in request.query if k not in ("namespace", "filter", "per_page", "resources", "task_states"))
    return "%s %s%s" % (request.method, path, "?" + "&".join(keys) if keys else "")


def scale_run(creates: int, nodes: int, key_file: str) -> t.Dict[str, t.Any]:
    """``creates`` creates at once on ``nodes`` nodes with capacity for all, against a fresh double; the creates share
    a node catalogue in a temporary directory (as creates from one control node with BACKENDAI_NODE_CACHE_DIR do),
    empty at the start."""
    with NomadAPIDouble(eval_delay=0.05) as double, tempfile.TemporaryDirectory(prefix="bai-bench-nodes-") as cache:
        for i in range(nodes):
            double.add_node("node-%04d" % i, cpu=4000, memory=8192)
        create = creator(double, key_file, cache)
        with ThreadPoolExecutor(creates) as pool:
            start, cpu, double_cpu = time.perf_counter(), time.process_time(), double.cpu_seconds
            states = list(pool.map(create, ["s%03d" % i for i in range(creates)]))
            wall = time.perf_counter() - start
            cpu, double_cpu = time.process_time() - cpu, double.cpu_seconds - double_cpu
        seen = double.requests
    holds, attempts = holds_and_attempts(seen)
    by_endpoint: t.Dict[str, int] = {}
    for r in seen:
        by_endpoint[endpoint(r)] = by_endpoint.get(endpoint(r), 0) + 1
    return {"creates": creates, "running": states.count("RUNNING"), "wall": wall, "sessions_per_s": creates / wall,
            "requests_per_session": len(seen) / creates,
            "acquires_per_session": attempts / creates,
            "bytes_per_create": sum(r.response_bytes for r in seen) / creates,
            "median_hold": statistics.median(holds) if holds else 0.0,
            "sessions_per_hold": creates / max(1, len(holds)),
            "cpu_per_session": cpu / creates, "double_cpu_per_session": double_cpu / creates,
            "requests_by_endpoint": {k: v / creates for k, v in by_endpoint.items()},
            "failures": sorted({s for s in states if s != "RUNNING"})[:3]}


def scale_runs(sizes: t.Sequence[int], nodes: int) -> t.List[t.Dict[str, t.Any]]:
    with temporary_network_key() as key_file:
        return [scale_run(n, nodes, key_file) for n in sizes]


def scale_of_revision(rev: str, sizes: t.Sequence[int], nodes: int) -> t.List[t.Dict[str, t.Any]]:
    """The same runs with the client of commit ``rev`` (its collection from a temporary worktree), in a subprocess."""
    from revision import checked_out
    with checked_out(rev) as tree:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--scale-json", "--client-tree", tree,
                              "--nodes", str(nodes), "--scale", ",".join(map(str, sizes))],
                             check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


SCALE_TARGETS = {"sessions_per_s": 20.0, "requests_per_session": 15.0, "acquires_per_session": 2.0}


def print_scale(rows: t.List[t.Dict[str, t.Any]], before: t.Optional[t.List[t.Dict[str, t.Any]]], rev: str,
                nodes: int) -> bool:
    print("cluster scale: N creates at once on %d nodes, capacity for all (2-container sessions; against the Nomad "
          "API double, in this process):" % nodes)
    header = ("client", "N", "wall s", "sessions/s", "requests/s'n", "acquires/s'n", "bytes/create", "hold ms",
              "s'ns/hold", "CPU ms/s'n", "of it double", "RUNNING")
    print("  %-9s %4s %8s %10s %12s %12s %14s %10s %9s %10s %12s %s" % header)
    for label, runs in (("before " + rev, before or []), ("this tree", rows)):
        for r in runs:
            print("  %-9s %4d %8.2f %10.1f %12.1f %12.1f %14.0f %10.1f %9.1f %10s %12s %d/%d%s" % (
                label[:9], r["creates"], r["wall"], r["sessions_per_s"], r["requests_per_session"],
                r["acquires_per_session"], r["bytes_per_create"], r["median_hold"] * 1000,
                r.get("sessions_per_hold", 1.0),
                "%.0f" % (r["cpu_per_session"] * 1000) if "cpu_per_session" in r else "-",
                "%.0f" % (r["double_cpu_per_session"] * 1000) if "double_cpu_per_session" in r else "-",
                r["running"], r["creates"], (" " + "; ".join(r["failures"]))[:200] if r["failures"] else ""))
    last = rows[-1]
    print("  requests per session by endpoint, this tree at N = %d:" % last["creates"])
    for name, count in sorted(last["requests_by_endpoint"].items(), key=lambda kv: (-kv[1], kv[0])):
        if count >= 0.05:
            print("    %5.2f  %s" % (count, name))
    cpu_ms, double_ms = last["cpu_per_session"] * 1000, last["double_cpu_per_session"] * 1000
    print("  the process's CPU bounds what one process can reach: at most %.1f sessions/s at %.0f ms of CPU per session "
          "(the double's own answers: %.0f ms of it)" % (1000 / cpu_ms, cpu_ms, double_ms))
    met = {k: (last[k] >= v if k == "sessions_per_s" else last[k] <= v) for k, v in SCALE_TARGETS.items()}
    print("  targets at N = %d: sessions/s >= 20: %s; requests per session <= 15: %s; lock-acquire attempts per "
          "session <= 2: %s" % (last["creates"], *("met" if met[k] else "MISSED" for k in SCALE_TARGETS)))
    return all(r["running"] == r["creates"] for r in rows)


def burst(connections: int = 400) -> None:
    """The slowest answer in a burst of connections, with the double's listen backlog and with socketserver's 5."""
    from nomad_double import http_shell
    slowest, failed = {}, {}
    for backlog in (http_shell.LISTEN_BACKLOG, 5):
        http_shell._Server.request_queue_size = backlog
        times: t.List[float] = []
        failures: t.List[str] = []
        with NomadAPIDouble() as double:
            def one() -> None:
                started = time.monotonic()
                try:
                    with socket.create_connection(("127.0.0.1", double.port), timeout=10) as sock:
                        sock.sendall(b"GET /v1/status/leader HTTP/1.0\r\n\r\n")
                        sock.recv(64)
                except OSError as err:  # no answer within 10 s, or refused
                    failures.append(repr(err))
                times.append(time.monotonic() - started)
            threads = [threading.Thread(target=one) for _ in range(connections)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        slowest[backlog], failed[backlog] = max(times), len(failures)
    http_shell._Server.request_queue_size = http_shell.LISTEN_BACKLOG
    print("the double, a burst of %d connections: slowest answer %.2f s (%d without an answer in 10 s) with its listen "
          "backlog (%d); %.2f s (%d without an answer) with socketserver's default (5)"
          % (connections, slowest[http_shell.LISTEN_BACKLOG], failed[http_shell.LISTEN_BACKLOG], http_shell.LISTEN_BACKLOG,
             slowest[5], failed[5]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--allocs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", default="16,64,100", help="concurrent creates of the cluster-scale runs")
    parser.add_argument("--against", default="main", help="the revision whose client gives the before figures ('' skips)")
    parser.add_argument("--client-tree", help=argparse.SUPPRESS)
    parser.add_argument("--scale-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=("capacity", "contention", "scale", "burst"))
    args = parser.parse_args()
    sizes = [int(n) for n in args.scale.split(",") if n]
    if args.scale_json:  # a run for another tree's client: one line of JSON
        print(json.dumps(scale_runs(sizes, args.nodes)))
        return 0
    ok = True
    if args.only in (None, "capacity"):
        ok = capacity(args.nodes, args.allocs, args.repeat)
    if args.only in (None, "contention"):
        with temporary_network_key() as key_file:
            ok = contention(key_file) and ok
    if args.only in (None, "scale"):
        before = scale_of_revision(args.against, sizes, args.nodes) if args.against else None
        ok = print_scale(scale_runs(sizes, args.nodes), before, args.against, args.nodes) and ok
    if args.only in (None, "burst"):
        burst()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
