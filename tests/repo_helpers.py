# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths and helpers shared by the repository-level tests (playbooks, examples, backends)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(REPO, os.pardir, "shared"))
EXAMPLES = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "examples")
NOMAD_JOB_LINT = os.path.join(SHARED, "tools", "nomad-job-lint")
VENV_BIN = os.path.dirname(sys.executable)


def run_playbook(playbook: str, *extra: str, env: t.Optional[t.Dict[str, str]] = None,
                 check: bool = False) -> subprocess.CompletedProcess:
    """Run ``ansible-playbook backendai.cluster.<playbook>`` from the repository top, as a user would, with JSON
    results on stdout (the collection's playbook, found through ansible.cfg's collections path)."""
    if os.path.isabs(playbook):  # a test's own playbook file
        target = playbook
    else:
        target = "backendai.cluster." + (playbook[:-len(".yml")] if playbook.endswith(".yml") else playbook)
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), target] + list(extra)
    if check:
        cmd.append("--check")
    full_env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="results_json", ANSIBLE_NOCOLOR="1",
                    ANSIBLE_CALLBACK_PLUGINS=os.path.join(REPO, "tests", "callback_plugins"),
                    PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)


def play_stats(proc: subprocess.CompletedProcess) -> t.Dict[str, t.Any]:
    """The per-host stats (ok/changed/failures) of a json-callback run."""
    return json.loads(proc.stdout)["stats"]["localhost"]


def task_results(proc: subprocess.CompletedProcess) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Task name → localhost result of a json-callback run."""
    out = {}
    for play in json.loads(proc.stdout)["plays"]:
        for task in play["tasks"]:
            out[task["task"]["name"]] = task["hosts"].get("localhost", {})
    return out


def lint_job_files(*paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, NOMAD_JOB_LINT] + list(paths), capture_output=True, text=True)
