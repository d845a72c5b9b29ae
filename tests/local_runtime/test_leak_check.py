# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The leak check (``tests/support/leaks.py``) can fail: one leftover of each kind it looks for, made by this test in
a namespace, links, chains and directories of its own, is reported; once removed, nothing is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import typing as t
import uuid

import pytest

import images
import leaks

TAG = "lk" + uuid.uuid4().hex[:6]  # every name this test makes starts with it
PATH = {"PATH": leaks.PATH}


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=PATH, check=check)


def _sleeper(*prefix: str, env: t.Optional[t.Dict[str, str]] = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(prefix) + ["sleep", "300"], env=dict(PATH, **(env or {})),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


@pytest.fixture
def fake_run_root(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A stand-in for /run/backendai-cluster holding the plugin's installation (never a leak)."""
    root = tmp_path / "run" / "backendai-cluster"
    for rel in ("agent/lib/_cni_plugin.py", "agent/bin/backendai", "agent/network.key",
                "agent/cni/local/backendai.conflist", "agent/state/local/lock"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    for rel in ("agent/slots", "agent/state/local/ipam", "agent/state/local/containers", "agent/state/local/sessions"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(leaks, "RUN_ROOTS", (str(root), str(tmp_path / "run" / "backendai-cluster-mounts")))
    return str(root)


def test_every_kind_of_leftover_is_reported_then_nothing(fake_run_root: str, tmp_path: t.Any) -> None:
    ns, br, veth, vx, chain, container = TAG + "-ns", TAG + "br", TAG + "v0", TAG + "vx", TAG.upper(), TAG + "-engine"
    engine = images.engine_missing() is None
    sysctl = "/proc/sys/net/ipv4/conf/default/route_localnet"
    with open(sysctl, encoding="ascii") as f:
        sysctl_was = f.read().strip()
    before = leaks.snapshot()
    procs: t.List[subprocess.Popen[bytes]] = []
    cgroups_made: t.List[str] = []
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", br, "type", "bridge")
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        sh("ip", "link", "add", vx, "type", "vxlan", "id", "4242", "dstport", "4789", "dev", "lo")
        sh("ip", "addr", "add", "127.77.0.1/32", "dev", "lo")
        for table in leaks.TABLES:
            sh("iptables", "-w", "-t", table, "-N", chain)
            sh("iptables", "-w", "-t", table, "-A", chain, "-s", "192.0.2.77", "-m", "comment", "--comment", TAG,
               "-j", "RETURN")
        with open(sysctl, "w", encoding="ascii") as f:
            f.write("0\n" if sysctl_was == "1" else "1\n")
        procs.append(_sleeper("ip", "netns", "exec", ns))   # a process in a namespace made since
        procs.append(_sleeper("unshare", "--net"))           # ... in one without a name
        owner = str(tmp_path / "sessions" / "s1")
        procs.append(_sleeper(env={leaks.OWNER_ENV: owner}))  # tagged with a session's state dir
        slot = os.path.join(fake_run_root, "agent", "slots", "7")
        with open(slot, "w", encoding="ascii") as f:
            f.write("{}")
        # a container's cgroups: one named after its namespace, one only in its record
        mounts = leaks.cgroup_mounts()
        cg_named = os.path.join(mounts[0], leaks.CGROUP_PREFIX + ns)
        cg_recorded = os.path.join(mounts[-1], leaks.CGROUP_PREFIX + TAG + "-rec")
        for d in (cg_named, cg_recorded):
            os.mkdir(d)
            cgroups_made.append(d)
        os.makedirs(owner)
        with open(os.path.join(owner, "session.json"), "w", encoding="utf-8") as f:
            json.dump({"session_id": TAG, "bridge": br, "subnet": "10.250.7.0/24", "containers": [
                {"netns": ns, "address": "10.250.7.2", "pid": procs[0].pid, "cgroups": [cg_recorded],
                 "pid_starttime": leaks._proc_starttime(procs[0].pid)}]}, f)
        sh("ip", "addr", "add", "10.250.7.1/24", "dev", br)
        if engine:  # an engine container labelled with the session's state directory (made, never started)
            images.podman("create", "--name", container, "--label", "%s=%s" % (leaks.ENGINE_LABEL, owner),
                          images.image("test-busybox"), "true")
        rec = leaks.record(str(tmp_path / "sessions"))
        os.makedirs(os.path.join(tmp_path, "agents", "f1", "cni", "a1"))
        conflist = os.path.join(tmp_path, "agents", "f1", "cni", "a1", "backendai.conflist")
        with open(conflist, "w", encoding="utf-8") as f:
            f.write("{}")
        rec = leaks.merge([rec, leaks.record(agents_root=str(tmp_path / "agents"))])

        # the snapshot diff alone
        left = "\n".join(leaks.leaks(before))
        for expected in ["network namespace " + ns, "bridge link " + br, "veth link " + veth, "vxlan link " + vx,
                         "address 127.77.0.1/32 on lo",
                         "sysctl net.ipv4.conf.default.route_localnet", "session state " + slot,
                         "process %d in a network namespace made since" % procs[0].pid,
                         "process %d in an unnamed network namespace" % procs[1].pid,
                         "cgroup " + cg_named, "cgroup " + cg_recorded]:
            assert expected in left, (expected, left)
        if engine:
            assert re.search(r"^engine container [0-9a-f]+ %s$" % container, left, re.M), left
        for table in leaks.TABLES:
            assert "iptables -t %s added: :%s" % (table, chain) in left
            assert "iptables -t %s added: -A %s -s 192.0.2.77/32" % (table, chain) in left
        assert "agent/lib" not in left and "network.key" not in left  # the installation is not a session's
        # the record alone (no baseline: Molecule's first destroy)
        left = "\n".join(leaks.leaks(None, rec))
        for expected in ["state directory " + owner, "CNI config " + conflist, "network namespace " + ns,
                         "link " + br, "host address 10.250.7.1/24 on " + br,
                         "process %d (recorded, still running)" % procs[0].pid,
                         "process %d of the session" % procs[2].pid, "cgroup " + cg_named, "cgroup " + cg_recorded] + (
                             ["engine container %s of %s" % (container, owner)] if engine else []):
            assert expected in left, (expected, left)
        # the command line Molecule's playbooks run, through JSON files
        baseline = os.path.join(tmp_path, "baseline.json")
        with open(baseline, "w", encoding="utf-8") as f:
            json.dump(before, f)
        cli = subprocess.run([sys.executable, leaks.__file__, "check", "--baseline", baseline], input=json.dumps(rec),
                             capture_output=True, text=True, check=True)
        assert "veth link " + veth in json.loads(cli.stdout)
    finally:
        if engine:
            images.podman("rm", "--force", "--ignore", container)
        for proc in procs:
            _stop(proc)
        for table in leaks.TABLES:
            sh("iptables", "-w", "-t", table, "-F", chain, check=False)
            sh("iptables", "-w", "-t", table, "-X", chain, check=False)
        sh("ip", "addr", "del", "127.77.0.1/32", "dev", "lo", check=False)
        for link in (br, veth, vx):
            sh("ip", "link", "del", link, check=False)
        sh("ip", "netns", "del", ns, check=False)
        for d in reversed(cgroups_made):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        with open(sysctl, "w", encoding="ascii") as f:
            f.write(sysctl_was + "\n")
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(fake_run_root, "agent", "slots", "7"))
    shutil.rmtree(tmp_path / "sessions")
    shutil.rmtree(tmp_path / "agents")
    assert leaks.leaks(before, rec) == []


def test_a_wireguard_go_left_behind_is_reported_by_snapshot_and_by_record(tmp_path: t.Any) -> None:
    """A local agent's WireGuard interface whose namespace was deleted while its wireguard-go lived on (the process
    keeps the namespace): the process and its UAPI socket are reported, from the snapshot diff and from the agents'
    journal; once the process is ended, nothing is."""
    ns, name = TAG + "-wg", TAG + "wg"
    before = leaks.snapshot()
    agents = tmp_path / "agents" / "local"
    agents.mkdir(parents=True)
    (agents / "journal").write_text(json.dumps({"op": "wireguard", "interfaces": {ns: name}}) + "\n")
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "netns", "exec", ns, "wireguard-go", name)
        sh("ip", "netns", "delete", ns)
        rec = leaks.record(agents_root=str(tmp_path / "agents"))
        left = leaks.leaks(before, rec)
        assert "WireGuard UAPI socket /var/run/wireguard/%s.sock" % name in left, left
        assert [x for x in left if x.startswith("wireguard-go process") and x.endswith("(%s)" % name)], left
    finally:
        sh("ip", "netns", "delete", ns, check=False)
        pids = [p["pid"] for p in leaks.processes().values() if leaks._wireguard_go(p) == name]
        for pid in pids:
            os.kill(pid, 15)
        # until the process is gone, not only its socket (it removes the socket, then exits: CI once saw it alive)
        for i in range(200):
            alive = [pid for pid in pids if os.path.exists("/proc/%d" % pid)]
            if not alive and not os.path.exists("/var/run/wireguard/%s.sock" % name):
                break
            for pid in alive if i == 100 else []:  # 5 s: no more waiting for a clean exit
                os.kill(pid, 9)
            __import__("time").sleep(0.05)
    shutil.rmtree(agents)
    assert not [x for x in leaks.leaks(before) if name in x]
