# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The suite serialises what changes this machine itself (tests/support/machine_lock.py): a ``machine`` test holds the
lock from its setup to its teardown, a pure test does not, and a holder's child processes run under its hold."""

from __future__ import annotations

import os
import subprocess
import sys
import typing as t

import pytest

from machine_lock import HELD_ENV, lock_path, machine_lock
from repo_helpers import SUPPORT


def _try_lock(path: str, env: t.Optional[t.Dict[str, str]] = None) -> int:
    """flock(1) -n from another process: 0 if the lock was free, 1 if someone holds it."""
    return subprocess.run(["flock", "-n", "-E", "1", path, "true"], env=env, check=False).returncode


@pytest.mark.machine
@pytest.mark.skipif(os.geteuid() != 0, reason="machine tests run (and lock) as root only")
def test_a_machine_test_holds_the_lock() -> None:
    assert os.environ.get(HELD_ENV) == lock_path()
    assert _try_lock(lock_path()) == 1, "another process could take the machine lock during a machine test"


def test_a_pure_test_does_not() -> None:
    assert HELD_ENV not in os.environ


def test_a_holder_excludes_others_and_its_children_run_under_its_hold(tmp_path: t.Any) -> None:
    path = str(tmp_path / "machine.lock")
    assert _try_lock(path) == 0
    child = ("import sys; sys.path.insert(0, %r)\nfrom machine_lock import machine_lock\n"
             "with machine_lock(%r): print('ran')" % (SUPPORT, path))
    with machine_lock(path):
        assert _try_lock(path) == 1
        # a child told of the hold (the environment) runs at once instead of waiting for its parent
        ran = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
        assert ran.stdout.strip() == "ran", ran.stderr
    assert HELD_ENV not in os.environ
    assert _try_lock(path) == 0
