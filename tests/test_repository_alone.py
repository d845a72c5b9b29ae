# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository tests on its own: a clone with nothing beside it (no ``../shared``), as anyone cloning the
project gets it, has the Nomad job API schema and its linter (``tests/nomad_api_schema``), and the copy is the
shared folder's where that folder is there."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

from repo_helpers import NOMAD_API_SCHEMA_DIR, REPO

SHARED = os.path.normpath(os.path.join(REPO, os.pardir, "shared"))
COPIED = ("nomad/job-api.schema.json", "nomad/README.md", "tools/nomad-job-lint")


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared beside the repository to compare the copy with")
def test_the_schema_copy_is_the_shared_one() -> None:
    stale = [f for f in COPIED if not filecmp.cmp(os.path.join(SHARED, f), os.path.join(NOMAD_API_SCHEMA_DIR, f),
                                                  shallow=False)]
    assert not stale, "tests/nomad_api_schema differs from ../shared in %s: run scripts/refresh-nomad-api-schema" % stale


def test_a_clone_with_nothing_beside_it_renders_lints_and_runs_the_double(tmp_path: str) -> None:
    """Clone HEAD into an empty directory, then run what needs the schema there: every example rendered and linted
    (the CI ``jobs`` step) and the Nomad API double's contract tests (it checks every body against the schema)."""
    clone = os.path.join(str(tmp_path), "alone", "repo")
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", REPO, clone], check=True, capture_output=True)
    assert os.listdir(os.path.dirname(clone)) == ["repo"]
    env = dict(os.environ, VENV=os.path.dirname(os.path.dirname(sys.executable)))
    env.pop("SHARED_DIR", None)
    out = os.path.join(str(tmp_path), "jobs")
    for cmd in (["scripts/render-jobs", out], ["scripts/lint-rendered-jobs", out],
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/nomad_double/test_double_contract.py"]):
        proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    assert " passed" in proc.stdout.splitlines()[-1] and "failed" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]
