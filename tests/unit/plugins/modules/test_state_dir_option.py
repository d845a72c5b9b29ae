# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every state-directory option pointing at a regular file fails naming the option (no traceback, nothing made)."""

from __future__ import annotations

import os
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.modules import local_agents, session, session_info
from module_helpers import ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures


@pytest.mark.parametrize("module, extra", [
    (session, {"spec": spec(), "backend": "local"}),
    (session, {"name": "s1", "state": "absent", "backend": "local"}),
    (session_info, {"backend": "local"}),
    (local_agents, {"agents": [{"name": "a1", "cpu": 1000, "memory": 512}]}),
], ids=["session-present", "session-absent", "session_info", "local_agents"])
@pytest.mark.parametrize("below", [False, True], ids=["the-file", "below-the-file"])
def test_state_dir_that_is_a_regular_file(tmp_path: t.Any, run: ModuleRun, module: t.Any, extra: t.Dict[str, t.Any],
                                          below: bool) -> None:
    regular = tmp_path / "state"
    regular.write_text("not a directory\n")
    given = str(regular / "sub") if below else str(regular)
    result = run(module, dict(extra, state_dir=given))
    assert result.get("failed") is True
    msg = result["msg"]
    assert msg.startswith("state_dir: must be a directory"), msg
    assert ("%s is a regular file" % regular if not below else "which is a regular file") in msg, msg
    assert "session_state_dir" in msg and "Traceback" not in msg
    assert regular.read_text() == "not a directory\n" and sorted(os.listdir(tmp_path)) == ["state"]
