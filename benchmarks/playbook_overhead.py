#!/usr/bin/env python3
"""Wall time of ``ansible-playbook`` create_session.yml and destroy_session.yml for a local session.

For a local (this machine) session of N = 4 containers of an image (``--image``, by default the README example's,
which ``scripts/setup`` builds; its containers are engine containers started as the job's tasks):
``create_session.yml`` (until every sshd answers) and, timed separately, ``destroy_session.yml``, against an empty
``ansible-playbook`` run (one debug task on localhost, same ansible.cfg and inventory) and against the runtime's own
work: the same spec made and removed by the local backend in this process (``LocalBackend.present`` and ``absent``,
as the session module calls them, its code already imported), with another session name. Runs are interleaved
(empty, create, destroy, the backend's own), after one warm-up round; the median of ``--repeat`` rounds is printed
with the difference to the empty run and to the empty run plus the backend's own time of the same rounds. Target
(issue 29): the playbook's overhead over the runtime's own work, create and destroy each, at most +0.5 s (what the
playbook costs over an empty run, less what the backend itself does); the exit status is 1 when either misses it.
Needs root; every session it makes is destroyed, also on failure or Ctrl-C.

    .venv/bin/python benchmarks/playbook_overhead.py [--size 4] [--cpu 1000] [--repeat 5] [--image IMAGE] [--breakdown] [--module]

Each container gets ``--cpu`` MHz (default 1000, the README example's): a quota its start does not use up. With a
small one the benchmark measured the clock, not the playbook. A local container's CPU is a hard quota per period of
1 s (``_local.task_start.CPU_PERIOD_US``), and the kernel refills the quotas of all cgroups at the same instants, a
whole second apart on the monotonic clock (a new cgroup's period timer is forwarded from 0 in steps of its period: a
cgroup given 41 ms a second at any moment ran again 0.05-0.09 s past a whole second, every time). A container's start
took 60-110 ms of CPU in its cgroup (runc's init, the entrypoint, sshd), so at 100 MHz (41 ms a second on the 2,445
MHz cores where this was measured) nearly every container used up its quota while starting and waited, 0.1-1.6 s, for
the next refill: every bring-up of a 100 MHz session (25 of 25, in the playbook's worker and in this process alike)
ended 0.06-0.19 s past a whole second, against anywhere in the second at 1000 MHz (none throttled). A bring-up's time
was the distance from its start to a whole second, so the overhead, a difference of two of them taken at different
points of the second, came out anywhere from +0.05 s to +0.62 s in runs of 7 rounds (and the bring-up 1.36 s in the
playbook's worker against 0.88 s here, in one of them). ``--cpu 100`` shows it.

``--module`` also times both playbooks with ``session`` run as a module (an AnsiballZ payload and a
second Python process, as every run did before the action plugin), in the same rounds: the plugin
leaves a task to the module when the target's ``ansible_python_interpreter`` names another Python
than ansible-playbook's, so the same interpreter under its other name forces that path.
``--breakdown`` adds, from one ANSIBLE_DEBUG=1 run of each playbook, the controller's AnsiballZ build
of ``session`` and the module process (both 0 when the plugin ran the task in its worker), and what a
worker imports to run the module in-process for a local session: the module and the local backend's
module_utils that ``session_backend`` imports (fresh interpreters), once from their byte code as the
plugin's worker loads them and once through Ansible's collection loader alone, which compiles
collection code from source. Every run ends with how much of the collection's byte code is current
(``scripts/setup`` writes it; what is not current is compiled in every session task).

Where the time went, and what was done about it (before: create +2.39 s, destroy +2.15 s over the
empty run; AnsiballZ build 0.7 s and module process 1.3 s of each):

* The AnsiballZ build and the module process (Python start, Ansible's module code, requests + nomad
  + hvac, this collection's module_utils) were most of it, for work that happens on the controller
  itself. The action plugin ``plugins/action/session.py`` runs the module's local step in Ansible's
  worker process for a local session on the controller (and leaves Nomad, remote hosts,
  become/async and other interpreters to the module). Lazy imports or a smaller payload alone could
  not reach the target: each run would still build the payload and start a second interpreter.
* Every task costs a worker fork and templating, skipped or not, and every play its set-up:
  create_session.yml is one play, and a local session skips two tasks (the Nomad includes), not four.
* Left as it was: fact gathering was already off; pipelining is already on and changes nothing for
  a local connection; the runtime's own bring-up and teardown are the work itself.

After (same-run medians, --module): create +1.23 s, destroy +0.94 s, against +2.74 s and +2.93 s
as a module. The rest over the target is the worker importing ``session`` and the module_utils it
loads eagerly (0.35 s, --breakdown); with module_utils imported per backend (issue 10's layout),
0.01 s, and create +0.75 s, destroy +0.67 s.

* The session module's import measured 0.01 s here, but the local backend's module_utils are imported
  lazily, by ``session_backend``, inside the task: 0.14-0.22 s of every create and destroy task, three
  quarters of it Ansible's collection loader compiling ~0.5 MB of source (it never uses byte code). The
  plugin's worker now loads them from byte code (0.04 s; plugins/action/session.py); the import line of
  --breakdown times both ways.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
sys.path.insert(0, os.path.join(REPO, "collections"))
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
PLUGINS = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "plugins")
TARGET = 0.5  # seconds over the empty run plus the backend's own work, for create and for destroy alike
#: The README example's image (scripts/setup builds it).
EXAMPLE_IMAGE = "localhost/backendai-cluster/example:bookworm"

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

# What a worker imports to run session in-process for a local session, after what it has from ansible-playbook (the
# action plugin, loaded before the worker forks): ansible.module_utils.basic, then the module and what
# session_backend imports for the local backend. argv[2] "byte-code": through the plugin's finder, as the worker
# imports them (their byte code); "source": through Ansible's collection loader alone (compiled from source).
IMPORTS = r"""
import sys, time
import ansible.executor.task_executor, ansible.plugins.action
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible_collections.backendai.cluster.plugins.action import session as action
if sys.argv[2] == "byte-code":
    sys.meta_path.insert(0, action._ByteCodeFinder())
t0 = time.perf_counter()
import ansible.module_utils.basic
t1 = time.perf_counter()
import ansible_collections.backendai.cluster.plugins.modules.session
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.backends import session_backend
class Module:  # what session_backend reads of the module for a local session
    params = {"backend": "local", "state_dir": "/nonexistent", "mount_roots": None}
session_backend(Module())
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, " ".join(sorted({m.split(".")[0] for m in sys.modules} & {"requests", "nomad", "hvac"})) or "-")
"""


def _module_interpreter() -> str:
    """ansible-playbook's own Python under its other name (python <-> python3): the plugin then runs the module."""
    with open(os.path.join(VENV_BIN, "ansible-playbook"), encoding="utf-8") as f:
        own = f.readline()[2:].strip()
    other = os.path.join(os.path.dirname(own), "python3" if os.path.basename(own) == "python" else "python")
    if not os.path.exists(other):
        raise SystemExit("playbook_overhead: --module needs %s (the same Python as %s)" % (other, own))
    return other


class Bench:
    def __init__(self, size: int, workdir: str, image: str, cpu: int = 1000) -> None:
        self.name = "pbo-" + uuid.uuid4().hex[:8]
        self.state_dir = os.path.join(workdir, "state")
        self.empty = os.path.join(workdir, "empty.yml")
        with open(self.empty, "w", encoding="utf-8") as f:
            f.write(EMPTY_PLAYBOOK)
        self.spec = {"name": self.name, "image": image, "cluster_size": size,
                     "resources": {"cpu": cpu, "memory": 64}}
        self.direct_spec = dict(self.spec, name=self.name + "-direct")
        self.direct_made = False
        self._backend = None
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

    def run_create(self, *extra: str, debug: bool = False) -> tuple[float, subprocess.CompletedProcess]:
        self.made = True
        return self.play("playbooks/create_session.yml", "-e", json.dumps({"session": self.spec}),
                         "-e", "session_state_dir=" + self.state_dir, *extra, debug=debug)

    def run_destroy(self, *extra: str, debug: bool = False) -> tuple[float, subprocess.CompletedProcess]:
        result = self.play("playbooks/destroy_session.yml", "-e", "session_name=" + self.name,
                           "-e", "session_state_dir=" + self.state_dir, *extra, debug=debug)
        self.made = os.path.exists(os.path.join(self.state_dir, self.name))
        return result

    def backend(self):  # type: ignore[no-untyped-def]
        """The local backend as the session module makes it (``_ansible.backends.session_backend``)."""
        if self._backend is None:
            from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
            from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
            from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job
            task = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                             (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
            self._backend = LocalBackend(self.state_dir, None, task)
        return self._backend

    def run_direct(self) -> tuple[float, float]:
        """The runtime's own work: the same spec made and removed by the backend in this process."""
        start = time.perf_counter()
        self.direct_made = True
        self.backend().present(self.direct_spec)
        made = time.perf_counter()
        self.backend().absent(self.direct_spec["name"])
        self.direct_made = False
        return made - start, time.perf_counter() - made

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


def import_times(how: str) -> tuple[float, float, str]:
    """Medians of 5 fresh interpreters: ansible.module_utils.basic, the session module with the local backend's
    module_utils, the HTTP clients loaded ("-": none); ``how``: "byte-code" or "source" (see IMPORTS)."""
    rounds = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", IMPORTS, os.path.join(REPO, "collections"), how],
                             capture_output=True, text=True, check=True).stdout.split()
        rounds.append((float(out[0]), float(out[1]), out[2]))
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds), rounds[0][2]


def byte_code_state() -> tuple[int, int]:
    """(modules whose byte code is current, modules) of the collection's plugins: what the worker loads from byte
    code; the rest it compiles from source (scripts/setup byte-compiles them; see plugins/action/session.py)."""
    import importlib.util

    current = total = 0
    for top, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith(".py"):
                total += 1
                source = os.path.join(top, name)
                try:
                    with open(importlib.util.cache_from_source(source), "rb") as f:
                        head = f.read(16)
                except OSError:
                    continue
                stat = os.stat(source)
                current += head[8:16] == (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + \
                    (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return current, total


def verdict(over: float) -> str:
    return "target <= +%.1f: %s" % (TARGET, "PASS" if over <= TARGET else "FAIL")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4, help="containers in the session (default 4)")
    parser.add_argument("--cpu", type=int, default=1000,
                        help="MHz per container (default 1000: a quota the containers' start does not use up; see above)")
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--breakdown", action="store_true", help="also show where the session task's time goes")
    parser.add_argument("--module", action="store_true", help="also time the playbooks with session run as a module")
    parser.add_argument("--image", default=EXAMPLE_IMAGE, help="the session's image (default %s)" % EXAMPLE_IMAGE)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("playbook_overhead: the local backend needs root", file=sys.stderr)
        return 2

    as_module = ("-e", "ansible_python_interpreter=" + _module_interpreter()) if args.module else ()
    workdir = tempfile.mkdtemp(prefix="backendai-pbo-")
    bench = Bench(args.size, workdir, args.image, args.cpu)
    times: dict[str, list[float]] = {"empty": [], "create": [], "destroy": [], "runtime": [], "present": [], "absent": []}
    if args.module:
        times.update({"create-module": [], "destroy-module": []})
    phases: dict[str, dict[str, float]] = {}
    try:
        bench.run_empty()  # warm-up round: byte-code caches, page cache
        bench.run_create()
        bench.run_destroy()
        bench.run_direct()
        for _ in range(args.repeat):
            times["empty"].append(bench.run_empty())
            times["create"].append(bench.run_create()[0])
            times["runtime"].append(bench.runtime_create_time())
            times["destroy"].append(bench.run_destroy()[0])
            present, absent = bench.run_direct()
            times["present"].append(present)
            times["absent"].append(absent)
            if args.module:
                times["create-module"].append(bench.run_create(*as_module)[0])
                times["destroy-module"].append(bench.run_destroy(*as_module)[0])
        if args.breakdown:
            _took, proc = bench.run_create(debug=True)
            phases["create"] = debug_phases(proc.stdout + proc.stderr)
            _took, proc = bench.run_destroy(debug=True)
            phases["destroy"] = debug_phases(proc.stdout + proc.stderr)
    finally:
        if bench.direct_made:
            bench.backend().absent(bench.direct_spec["name"])
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
    own = {"create": "present", "destroy": "absent"}
    # per round: the playbook less the empty run and the backend's own work of the same round
    over = {k: statistics.median(c - e - d for c, e, d in zip(times[k], times["empty"], times[own[k]]))
            for k in ("create", "destroy")}
    print("playbook overhead: local session of %s, N = %d, %d MHz each, median of %d runs (wall seconds); load average %s"
          % (args.image, args.size, args.cpu, args.repeat, " ".join("%.1f" % x for x in os.getloadavg())))
    print("  %-46s %6.2f" % ("empty ansible-playbook (one debug task)", med["empty"]))
    for what in ("create", "destroy"):
        print("  %-46s %6.2f   %+.2f over empty, the backend's own %s %.2f: %+.2f over both (%s)" % (
            "%s_session.yml" % what, med[what], med[what] - med["empty"], own[what], med[own[what]], over[what],
            verdict(over[what])))
    if args.module:
        for what in ("create", "destroy"):
            print("  %-46s %6.2f   %+.2f over empty (as before the action plugin)" % (
                "%s_session.yml, session run as a module" % what, med[what + "-module"],
                med[what + "-module"] - med["empty"]))
    print("  %-46s %6.2f" % ("  of create: the runtime's own bring-up", med["runtime"]))
    print("  runs: " + "; ".join("%s %s" % (k, " ".join("%.2f" % x for x in v)) for k, v in times.items()))
    if args.breakdown:
        for what, p in phases.items():
            print("  %-46s %6.2f   module process %.2f (ANSIBLE_DEBUG=1 run; 0: run in the worker)" % (
                "%s: AnsiballZ build of the session module" % what, p["ansiballz_build"], p["module_process"]))
        for how in ("byte-code", "source"):
            basic, session, clients = import_times(how)
            print("  worker imports for a local session, %-9s (median of 5 fresh interpreters): ansible.module_utils.basic "
                  "%.3f, the session module and the local backend's module_utils %.3f (HTTP clients among them: %s)"
                  % (how, basic, session, clients))
    print("  the collection's byte code: %d of %d modules current (the rest are compiled from source in every run)"
          % byte_code_state())
    return 0 if max(over.values()) <= TARGET else 1


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        sys.exit(main())
