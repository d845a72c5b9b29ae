"""Attacks on a local container's isolation beyond packets (issue 18), on engine (podman) containers of the example
image: two sessions A and B on this machine; from inside A (logged in through A's ssh_config, and as A's batch
command) nothing of B can be seen, read, entered or signalled; a container cannot take more processes than its
pids limit gives it, and killing its first process ends everything in it.

Each probe comes with a positive control on A's own process (the same read of /proc/<pid>/environ, kill,
/proc/<pid>) so that a probe that could never succeed does not pass for a defence.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from typing import Any, Callable, Iterator

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt

#: What A's container may see at most (its first process, sshd, a login and the probe itself are a handful).
MAX_PROCESSES = 30
#: Where a container keeps the session's private key (``_nomad.job.ENTRYPOINT``): sshd's host key and the user's.
KEY_PATHS = ("/run/backendai/host_key", "/home/work/.ssh/id_backendai")


def _alive(pid: int) -> bool:
    return os.path.exists("/proc/%d" % pid)


def _netns_pids(netns: str) -> list[str]:
    """The processes in a network namespace (what runs in a container)."""
    return subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False).stdout.split()


def _probe_script(b: dict[str, Any], key_line: str) -> str:
    """sh that prints ``LEAK ...`` for every way it reaches session B, ``OK ...`` for its positive controls
    on its own process, and ``COUNT n`` (processes it sees)."""
    b_pids = " ".join(str(c["pid"]) for c in b["containers"])
    b_netns = " ".join(c["netns"] for c in b["containers"])
    # the script (a batch command's args, its /proc/1/cmdline, hold it) never holds the key's line or B's directory whole
    half, d_half = len(key_line) // 2, len(b["state_dir"]) // 2
    return "\n".join([
        "B_PIDS=%s; D1=%s; D2=%s; B_DIR=$D1$D2; B_SID=%s; B_NETNS=%s; K1=%s; K2=%s; KEY=$K1$K2" % tuple(
            shlex.quote(v) for v in (b_pids, b["state_dir"][:d_half], b["state_dir"][d_half:], b["session_id"], b_netns,
                                     key_line[:half], key_line[half:])),
        "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo COUNT $n",
        # positive controls: the same reads and signals work on the probe's own process
        "[ -e /proc/$$ ] && echo OK proc",
        "tr '\\0' '\\n' < /proc/$$/environ | grep -q '^BACKENDAI_SESSION_ID=' && echo OK environ",
        "kill -0 $$ && echo OK kill",
        "tr '\\0' ' ' < /proc/$$/cmdline | grep -q . && echo OK cmdline",
        # B's processes: not in /proc (by pid or by what they run), no environ, no root, no namespaces, no signal
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null | grep -qF -- \"$B_DIR\" && echo LEAK cmdline $f; done",
        "for p in $B_PIDS; do",
        "  [ -e /proc/$p ] && echo LEAK /proc/$p exists",
        "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -q \"$B_SID\" && echo LEAK environ of $p",
        "  for k in %s; do grep -qsF -- \"$KEY\" /proc/$p/root$k && echo LEAK key via /proc/$p/root$k; done" % " ".join(KEY_PATHS),
        "  grep -qsF -- \"$KEY\" /proc/$p/root$B_DIR/ssh/id_cluster && echo LEAK key via /proc/$p/root$B_DIR",
        "  nsenter --net=/proc/$p/ns/net true 2>/dev/null && echo LEAK nsenter --net=/proc/$p/ns/net",
        "  nsenter -t $p -a true 2>/dev/null && echo LEAK nsenter -t $p -a",
        "  kill -0 $p 2>/dev/null && echo LEAK kill $p",
        "done",
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep -q \"$B_SID\" && echo LEAK environ $f; done",
        "for f in %s /proc/[0-9]*/root$B_DIR/ssh/id_cluster $B_DIR/ssh/id_cluster; do grep -qsF -- \"$KEY\" $f && "
        "echo LEAK key $f; done" % " ".join("/proc/[0-9]*/root" + k for k in KEY_PATHS),
        # where a state directory or its keys could be seen from here (the default state root is under /root)
        "grep -rlsF -- \"$KEY\" /run /tmp /root /home /etc /var/tmp 2>/dev/null"
        " | sed 's/^/LEAK key in /'",
        "for ns in $B_NETNS; do nsenter --net=/run/netns/$ns true 2>/dev/null && echo LEAK nsenter /run/netns/$ns; done",
        "echo DONE",
    ]) + "\n"


def _assert_isolated(output: str, b: dict[str, Any]) -> None:
    lines = output.splitlines()
    assert "DONE" in lines, output
    assert [x for x in lines if x.startswith("LEAK")] == [], output
    assert {"OK proc", "OK environ", "OK kill", "OK cmdline"} <= set(lines), output  # the probes can succeed
    count = int(next(x for x in lines if x.startswith("COUNT "))[6:])
    assert 0 < count < MAX_PROCESSES, output
    for c in b["containers"]:  # B was not hurt
        assert _alive(c["pid"])


def _key_line(keypair: tuple[str, str]) -> str:
    return keypair[0].strip().splitlines()[2]  # a line of the private key's body, in no public file


def _exit_code(state_root: str, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        st = rt.session_status(name, state_root, log_lines=40)
        if all(c["command"] != "running" for c in st["containers"]) or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def _command_output(c: dict[str, Any]) -> list[str]:
    """The command's lines of a container's log tail (without the entrypoint's ``backendai:`` lines)."""
    return [line for line in c["log_tail"] if not line.startswith("backendai: ")]


@pytest.fixture(scope="module")
def b_session(run_dir: str, helpers: Any, tmp_path_factory: Any) -> Iterator[tuple[dict[str, Any], tuple[str, str]]]:
    """Session B (one container, a keypair of its own), which the probes of A try to reach."""
    keys = helpers.new_keypair(str(tmp_path_factory.mktemp("b-key")))
    with helpers.module_session(run_dir, keys, "isob", size=1) as b:
        yield b, keys


def test_logged_into_a_nothing_of_b_is_reachable(sessions: Any, helpers: Any, b_session: Any) -> None:
    b, b_keys = b_session
    a = sessions("isoa", size=2)
    for host in ("main1", "sub1"):
        p = helpers.ssh(a, host, _probe_script(b, _key_line(b_keys)), timeout=120)
        assert p.returncode == 0, p.stderr
        _assert_isolated(p.stdout, b)


def test_a_batch_command_reaches_nothing_of_b_and_has_no_privileges(sessions: Any, state_root: str,
                                                                    helpers: Any, b_session: Any) -> None:
    """A's batch command also starts with no descriptor but stdin, stdout and stderr (none its creator held open and
    inheritable, an Ansible module's pipe say, reaches it) and no capability."""
    b, b_keys = b_session
    script = _probe_script(b, _key_line(b_keys)) + ("grep -E '^(CapEff|CapPrm):' /proc/self/status\n"
                                                    "python3 -c \"import os; print('FDS', *sorted(os.listdir("
                                                    "'/proc/%d/fd' % os.getppid()), key=int))\"\n")
    held = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(held, True)
    try:
        sessions("isoc", size=1, command=["sh", "-c", script])
    finally:
        os.close(held)
    st = _exit_code(state_root, "isoc")
    c = st["containers"][0]
    assert c["exit_code"] == 0, c
    lines = _command_output(c)
    output = "\n".join(lines)
    _assert_isolated(output, b)
    for line in ("CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "FDS 0 1 2"):
        assert line in lines, output


def _cgroup(pid: int, controller: str) -> str:
    """The directory of a process's cgroup of ``controller`` (cgroup v1, as on these machines)."""
    with open("/proc/%d/cgroup" % pid, encoding="ascii") as f:
        for line in f:
            _n, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return "/sys/fs/cgroup/%s%s" % (controller, path)
    raise AssertionError("process %d has no %s cgroup" % (pid, controller))


def test_fork_bomb_stops_at_the_pids_limit(sessions: Any, state_root: str, helpers: Any) -> None:
    """The bomb goes off once the session is up (a login touches ``~/go``): one that went off with the container took
    the pids its sshd needs to answer the start-up probe, and the create waited 17 s (quiet machine) for a pid to come
    free."""
    bystander = sessions("bystander", size=1)
    r = sessions("bomb", size=1, resources={"cpu": 1000, "memory": 4096},
                 command=["sh", "-c", "while [ ! -e ~/go ]; do sleep 0.05; done; b() { b | b & }; b; sleep 600"])
    pids_dir = _cgroup(r["containers"][0]["pid"], "pids")
    with open(os.path.join(pids_dir, "pids.events"), encoding="ascii") as f:
        assert f.read().split() == ["max", "0"]  # no fork was refused yet
    p = helpers.ssh(r, "main1", "touch ~/go")
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + 60
    events = ""
    while time.monotonic() < deadline:
        with open(os.path.join(pids_dir, "pids.events"), encoding="ascii") as f:
            events = f.read()
        if events.split() != ["max", "0"]:
            break
        time.sleep(0.05)
    with open(os.path.join(pids_dir, "pids.current"), encoding="ascii") as f:
        current = int(f.read())
    with open(os.path.join(pids_dir, "pids.max"), encoding="ascii") as f:
        limit = int(f.read())
    assert events.split()[0] == "max" and int(events.split()[1]) > 0, events  # forks were refused
    assert current <= limit == 4096
    # the machine is still usable: it forks, and another session answers
    assert subprocess.run(["true"], check=False).returncode == 0
    p = helpers.ssh(bystander, "main1", "echo alive", timeout=60)
    assert p.stdout.strip() == "alive", p.stderr
    rt.destroy_session("bomb", state_root)
    assert not os.path.exists(pids_dir)


def test_killing_a_containers_first_process_ends_everything_in_it(sessions: Any, state_root: str, helpers: Any) -> None:
    r = sessions("initkill", size=2, command=["sleep", "600"])
    p = helpers.ssh(r, "sub1", "setsid sleep 900 > /dev/null 2>&1 < /dev/null & echo started")  # a login's orphan
    assert p.stdout.strip() == "started", p.stderr
    sub1 = r["containers"][1]
    assert len(_netns_pids(sub1["netns"])) >= 3  # the command, sshd, the orphan
    os.kill(sub1["pid"], signal.SIGKILL)  # the PID namespace's init: the kernel kills the rest
    deadline = time.monotonic() + 10
    while _netns_pids(sub1["netns"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _netns_pids(sub1["netns"]) == []
    deadline = time.monotonic() + 10
    while rt.session_status("initkill", state_root)["state"] != "DEGRADED" and time.monotonic() < deadline:
        time.sleep(0.05)
    st = rt.session_status("initkill", state_root)
    assert [c["state"] for c in st["containers"]] == ["running", "failed"] and st["state"] == "DEGRADED"


#: A host terminal opened by uid 1000 (on these machines a real account; every session's ``work`` has it too): prints
#: its slave's path, then what arrives on it, as JSON, once the control's line has arrived (written last, after the
#: session's write returned: whatever that write delivered is before it) or after ``argv[1]`` seconds.
HOST_PTY = """
import json, os, select, sys, time
master, slave = os.openpty()
print(os.ttyname(slave), flush=True)
got, end = b"", time.monotonic() + float(sys.argv[1])
while time.monotonic() < end and b"FROM-THE-HOST" not in got:
    if select.select([master], [], [], 0.1)[0]:
        got += os.read(master, 4096)
print(json.dumps(got.decode(errors="replace")), flush=True)
"""


def assert_a_login_cannot_write_to_a_host_terminal(login: Callable[[str], Any]) -> None:
    """The devpts attack (``test_local_lifecycle`` runs it): a host process of uid 1000 holds a terminal (/dev/pts/N, its
    own: mode 0620); ``login(command)`` runs ``command`` in the session's login as ``work`` (uid 1000 too), which
    writes to that path: nothing may arrive, the container has terminals of its own only. Control: a host process
    of uid 1000 writing to the same path does reach it (the write itself is allowed to that uid)."""
    import json
    import sys
    holder = subprocess.Popen(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", sys.executable,
                               "-c", HOST_PTY, "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        path = holder.stdout.readline().strip()
        assert path.startswith("/dev/pts/") and os.stat(path).st_uid == 1000, path
        p = login("id -u; echo FROM-THE-SESSION > %s; echo rc=$?; ls /dev/pts" % path)
        assert p.stdout.splitlines()[0] == "1000", (p.stdout, p.stderr)  # the login is uid 1000
        subprocess.run(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "sh", "-c",
                        "echo FROM-THE-HOST > %s" % path], check=True)
        got = json.loads(holder.communicate(timeout=30)[0].strip().splitlines()[-1])
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert "FROM-THE-HOST" in got, "the control did not reach the terminal: the test proves nothing (%r)" % got
    assert "FROM-THE-SESSION" not in got, "the session's login wrote into a host terminal: %r" % p.stdout
    assert "ptmx" in p.stdout.split(), p.stdout  # the container's own devpts instance
