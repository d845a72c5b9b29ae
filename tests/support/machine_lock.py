# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The suite's own lock for what changes this machine: network namespaces, links, iptables rules, cgroups,
containers and local sessions.

Tests marked ``machine`` (every test of ``tests/local_runtime/`` but the ``no_root`` ones, and the tests that
bring a local session up or run the job's entrypoint in namespaces) hold it from their setup to their teardown
(``tests/conftest.py``), the Molecule step of ``scripts/run-tests`` holds it for its scenarios, and the benchmarks
that make namespaces hold it while they run. So two runs of the suite on one machine (two clones, a benchmark
beside a test run) never interleave their namespace work: a test's leak check (``tests/support/leaks.py``) compares the
machine before and after it and would see the other run's links and rules. Anything else, pure tests included,
runs without it.

The lock is an exclusive ``flock`` of one file, ``/run/lock/backendai-cluster-tests.lock`` (the FHS's place for
lock files; ``BACKENDAI_CLUSTER_TESTS_LOCK`` names another), the same file ``flock(1)`` takes:

    flock /run/lock/backendai-cluster-tests.lock .venv/bin/python benchmarks/local_bringup.py

It is taken per test, so a run that holds no other lock cannot deadlock with one that wraps this suite in a lock
of its own (that outer lock is always taken first). A holder says so in its environment
(``BACKENDAI_CLUSTER_TESTS_LOCK_HELD``): its child processes (the older tree's benchmark of ``--against REV``,
Molecule under ``scripts/run-tests``) run under its hold instead of waiting for themselves."""

from __future__ import annotations

import contextlib
import fcntl
import os
import typing as t

LOCK_ENV = "BACKENDAI_CLUSTER_TESTS_LOCK"
HELD_ENV = "BACKENDAI_CLUSTER_TESTS_LOCK_HELD"
DEFAULT_LOCK = "/run/lock/backendai-cluster-tests.lock"


def lock_path() -> str:
    path = os.environ.get(LOCK_ENV)
    if path:
        return path
    return DEFAULT_LOCK if os.path.isdir(os.path.dirname(DEFAULT_LOCK)) else os.path.join("/tmp", os.path.basename(DEFAULT_LOCK))


@contextlib.contextmanager
def machine_lock(path: t.Optional[str] = None) -> t.Iterator[str]:
    """Hold the machine lock (blocking until it is free); the file is left in place (removing a lock file
    another process may be opening would let two holders lock two different files)."""
    path = path or lock_path()
    if os.environ.get(HELD_ENV) == path:  # a parent process holds it for us
        yield path
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.environ[HELD_ENV] = path
        try:
            yield path
        finally:
            del os.environ[HELD_ENV]
    finally:
        os.close(fd)  # closing the only descriptor releases the flock
