# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure policy on the nomad backend (docs/failure-policy.md), with the job's tasks run for real.

The mechanism lives in the job: the supervisor in job Meta that the entrypoint runs, and each group's restart
policy. So the session is registered with the nomad backend against the Nomad API double (three client nodes, one
container each), and its allocations run as the engine containers of a local session of the same spec (every
container is the group's task of the rendered job: ``_local.task_start``), driven by a client double
(``nomad_double/engine_client.py``) that tells the double what a Nomad client would: the task's starts and exits
through the group's restart policy (``nomad_double/model/tasks.py``: ``restarts.go``'s tracker, TaskStates,
ClientStatus), a node going down (its allocation lost) and back (the replacement, whose container is made again).
What the tests read is what ``session_info`` of the nomad backend reports through the double, status files
included (``/v1/client/fs/cat`` of the containers' allocation directories).

For each policy: a rank's command killed with -9, a command exiting with a ``fail_on_exit_codes`` code, a command
whose heartbeat stops, an allocation lost (its node down, its container gone); ``max_restarts`` ending in ``fail``;
nothing left after the end (the leak check). Not the double's doing: the gang's restarts inside the containers.
"""

from __future__ import annotations

import os
import signal
import typing as t
import uuid

import pytest

import faults
import images
from test_failure_policy import TASK, until

from ansible_collections.backendai.cluster.plugins.module_utils._local.bringup import engine_log_tail
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang as gang_script
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from ansible_collections.backendai.cluster.plugins.modules import session_info
from module_helpers import ModuleRun
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.engine_client import EngineClient
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures

HOSTS = ("main1", "sub1", "sub2")
#: A rank: says which start it is; USR1 makes it exit 3, USR2 stops its heartbeat (it hangs); else it beats. A hung rank
#: dates its last beat a minute back, as a rank that stopped beating a minute ago would have left it: the supervisor
#: reads the file's age against hang_timeout either way, and the tests need not wait hang_timeout out (5 s at least,
#: each time). test_failure_policy.py's hung rank waits it out for real.
RANK = ("HB=${BACKENDAI_HEARTBEAT_FILE:-/tmp/heartbeat}; trap 'exit 3' USR1; "
        "trap 'H=1; touch -d @$(($(date +%s) - 60)) \"$HB\"' USR2; "
        "echo \"start $BACKENDAI_CLUSTER_HOST ${BACKENDAI_RESTART_COUNT:-0}\"; "
        "while :; do [ -n \"$H\" ] || touch \"$HB\"; sleep 0.2; done")
#: Each container's MHz, and each client node's: one container per node. The local engine's CPU quota is the spec's MHz
#: over a core's (task_start.py): 1,000 MHz gives each of the three containers 0.4 of a core here, where 100 MHz (4 %)
#: made every supervisor tick and probe wait for its quota.
CPU, NODE_CPU = 1000, 1500
#: How much faster the client double lets Nomad's restart delays pass (policy none: 5 s per restart of a task, 2 s here, so
#: that a test still sees the task restarting; the events still say 5 s): what is restarted, how often and when Nomad
#: gives up does not depend on it.
RESTART_TIME_SCALE = 2.5
#: ... and once a test saw a task restarting (policy none), 25 times as fast (0.2 s for 5 s: the client double's tick)
SEEN_RESTART_TIME_SCALE = 25.0


class NomadGang:
    """One session: registered through the nomad backend's module in the double, run by the local engine."""

    def __init__(self, run: ModuleRun, double: t.Any, state_root: str, helpers: t.Any, name: str,
                 failure: t.Dict[str, t.Any]) -> None:
        self.run, self.double, self.name = run, double, name
        self.spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": len(HOSTS), "cluster_mode": "multi-node",
                     "resources": {"cpu": CPU, "memory": 64}, "command": ["sh", "-c", RANK], "failure": failure}
        self.local = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
        self.paths = SessionPaths(os.path.abspath(state_root), name)
        self.client: t.Optional[EngineClient] = None

    def up(self) -> "NomadGang":
        result = self.run(session_module, {"nomad_addr": self.double.url, "spec": self.spec})
        assert not result.get("failed"), result.get("msg")
        job = self.double.stored_job(self.name)
        assert self.local.present(self.spec)["session"]["state"] == "RUNNING"
        # the containers are the job's tasks: the mechanism (supervisor, policy, members, entrypoint) is the job's
        local_job = self.local_job()
        for key in (gang_script.SCRIPT_META_KEY, gang_script.POLICY_META_KEY, gang_script.MEMBERS_META_KEY,
                    nomad_job.ENTRYPOINT_META_KEY):
            assert (job["Meta"].get(key), key) == (local_job["Meta"].get(key), key)
        for group, local_group in zip(job["TaskGroups"], local_job["TaskGroups"]):
            assert group["Tasks"][0]["Config"] == local_group["Tasks"][0]["Config"]
            assert group["RestartPolicy"] == local_group["RestartPolicy"]
        self.client = EngineClient(self.double, self.name, self.paths, time_scale=RESTART_TIME_SCALE).start()
        until(lambda: [self.starts(h) for h in HOSTS], lambda s: all(s), 20)
        return self

    def local_job(self) -> t.Dict[str, t.Any]:
        from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import build_plan
        from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
        from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import local_agent
        return dict(TASK.render(build_plan(parse_spec(self.spec), [local_agent()], str(uuid.UUID(int=0)))))

    def down(self) -> None:
        if self.client is not None:
            self.client.stop()
        self.local.absent(self.name)
        result = self.run(session_module, {"nomad_addr": self.double.url, "name": self.name, "state": "absent"})
        assert not result.get("failed"), result.get("msg")

    # what the tests do -------------------------------------------------------------------------
    def view(self) -> t.Dict[str, t.Any]:
        result = self.run(session_info, {"nomad_addr": self.double.url, "name": self.name})
        assert not result.get("failed"), result.get("msg")
        (view,) = result["sessions"]
        return view

    def until(self, ok: t.Callable[[t.Dict[str, t.Any]], bool], timeout: float) -> t.Dict[str, t.Any]:
        view = until(self.view, ok, timeout)
        assert ok(view), (view["state"], view["reason"], view.get("failure"), [
            (c["hostname"], c["status"], c["reason"], c.get("last_failure")) for c in view["containers"]],
            {h: (a["ClientStatus"], [e["Type"] for e in a["TaskStates"][nomad_job.TASK_NAME]["Events"]])
             for h, a in self.allocs().items()})
        return view

    def starts(self, host: str) -> t.List[str]:
        return [line for line in engine_log_tail(self.paths.log(host), 200) if line.startswith("start ")]

    def engine(self, host: str) -> str:
        assert self.client is not None
        return self.client.engines[host]

    def signal(self, host: str, sig: str) -> None:
        """Send ``sig`` to the host's command: its supervisor's record of it, or the container's first process under
        policy none (the command is exec'd)."""
        faults.signal_command(self.engine(host), images.engine_conf(), getattr(signal, "SIG" + sig),
                              supervised=self.spec["failure"]["policy"] != "none")

    def allocs(self) -> t.Dict[str, t.Dict[str, t.Any]]:
        """Group -> its current allocation as the double serves it."""
        out: t.Dict[str, t.Dict[str, t.Any]] = {}
        for a in sorted(self.double.allocations_of(self.name), key=lambda a: a["CreateIndex"]):
            out[a["TaskGroup"]] = a
        return out

    def nomad_restarts(self) -> t.Dict[str, int]:
        return {g: a["TaskStates"][nomad_job.TASK_NAME]["Restarts"] for g, a in self.allocs().items()}

    def node_of(self, host: str) -> str:
        return self.allocs()[host]["NodeName"]

    def lose(self, host: str) -> None:
        """The host's node goes down (its allocation is lost) and its container with it."""
        self.double.set_node_status(self.node_of(host), "down")
        images.podman("rm", "--force", "--time", "0", self.engine(host))


@pytest.fixture
def nomad_gang(run: ModuleRun, nomad_double_factory: t.Any, state_root: str, helpers: t.Any) -> t.Any:
    made: t.List[NomadGang] = []
    before = helpers.host_snapshot()

    def make(name: str, failure: t.Dict[str, t.Any]) -> NomadGang:
        double = nomad_double_factory()
        for i in range(len(HOSTS)):  # one container per node
            double.add_node("n%d" % (i + 1), cpu=NODE_CPU, memory=256)
        made.append(NomadGang(run, double, state_root, helpers, name, failure))
        return made[-1].up()
    yield make
    for g in made:
        g.down()
    helpers.assert_clean(before, state_root, [])


def by_host(view: t.Dict[str, t.Any], key: str) -> t.Dict[str, t.Any]:
    return {c["hostname"]: c.get(key) for c in view["containers"]}


def failed_by_policy(g: NomadGang, view: t.Dict[str, t.Any]) -> None:
    """Every task ended and Nomad restarted none (Attempts 0: "Policy allows no restarts"); no file is read from a lost
    allocation."""
    allocs = g.allocs()
    assert {h: a["ClientStatus"] for h, a in allocs.items() if a["ClientStatus"] != "lost"} == {
        h: "failed" for h, a in allocs.items() if a["ClientStatus"] != "lost"}, allocs
    for a in allocs.values():
        if a["ClientStatus"] == "failed":
            events = a["TaskStates"][nomad_job.TASK_NAME]["Events"]
            assert [e["Type"] for e in events][-2:] == ["Terminated", "Not Restarting"], events
            assert events[-1]["DisplayMessage"] == "Policy allows no restarts"
    assert set(g.nomad_restarts().values()) == {0}


def test_restart_all_on_nomad_each_fault(nomad_gang: t.Any) -> None:
    """kill -9, a hang and a lost allocation each restart every rank (the gang's generations 1, 2, 3: Nomad restarts no
    task), the lost one comes back as a replacement on its node; then an exit code of fail_on_exit_codes fails all."""
    g = nomad_gang("fpn-all", {"policy": "restart_all", "max_restarts": 3, "fail_on_exit_codes": [3],
                               "hang_timeout": 5, "rejoin_timeout": 60})
    g.signal("sub2", "KILL")
    view = g.until(lambda v: v["state"] == "RUNNING" and v.get("failure", {}).get("restarts") == 1, 20)
    assert {(f["host"], f["exit_code"]) for f in by_host(view, "last_failure").values()} == {("sub2", 137)}, view
    assert set(by_host(view, "restarts").values()) == {1} and set(g.nomad_restarts().values()) == {0}
    until(lambda: [g.starts(h) for h in HOSTS], lambda s: all(len(x) == 2 for x in s), 15)

    g.signal("sub1", "USR2")  # sub1 hangs: after hang_timeout its supervisor restarts the gang
    view = g.until(lambda v: v["state"] == "RUNNING" and v.get("failure", {}).get("restarts") == 2, 25)
    assert by_host(view, "last_failure")["main1"]["host"] == "sub1", view
    assert "hung" in by_host(view, "last_failure")["main1"]["reason"], view

    first = g.allocs()["sub2"]["ID"]
    g.lose("sub2")
    view = g.until(lambda v: v["state"] == "RESTARTING", 15)
    assert by_host(view, "status")["sub2"] == "lost", view
    assert g.double.model.node_back(g.node_of("sub2"))
    view = g.until(lambda v: v["state"] == "RUNNING" and v.get("failure", {}).get("restarts") == 3, 30)
    assert g.allocs()["sub2"]["ID"] != first and by_host(view, "alloc_id")["sub2"] != first
    assert set(g.nomad_restarts().values()) == {0}

    g.signal("main1", "USR1")  # exit 3: do not retry
    view = g.until(lambda v: v["state"] == "ERROR" and all(c["status"] == "failed" for c in v["containers"]), 40)
    assert view["reason"] == ("failure policy restart_all failed: main1, exit code 3: the command exited with code 3 "
                              "(exit code 3 is in fail_on_exit_codes)"), view["reason"]
    failed_by_policy(g, view)


def test_restart_one_on_nomad_each_fault(nomad_gang: t.Any) -> None:
    """kill -9 and a hang restart only that rank; a lost allocation's replacement rejoins while the others run on; an
    exit code of fail_on_exit_codes fails the session."""
    g = nomad_gang("fpn-one", {"policy": "restart_one", "fail_on_exit_codes": [3], "hang_timeout": 5,
                               "rejoin_timeout": 60})
    g.signal("sub1", "KILL")
    g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "restarts") == {"main1": 0, "sub1": 1, "sub2": 0}, 20)
    g.signal("sub2", "USR2")
    view = g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "restarts") == {"main1": 0, "sub1": 1, "sub2": 1},
                   25)
    assert "hung" in by_host(view, "last_failure")["sub2"]["reason"], view
    assert g.starts("main1") == ["start main1 0"] and set(g.nomad_restarts().values()) == {0}

    g.lose("sub2")
    view = g.until(lambda v: v["state"] == "DEGRADED", 15)
    assert by_host(view, "status") == {"main1": "running", "sub1": "running", "sub2": "lost"}, view
    assert g.double.model.node_back(g.node_of("sub2"))
    g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "status")["sub2"] == "running", 30)
    assert g.starts("main1") == ["start main1 0"], g.starts("main1")

    g.signal("sub1", "USR1")
    view = g.until(lambda v: v["state"] == "ERROR" and all(c["status"] == "failed" for c in v["containers"]), 40)
    assert view["reason"].startswith("failure policy restart_one failed: sub1, exit code 3: "), view["reason"]
    failed_by_policy(g, view)


@pytest.mark.parametrize("fault", ["kill", "exit", "hang", "lost"])
def test_fail_on_nomad_ends_every_task(nomad_gang: t.Any, fault: str) -> None:
    g = nomad_gang("fpn-fail-" + fault, {"policy": "fail", "fail_on_exit_codes": [3], "hang_timeout": 5})
    if fault == "lost":
        g.lose("sub2")
    else:
        g.signal("sub2", {"kill": "KILL", "exit": "USR1", "hang": "USR2"}[fault])
    view = g.until(lambda v: v["state"] == "ERROR" and all(c["status"] in ("failed", "lost") for c in v["containers"]),
                   25)
    reason = {"kill": "failure policy fail failed: sub2, exit code 137: the command was killed by signal 9",
              "exit": "failure policy fail failed: sub2, exit code 3: the command exited with code 3",
              "hang": "failure policy fail failed: sub2: the command hung",
              "lost": "failure policy fail failed: sub2: sub2 does not answer on the session network"}[fault]
    assert view["reason"].startswith(reason), view["reason"]
    failed_by_policy(g, view)


def test_max_restarts_on_nomad_ends_in_fail(nomad_gang: t.Any) -> None:
    g = nomad_gang("fpn-max", {"policy": "restart_all", "max_restarts": 1})
    g.signal("sub2", "KILL")
    g.until(lambda v: v["state"] == "RUNNING" and v.get("failure", {}).get("restarts") == 1, 20)
    until(lambda: [g.starts(h) for h in HOSTS], lambda s: all(len(x) == 2 for x in s), 15)
    g.signal("main1", "KILL")
    view = g.until(lambda v: v["state"] == "ERROR" and all(c["status"] == "failed" for c in v["containers"]), 40)
    assert view["failure"]["state"] == "gave_up", view
    assert view["reason"].startswith("failure policy restart_all gave up: main1, exit code 137: "), view["reason"]
    failed_by_policy(g, view)


def test_none_on_nomad_is_nomads_restart_policy(nomad_gang: t.Any) -> None:
    """No supervisor: Nomad's own restart policy (2 attempts in 5 minutes, 5 s apart) restarts a killed or failing
    task in place, a hang is not watched, a lost allocation is replaced; the third failure within the interval fails
    the allocation and the session is DEGRADED (until present)."""
    g = nomad_gang("fpn-none", {"policy": "none"})
    g.signal("sub1", "KILL")
    view = g.until(lambda v: by_host(v, "status")["sub1"] == "restarting", 10)
    assert view["state"] == "DEGRADED" and "failure" not in view, view
    assert g.client is not None
    g.client.time_scale = SEEN_RESTART_TIME_SCALE  # (from the next exit on: this restart is due as it was)
    view = g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "restarts")["sub1"] == 1, 20)
    starts = until(lambda: g.starts("sub1"), lambda s: len(s) == 2, 10)  # the same container started again
    assert starts == ["start sub1 0", "start sub1 0"], starts
    g.signal("sub2", "USR1")
    g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "restarts") == {"main1": 0, "sub1": 1, "sub2": 1}, 20)
    assert by_host(g.view(), "exit_code")["sub2"] == 3
    g.signal("main1", "USR2")  # not watched: main1 runs on
    first = g.allocs()["main1"]["ID"]
    g.lose("main1")
    view = g.until(lambda v: v["state"] == "DEGRADED" and by_host(v, "status")["main1"] == "lost", 10)
    assert g.double.model.node_back(g.node_of("main1"))
    g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "alloc_id")["main1"] != first, 30)
    g.signal("sub1", "KILL")  # the second restart of sub1 within the interval, then the third failure: no more
    g.until(lambda v: v["state"] == "RUNNING" and by_host(v, "restarts")["sub1"] == 2, 20)
    g.signal("sub1", "KILL")
    view = g.until(lambda v: v["state"] == "DEGRADED" and by_host(v, "status")["sub1"] == "failed", 15)
    events = g.allocs()["sub1"]["TaskStates"][nomad_job.TASK_NAME]["Events"]
    assert events[-1]["DisplayMessage"] == 'Exceeded allowed attempts 2 in interval 5m0s and mode is "fail"', events
