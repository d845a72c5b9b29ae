# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a process of a session (the relay, a CNI plugin a killed creator left) still runs, from ``/proc/<pid>/stat``: a zombie, a process in its exit (a PID
namespace's init killed from outside, while the kernel ends the rest of its namespace) and a reused pid are not."""

from __future__ import annotations

import io
import os
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import netns

ME = os.getpid()


def _stat_line(state: str, flags: int, starttime: int) -> str:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags ... starttime is field 22 (index 19 after the comm)
    fields = [state, "1", "1", "1", "0", "-1", str(flags)] + ["0"] * 12 + [str(starttime)] + ["0"] * 30
    return "%d (sh) %s\n" % (ME, " ".join(fields))


@pytest.mark.parametrize("state, flags, starttime, alive", [
    ("S", 0x400100, 42, True),
    ("R", 0, 42, True),
    ("Z", 0x400100, 42, False),
    ("S", 0x400104, 42, False),  # PF_EXITING: in its exit, not yet a zombie
    ("S", 0x400100, 43, False),  # another process with the same pid
])
def test_is_alive(monkeypatch: t.Any, state: str, flags: int, starttime: int, alive: bool) -> None:
    real_open = open

    def fake_open(path: str, *args: t.Any, **kwargs: t.Any) -> t.Any:
        if path == "/proc/%d/stat" % ME:
            return io.StringIO(_stat_line(state, flags, starttime))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert netns.is_alive(ME, 42) is alive


def test_proc_stat_reads_this_process() -> None:
    state, starttime, flags = netns.proc_stat(ME)
    assert state == "R" and starttime > 0 and not flags & netns.PF_EXITING
    assert netns.is_alive(ME, starttime) and not netns.is_alive(ME, starttime + 1)
