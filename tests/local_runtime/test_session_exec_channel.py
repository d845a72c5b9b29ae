# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""session_exec through the exec channel (``_session.exec_channel``, ``_local.exec_channel``) on real containers.

Two local sessions in one state root: ``ch`` (3 containers of the example image: util-linux ``setpriv`` in the image)
and ``chb`` (1 container of the busybox image: the bundle's ``setpriv``). Checked: the channel is the way taken, and
the command sees exactly what it sees through ``podman exec`` (identity, capabilities, seccomp, no-new-privileges,
cgroups, rlimits, umask, working directory, environment), as the session user and as root, in both images; exit
codes, a missing program, a timeout that kills the command and what it started. Attacks: the session user cannot
use the channel (it cannot enter the directory, so it cannot make the agent run anything as root); a container of
another session cannot see it; a link planted by the container's root in place of the agent's FIFO is not
followed by the host (that container falls back to ``runc exec``, and the host file the link names is not written).
"""
from __future__ import annotations

import os
import time
import typing as t
import uuid

import pytest

import images
import local_session_dict
from ansible_collections.backendai.cluster.plugins.module_utils._local import exec_channel
from ansible_collections.backendai.cluster.plugins.module_utils._local import local_backend
from ansible_collections.backendai.cluster.plugins.module_utils._local import session_exec as local_exec
from ansible_collections.backendai.cluster.plugins.module_utils._session.exec_channel import MOUNT
from ansible_collections.backendai.cluster.plugins.modules import session_exec
from module_helpers import ModuleRun
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures

#: What a process sees of its container (test_session_exec.PROBE, and its supplementary groups).
PROBE = ("id; grep -E '^(Cap|NoNewPrivs|Seccomp|Groups)' /proc/self/status; cat /proc/self/cgroup; ulimit -a; umask; pwd; "
         "env | grep -v -E '^(PWD|SHLVL|_)=' | sort")


@pytest.fixture(scope="module")
def live(run_dir: str) -> t.Iterator[t.Dict[str, t.Any]]:
    root = os.path.join(run_dir, "channel-" + uuid.uuid4().hex[:8])
    backend = local_backend.LocalBackend(root, task=local_session_dict.TASK)
    made = []
    try:
        for name, image, size in (("ch", local_session_dict.DEFAULT_IMAGE, 3), ("chb", images.image("test-busybox"), 1)):
            result = backend.present({"name": name, "image": image, "cluster_size": size,
                                      "resources": {"cpu": 300, "memory": 128}})
            made.append(name)
            assert result["session"]["state"] == "RUNNING", result["session"].get("reason")
        yield {"root": root}
    finally:
        for name in made:
            backend.absent(name)


@pytest.fixture
def ways(monkeypatch: pytest.MonkeyPatch) -> t.List[str]:
    """The way each container was run in, in order: ``channel``, ``runc`` or ``podman``."""
    taken: t.List[str] = []
    real_start, real_exec_one = exec_channel.start, local_exec._exec_one

    def start(exec_dir: str, process: t.Any) -> t.Any:
        job = real_start(exec_dir, process)
        if job is not None:
            taken.append("channel")
        return job

    def exec_one(container: t.Any, request: t.Any, command: t.List[str], env: t.Any, runc_log: t.Any) -> t.Any:
        taken.append(os.path.basename(command[0]))
        return real_exec_one(container, request, command, env, runc_log)

    monkeypatch.setattr(exec_channel, "start", start)
    monkeypatch.setattr(local_exec, "_exec_one", exec_one)
    return taken


def exec_in(run: ModuleRun, live: t.Dict[str, t.Any], name: str, **args: t.Any) -> t.Dict[str, t.Any]:
    return run(session_exec, dict({"name": name, "backend": "local", "state_dir": live["root"]}, **args))


def by_host(result: t.Dict[str, t.Any]) -> t.Dict[str, t.Dict[str, t.Any]]:
    return {c["hostname"]: c for c in result["containers"]}


@pytest.mark.parametrize("user", ["session", "root"])
def test_the_channel_gives_the_process_podman_exec_gives(run: ModuleRun, live: t.Dict[str, t.Any], user: str,
                                                         ways: t.List[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, count in (("ch", 3), ("chb", 1)):
        ways.clear()
        cheap = exec_in(run, live, name, command=PROBE, user=user)
        assert ways == ["channel"] * count and not cheap.get("failed"), cheap.get("msg")
        with monkeypatch.context() as m:
            m.setattr(local_exec, "_inspect", lambda engines, env: {})
            ways.clear()
            engine = exec_in(run, live, name, command=PROBE, user=user)
        assert ways == ["podman"] * count and not engine.get("failed"), engine.get("msg")
        for a, b in zip(cheap["containers"], engine["containers"]):
            assert a["stdout"] == b["stdout"] and a["stderr"] == b["stderr"] == ""
        text = cheap["containers"][0]["stdout"]
        assert "memory:/" in text and "pids:/" in text and "BACKENDAI_SESSION_ID=" in text
        assert ("uid=0(root)" in text) == (user == "root")
        assert ("CapEff:\t0000000000000000" in text) == (user != "root")


def test_exit_codes_a_missing_program_and_argv(run: ModuleRun, live: t.Dict[str, t.Any], ways: t.List[str]) -> None:
    result = exec_in(run, live, "ch", command='case $(hostname) in sub1) exit 1 ;; sub2) exit 2 ;; esac', fail_on="none")
    assert [(c["hostname"], c["result"], c["exit_code"]) for c in result["containers"]] == [
        ("main1", "ok", 0), ("sub1", "failed", 1), ("sub2", "failed", 2)]
    missing = by_host(exec_in(run, live, "ch", argv=["no-such-program-here"], hostnames=["sub1"]))["sub1"]
    assert (missing["result"], missing["exit_code"]) == ("failed", 127) and "no-such-program-here" in missing["stderr"]
    quoted = by_host(exec_in(run, live, "ch", argv=["printf", "%s|", "a b", "$HOME", "it's"], hostnames=["sub2"]))
    assert quoted["sub2"]["stdout"] == "a b|$HOME|it's|"
    assert set(ways) == {"channel"}


def test_a_timeout_kills_the_command_and_what_it_started(run: ModuleRun, live: t.Dict[str, t.Any],
                                                         ways: t.List[str]) -> None:
    result = exec_in(run, live, "ch", command="sleep 61 & sleep 62; echo never", command_timeout=1, hostnames=["sub1"])
    sub1 = by_host(result)["sub1"]
    assert (sub1["result"], sub1["exit_code"]) == ("timed_out", None) and sub1["time"] < 10 and ways == ["channel"]
    left = exec_in(run, live, "ch", user="root", hostnames=["sub1"],
                   command="cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c -e 'sleep 6[12]' || true")
    assert by_host(left)["sub1"]["stdout"] == "0\n"


def test_the_session_user_cannot_use_the_channel(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    """As the session user: list the directory, write a request that would run as root, tell the agent to run it."""
    ident, proof = "0123456789abcdef", "/tmp/channel-attack-%s" % uuid.uuid4().hex[:8]
    attack = ("ls {d} >/dev/null 2>&1 && echo listed; "
              "printf 'C=/ M=0022\\ngo() {{ id -u > {p}; }}\\n' > {d}/{i}.req 2>/dev/null && echo wrote; "
              "(echo 'run {i}' > {d}/req) 2>/dev/null && echo told; sleep 1; true").format(d=MOUNT, i=ident, p=proof)
    tried = by_host(exec_in(run, live, "ch", command=attack, hostnames=["sub1"]))["sub1"]
    check = by_host(exec_in(run, live, "ch", user="root", hostnames=["sub1"], command="cat %s 2>/dev/null || true" % proof))
    assert check["sub1"]["stdout"] == ""  # nothing ran as root for the session user
    assert tried["result"] == "ok" and tried["stdout"] == "", tried  # it could not even list the directory


def test_another_sessions_container_cannot_see_the_channel(run: ModuleRun, live: t.Dict[str, t.Any]) -> None:
    """ch's main1 leaves a mark in its channel's directory; chb's root looks for it everywhere it can."""
    marker = "channel-marker-" + uuid.uuid4().hex[:8]
    made = exec_in(run, live, "ch", user="root", hostnames=["main1"], command="touch %s/%s && ls %s" % (MOUNT, marker, MOUNT))
    assert marker in by_host(made)["main1"]["stdout"]
    try:
        looked = exec_in(run, live, "chb", user="root",
                         command="find / \\( -path /proc -o -path /sys \\) -prune -o -name '%s' -print" % marker)
        assert by_host(looked)["main1"]["stdout"] == ""
    finally:
        exec_in(run, live, "ch", user="root", hostnames=["main1"], command="rm -f %s/%s" % (MOUNT, marker))


def test_a_link_planted_by_container_root_is_not_followed(run: ModuleRun, live: t.Dict[str, t.Any], tmp_path: t.Any,
                                                          ways: t.List[str]) -> None:
    """The container's root replaces the agent's FIFO by a link to a host file: the host writes nothing there, and
    that container's command runs through ``runc exec`` instead. (Last: it breaks chb's channel.)"""
    victim = str(tmp_path / "victim")  # a host file the container cannot reach
    with open(victim, "w", encoding="utf-8") as f:
        f.write("untouched\n")
    try:
        planted = exec_in(run, live, "chb", user="root", command="ln -sf %s %s/req" % (victim, MOUNT))
        assert by_host(planted)["main1"]["result"] == "ok" and ways == ["channel"]
        ways.clear()
        after = exec_in(run, live, "chb", command="hostname")
        assert by_host(after)["main1"]["stdout"] == "main1\n" and ways == ["runc"]
        time.sleep(0.2)
        with open(victim, encoding="utf-8") as f:
            assert f.read() == "untouched\n"
    finally:
        os.unlink(victim)
