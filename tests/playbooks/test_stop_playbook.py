# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/stop_session.yml on the local backend, then create_session.yml starts the session again with the same
session ID (docs/session-lifecycle.md); nothing is left after destroy_session.yml."""

from __future__ import annotations

import json
import typing as t

from repo_helpers import play_stats, task_results
from test_local_playbooks import CREATE_TASK, Session, pytestmark, session  # noqa: F401 - fixture and marks


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
