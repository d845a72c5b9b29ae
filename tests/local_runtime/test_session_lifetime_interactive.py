# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``max_run_time`` and ``keep_after`` for interactive containers (no command), with real engine containers
(docs/session-lifecycle.md).

An interactive container runs its sshd and nothing else; with ``max_run_time`` or ``keep_after`` its supervisor
(``_session.gang``) runs too, with no command: it keeps the session's time, takes the gang's messages and keeps the
container up ``keep_after`` seconds after the end. On the local backend (the containers the local backend makes) and
on the nomad backend (the rendered job's tasks run as engine containers while the in-test Nomad API double plays the
servers and a client: ``test_failure_policy_on_nomad.NomadGang``), an interactive session that runs longer than its
``max_run_time`` ends ``ERROR`` with the reason; with ``keep_after`` it stays up (``ssh main1`` works) that long first,
then it is removed (local: the session's reaper; Nomad: the tasks exit).
"""

from __future__ import annotations

import os
import time
import typing as t

import pytest

import images
from test_failure_policy import until
from test_failure_policy_on_nomad import NODE_CPU, NomadGang, failed_by_policy
from test_session_lifecycle_ops import Local, busybox, containers, local, ssh, view_until  # noqa: F401 - the fixture

from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from module_helpers import ModuleRun
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.skipif(images.engine_missing() is not None, reason="needs podman and the test images")
#: max_run_time and keep_after (s): short, the product takes them as the spec's (the checks bound them from below: ended
#: or removed no earlier than their time). LIMIT leaves the time for a create and an ssh hop before it is up; the
#: session on Nomad has more to do first (the module's register, the client double's starts, a RUNNING view through
#: session_info); the keep_after session has nothing to do before its end.
LIMIT = 4
LIMIT_ON_NOMAD = 5
LIMIT_THEN_KEEP = 2
KEEP = 3


def _ended_by_the_time(view: t.Dict[str, t.Any], limit: int = LIMIT) -> None:
    reason = "max_run_time %ds exceeded: every command was stopped" % limit
    assert view["state"] == "ERROR", view
    assert view["reason"].startswith(reason + " (first seen by "), view["reason"]
    assert [(c["status"], c["reason"]) for c in view["containers"]] == [("failed", "stopped: " + reason)] * len(
        view["containers"]), view["containers"]


def test_an_interactive_session_ends_error_at_max_run_time(local: Local) -> None:
    """No container runs a command: each one's supervisor keeps the time beside its sshd, and the first whose time is
    up ends them all (their first processes exit 1)."""
    name = "ia-max-run"
    b, state_root = local.backend, local.state_root
    paths = local.paths(name)
    start = time.monotonic()
    first = b.present(busybox(name, 3, max_run_time=LIMIT))["session"]
    assert first["state"] == "RUNNING" and "failure" not in first, first
    got = ssh(state_root, name, "main1", "ssh sub2 hostname")  # an interactive session as ever, until its time is up
    assert (got.returncode, got.stdout.strip()) == (0, "sub2"), got.stderr
    view = view_until(b, name, lambda state: state == "ERROR", LIMIT + 30)
    assert time.monotonic() - start >= LIMIT - 1, "ended before its time"
    _ended_by_the_time(view)
    engines = [c["engine"] for c in containers(paths).values()]
    exited = until(lambda: images.podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", *engines)
                   .stdout.split("\n")[:len(engines)], lambda got: got == ["exited 1"] * len(engines), 15)
    assert exited == ["exited 1"] * len(engines), exited


def test_keep_after_keeps_an_interactive_session_the_time_ended_up_then_removes_it(local: Local) -> None:
    """keep_after counts from the end (ERROR at max_run_time), as for a batch session: the containers stay up and
    ``ssh main1`` works meanwhile; then the session's reaper removes it whole."""
    name = "ia-keep"
    b, state_root = local.backend, local.state_root
    paths = local.paths(name)
    b.present(busybox(name, 2, max_run_time=LIMIT_THEN_KEEP, keep_after=KEEP))
    view = view_until(b, name, lambda state: state == "ERROR", LIMIT_THEN_KEEP + 30)
    ended = time.monotonic()
    _ended_by_the_time(view, LIMIT_THEN_KEEP)
    got = ssh(state_root, name, "main1", "ssh sub1 hostname")
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    while os.path.exists(paths.root) and time.monotonic() - ended < KEEP + 30:
        time.sleep(0.2)
    assert not os.path.exists(paths.root), "the session was not removed after keep_after"
    assert time.monotonic() - ended >= KEEP - 1.5, "removed before keep_after"
    assert b.info(name=name) == []


class InteractiveNomadGang(NomadGang):
    """The same harness with a spec of interactive containers (no command), bounded by ``max_run_time``."""

    def __init__(self, run: ModuleRun, double: t.Any, state_root: str, helpers: t.Any, name: str,
                 extra: t.Dict[str, t.Any]) -> None:
        super().__init__(run, double, state_root, helpers, name, {"policy": "none"})
        self.spec.pop("command")
        self.spec.pop("failure")
        self.spec.update(extra)

    def starts(self, host: str) -> t.List[str]:
        return ["start %s (interactive: its sshd)" % host]


def test_an_interactive_session_ends_error_at_max_run_time_on_nomad(run: ModuleRun, nomad_double_factory: t.Any,
                                                                    state_root: str, helpers: t.Any) -> None:
    """The rendered job's tasks (interactive, bounded: a batch job) run as engine containers: the supervisor of
    each keeps the time, every task exits 1 at max_run_time, Nomad restarts none of them (Attempts 0: a restarted task
    would count its time anew), and session_info of the nomad backend shows ERROR with the reason, read from the
    supervisors' status files through the double's ``/v1/client/fs/cat``."""
    before = helpers.host_snapshot()
    double = nomad_double_factory()
    for i in range(3):
        double.add_node("n%d" % (i + 1), cpu=NODE_CPU, memory=256)
    g = InteractiveNomadGang(run, double, state_root, helpers, "ia-nomad", {"max_run_time": LIMIT_ON_NOMAD})
    try:
        start = time.monotonic()
        g.up()
        job = double.stored_job(g.name)
        assert job["Type"] == "batch" and job["Meta"][gang.MEMBERS_META_KEY] == "main1,sub1,sub2", job["Meta"]
        view = g.until(lambda v: v["state"] == "RUNNING", 15)
        view = g.until(lambda v: v["state"] == "ERROR" and all(c["status"] == "failed" for c in v["containers"]),
                       LIMIT_ON_NOMAD + 30)
        assert time.monotonic() - start >= LIMIT_ON_NOMAD - 1, "ended before its time"
        _ended_by_the_time(view, LIMIT_ON_NOMAD)
        failed_by_policy(g, view)
    finally:
        g.down()
    helpers.assert_clean(before, state_root, [])
