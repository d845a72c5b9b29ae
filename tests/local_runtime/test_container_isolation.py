"""Attacks on a local container's isolation beyond packets (issue 18): two sessions A and B on this machine;
from inside A (logged in through A's ssh_config, and as A's batch command) nothing of B can be seen, read,
entered or signalled; a container cannot take more memory or processes than its cgroup gives it.

Each probe comes with a positive control on A's own process (the same read of /proc/<pid>/environ, kill,
/proc/<pid>) so that a probe that could never succeed does not pass for a defence.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from typing import Any, Callable

from ansible_collections.backendai.cluster.plugins.module_utils._local import cgroups as cg
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._local.containers import is_alive, session_pids

#: What A's container may see at most (init, sshd, a login and the probe itself are a handful).
MAX_PROCESSES = 30


def _probe_script(b: dict[str, Any], key_line: str) -> str:
    """sh that prints ``LEAK ...`` for every way it reaches session B, ``OK ...`` for its positive controls
    on its own process, and ``COUNT n`` (processes it sees)."""
    b_pids = " ".join(str(c[k]) for c in b["containers"] for k in ("pid", "sshd_pid"))
    b_netns = " ".join(c["netns"] for c in b["containers"])
    half = len(key_line) // 2  # the script (a batch command's init.sh holds it) never holds the line whole
    return "\n".join([
        "B_PIDS=%s; B_DIR=%s; B_SID=%s; B_NETNS=%s; K1=%s; K2=%s; KEY=$K1$K2" % tuple(shlex.quote(v) for v in (
            b_pids, b["state_dir"], b["session_id"], b_netns, key_line[:half], key_line[half:])),
        "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo COUNT $n",
        # positive controls: the same reads and signals work on the probe's own process
        "[ -e /proc/$$ ] && echo OK proc",
        "tr '\\0' '\\n' < /proc/$$/environ | grep -q '^BACKENDAI_SESSION_ID=' && echo OK environ",
        "kill -0 $$ && echo OK kill",
        "ps ax -o pid=,args= | grep -q '[p]s ax' && echo OK ps",
        # B's processes: not in ps, not in /proc, no environ, no root, no namespaces, no signal
        "ps ax -o args= | grep -F -- \"$B_DIR\" | grep -v grep | sed 's/^/LEAK ps: /'",
        "for p in $B_PIDS; do",
        "  [ -e /proc/$p ] && echo LEAK /proc/$p exists",
        "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -q \"$B_SID\" && echo LEAK environ of $p",
        "  grep -qsF -- \"$KEY\" /proc/$p/root/run/backendai-cluster/ssh/id_cluster && echo LEAK key via /proc/$p/root",
        "  grep -qsF -- \"$KEY\" /proc/$p/root$B_DIR/ssh/id_cluster && echo LEAK key via /proc/$p/root$B_DIR",
        "  nsenter --net=/proc/$p/ns/net true 2>/dev/null && echo LEAK nsenter --net=/proc/$p/ns/net",
        "  nsenter -t $p -a true 2>/dev/null && echo LEAK nsenter -t $p -a",
        "  kill -0 $p 2>/dev/null && echo LEAK kill $p",
        "done",
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep -q \"$B_SID\" && echo LEAK environ $f; done",
        "for f in /proc/[0-9]*/root/run/backendai-cluster/ssh/id_cluster /proc/[0-9]*/root$B_DIR/ssh/id_cluster"
        " $B_DIR/ssh/id_cluster; do grep -qsF -- \"$KEY\" $f && echo LEAK key $f; done",
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
    assert {"OK proc", "OK environ", "OK kill", "OK ps"} <= set(lines), output  # the probes can succeed
    count = int(next(x for x in lines if x.startswith("COUNT "))[6:])
    assert 0 < count < MAX_PROCESSES, output
    for c in b["containers"]:  # B was not hurt
        assert is_alive(c["pid"]) and is_alive(c["sshd_pid"])


def _key_line(keypair: tuple[str, str]) -> str:
    return keypair[0].strip().splitlines()[2]  # a line of the private key's body, in no public file


def _exit_code(state_root: str, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        st = rt.session_status(name, state_root, log_lines=40)
        if all(c["command"] != "running" for c in st["containers"]) or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def test_logged_into_a_nothing_of_b_is_reachable(sessions: Any, helpers: Any, tmp_path: Any) -> None:
    b_keys = helpers.new_keypair(str(tmp_path))
    a = sessions("isoa", size=2)
    b = sessions("isob", size=2, keypair=b_keys)
    for host in ("main1", "sub1"):
        p = helpers.ssh(a, host, _probe_script(b, _key_line(b_keys)), timeout=120)
        assert p.returncode == 0, p.stderr
        _assert_isolated(p.stdout, b)
    # logins cannot gain privileges by exec (sshd runs with no_new_privs; its sessions inherit it)
    p = helpers.ssh(a, "sub1", "grep ^NoNewPrivs: /proc/self/status")
    assert p.stdout.split() == ["NoNewPrivs:", "1"], (p.stdout, p.stderr)


def test_a_batch_command_reaches_nothing_of_b_and_has_no_privileges(sessions: Any, state_root: str,
                                                                    helpers: Any, tmp_path: Any) -> None:
    b_keys = helpers.new_keypair(str(tmp_path))
    b = sessions("isob", size=1, keypair=b_keys)
    script = _probe_script(b, _key_line(b_keys)) + "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status\n"
    sessions("isoc", size=1, command=["sh", "-c", script])
    st = _exit_code(state_root, "isoc")
    c = st["containers"][0]
    assert c["exit_code"] == 0, c
    output = "\n".join(c["log_tail"])
    _assert_isolated(output, b)
    for line in ("CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
                 "NoNewPrivs:\t1"):
        assert line in c["log_tail"], output


def test_a_container_inherits_no_descriptor_of_its_creator(sessions: Any, state_root: str) -> None:
    """A descriptor its creator holds open and inheritable (an Ansible module's pipe, say) never reaches a
    container: its command starts with stdin, stdout and stderr only (the setup child closes the rest)."""
    held = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(held, True)
    try:
        sessions("fds", size=1, command=["sh", "-c", "ls /proc/$$/fd"])
    finally:
        os.close(held)
    c = _exit_code(state_root, "fds")["containers"][0]
    assert (c["exit_code"], c["log_tail"]) == (0, ["0", "1", "2"]), c


def test_memory_limit_kills_and_reports_oom(sessions: Any, state_root: str) -> None:
    # 700 MB written (so really allocated) in a 256 MB container
    r = sessions("oom", size=2, resources={"cpu": 1000, "memory": 256},
                 command=["sh", "-c", 'if [ "$BACKENDAI_CLUSTER_ROLE" = main ]; then '
                                      "exec /usr/bin/python3 -c 'b = bytearray(b\"x\") * (700 << 20); print(len(b))'; "
                                      "else sleep 600; fi"])
    st = _exit_code(state_root, "oom", timeout=10)
    deadline = time.monotonic() + 10
    while st["containers"][0]["command"] == "running" and time.monotonic() < deadline:
        st = _exit_code(state_root, "oom", timeout=1)
    main = st["containers"][0]
    assert (main["state"], main["exit_code"]) == ("failed", 137), main
    assert main["reason"].startswith("OOM: the kernel killed"), main
    assert st["containers"][1]["state"] == "running"
    assert st["state"] == "DEGRADED"
    dirs = r["containers"][0]["cgroups"]
    assert any(d.startswith("/sys/fs/cgroup") for d in dirs)
    rt.destroy_session("oom", state_root)
    assert [d for c in r["containers"] for d in c["cgroups"] if os.path.exists(d)] == []


def test_fork_bomb_stops_at_the_pids_limit(sessions: Any, state_root: str, helpers: Any) -> None:
    bystander = sessions("bystander", size=1)
    r = sessions("bomb", size=1, resources={"cpu": 1000, "memory": 4096},
                 command=["sh", "-c", "b() { b | b & }; b; sleep 600"])
    pids_dir = next((d for d in r["containers"][0]["cgroups"] if "pids" in d), None)
    assert pids_dir is not None, r["containers"][0]["cgroups"]
    deadline = time.monotonic() + 60
    events = ""
    while time.monotonic() < deadline:
        with open(os.path.join(pids_dir, "pids.events"), encoding="ascii") as f:
            events = f.read()
        if events.split() != ["max", "0"]:
            break
        time.sleep(0.2)
    with open(os.path.join(pids_dir, "pids.current"), encoding="ascii") as f:
        current = int(f.read())
    assert events.split()[0] == "max" and int(events.split()[1]) > 0, events  # forks were refused
    assert current <= cg.PIDS_LIMIT
    # the machine is still usable: it forks, and another session answers
    assert subprocess.run(["true"], check=False).returncode == 0
    p = helpers.ssh(bystander, "main1", "echo alive", timeout=60)
    assert p.stdout.strip() == "alive", p.stderr
    rt.destroy_session("bomb", state_root)
    assert not os.path.exists(pids_dir)


def test_without_cgroup_controllers_the_session_runs_and_says_so(sessions: Any, state_root: str, helpers: Any,
                                                                 monkeypatch: Any) -> None:
    monkeypatch.setattr(cg, "detect", lambda: cg.Hierarchies({}, list(cg.CONTROLLERS)))
    r = sessions("nocg", size=1)
    assert r["isolation"]["cgroups"] == "none" and len(r["isolation"]["warnings"]) == 3, r["isolation"]
    assert r["containers"][0]["cgroups"] == []
    with open(os.path.join(state_root, "nocg", "logs", "main1.system.log"), encoding="utf-8") as f:
        log = f.read()
    assert "warning: no memory cgroup controller on this machine: the containers run without a memory limit" in log
    p = helpers.ssh(r, "main1", "ps ax -o pid= | wc -l")  # the namespaces do not depend on cgroups
    assert 0 < int(p.stdout) < MAX_PROCESSES, (p.stdout, p.stderr)


def test_killing_a_containers_init_ends_everything_in_it(sessions: Any, state_root: str, helpers: Any) -> None:
    r = sessions("initkill", size=2, command=["sleep", "600"])
    p = helpers.ssh(r, "sub1", "setsid sleep 900 > /dev/null 2>&1 < /dev/null & echo started")  # a login's orphan
    assert p.stdout.strip() == "started", p.stderr
    sub1 = r["containers"][1]
    os.kill(sub1["pid"], signal.SIGKILL)  # the PID namespace's init: the kernel kills the rest
    deadline = time.monotonic() + 10
    while session_pids([sub1["netns"]], "-") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_pids([sub1["netns"]], "-") == []
    assert not is_alive(sub1["sshd_pid"])
    st = rt.session_status("initkill", state_root)
    assert [c["state"] for c in st["containers"]] == ["running", "failed"] and st["state"] == "DEGRADED"


#: A host terminal opened by uid 1000 (on these machines a real account; every session's ``work`` has it too): prints
#: its slave's path, then for ``argv[1]`` seconds what arrives on it, as JSON.
HOST_PTY = """
import json, os, select, sys, time
master, slave = os.openpty()
print(os.ttyname(slave), flush=True)
got, end = b"", time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    if select.select([master], [], [], 0.1)[0]:
        got += os.read(master, 4096)
print(json.dumps(got.decode(errors="replace")), flush=True)
"""


def assert_a_login_cannot_write_to_a_host_terminal(login: Callable[[str], Any]) -> None:
    """The devpts attack, for either kind of container: a host process of uid 1000 holds a terminal (/dev/pts/N, its
    own: mode 0620); ``login(command)`` runs ``command`` in the session's login as ``work`` (uid 1000 too), which
    writes to that path: nothing may arrive, the container has terminals of its own only. Control: a host process
    of uid 1000 writing to the same path does reach it (the write itself is allowed to that uid)."""
    import json
    import sys
    holder = subprocess.Popen(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", sys.executable,
                               "-c", HOST_PTY, "12"], stdout=subprocess.PIPE, text=True)
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


def test_a_login_cannot_write_to_a_host_terminal_of_its_own_uid(sessions: Any, helpers: Any) -> None:
    """The devpts attack on a host-files container (:func:`assert_a_login_cannot_write_to_a_host_terminal`)."""
    a = sessions("ptys", size=1)
    assert_a_login_cannot_write_to_a_host_terminal(lambda command: helpers.ssh(a, "main1", command))
