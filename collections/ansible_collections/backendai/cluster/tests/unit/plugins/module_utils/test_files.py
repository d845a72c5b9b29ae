# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ensure_file: idempotent, check-mode safe, atomic file writes; create_file: a new file, never a replaced one."""

from __future__ import annotations

import os
import stat
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._files import create_file, ensure_file


def test_writes_once_then_reports_no_change(tmp_path: t.Any) -> None:
    path = str(tmp_path / "sub" / "job.json")
    assert ensure_file(path, "a\n", check_mode=True) and not os.path.exists(path)
    assert ensure_file(path, "a\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert not ensure_file(path, "a\n")
    assert ensure_file(path, "b\n", mode=0o600)
    with open(path, encoding="utf-8") as f:
        assert f.read() == "b\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(str(tmp_path / "sub")) == ["job.json"]  # no temporary file left


def test_create_file_makes_a_new_file_with_its_mode_and_never_replaces_one(tmp_path: t.Any) -> None:
    path = str(tmp_path / "key")
    old = os.umask(0o077)
    try:
        create_file(path, "secret\n", mode=0o644, owner=(os.getuid(), os.getgid()))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # not narrowed by the umask
    with open(path, encoding="utf-8") as f:
        assert f.read() == "secret\n"
    with pytest.raises(FileExistsError):
        create_file(path, "other\n")
    with open(path, encoding="utf-8") as f:
        assert f.read() == "secret\n"
