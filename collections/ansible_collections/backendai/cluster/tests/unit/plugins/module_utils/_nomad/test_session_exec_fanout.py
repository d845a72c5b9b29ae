# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""session_exec's fan-out script on main1 and its frames: the script run by this machine's sh (dash) and busybox sh
where present, with an ``ssh`` on PATH that runs the command locally as ``<host>`` would (no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import session_exec as ne

FAKE_SSH = r"""#!/bin/sh
# ssh [-o OPT]... HOST COMMAND: the command, run here with HOST in $FAKE_HOST (host "down" cannot be reached)
while [ "$1" = -o ]; do shift 2; done
[ "$1" != down ] || { echo "ssh: connect to host down port 2200: Connection refused" >&2; exit 255; }
FAKE_HOST=$1 exec sh -c "$2"
"""
SHELLS = [s for s in (shutil.which("dash") or shutil.which("sh"), shutil.which("busybox")) if s]


def run_script(tmp_path: t.Any, shell: str, script: str, timeout: float = 30) -> bytes:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    argv = [shell, "sh", "-s"] if shell.endswith("busybox") else [shell, "-s"]
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "FAKE_HOST": "main1", "SHELL": "/bin/sh"}
    return subprocess.run(argv, input=script.encode(), stdout=subprocess.PIPE, env=env, timeout=timeout, check=True).stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_every_host_gets_a_frame_with_its_output_and_exit_code(tmp_path: t.Any, shell: str) -> None:
    command = "echo \"out $FAKE_HOST\"; printf 'two\\nlines' >&2; [ $FAKE_HOST != sub2 ] || exit 7"
    script = ne.fanout_script(command, ["main1", "sub1", "sub2", "down"], "main1", 0)
    frames = ne.parse_frames(run_script(tmp_path, shell, script))
    assert sorted(frames) == [0, 1, 2, 3]
    assert [(f[0], f[2]) for f in (frames[i] for i in range(3))] == [
        ("0", b"out main1\n"), ("0", b"out sub1\n"), ("7", b"out sub2\n")]
    assert frames[0][3] == b"two\nlines" and all(f[1] >= 0 for f in frames.values())
    assert frames[3][0] == "255" and b"Connection refused" in frames[3][3]


@pytest.mark.parametrize("shell", SHELLS)
def test_timeout_marks_what_still_runs(tmp_path: t.Any, shell: str) -> None:
    script = ne.fanout_script('[ "$FAKE_HOST" != sub1 ] || sleep 30; echo done', ["main1", "sub1"], "main1", 1)
    frames = ne.parse_frames(run_script(tmp_path, shell, script, timeout=20))
    assert frames[0][0] == "0" and frames[0][2] == b"done\n"
    assert frames[1][0] == ne.TIMED_OUT_MARK and 1 <= frames[1][1] < 15


def test_the_command_is_quoted_once() -> None:
    script = ne.fanout_script("echo 'it''s' \"$HOME\"; `x`", ["main1", "sub-1"], "main1", 0)
    assert "C='echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"' \"$HOME\"; `x`'" in script
    assert "here 0 &" in script and "peer 1 sub-1 &" in script


def test_parse_frames_skips_noise_and_stops_at_a_cut_frame() -> None:
    data = b"motd\nBAI-EXEC 0 0 1.00 1.25 3 0\nabcBAI-EXEC garbage\nBAI-EXEC 1 t 1.00 3.00 0 2\nxyBAI-EXEC 2 0 1 2 10 0\nshort"
    frames = ne.parse_frames(data)
    assert frames == {0: ("0", 0.25, b"abc", b""), 1: ("t", 2.0, b"", b"xy")}
