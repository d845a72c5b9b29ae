# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exec channel's host side (``_local.exec_channel``) against a stand-in agent in a thread: results, a
container with no agent, a link or a plain file where the agent's FIFO should be (never written through), and an
agent that does not take the command (reported, not waited for forever)."""

from __future__ import annotations

import os
import threading
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import exec_channel

PROCESS = {"args": ["hostname"], "env": ["PATH=/bin"], "cwd": "/root", "user": {"uid": 0, "gid": 0}}


def agent(directory: str, act: bool) -> threading.Thread:
    """Reads one request from ``req``; when ``act``, answers it as the agent would (pid, stdout, exit status 3)."""
    os.mkfifo(os.path.join(directory, "req"), 0o600)
    fd = os.open(os.path.join(directory, "req"), os.O_RDWR)

    def serve() -> None:
        with os.fdopen(fd, "rb") as req:
            op, ident = req.readline().decode().split()
            assert op == "run" and os.path.isfile(os.path.join(directory, ident + ".req"))
            if act:
                with open(os.path.join(directory, ident + ".pid"), "w", encoding="ascii") as f:
                    f.write("42\n")
                for suffix, text in ((".out", "main1\n"), (".err", ""), (".rc", "3\n")):
                    with open(os.path.join(directory, ident + suffix), "w", encoding="ascii") as f:
                        f.write(text)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_command_through_the_agent(tmp_path: t.Any) -> None:
    thread = agent(str(tmp_path), act=True)
    job = exec_channel.start(str(tmp_path), PROCESS)
    assert job is not None
    [result] = exec_channel.wait_all([job], 10)
    thread.join(5)
    assert (result["exit_code"], result["stdout"], result["timed_out"], result["lost"]) == (3, b"main1\n", False, False)
    assert sorted(os.listdir(tmp_path)) == ["req"]  # the job's files are removed


def test_no_agent_no_fifo_or_a_planted_link_is_not_used(tmp_path: t.Any) -> None:
    assert exec_channel.start(str(tmp_path), PROCESS) is None  # no req at all
    os.mkfifo(str(tmp_path / "req"), 0o600)
    assert exec_channel.start(str(tmp_path), PROCESS) is None  # a FIFO nobody reads
    os.unlink(str(tmp_path / "req"))
    victim = tmp_path.parent / (tmp_path.name + "-victim")
    victim.write_text("untouched\n")
    os.symlink(str(victim), str(tmp_path / "req"))
    assert exec_channel.start(str(tmp_path), PROCESS) is None and victim.read_text() == "untouched\n"
    os.unlink(str(tmp_path / "req"))
    (tmp_path / "req").write_text("")
    assert exec_channel.start(str(tmp_path), PROCESS) is None and (tmp_path / "req").read_text() == ""
    assert sorted(os.listdir(tmp_path)) == ["req"]


def test_a_command_nobody_takes_is_reported(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exec_channel, "TAKE_TIMEOUT", 0.3)
    thread = agent(str(tmp_path), act=False)
    job = exec_channel.start(str(tmp_path), PROCESS)
    assert job is not None
    [result] = exec_channel.wait_all([job], 0)
    thread.join(5)
    assert (result["exit_code"], result["lost"], result["timed_out"]) == (None, True, False) and result["time"] < 5
