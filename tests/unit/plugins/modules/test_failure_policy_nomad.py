# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure policy on the nomad backend, against the Nomad API double (docs/failure-policy.md): the job a policy
registers (no Nomad restarts of one task, the supervisor in Meta once), and session_info reading the supervisors'
status files through the client's ``/v1/client/fs/cat`` (written here as the supervisors write them: the double
runs no task; tests/local_runtime/test_failure_policy.py runs the supervisors themselves in real containers)."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import GANG_RESTART_POLICY, RESTART_POLICY
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from module_helpers import ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_info_nomad import alloc_of, conn, info, nomad  # noqa: F401 - a one-node double and its helpers
from ansible_collections.backendai.cluster.plugins.modules import session as session_module

STATUS = "alloc/" + gang.STATUS_FILE


def create(run: ModuleRun, double: NomadAPIDouble, failure: t.Optional[t.Dict[str, t.Any]]) -> None:
    s = spec(size=3, command=["python", "train.py"])
    if failure is not None:
        s["failure"] = failure
    result = run(session_module, conn(double, spec=s))
    assert not result.get("failed"), result.get("msg")


def write_status(double: NomadAPIDouble, host: str, text: str) -> None:
    double.write_alloc_file(alloc_of(double, host), STATUS, text)


def test_a_policy_job_restarts_no_task_and_carries_the_supervisor(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad, {"policy": "restart_all", "max_restarts": 2})
    job = nomad.stored_job("s1")
    assert {g["RestartPolicy"]["Attempts"] for g in job["TaskGroups"]} == {GANG_RESTART_POLICY["Attempts"]} == {0}
    assert job["Meta"][gang.POLICY_META_KEY] == "restart_all 2 600 0 360 2201 2,126,127"
    assert job["Meta"][gang.MEMBERS_META_KEY] == "main1,sub1,sub2"
    assert job["Meta"][gang.SCRIPT_META_KEY] == gang.GANG_SCRIPT


def test_no_policy_reads_no_status_file(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad, None)
    assert {g["RestartPolicy"]["Attempts"] for g in nomad.stored_job("s1")["TaskGroups"]} == {RESTART_POLICY["Attempts"]}
    nomad.clear_requests()
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "RUNNING" and "failure" not in view
    assert nomad.find("GET", "^/v1/client/fs/cat/") == []


def test_session_info_shows_the_gang_restarting_then_giving_up(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    create(run, nomad, {"policy": "restart_all", "max_restarts": 1})
    # before any supervisor wrote its file (or with a token without read-fs): what Nomad knows
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "RUNNING" and "failure" not in view
    killed = "last 1795826188 sub2 137 the command was killed by signal 9\n"
    for host, state in (("main1", "waiting"), ("sub1", "running"), ("sub2", "stopping")):
        write_status(nomad, host, "policy restart_all\nstate %s\ngeneration 1\nrestarts 1\n%s" % (state, killed))
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "RESTARTING", view
    assert view["failure"] == {"policy": "restart_all", "state": "restarting", "restarts": 1, "first_failure": None}
    by_host = {c["hostname"]: c for c in view["containers"]}
    assert {h: (c["status"], c["restarts"]) for h, c in by_host.items()} == {
        "main1": ("restarting", 1), "sub1": ("running", 1), "sub2": ("restarting", 1)}
    assert by_host["sub1"]["last_failure"] == {"time": 1795826188, "host": "sub2", "exit_code": 137,
                                               "reason": "the command was killed by signal 9"}
    # the second death within the window: every supervisor gives up, every task fails
    first = "first 1795826190 main1 137 the command was killed by signal 9 (after 1 restarts within 600s)\n"
    for host in ("main1", "sub1", "sub2"):
        write_status(nomad, host, "policy restart_all\nstate gave_up\ngeneration 1\nrestarts 1\n%s%s" % (killed, first))
        nomad.set_alloc_status(alloc_of(nomad, host), "failed", task_state="dead", failed=True)
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "ERROR", view
    assert view["reason"] == ("failure policy restart_all gave up: main1, exit code 137: the command was killed by "
                              "signal 9 (after 1 restarts within 600s)"), view["reason"]
    assert view["failure"]["state"] == "gave_up" and view["failure"]["first_failure"]["host"] == "main1"
    assert all(c["reason"].startswith("gave up by the failure policy") for c in view["containers"]), view
    assert len(nomad.find("GET", "^/v1/client/fs/cat/")) >= 3
