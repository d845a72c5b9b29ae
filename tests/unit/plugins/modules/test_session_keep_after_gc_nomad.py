# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``keep_after`` on the nomad backend, to the end: after ``keep_after`` the supervisors exit, the tasks end, and
Nomad's garbage collection removes the job and its allocations (their directories, hence the status files and logs)
``job_gc_threshold`` later. Run against the in-test Nomad API double, whose GC follows ``nomad/core_sched.go``
(``nomad_double/model/gc.py`` says which parts and what it leaves out); the double runs no task here, the tasks' ends
are set as the supervisors make them (tests/local_runtime/ runs the supervisors in real containers).

A session that ends by itself (a command, or ``max_run_time`` / ``keep_after``, interactive containers included) is a
batch job, which Nomad collects once dead; an interactive session without them is a service job, which Nomad never
collects while it is not stopped (``nomad/state/schema.go`` ``jobIsGCable``): its allocations go, the job stays."""

from __future__ import annotations

import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.model.gc import JOB_GC_THRESHOLD
from nomad_double.server import NomadAPIDouble
from test_session_info_nomad import alloc_of, conn, info, nomad  # noqa: F401 - a one-node double and its helpers

STATUS = "alloc/" + gang.STATUS_FILE
MINUTE = 60 * 1_000_000_000
HOSTS = ("main1", "sub1")


def _end(nomad: NomadAPIDouble, status: str, code: int, keep: int) -> None:
    """Each supervisor's end, as written: kept up ``keep`` seconds (the allocation runs), then its task exits."""
    for host in HOSTS:
        nomad.write_alloc_file(alloc_of(nomad, host), STATUS, "policy none\nstate %s\ngeneration 0\nrestarts 0\n"
                               "ended %d %d %d\n" % (status, code, int(time.time()), keep))


def test_a_finished_session_is_collected_job_gc_threshold_after_its_tasks_ended(nomad: NomadAPIDouble,
                                                                               run: ModuleRun) -> None:
    result = run(session_module, conn(nomad, spec=spec(size=2, command=["python", "train.py"], keep_after=600)))
    assert not result.get("failed"), result.get("msg")
    _end(nomad, "done", 0, 600)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "TERMINATED", view
    # kept up: the tasks run (keep_after), and Nomad collects nothing of a running job, however late
    assert nomad.garbage_collect(time.time_ns() + 10 * JOB_GC_THRESHOLD) == {"jobs": [], "evals": [], "allocs": []}
    for host in HOSTS:  # keep_after is over: the supervisors exit 0, the tasks complete
        nomad.set_alloc_status(alloc_of(nomad, host), "complete", task_state="dead")
    ended = time.time_ns()
    allocs = {a["ID"] for a in nomad.allocations_of("s1")}
    assert nomad.garbage_collect(ended + JOB_GC_THRESHOLD - MINUTE)["jobs"] == []  # not yet: job_gc_threshold
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "TERMINATED", view
    gone = nomad.garbage_collect(ended + JOB_GC_THRESHOLD + MINUTE)
    assert gone["jobs"] == ["s1"] and set(gone["allocs"]) == allocs, gone
    assert nomad.stored_job("s1") is None and nomad.allocations_of("s1") == []
    assert info(run, nomad, name="s1") == []
    # what Nomad's GC does not know: the session's keypair stays until state=absent removes it
    assert nomad.stored_variable("nomad/jobs/s1") is not None
    result = run(session_module, conn(nomad, name="s1", state="absent"))
    assert not result.get("failed"), result.get("msg")
    assert nomad.stored_variable("nomad/jobs/s1") is None


def test_an_interactive_session_ended_by_max_run_time_is_collected_as_a_batch_session(nomad: NomadAPIDouble,
                                                                                     run: ModuleRun) -> None:
    result = run(session_module, conn(nomad, spec=spec(size=2, max_run_time=60, keep_after=0)))
    assert not result.get("failed"), result.get("msg")
    assert nomad.stored_job("s1")["Type"] == "batch"
    for host in HOSTS:  # the time is up: every supervisor exits 1 (keep_after 0)
        nomad.set_alloc_status(alloc_of(nomad, host), "failed", task_state="dead", failed=True)
    gone = nomad.garbage_collect(time.time_ns() + JOB_GC_THRESHOLD + MINUTE)
    assert gone["jobs"] == ["s1"] and len(gone["allocs"]) == 2, gone


def test_an_interactive_session_without_a_lifetime_is_a_service_job_nomad_keeps(nomad: NomadAPIDouble,
                                                                               run: ModuleRun) -> None:
    """Its containers fail (no lifetime, nothing ends it otherwise): their allocations are collected after
    eval_gc_threshold, the dead service job stays (shown until state=absent)."""
    result = run(session_module, conn(nomad, spec=spec(size=2)))
    assert not result.get("failed"), result.get("msg")
    assert nomad.stored_job("s1")["Type"] == "service"
    for host in HOSTS:
        nomad.set_alloc_status(alloc_of(nomad, host), "failed", task_state="dead", failed=True)
    gone = nomad.garbage_collect(time.time_ns() + 10 * JOB_GC_THRESHOLD)
    assert gone["jobs"] == [] and len(gone["allocs"]) == 2, gone
    assert nomad.stored_job("s1") is not None and nomad.allocations_of("s1") == []


def test_force_gc_collects_a_dead_batch_job_at_once(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    """``nomad system gc`` (forceGC: every threshold 1 ms): what an operator runs to free a finished session now."""
    run(session_module, conn(nomad, spec=spec(size=2, command=["python", "train.py"], keep_after=0)))
    assert nomad.garbage_collect(force=True)["jobs"] == []  # running
    for host in HOSTS:
        nomad.set_alloc_status(alloc_of(nomad, host), "complete", task_state="dead")
    time.sleep(0.01)
    assert nomad.garbage_collect(force=True)["jobs"] == ["s1"]
