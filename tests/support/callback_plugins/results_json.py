# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only stdout callback: the play's task results and stats as one JSON document.

ansible-core 2.19 no longer ships a JSON callback (it moved to ansible.posix, which this machine
cannot fetch from Galaxy), so the playbook tests bring this small one. Output shape, like
ansible.posix.json: {"plays": [{"tasks": [{"task": {"name"}, "hosts": {host: result}}]}], "stats": {...}}.
"""

from __future__ import annotations

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: results_json
type: stdout
short_description: task results and stats as one JSON document (tests only)
description: Prints every task result and the final stats as JSON when the playbook ends.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "results_json"

    def __init__(self) -> None:
        super().__init__()
        self.plays: list = []

    def v2_playbook_on_play_start(self, play) -> None:
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self.v2_playbook_on_task_start(task, False)

    def _record(self, result, **flags) -> None:
        data = dict(self._clean_results(result._result, result._task.action) or result._result)
        data.update(flags)
        self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = json.loads(json.dumps(data, default=str))

    def v2_runner_on_ok(self, result) -> None:
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result) -> None:
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result) -> None:
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats) -> None:
        summary = {h: stats.summarize(h) for h in sorted(stats.processed)}
        self._display.display(json.dumps({"plays": self.plays, "stats": summary}, indent=2, default=str))
