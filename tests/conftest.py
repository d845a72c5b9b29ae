# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the repository-level tests."""

from __future__ import annotations

import os
import typing as t

import pytest

import leaks
from machine_lock import machine_lock

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import NETWORK_ENV
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import generate_key

NETWORK_KEY_ENV = NETWORK_ENV["network_key_file"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: t.Optional[pytest.Item]) -> t.Iterator[None]:
    """A ``machine`` test holds the suite's machine lock (tests/support/machine_lock.py) from its setup to its teardown, so
    that another run on this machine never changes namespaces, links or rules between its leak check's snapshots.
    Without root no such test runs (they skip), so nothing is locked."""
    if item.get_closest_marker("machine") is None or os.geteuid() != 0:
        yield
        return
    with machine_lock():
        yield


@pytest.fixture(scope="session", autouse=True)
def network_key_file(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[str]:
    """The cluster network key of the tests' control node (what the overlay_agent role makes once): a fresh key in
    a temporary file, given to every module and playbook through BACKENDAI_NETWORK_KEY_FILE (never ~/.config)."""
    path = str(tmp_path_factory.mktemp("network-key") / "network.key")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as f:
        f.write(generate_key() + "\n")
    before = os.environ.get(NETWORK_KEY_ENV)
    os.environ[NETWORK_KEY_ENV] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(NETWORK_KEY_ENV, None)
        else:
            os.environ[NETWORK_KEY_ENV] = before


@pytest.fixture
def host_leaks() -> t.Iterator[leaks.LeakCheck]:
    """A snapshot of this machine before the test (tests/support/leaks.py); after it, nothing may be left or changed.
    ``host_leaks.record(state_dir, [name])`` before destroying a session adds what its state directory says
    it made. Needs root; a test using it is marked ``machine`` (it then holds the suite's machine lock)."""
    check = leaks.LeakCheck()
    yield check
    check.assert_clean()
