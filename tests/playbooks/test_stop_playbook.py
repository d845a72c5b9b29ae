# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/stop_session.yml on the local backend, then create_session.yml starts the session again with the same
session ID (docs/session-lifecycle.md); nothing is left after destroy_session.yml."""

from __future__ import annotations

import json
import os
import time
import typing as t

from repo_helpers import play_stats, task_results
from test_local_playbooks import CREATE_TASK, Session, pytestmark, session, spec_vars  # noqa: F401 - fixture and marks


def test_stop_then_create_starts_it_again(session: Session) -> None:
    first = session.play("create_session.yml")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    view = task_results(first)[CREATE_TASK]["session"]
    stopped = session.play("stop_session.yml", spec=json.dumps({"session_name": session.name}))
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-2000:]
    assert play_stats(stopped)["changed"] == 1
    result: t.Dict[str, t.Any] = task_results(stopped)["Stop the session"]
    assert result["session"]["state"] == "STOPPED" and result["session"]["session_id"] == view["session_id"]
    again = session.play("create_session.yml")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    started = task_results(again)[CREATE_TASK]["session"]
    assert started["state"] == "RUNNING" and started["session_id"] == view["session_id"]


def test_keep_after_through_the_playbook_the_reaper_outlives_the_module(session: Session) -> None:
    """The module forks the session's reaper: the playbook still returns at once (the reaper holds none of its
    descriptors), and the reaper, alone, removes the session keep_after seconds after it finished."""
    spec = spec_vars(session.name, command=["sh", "-c", "echo done"], keep_after=2)
    started = time.monotonic()
    made = session.play("create_session.yml", spec=spec)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-2000:]
    assert time.monotonic() - started < 120
    root = os.path.join(session.state_dir, session.name)
    deadline = time.monotonic() + 60
    while os.path.exists(root) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not os.path.exists(root), "the reaper did not remove the finished session"
