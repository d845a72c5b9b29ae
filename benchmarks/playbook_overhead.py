#!/usr/bin/env python3
"""Wall time of the whole ``ansible-playbook playbooks/create_session.yml`` for a local session.

For a local (this machine) session of N = 4 containers: ``create_session.yml`` (until every sshd
answers) and, timed separately, ``destroy_session.yml``, against an empty ``ansible-playbook`` run
(one debug task on localhost, same ansible.cfg and inventory). Runs are interleaved (empty, create,
destroy), after one warm-up round; the median of ``--repeat`` rounds is printed with the difference
to the empty run (target: create within 2.5 s of it). Needs root; every session it makes is
destroyed, also on failure or Ctrl-C.

    .venv/bin/python benchmarks/playbook_overhead.py [--size 4] [--repeat 5] [--breakdown]

``--breakdown`` adds where the module's share goes: the controller's AnsiballZ build of the
``session`` module and the module process (from one ANSIBLE_DEBUG=1 run of each playbook), the
runtime's own create time (session.json), and the module's import time by group.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
TARGET = 2.5  # seconds over the empty run

EMPTY_PLAYBOOK = """---
- name: Empty run
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
"""

IMPORTS = r"""
import time
t0 = time.perf_counter()
import ansible.module_utils.basic
t1 = time.perf_counter()
import requests, nomad, hvac
t2 = time.perf_counter()
import cryptography.hazmat.primitives.asymmetric.ed25519, cryptography.hazmat.primitives.serialization
t3 = time.perf_counter()
import ansible_collections.backendai.cluster.plugins.modules.session
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


class Bench:
    def __init__(self, size: int, workdir: str) -> None:
        self.name = "pbo-" + uuid.uuid4().hex[:8]
        self.state_dir = os.path.join(workdir, "state")
        self.empty = os.path.join(workdir, "empty.yml")
        with open(self.empty, "w", encoding="utf-8") as f:
            f.write(EMPTY_PLAYBOOK)
        self.spec = {"name": self.name, "image": "local", "cluster_size": size,
                     "resources": {"cpu": 100, "memory": 64}}
        self.env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                        PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
        self.made = False

    def play(self, *args: str, debug: bool = False) -> tuple[float, subprocess.CompletedProcess]:
        env = dict(self.env, ANSIBLE_DEBUG="1") if debug else self.env
        cmd = [os.path.join(VENV_BIN, "ansible-playbook"), *args]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError("%s failed (rc=%d):\n%s\n%s" % (" ".join(args[:1]), proc.returncode,
                                                              proc.stdout[-3000:], proc.stderr[-2000:]))
        return took, proc

    def run_empty(self) -> float:
        return self.play(self.empty)[0]

    def run_create(self, debug: bool = False) -> tuple[float, subprocess.CompletedProcess]:
        self.made = True
        return self.play("playbooks/create_session.yml", "-e", json.dumps({"session": self.spec}),
                         "-e", "session_state_dir=" + self.state_dir, debug=debug)

    def run_destroy(self, debug: bool = False) -> tuple[float, subprocess.CompletedProcess]:
        result = self.play("playbooks/destroy_session.yml", "-e", "session_name=" + self.name,
                           "-e", "session_state_dir=" + self.state_dir, debug=debug)
        self.made = os.path.exists(os.path.join(self.state_dir, self.name))
        return result

    def runtime_create_time(self) -> float:
        with open(os.path.join(self.state_dir, self.name, "session.json"), encoding="utf-8") as f:
            return float(json.load(f)["timings"]["total"])


def debug_phases(stderr_and_out: str) -> dict[str, float]:
    """From an ANSIBLE_DEBUG=1 run: the AnsiballZ build and module process time of ``session``."""
    stamps = []
    for line in stderr_and_out.splitlines():
        m = re.match(r"\s*\d+\s+(\d+\.\d+):\s(.*)", line)
        if m:
            stamps.append((float(m.group(1)), m.group(2)))
    build = run = 0.0
    start = None
    building = False
    for stamp, text in stamps:
        if text.startswith("ANSIBALLZ: Creating module"):
            start, building = stamp, True
        elif text.startswith("ANSIBALLZ: Done creating module") and building and start is not None:
            build += stamp - start
            building = False
        elif "_low_level_execute_command(): executing:" in text and "AnsiballZ_session.py" in text:
            start = stamp
        elif text.startswith("_low_level_execute_command() done") and start is not None and not building:
            run += stamp - start
            start = None
    return {"ansiballz_build": build, "module_process": run}


def import_times() -> list[float]:
    rounds = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections"))).stdout
        rounds.append([float(x) for x in out.split()])
    return [statistics.median(col) for col in zip(*rounds)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4, help="containers in the session (default 4)")
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--breakdown", action="store_true", help="also show where the module's time goes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("playbook_overhead: the local backend needs root", file=sys.stderr)
        return 2

    workdir = tempfile.mkdtemp(prefix="backendai-pbo-")
    bench = Bench(args.size, workdir)
    times: dict[str, list[float]] = {"empty": [], "create": [], "destroy": [], "runtime": []}
    phases: dict[str, dict[str, float]] = {}
    try:
        bench.run_empty()  # warm-up round: byte-code caches, page cache
        bench.run_create()
        bench.run_destroy()
        for _ in range(args.repeat):
            times["empty"].append(bench.run_empty())
            times["create"].append(bench.run_create()[0])
            times["runtime"].append(bench.runtime_create_time())
            times["destroy"].append(bench.run_destroy()[0])
        if args.breakdown:
            _took, proc = bench.run_create(debug=True)
            phases["create"] = debug_phases(proc.stdout + proc.stderr)
            _took, proc = bench.run_destroy(debug=True)
            phases["destroy"] = debug_phases(proc.stdout + proc.stderr)
    finally:
        if bench.made:
            try:
                bench.run_destroy()
            except RuntimeError as e:
                print("playbook_overhead: cleanup failed, destroy it yourself: ansible-playbook "
                      "playbooks/destroy_session.yml -e session_name=%s -e session_state_dir=%s\n%s"
                      % (bench.name, bench.state_dir, e), file=sys.stderr)
        if not bench.made:
            shutil.rmtree(workdir, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    over_create = med["create"] - med["empty"]
    print("playbook overhead: local session, N = %d, median of %d runs (wall seconds)" % (args.size, args.repeat))
    print("  %-46s %6.2f" % ("empty ansible-playbook (one debug task)", med["empty"]))
    print("  %-46s %6.2f   %+.2f over empty (target <= +%.1f: %s)" % (
        "create_session.yml", med["create"], over_create, TARGET, "PASS" if over_create <= TARGET else "FAIL"))
    print("  %-46s %6.2f   %+.2f over empty" % ("destroy_session.yml", med["destroy"], med["destroy"] - med["empty"]))
    print("  %-46s %6.2f" % ("  of create: the runtime's own bring-up", med["runtime"]))
    print("  runs: " + "; ".join("%s %s" % (k, " ".join("%.2f" % x for x in v)) for k, v in times.items()))
    if args.breakdown:
        for what, p in phases.items():
            print("  %-46s %6.2f   module process %.2f (ANSIBLE_DEBUG=1 run)" % (
                "%s: AnsiballZ build of the session module" % what, p["ansiballz_build"], p["module_process"]))
        basic, clients, crypto, ours = import_times()
        print("  module imports (median of 5 fresh interpreters): ansible.module_utils.basic %.3f, "
              "requests+nomad+hvac %.3f, cryptography %.3f, the collection's module + module_utils %.3f"
              % (basic, clients, crypto, ours))
    return 0 if over_create <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
