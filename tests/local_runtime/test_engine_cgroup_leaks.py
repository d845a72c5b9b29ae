# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cgroups an engine container leaves when its ``podman run`` is killed half-way (issue 29: the creator killed
during a create; ``podman rm`` removes the container and leaves its cgroups, empty): the leak check reports them, and
teardown removes them.

Each test makes cgroups of its own, named like podman's (``libpod_parent/libpod-<id>`` in every hierarchy) with an ID
no container has, and removes them; other runs' containers and their cgroups on this machine are never touched.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import typing as t
import uuid

import pytest

import leaks
from ansible_collections.backendai.cluster.plugins.module_utils._local import engine


def _fake_id() -> str:
    return "bad0" + uuid.uuid4().hex + uuid.uuid4().hex[:28]


def _cgroups_of(cid: str) -> t.List[str]:
    """A podman-like cgroup of ``cid`` in every hierarchy that has podman's parent (``libpod_parent``)."""
    return [os.path.join(m, "libpod_parent", "libpod-" + cid) for m in leaks.cgroup_mounts()
            if os.path.isdir(os.path.join(m, "libpod_parent"))]


@pytest.fixture
def made() -> t.Iterator[t.List[str]]:
    dirs: t.List[str] = []
    try:
        yield dirs
    finally:
        for d in reversed(dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)


def test_an_empty_engine_cgroup_is_reported_by_snapshot_and_by_record(made: t.List[str], tmp_path: t.Any) -> None:
    cid = _fake_id()
    dirs = _cgroups_of(cid)
    if not dirs:
        pytest.skip("podman has made no libpod_parent cgroup on this machine yet")
    before = leaks.snapshot()
    for d in dirs:
        os.mkdir(d)
        made.append(d)
    session = tmp_path / "sessions" / "s1"
    (session / "containers" / "main1").mkdir(parents=True)
    (session / "containers" / "main1" / "cid").write_text(cid + "\n")
    rec = leaks.record(str(tmp_path / "sessions"))
    assert cid in rec["engine_ids"]
    left = leaks.leaks(before)  # no container has this ID
    assert sorted(x for x in left if cid in x) == sorted("engine cgroup %s (of no container)" % d for d in dirs), left
    left = leaks.leaks(None, rec)  # the session's container's, without a baseline (Molecule's first destroy)
    assert sorted(x for x in left if cid in x) == sorted("engine cgroup %s of the session's container" % d
                                                         for d in dirs), left
    for d in dirs:
        os.rmdir(d)
    assert not [x for x in leaks.leaks(before, rec) if cid in x]


def test_teardown_removes_the_empty_cgroups_of_its_containers_and_no_others(made: t.List[str]) -> None:
    ours, other = _fake_id(), _fake_id()
    dirs, others = _cgroups_of(ours), _cgroups_of(other)
    if not dirs:
        pytest.skip("podman has made no libpod_parent cgroup on this machine yet")
    for d in dirs + others:
        os.mkdir(d)
        made.append(d)
    assert sorted(engine.container_cgroups([ours])) == sorted(dirs)
    assert engine.remove_cgroups([ours]) == []
    assert not [d for d in dirs if os.path.exists(d)]
    assert all(os.path.isdir(d) for d in others)  # another container's (a run beside this one) stays


def test_a_cgroup_that_still_has_a_process_is_reported_not_forced(made: t.List[str], tmp_path: t.Any) -> None:
    """Where a process outlived the session's kill, teardown says so and leaves the cgroup (and the process) alone."""
    cid = _fake_id()
    dirs = _cgroups_of(cid)
    if not dirs:
        pytest.skip("podman has made no libpod_parent cgroup on this machine yet")
    top = dirs[0]
    os.mkdir(top)
    made.append(top)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        with open(os.path.join(top, "cgroup.procs"), "w", encoding="ascii") as f:
            f.write(str(proc.pid))
        errors = engine.remove_cgroups([cid], wait=0.2)
        assert len(errors) == 1 and top in errors[0], errors
        assert os.path.isdir(top) and proc.poll() is None
    finally:
        proc.kill()
        proc.wait(10)
    for _ in range(100):  # the killed process leaves the cgroup: now it goes
        if engine.remove_cgroups([cid], wait=1.0) == []:
            break
    assert not os.path.exists(top)
