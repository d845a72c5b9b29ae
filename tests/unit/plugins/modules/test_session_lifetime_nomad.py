# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``max_run_time`` on the nomad backend, against the Nomad API double (docs/session-lifecycle.md): the job carries
the supervisor and the time (no Nomad restart of a task: it would count its time anew), and session_info shows a
session the time ended as ERROR with the reason, read from the supervisors' status files through
``/v1/client/fs/cat`` (written here as the supervisors write them: the double runs no task;
tests/local_runtime/test_session_lifecycle_ops.py runs the supervisors in real containers)."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import GANG_RESTART_POLICY
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_info_nomad import alloc_of, conn, info, nomad  # noqa: F401 - a one-node double and its helpers

STATUS = "alloc/" + gang.STATUS_FILE


def time_ran_out(run: ModuleRun, nomad: NomadAPIDouble, first_host: str) -> t.Dict[str, t.Any]:
    """Every supervisor's end when ``first_host``'s time ran out first (30 s): status files and allocations failed;
    the view read through the double, ERROR with the reason."""
    first = "1795826188 %s - max_run_time 30s exceeded: every command was stopped" % first_host
    for host in ("main1", "sub1"):
        nomad.write_alloc_file(alloc_of(nomad, host), STATUS,
                               "policy none\nstate failed\ngeneration 0\nrestarts 0\nlast %s\nfirst %s\n" % (first, first))
        nomad.set_alloc_status(alloc_of(nomad, host), "failed", task_state="dead", failed=True)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "ERROR", view
    assert view["reason"] == "max_run_time 30s exceeded: every command was stopped (first seen by %s)" % first_host, \
        view["reason"]
    return view


def test_max_run_time_ends_the_session_error_with_the_reason(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, conn(nomad, spec=spec(size=2, command=["python", "train.py"], max_run_time=30)))
    assert not result.get("failed"), result.get("msg")
    job = nomad.stored_job("s1")
    assert job["Meta"][gang.POLICY_META_KEY].endswith(" 30") and job["Meta"][gang.SCRIPT_META_KEY] == gang.GANG_SCRIPT
    assert all(g["RestartPolicy"] == GANG_RESTART_POLICY for g in job["TaskGroups"])
    # running: the supervisors only keep the time, nothing more is shown
    for host in ("main1", "sub1"):
        nomad.write_alloc_file(alloc_of(nomad, host), STATUS, "policy none\nstate running\ngeneration 0\nrestarts 0\n")
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "RUNNING" and "failure" not in view, view
    # the time ran out on main1 first: it told sub1, both stopped their commands and exited 1
    view = time_ran_out(run, nomad, "main1")
    assert all(c["reason"] == "stopped: max_run_time 30s exceeded: every command was stopped"
               for c in view["containers"]), view["containers"]


def test_a_keep_after_that_could_never_start_is_refused_before_anything_is_written(nomad: NomadAPIDouble,
                                                                                     run: ModuleRun) -> None:
    result = run(session_module, conn(nomad, spec=spec(size=2, keep_after=30)))
    assert result.get("failed") and "session.keep_after" in result["msg"] and "set max_run_time" in result["msg"], \
        result["msg"]
    assert nomad.find("PUT", ".") == [] and nomad.find("POST", ".") == []


def test_max_run_time_ends_an_interactive_session_error(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    """No command, but a lifetime: a batch job whose every task runs the supervisor (no Nomad restart), and the view of
    the end is the batch session's (tests/local_runtime/test_session_lifetime_interactive.py runs the tasks)."""
    result = run(session_module, conn(nomad, spec=spec(size=2, max_run_time=30)))
    assert not result.get("failed"), result.get("msg")
    job = nomad.stored_job("s1")
    assert job["Type"] == "batch" and job["Meta"][gang.MEMBERS_META_KEY] == "main1,sub1", job["Meta"]
    assert all(g["RestartPolicy"] == GANG_RESTART_POLICY for g in job["TaskGroups"])
    time_ran_out(run, nomad, "sub1")


def test_keep_after_a_finished_session_is_shown_finished_while_its_tasks_stay_up(nomad: NomadAPIDouble,
                                                                                 run: ModuleRun) -> None:
    """The supervisors keep their tasks up keep_after seconds after the end (their allocations still run): the view
    reads each one's end from its status file. After that the tasks exit and Nomad's own garbage collection removes
    the allocations (not modelled by the double)."""
    result = run(session_module, conn(nomad, spec=spec(size=2, command=["python", "train.py"], keep_after=600)))
    assert not result.get("failed"), result.get("msg")
    assert nomad.stored_job("s1")["Meta"][gang.POLICY_META_KEY].endswith(" 0 600")
    for host in ("main1", "sub1"):
        nomad.write_alloc_file(alloc_of(nomad, host), STATUS,
                               "policy none\nstate done\ngeneration 0\nrestarts 0\nended 0 1795826188 600\n")
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "TERMINATED", view
    assert {(c["status"], c["exit_code"]) for c in view["containers"]} == {("complete", 0)}
