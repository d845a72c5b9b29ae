"""The local runtime brings real cluster sessions up on this machine and tears them down.

Every container is an engine (podman) container of the example image, started as a task of the session's rendered
Nomad job (``tests/support/local_session_dict.py``). Every test that creates a session destroys it and asserts the host
holds nothing of it (``assert_clean`` in conftest.py): no network namespace, link, iptables rule, process,
engine container or state file; when no other session is on the host, also that the whole iptables ruleset and
net.ipv4.ip_forward are exactly as before. Tests that only look at a running session share one per module.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest

import faults  # tests/local_runtime/faults.py: faults injected from outside the runtime
import images  # tests/support/images.py: the engine's containers.conf, podman as the tests run it
import local_session_dict  # tests/support/local_session_dict.py: a session given as a dict, brought up by the runtime
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt
from ansible_collections.backendai.cluster.plugins.module_utils._local.bringup import engine_log_tail
from ansible_collections.backendai.cluster.plugins.module_utils._session.hosts import HOSTS_SCRIPT, peers_text
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths

HOSTS = ["main1", "sub1", "sub2"]
#: What the job's entrypoint gives a login of the task's environment (``_nomad.job.ENTRYPOINT``: ~/.ssh/environment).
LOGIN_ENV = re.compile(r"^(BACKENDAI_|WORLD_|RANK$|LOCAL_RANK$|MASTER_|TF_CONFIG$)")


def _exec(result: dict[str, Any], host: str, argv: list[str], user: str = "") -> subprocess.CompletedProcess[str]:
    """Run argv in a container (``podman exec``, as root or as ``user``)."""
    engine = next(c["engine"] for c in result["containers"] if c["hostname"] == host)
    return images.podman("exec", *(["--user", user] if user else []), engine, *argv, check=False)


def _tcp_probe(result: dict[str, Any], host: str, address: str, port: int) -> bool:
    """A TCP connect from the container's network namespace (this machine's python, run in it)."""
    code = ("import socket,sys\ns=socket.socket(); s.settimeout(1.0)\n"
            "try:\n s.connect((%r, %d)); sys.exit(0)\nexcept OSError:\n sys.exit(1)\n" % (address, port))
    netns = next(c["netns"] for c in result["containers"] if c["hostname"] == host)
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", code], check=False,
                          timeout=30).returncode == 0


def _log(c: dict[str, Any]) -> list[str]:
    """Every line a container's command wrote (podman's k8s-file log, without the entrypoint's ``backendai:`` lines)."""
    return [line for line in engine_log_tail(c["log"], 10 ** 6) if not line.startswith("backendai: ")]


def _status_until(name: str, state_root: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        st = rt.session_status(name, state_root, log_lines=20)
        if st["state"] == state or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


@pytest.fixture
def shared(example_session: dict[str, Any]) -> dict[str, Any]:
    """The run's interactive session of main1, sub1, sub2 (conftest.py's ``example_session``), which the tests below
    only look at or leave as they found it."""
    return example_session


@pytest.fixture(scope="module")
def other(run_dir: str, helpers: Any, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    """A second interactive session (main1, sub1) beside :func:`shared`, which it must not reach nor be reached by,
    with a keypair of its own (the session's key is also its sshd's host key)."""
    with helpers.module_session(run_dir, helpers.new_keypair(str(tmp_path_factory.mktemp("other-key"))), "other",
                                size=2) as r:
        yield r


#: The batch command of :func:`batch`: who runs it, then its whole environment.
WHO_AND_ENV = ["sh", "-c", "id -u; id -g; id -un; grep -E '^(Uid|Gid|Groups):' /proc/self/status; echo --; env"]


@pytest.fixture(scope="module")
def batch(run_dir: str, keypair: Any, helpers: Any) -> Iterator[dict[str, Any]]:
    """A session of two containers whose command (:data:`WHO_AND_ENV`) ended, with the session's status then."""
    with helpers.module_session(run_dir, keypair, "batch", size=2, command=WHO_AND_ENV) as r:
        r["status"] = _status_until("batch", os.path.dirname(r["state_dir"]), "TERMINATED")
        yield r


# ------------------------------------------------------------------ behaviour

def test_ssh_between_every_pair_without_prompt(shared: Any, helpers: Any) -> None:
    r = shared
    assert [c["hostname"] for c in r["containers"]] == HOSTS
    assert r["state"] == "RUNNING"
    # the host reaches main1 directly and subs through main1 (ProxyJump); every container's loop at once
    with ThreadPoolExecutor(len(HOSTS)) as pool:
        logins = list(pool.map(lambda src: helpers.ssh(r, src, "hostname; for h in main1 sub1 sub2; do ssh $h hostname; done"),
                               HOSTS))
    for src, p in zip(HOSTS, logins):
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [src] + HOSTS


def test_ssh_shell_has_the_session_env_and_master_addr_resolves(shared: Any, helpers: Any) -> None:
    r = shared
    main_ip = r["containers"][0]["address"]

    def login(host: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        return helpers.ssh(r, host, "env -0"), helpers.ssh(r, host, "getent ahostsv4 \"$MASTER_ADDR\" | head -n1; "
                           "python3 -c 'import os, socket; print(socket.gethostbyname(os.environ[\"MASTER_ADDR\"]))'")

    with ThreadPoolExecutor(len(HOSTS)) as pool:  # every container's logins at once
        logins = list(pool.map(login, [c["hostname"] for c in r["spec"]["containers"]]))
    for c, (p, q) in zip(r["spec"]["containers"], logins):
        assert p.returncode == 0, p.stderr
        env = dict(item.split("=", 1) for item in p.stdout.split("\0") if "=" in item)
        want = {k: v for k, v in c["env"].items() if LOGIN_ENV.match(k)}
        assert len(want) >= 15 and {k: env.get(k) for k in want} == want
        assert q.returncode == 0, q.stderr
        assert [line.split()[0] for line in q.stdout.splitlines()] == [main_ip, main_ip]


def test_user_command_gets_the_task_env(batch: Any) -> None:
    """The command's environment: every variable of the container (the user's ``env`` too), HOME the user's."""
    assert batch["status"]["state"] == "TERMINATED"
    assert {c["state"] for c in batch["status"]["containers"]} == {"complete"}
    for spec, c in zip(batch["spec"]["containers"], batch["containers"]):
        lines = _log(c)
        got = dict(line.split("=", 1) for line in lines[lines.index("--") + 1:] if "=" in line)
        assert {k: got.get(k) for k in spec["env"]} == spec["env"]
        assert got["TRICKY"] == "a b \"c\" 'd' # e \\ f $HOME %h" and got["HOME"] == "/home/work"


def test_the_batch_command_runs_as_the_user_not_root(batch: Any) -> None:
    for c in batch["containers"]:
        lines = _log(c)
        assert lines[:3] == ["1000", "1000", "work"], lines
        assert [line.split() for line in lines[3:6]] == [["Uid:"] + ["1000"] * 4, ["Gid:"] + ["1000"] * 4,
                                                         ["Groups:", "1000"]]  # initgroups: its own group only


def test_user_command_log_and_exit_code(sessions: Any, state_root: str, helpers: Any) -> None:
    r = sessions("exitcode", command=["sh", "-c", "echo out-$BACKENDAI_CLUSTER_HOST; echo err-$WORLD_RANK >&2;"
                                      " exit $((3 + WORLD_RANK))"])
    st = _status_until("exitcode", state_root, "ERROR")
    assert st["state"] == "ERROR"  # a batch container ends with its command: every one failed
    for rank, c in enumerate(st["containers"]):
        assert (c["state"], c["command"], c["exit_code"]) == ("failed", "exited", 3 + rank)
        assert c["reason"] == "the command exited with code %d" % (3 + rank)
        assert c["log_tail"][-2:] == ["out-" + HOSTS[rank], "err-%d" % rank]
        assert c["log"] == os.path.join(state_root, "exitcode", "logs", HOSTS[rank] + ".log")
    assert helpers.ssh(r, "sub2", "hostname", timeout=10).returncode != 0  # its sshd ended with the container


def test_sessions_are_isolated(shared: Any, other: Any) -> None:
    a, b = shared, other
    assert a["subnet"] != b["subnet"] and a["bridge"] != b["bridge"]
    a_sub, b_main = a["containers"][1]["address"], b["containers"][0]["address"]
    assert _tcp_probe(a, "main1", a_sub, 2200), "containers of one session must reach each other"
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        forward = f.read().strip()
    try:
        for value in ("0", "1"):  # isolated even on a host that routes between its bridges
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write(value)
            # the three probes at once (a dropped SYN takes the probe's timeout)
            with ThreadPoolExecutor(3) as pool:
                a_to_b, b_to_a, b_to_b = pool.map(lambda args: _tcp_probe(*args), [
                    (a, "main1", b_main, 2200), (b, "sub1", a_sub, 2200), (b, "sub1", b_main, 2200)])
            assert not a_to_b, "ip_forward=%s: a reached b" % value
            assert not b_to_a, "ip_forward=%s: b reached a" % value
            assert b_to_b
    finally:
        with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write(forward)
    # each session has its own host keys: a's ssh_config, pointed at b's published port, does not get into b's main1
    # (control: the same command with a's own port does)
    for port, rc in ((a["published"].rsplit(":", 1)[1], 0), (b["published"].rsplit(":", 1)[1], 255)):
        crossed = subprocess.run(["ssh", "-F", a["ssh_config"], "-o", "BatchMode=yes", "-o", "Port=" + port, "main1", "true"],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
        assert crossed.returncode == rc, crossed.stderr
    assert "Host key verification failed" in crossed.stderr, crossed.stderr


def test_only_main1_is_published_on_localhost(shared: Any) -> None:
    r = shared
    host, port = r["published"].split(":")
    assert host == "127.0.0.1"
    assert [c["published"] for c in r["containers"]] == [r["published"], None, None]
    nat = subprocess.run(["iptables-save", "-t", "nat"], stdout=subprocess.PIPE, text=True, check=True).stdout
    ours = r["subnet"].rsplit(".", 1)[0] + "."
    dnat = [line.split("--to-destination ")[1] for line in nat.splitlines() if "--to-destination " + ours in line]
    assert dnat == ["%s:2200" % r["containers"][0]["address"]]
    with socket.create_connection((host, int(port)), timeout=5) as s:
        assert s.recv(4) == b"SSH-"
    with open(r["ssh_config"]) as f:
        text = f.read()
    assert "StrictHostKeyChecking yes" in text and "127.0.0.1" in text
    key = r["state_dir"] + "/ssh/id_cluster"
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert r["spec"]["ssh"]["private_key"].strip() not in json.dumps(r | {"spec": None})


def test_mounts_private_tmp_and_hostname(sessions: Any, tmp_path: Any, helpers: Any) -> None:
    data, ro = tmp_path / "data", tmp_path / "ro"
    data.mkdir()
    ro.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chown(data, 1000, 1000)  # the session user (work, 1000:1000) owns the data it writes to (see docs/session-user.md)
    (data / "hello").write_text("hi\n")
    (ro / "ro-file").write_text("ro\n")
    missing_top = "/srv/bai-test-%s" % uuid.uuid4().hex[:8]
    target = missing_top + "/data"  # missing on the host and in the image: made in the container only
    ro_target = str(tmp_path / "ro-view")  # under /tmp: the image's /tmp, not the host's
    host_marker = "/tmp/bai-host-marker-%s" % uuid.uuid4().hex[:8]
    open(host_marker, "w").close()
    try:
        r = sessions("mounts", size=2, mounts=[{"source": str(data), "target": target, "read_only": False},
                                               {"source": str(ro), "target": ro_target, "read_only": True}])
        p = helpers.ssh(r, "sub1", "hostname; cat %s/hello; touch %s/from-sub1; cat %s/ro-file; touch %s/x || echo ro-ok; "
                "test -e %s || echo private-tmp" % (target, target, ro_target, ro_target, host_marker))
        assert p.stdout.split() == ["sub1", "hi", "ro", "ro-ok", "private-tmp"], p.stderr
        assert (data / "from-sub1").exists()
        assert not os.path.exists(missing_top)
        rt.destroy_session("mounts", os.path.dirname(r["state_dir"]))
        assert sorted(os.listdir(data)) == ["from-sub1", "hello"]
    finally:
        os.unlink(host_marker)


def test_each_container_has_its_own_home(shared: Any, helpers: Any) -> None:
    r = shared
    marker = "bai-home-marker-%s" % uuid.uuid4().hex[:8]
    p = helpers.ssh(r, "main1", "echo $HOME; ls -A ~; ls ~/.ssh | tr '\\n' ' '; echo; touch ~/%s; "
                    "ssh sub1 'ls -A ~; test -e ~/%s || echo not-shared'; rm ~/%s" % (marker, marker, marker))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.split("\n")[:2] == ["/home/work", ".ssh"], p.stdout
    assert "authorized_keys" in p.stdout.split("\n")[2].split()
    assert p.stdout.split("\n")[3:5] == [".ssh", "not-shared"], p.stdout
    assert not os.path.exists("/root/" + marker), "a container wrote to the host's /root"
    assert not os.path.exists("/home/work/" + marker), "a container wrote to the host's /home"
    # the state directory keeps the host client's files, never a login's home
    assert sorted(os.listdir(os.path.join(r["state_dir"], "ssh"))) == ["id_cluster", "id_cluster.pub", "known_hosts"]


def test_a_changed_address_reaches_every_peer(shared: Any, tmp_path: Any) -> None:
    """The local side of /etc/hosts following the peers: bring-up writes each container's hosts file as the hosts
    script a Nomad task runs on a re-rendered peers template would (the script run on it with the same peers
    changes nothing); the script run with a moved peer rewrites the file in place, so the running container
    resolves the new address at once (it has that file bind-mounted)."""
    r = shared
    paths = SessionPaths(os.path.dirname(r["state_dir"]), r["spec"]["name"])
    addresses = {c["hostname"]: c["address"] for c in r["containers"]}
    moved = dict(addresses, sub2=str(ipaddress.ip_address(addresses["sub2"]) + 100))  # sub2 replaced elsewhere

    def run_script(peers: dict[str, str], hosts_file: str) -> str:
        (tmp_path / "peers").write_text(peers_text(peers))
        subprocess.run(["sh", "-c", HOSTS_SCRIPT, "hosts.sh", str(tmp_path / "peers"), hosts_file], check=True)
        with open(hosts_file, encoding="utf-8") as f:
            return f.read()
    for c in r["containers"]:
        hosts_file = os.path.join(paths.container_dir(c["hostname"]), "hosts")
        inode = os.stat(hosts_file).st_ino
        with open(hosts_file, encoding="utf-8") as f:
            written = f.read()
        assert run_script(addresses, hosts_file) == written
        assert written.startswith("127.0.0.1\tlocalhost\n") and written.count(" sub2\n") == 1
        try:
            run_script(moved, hosts_file)
            got = subprocess.run(["nsenter", "-t", str(c["pid"]), "-m", "getent", "hosts", "sub2", "main1"],
                                 capture_output=True, text=True, timeout=10, check=False)
            assert got.stdout.split() == [moved["sub2"], "sub2", addresses["main1"], "main1"], (c["hostname"], got)
            assert os.stat(hosts_file).st_ino == inode  # rewritten in place: the container's bind mount sees it
        finally:
            run_script(addresses, hosts_file)


def test_destroy_is_idempotent_and_create_refuses_existing(sessions: Any, state_root: str,
                                                           keypair: Any, helpers: Any) -> None:
    sessions("dup", size=1)
    with pytest.raises(rt.LocalRuntimeError, match="already exists"):
        local_session_dict.create_session(helpers.make_session("dup", keypair, size=1), state_root)
    assert rt.session_status("dup", state_root)["state"] == "RUNNING"
    assert rt.destroy_session("dup", state_root)["changed"] is True
    assert rt.destroy_session("dup", state_root) == {"changed": False, "name": "dup", "state": "missing"}
    assert rt.session_status("dup", state_root)["state"] == "missing"


def test_destroy_keep_logs(sessions: Any, state_root: str) -> None:
    sessions("logs", size=2, command=["sh", "-c", "echo kept; exit 7"])
    deadline = time.monotonic() + 10
    while any(c["exit_code"] is None for c in rt.session_status("logs", state_root)["containers"]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    res = rt.destroy_session("logs", state_root, keep_logs=True)
    assert res["changed"] and res["state"] == "TERMINATED"
    left = sorted(os.listdir(os.path.join(state_root, "logs")))
    assert left == ["logs", "session.json"]  # no keys, no journal
    st = rt.session_status("logs", state_root, log_lines=1)
    assert st["state"] == "TERMINATED"
    assert [(c["state"], c["exit_code"], c["log_tail"]) for c in st["containers"]] == \
        [("failed", 7, ["kept"])] * 2
    assert rt.destroy_session("logs", state_root, keep_logs=True)["changed"] is False
    assert rt.destroy_session("logs", state_root)["changed"] is True


# ------------------------------------------------------------------ failures

def test_destroy_without_cached_cni_results(sessions: Any, state_root: str) -> None:
    """A creator killed between a CNI ADD and caching its result: DEL rebuilds prevResult
    from the IPAM leases (firewall rules) and takes the port mappings from the journal."""
    r = sessions("nocache", size=2)
    for c in r["containers"]:
        os.unlink(os.path.join(r["state_dir"], "cni", c["hostname"] + ".json"))
    # the sessions fixture destroys the session and checks no rule is left



#: The journal's records of a session's create, in order.
RECORDS = ["begin", "netns", "slot", "network", "engine", "ready"]


@pytest.mark.parametrize("records", range(len(RECORDS)), ids=RECORDS)
def test_create_failure_rolls_back(records: int, state_root: str, keypair: Any, tmp_path: Any, helpers: Any) -> None:
    """Fail at each journal record (RECORDS): the create rolls back, leaving nothing."""
    before = helpers.host_snapshot()
    (tmp_path / "src").mkdir()
    top = "/srv/bai-test-%s" % uuid.uuid4().hex[:8]
    session = helpers.make_session("rollback", keypair, size=2,
                                   mounts=[{"source": str(tmp_path / "src"), "target": top + "/x"}])
    undo = faults.inject("raise", records)
    try:
        with pytest.raises(rt.LocalRuntimeError, match=r"fault injected.*\(rolled back\)"):
            local_session_dict.create_session(session, state_root, helpers.MOUNT_ROOTS)
    finally:
        undo()
    assert not os.path.exists(top)
    helpers.assert_clean(before, state_root, [session])


def test_real_start_failure_rolls_back_with_log(state_root: str, keypair: Any, tmp_path: Any, helpers: Any) -> None:
    before = helpers.host_snapshot()
    # a directory cannot be bound over a file of the image: the engine's start fails, saying which container and why
    session = helpers.make_session("badmount", keypair, size=2,
                                   mounts=[{"source": str(tmp_path), "target": "/etc/debian_version"}])
    with pytest.raises(rt.LocalRuntimeError, match=r"(?s)podman run of container (main1|sub1) \(image \S+\) failed: .*"
                                                   r"not a directory.*rolled back"):
        local_session_dict.create_session(session, state_root, helpers.MOUNT_ROOTS)
    helpers.assert_clean(before, state_root, [session])


@pytest.mark.parametrize("kill", ["records:%d" % i for i in range(len(RECORDS))] + ["after:0.3", "after:0.6", "after:0.9"])
def test_destroy_after_creator_killed(kill: str, state_root: str, keypair: Any, tmp_path: Any, helpers: Any) -> None:
    """SIGKILL the creating process mid-way (at a journal record, or after a delay):
    destroy must still remove everything."""
    before = helpers.host_snapshot()
    (tmp_path / "src").mkdir()
    top = "/srv/bai-test-%s" % uuid.uuid4().hex[:8]
    session = helpers.make_session("killed", keypair, size=3, command=["sleep", "600"],
                           mounts=[{"source": str(tmp_path / "src"), "target": top + "/x"}])
    proc = helpers.start_creator(session, state_root, kill)
    proc.wait(timeout=60)
    if kill.startswith("records:"):
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    # CREATING only while the creator's lock on the session directory is held: a child it forked a moment before
    # the kill holds the lock until it execs (close-on-exec); on a loaded machine (a rehearsal) that was still so
    # right after the kill. It must end within seconds, and then the state is one of these.
    deadline = time.monotonic() + 10
    while (st := rt.session_status("killed", state_root))["state"] == "CREATING" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert st["state"] in ("DEGRADED", "RUNNING", "TERMINATED", "missing")
    existed = os.path.isdir(os.path.join(state_root, "killed"))
    assert rt.destroy_session("killed", state_root)["changed"] is existed
    assert not os.path.exists(top)
    helpers.assert_clean(before, state_root, [session])


def test_concurrent_creates_and_destroys(state_root: str, keypair: Any, helpers: Any) -> None:
    """Sessions created and destroyed by concurrent processes get distinct subnets and
    leave nothing (the shared CNI chains are pruned by whichever destroy runs last)."""
    before = helpers.host_snapshot()
    names = ["conc-%d" % i for i in range(3)]
    specs = [helpers.make_session(name, keypair, size=3) for name in names]
    procs = []
    for spec in specs:
        procs.append(helpers.start_creator(spec, state_root))
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
    listed = rt.list_sessions(state_root)
    assert [(s["name"], s["state"]) for s in listed] == [(n, "RUNNING") for n in names]
    subnets = {rt.session_status(n, state_root)["subnet"] for n in names}
    assert len(subnets) == 3
    destroyer = "import sys\nsys.path.insert(0, %r)\nfrom ansible_collections.backendai.cluster.plugins." \
                "module_utils._local.runtime import destroy_session\ndestroy_session(sys.argv[1], %r)\n" \
                % (helpers.collections, state_root)
    procs = [subprocess.Popen([sys.executable, "-c", destroyer, n], stderr=subprocess.PIPE) for n in names]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
    helpers.assert_clean(before, state_root, specs)


# ------------------------------------------------------------------ checks without root

@pytest.mark.no_root
def test_not_root_is_refused(monkeypatch: pytest.MonkeyPatch, state_root: str, keypair: Any, helpers: Any) -> None:
    monkeypatch.setattr(rt.os, "geteuid", lambda: 1000)
    with pytest.raises(rt.LocalRuntimeError, match="must run as root"):
        local_session_dict.create_session(helpers.make_session("x", keypair), state_root)
    with pytest.raises(rt.LocalRuntimeError, match="must run as root"):
        rt.destroy_session("x", state_root)


@pytest.mark.no_root
def test_missing_cni_plugins_named(monkeypatch: pytest.MonkeyPatch, state_root: str, keypair: Any, helpers: Any) -> None:
    monkeypatch.setattr(rt.os, "geteuid", lambda: 0)
    monkeypatch.setattr(rt, "CNI_PATH", "/nonexistent/cni")
    with pytest.raises(rt.LocalRuntimeError) as err:
        local_session_dict.create_session(helpers.make_session("x", keypair), state_root)
    assert err.value.message == ("containernetworking-plugins is not installed: /nonexistent/cni/loopback missing; "
                                 "install it with apt-get install containernetworking-plugins")
    assert not os.path.exists(state_root)


@pytest.mark.no_root
@pytest.mark.parametrize("mutate, match", [
    (lambda s: s["containers"][0]["env"].update(X="a\nb"), "newline"),
    (lambda s: s["containers"][0].update(agent="node2"), "only runs agent 'local'"),
    (lambda s: s.update(mounts=[{"source": "/nonexistent/src", "target": "/x"}]), "does not exist"),
    (lambda s: s.update(mounts=[{"source": "/usr/share", "target": "/x"}]), r"mounts\[0\]\.source: /usr/share is not under a mount root"),
    (lambda s: s.update(mounts=[{"source": "/etc", "target": "/x"}]), r"mounts\[0\]\.source: /etc must not be /etc/backendai-cluster"),
])
def test_invalid_session_is_rejected_before_any_change(mutate: Any, match: str, state_root: str,
                                                        keypair: Any, helpers: Any) -> None:
    session = helpers.make_session("valid", keypair)
    mutate(session)
    with pytest.raises(rt.LocalRuntimeError, match=match) as err:
        local_session_dict.create_session(session, state_root, helpers.MOUNT_ROOTS)
    assert keypair[0].strip() not in str(err.value)
    assert not os.path.exists(state_root)


def test_logins_and_ssh_between_containers_are_the_work_user_and_root_is_refused(shared: Any, helpers: Any) -> None:
    r = shared
    p = helpers.ssh(r, "main1", "id -un; id -u; id -g; id -G; echo $HOME; stat -c '%U %a' ~ ~/.ssh ~/.ssh/id_backendai; "
                    "ssh sub1 'id -un; hostname'")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[:5] == ["work", "1000", "1000", "1000", "/home/work"], p.stdout  # no supplementary groups
    assert lines[5:8] == ["work 700", "work 700", "work 600"], p.stdout
    assert lines[8:] == ["work", "sub1"], p.stdout
    # root is refused by sshd (PermitRootLogin no, AllowUsers work) even when root's home in the container
    # authorizes the session's own key ...
    planted = _exec(r, "main1", ["sh", "-c", "mkdir -m 700 /root/.ssh && cp /home/work/.ssh/authorized_keys "
                                 "/root/.ssh/ && chown -R root:root /root/.ssh"])
    assert planted.returncode == 0, planted.stderr
    try:
        root = subprocess.run(["ssh", "-F", r["ssh_config"], "-l", "root", "main1", "id -un"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30, check=False)
        assert root.returncode == 255 and "Permission denied" in root.stderr and root.stdout == "", root.stderr
        # ... from inside too, and so is any other account of the image
        p = helpers.ssh(r, "main1", "ssh -l root sub1 id -un; echo rc=$?; ssh -l daemon sub1 id -un; echo rc=$?")
        assert p.stdout.split() == ["rc=255", "rc=255"] and p.stderr.count("Permission denied") == 2, p.stderr
    finally:
        _exec(r, "main1", ["rm", "-rf", "/root/.ssh"])


def test_a_configured_uid_and_gid_show_up_as_such(sessions: Any, helpers: Any) -> None:
    r = sessions("uidgid", size=2, user={"name": "alice", "uid": 4242, "gid": 4343})
    p = helpers.ssh(r, "sub1", "id -un; id -u; id -gn; id -g; echo $HOME; touch ~/f; stat -c '%u:%g' ~/f")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["alice", "4242", "alice", "4343", "/home/alice", "4242:4343"], p.stdout
    # the host's own account files are untouched
    with open("/etc/passwd", encoding="utf-8") as f:
        assert "alice:" not in f.read()


def test_mpirun_over_ssh_starts_every_rank_as_the_user_across_containers(shared: Any, helpers: Any) -> None:
    """OpenMPI's launcher (the example image's) reaches the other containers with `ssh subN orted ...`, as the
    session user."""
    p = helpers.ssh(shared, "main1", "printf 'main1 slots=1\\nsub1 slots=1\\nsub2 slots=1\\n' > ~/hostfile && "
                    "mpirun --hostfile ~/hostfile -np 3 --mca btl self,tcp --mca btl_tcp_if_include eth0 "
                    "--mca oob_tcp_if_include eth0 sh -c 'echo $(uname -n) $(id -un) $OMPI_COMM_WORLD_RANK'; "
                    "rc=$?; rm ~/hostfile; exit $rc", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(p.stdout.splitlines()) == ["main1 work 0", "sub1 work 1", "sub2 work 2"], p.stdout + p.stderr


def test_a_session_user_cannot_read_another_sessions_keys(shared: Any, other: Any, helpers: Any) -> None:
    """Both sessions' users are work (1000). A container sees its image's files, not the host's: B's keys (in B's
    state directory, and in B's task directory as the job's templates render them) are not there for A's user, nor
    for A's root."""
    b = other
    paths = SessionPaths(os.path.dirname(b["state_dir"]), "other")
    keys = [os.path.join(b["state_dir"], "ssh", "id_cluster"), os.path.join(paths.container_dir("main1"), "task")]
    assert os.path.exists(keys[0]) and os.path.isdir(keys[1])
    p = helpers.ssh(shared, "main1", "id -un; cat %s; ls %s" % tuple(keys))
    assert p.stdout.split() == ["work"] and p.stderr.count("No such file or directory") == 2, p.stdout + p.stderr
    p = _exec(shared, "main1", ["sh", "-c", "cat %s; ls %s" % tuple(keys)])
    assert "PRIVATE KEY" not in p.stdout and p.stderr.count("No such file or directory") == 2, p.stdout + p.stderr
