# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad job's entrypoint, run for real with OpenSSH in network namespaces.

No Nomad binary can run here, so this test plays the parts Nomad would: for each task group of a
rendered job it makes a network + mount + UTS namespace, renders the task's files the way its
templates would (the key pair into ``secrets/``, the peers file that ``nomadService`` would give
into ``local/``, the entrypoint from job Meta), interpolates ``${NOMAD_META_...}`` into the
group's Env, and starts the entrypoint. Then it checks the seeds' promises: ``ssh sub1 hostname``
from main1 with no prompt, every pair, and each ssh shell carrying its container's variables. Last,
a container moves to a new address (as a replaced allocation does): the peers file is rendered again
and the peers template's change script runs in every task, as Nomad's ``change_mode = "script"``
would, and ``ssh sub2`` works again from every peer.
Everything it makes (namespaces, veths, bridge, processes) is removed at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import typing as t
import uuid

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    ENTRYPOINT_META_KEY,
    LOCAL_SUBDIR,
    render_job,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair

META_REF = re.compile(r"\$\{NOMAD_META_([A-Za-z0-9_]+)\}")
TOOLS = ("ip", "unshare", "nsenter", "ssh")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/sbin/sshd") or not all(shutil.which(x) for x in TOOLS),
    reason="needs root, iproute2, util-linux and OpenSSH (scripts/setup installs them)")


def sh(*cmd: str, check: bool = True, **kw: t.Any) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=30, **kw)


class Namespaces:
    """Network namespaces and links this test made, so that teardown can remove exactly them."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.hub = "baiep%s-hub" % self.tag
        self.netns: t.List[str] = []
        self.procs: t.List[subprocess.Popen] = []

    def add(self, name: str) -> str:
        sh("ip", "netns", "add", name)
        self.netns.append(name)
        return name

    def teardown(self) -> None:
        for ns in self.netns:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for ns in reversed(self.netns):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def namespaces() -> t.Iterator[Namespaces]:
    made = Namespaces()
    try:
        yield made
    finally:
        made.teardown()
        left = sh("ip", "netns", "list").stdout
        assert made.tag not in left, "namespaces left behind: " + left


def test_entrypoint_gives_passwordless_ssh_and_the_seed_env(namespaces: Namespaces, tmp_path: t.Any) -> None:
    keys = generate_keypair()
    plan = plan_session({"name": "ep-test", "image": "unused", "cluster_size": 3, "command": ["sleep", "300"]},
                        [{"name": "agent-1", "cpu": 9000, "memory": 9000}], public_key=keys.public_key)
    job = render_job(plan)
    meta = job["Meta"]
    hub = namespaces.add(namespaces.hub)
    sh("ip", "netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge")
    sh("ip", "netns", "exec", hub, "ip", "link", "set", "br0", "up")
    addresses = {c.hostname: "10.250.%d.%d" % (int(namespaces.tag[:2], 16), 10 + c.rank) for c in plan.containers}
    peers = "".join("%s %s\n" % (addresses[h], h) for h in plan.hostnames)  # what nomadService renders
    pids: t.Dict[str, int] = {}
    task_env: t.Dict[str, t.Dict[str, str]] = {}
    for group, container in zip(job["TaskGroups"], plan.containers):
        host = container.hostname
        ns = namespaces.add("baiep%s-%s" % (namespaces.tag, host))
        inner, outer = "eth0", "v%s%d" % (namespaces.tag, container.rank)
        sh("ip", "link", "add", outer, "netns", hub, "type", "veth", "peer", "name", inner, "netns", ns)
        sh("ip", "netns", "exec", hub, "ip", "link", "set", outer, "master", "br0", "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", addresses[host] + "/24", "dev", inner)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        root = tmp_path / host
        for sub in ("secrets/backendai", "local/backendai", "home"):
            (root / sub).mkdir(parents=True)
        (root / "secrets/backendai/id").write_text(keys.private_key)
        os.chmod(root / "secrets/backendai/id", 0o600)
        (root / "secrets/backendai/id.pub").write_text(keys.public_key + "\n")
        (root / "local/backendai/peers").write_text(peers)
        (root / "local/backendai/entrypoint.sh").write_text(meta[ENTRYPOINT_META_KEY])
        (root / "hosts").write_text("127.0.0.1 localhost\n")
        os.chmod(root / "home", 0o700)
        task = group["Tasks"][0]
        env = {k: META_REF.sub(lambda m: meta[m.group(1)], v) for k, v in task["Env"].items()}
        env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", HOME="/root", NOMAD_SECRETS_DIR=str(root / "secrets"),
                   NOMAD_TASK_DIR=str(root / "local"))
        env.update({"NOMAD_META_" + k: v for k, v in meta.items()})  # Nomad puts every Meta key in the task's env
        # The container: its own hostname, /etc/hosts, /root and /run; then the entrypoint, as Nomad would start it.
        script = ("hostname %s && mount --bind %s /etc/hosts && mount --bind %s /root && mount -t tmpfs tmpfs /run "
                  "&& exec sh %s %s" % (host, root / "hosts", root / "home", root / "local/backendai/entrypoint.sh",
                                         " ".join(task["Config"]["args"])))
        task_env[host] = env
        proc = subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
                                 "sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        namespaces.procs.append(proc)
        pids[host] = proc.pid

    def in_container(host: str, *cmd: str) -> subprocess.CompletedProcess:
        return sh("nsenter", "-t", str(pids[host]), "-m", "-u", "-n", *cmd, check=False)

    deadline = time.monotonic() + 20
    for host, addr in addresses.items():
        while True:
            probe = sh("ip", "netns", "exec", "baiep%s-main1" % namespaces.tag, "bash", "-c",
                       "exec 3<>/dev/tcp/%s/2200" % addr, check=False)
            if probe.returncode == 0:
                break
            for proc in namespaces.procs:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "sshd of %s never listened" % host
            time.sleep(0.1)

    ssh = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5")
    got = in_container("main1", *ssh, "sub1", "hostname")
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    for src in plan.hostnames:  # every container reaches every other and itself, by name
        for dst in plan.hostnames:
            got = in_container(src, *ssh, dst, "cat /proc/sys/kernel/hostname")
            assert (got.returncode, got.stdout.strip()) == (0, dst), (src, dst, got.stderr)
    for container in plan.containers:  # an ssh shell has the container's variables
        got = in_container("main1", *ssh, container.hostname, "env")
        shell_env = dict(line.split("=", 1) for line in got.stdout.splitlines() if "=" in line)
        expected = container_env(plan, container)
        assert {k: shell_env.get(k) for k in expected} == expected
    getent = in_container("sub2", "getent", "hosts", "main1")  # MASTER_ADDR resolves
    assert getent.stdout.split()[0] == addresses["main1"]

    # sub2 is replaced: its new allocation has a new address. Its peers' /etc/hosts still name the old one ...
    old, new = addresses["sub2"], addresses["sub2"].rsplit(".", 1)[0] + ".200"
    sub2_ns = "baiep%s-sub2" % namespaces.tag
    sh("ip", "netns", "exec", sub2_ns, "ip", "addr", "del", old + "/24", "dev", "eth0")
    sh("ip", "netns", "exec", sub2_ns, "ip", "addr", "add", new + "/24", "dev", "eth0")
    quick = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2")
    assert in_container("main1", *quick, "sub2", "hostname").returncode != 0
    # ... until Nomad renders the peers template again and runs its change script in each task, with the task's
    # environment (the task dir is /local in a Nomad task, root/local here)
    moved = "".join("%s %s\n" % (new if h == "sub2" else addresses[h], h) for h in plan.hostnames)
    for group in job["TaskGroups"]:
        host, root = group["Name"], tmp_path / group["Name"]
        (root / "local/backendai/peers").write_text(moved)
        change = next(x for x in group["Tasks"][0]["Templates"] if x["DestPath"] == LOCAL_SUBDIR + "/peers")["ChangeScript"]
        argv = [change["Command"]] + [a.replace("/local/", str(root / "local") + "/", 1) for a in change["Args"]]
        got = sh("nsenter", "-t", str(pids[host]), "-m", "-u", "-n", "env", "-i",
                 *["%s=%s" % kv for kv in task_env[host].items()], *argv, check=False)
        assert got.returncode == 0, got.stderr
    for src in plan.hostnames:
        got = in_container(src, *ssh, "sub2", "cat /proc/sys/kernel/hostname")
        assert (got.returncode, got.stdout.strip()) == (0, "sub2"), (src, got.stderr)
        hosts = in_container(src, "cat", "/etc/hosts").stdout
        assert hosts.count(" sub2") == 1 and hosts.startswith("127.0.0.1 localhost\n"), hosts
