# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository tests on its own: a clone with nothing beside it (no ``../shared``), as anyone cloning the
project gets it, has the Nomad job API schema and its linter (``tests/support/nomad_api_schema``), and the copy is the
shared folder's where that folder is there. In such a clone the whole suite is collected, and what needs the schema
runs (render and lint every example, the Nomad API double's contract); no file but the copy's refresh script and
this test names ``../shared`` as a path; CI runs the README's test command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from repo_helpers import REPO

SHARED = os.path.normpath(os.path.join(REPO, os.pardir, "shared"))


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared beside the repository to compare the copy with")
def test_the_schema_copy_is_the_shared_one() -> None:
    """The check ``.ci/run`` makes before it clones (``scripts/refresh-nomad-api-schema --check``), run here too."""
    proc = subprocess.run([os.path.join(REPO, "scripts", "refresh-nomad-api-schema"), "--check"], env=dict(os.environ, SHARED_DIR=SHARED),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "is %s's" % SHARED in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_clone_with_nothing_beside_it_renders_lints_and_runs_the_double(tmp_path: str) -> None:
    """Clone HEAD into an empty directory, then run what needs the schema there: every example rendered and linted
    (the CI ``jobs`` step) and the Nomad API double's contract tests (it checks every body against the schema); and
    collect the whole suite there (every test module and conftest imported: a path outside the clone read at import
    fails it)."""
    clone = os.path.join(str(tmp_path), "alone", "repo")
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", REPO, clone], check=True, capture_output=True)
    assert os.listdir(os.path.dirname(clone)) == ["repo"]
    env = dict(os.environ, VENV=os.path.dirname(os.path.dirname(sys.executable)))
    env.pop("SHARED_DIR", None)
    out = os.path.join(str(tmp_path), "jobs")
    collect = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    proc = subprocess.run(collect, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and " error" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:] + proc.stderr[-3000:]
    for cmd in (["scripts/render-jobs", out], ["scripts/lint-rendered-jobs", out],
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/support/nomad_double/test_double_contract.py"]):
        proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    assert " passed" in proc.stdout.splitlines()[-1] and "failed" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]


#: A path built to ``../shared``: ``os.pardir, "shared"``, a quoted or joined ``../shared``, ``$REPO/../shared``.
SHARED_PATH = re.compile(r"""pardir\s*,\s*["']shared["']|["'/]\.\./shared\b|\$\{?REPO\}?/\.\./shared""")
#: The only files that may read ../shared: the copy's refresh script and this test (its comparison).
MAY_READ_SHARED = {"scripts/refresh-nomad-api-schema", "tests/test_repository_alone.py"}


def test_no_file_but_the_refresh_script_reads_the_shared_folder() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = os.path.join(REPO, name)
        if name in MAY_READ_SHARED or name.endswith(".md") or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            found += ["%s:%d" % (name, n) for n, line in enumerate(f, 1) if SHARED_PATH.search(line)]
    assert not found, "these read ../shared, which a clone of the repository does not have: %s" % found


def test_ci_runs_the_readme_test_command() -> None:
    """The README's test command is what ``.ci/run`` runs, arguments passed on (guide: one and the same command)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        ci = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    command = re.search(r"\*\*Tests\*\*.*?\n\n    (\S[^\n]*)\n", readme, re.S)
    assert command is not None, "the README's **Tests** paragraph has no indented command"
    assert command.group(1) == "scripts/run-tests"
    assert ci[-1] == '%s "$@" </dev/null' % command.group(1), ci[-1]
    assert "CI (`.ci/run`) runs exactly `%s`" % command.group(1) in readme


@pytest.mark.slow
def test_ci_runs_the_suite_in_a_clone_with_nothing_beside_it(tmp_path: str) -> None:
    """``.ci/run`` (run from a checkout with a ``shared`` folder beside it) runs the test command in a clone made in
    an empty directory of the home, 0700 as a user's would be (nothing of the suite relies on containers seeing the
    clone), passes its arguments on, and removes the clone afterwards. The test command is a stand-in here, committed (with this work tree's ``.ci/run``) in a throwaway
    clone: it reports where it ran."""
    top = os.path.join(str(tmp_path), "work")
    checkout = os.path.join(top, "repo")
    subprocess.run(["git", "clone", "--quiet", REPO, checkout], check=True, capture_output=True)
    os.makedirs(os.path.join(top, "shared"))
    for name in (".ci/run", "scripts/refresh-nomad-api-schema"):  # this work tree's, committed or not
        shutil.copy2(os.path.join(REPO, name), os.path.join(checkout, name))
    stand_in = os.path.join(checkout, "scripts", "run-tests")
    with open(stand_in, "w", encoding="utf-8") as f:
        f.write('#!/bin/sh\necho "ran in $PWD"\necho "beside: $(ls -A ..)"\necho "args: $*"\necho "mode: $(stat -c %a ..)"\n')
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["commit", "--quiet", "-am", "stand-in test command"], cwd=checkout, check=True, capture_output=True)
    home = os.path.join(top, "home")
    os.makedirs(home, mode=0o700)
    env = dict(os.environ, SHARED_DIR=os.path.join(REPO, "tests", "support", "nomad_api_schema"), HOME=home)
    proc = subprocess.run(["bash", ".ci/run", "--only", "pytest"], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if line.startswith(("beside:", "args:", "mode:")))
    where = re.search(r"^ran in (\S+)$", proc.stdout, re.M)
    assert where is not None, proc.stdout
    assert where.group(1) != checkout and where.group(1).startswith(home + "/"), proc.stdout
    assert ran == {"beside": "repo", "args": "--only pytest", "mode": "700"}, ran
    assert not os.path.exists(os.path.dirname(where.group(1))), "the clone is left behind"


#: A path of the machines this was developed on (their team folder, worktrees, lock files: a top-level ``work``
#: folder), not ``/home/work`` (the session user's home) nor a relative ``work/``.
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/" + "work/")


def test_no_path_of_a_development_machine() -> None:
    """Nothing in the repository points at a path of the machine it was written on (a lock file a reader is told to
    take, a folder beside the checkout): the suite serialises its own namespace tests (tests/support/machine_lock.py)."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = os.path.join(REPO, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            found += ["%s:%d" % (name, n) for n, line in enumerate(f, 1) if MACHINE_PATH.search(line)]
    assert not found, "paths of a development machine: %s" % found
    assert MACHINE_PATH.search("run under flock /%s/.netns-tests.lock" % "work")
    assert not MACHINE_PATH.search("/home/work/data")
