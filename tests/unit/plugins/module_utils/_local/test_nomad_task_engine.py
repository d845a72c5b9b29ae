# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad job's tasks run in a real container engine (podman), in images built here from Debian packages.

No Nomad binary can run here; what Nomad's client and docker driver would give each task is read off the
rendered job by the local backend's container start (``_local.task_start``: image, entrypoint and args, the
task's user, env with job Meta, the templates rendered with the session's keys and peers, the runtime bundle and
the other volume mounts, the memory limit) and handed to ``podman run``, into network namespaces this test makes (a bridge in a hub namespace, as the
CNI plugin would on an agent). The images (``scripts/build-images``): busybox alone, one static binary, Debian
without OpenSSH, Debian with its own OpenSSH, and an image whose config says ``USER 1000`` with its own account
of that uid (docker-stacks' ``jovyan``). In each: ``ssh`` between every pair as the session user with no prompt,
``scp``, every seed variable in logins and in the command's environment, the image's own files and not the
host's, and the command running as the session user.

Everything it makes (containers, namespaces, veths) is removed at the end; images stay (an engine user expects
them to).
"""

from __future__ import annotations

import os
import subprocess
import typing as t
import uuid

import pytest

import images
from repo_helpers import REPO

from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import run_args, task_env, task_files
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    RUNTIME_MOUNT,
    RUNTIME_VERSION,
    RUNTIME_VOLUME,
    render_job,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import SESSION_VARIABLES
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec

BUNDLER = os.path.join(REPO, "collections/ansible_collections/backendai/cluster/roles/overlay_agent/files/backendai-runtime-bundle")
SEEDS = ("BACKENDAI_CLUSTER_HOST", "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_SIZE", "BACKENDAI_CLUSTER_ROLE")

pytestmark = [pytest.mark.machine,
              pytest.mark.skipif(images.engine_missing() is not None, reason=images.engine_missing() or "")]


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session runtime bundle, built by the overlay_agent role's builder from this host's packages."""
    dest = tmp_path_factory.mktemp("runtime")
    sh("/usr/bin/python3", "-IS", BUNDLER, RUNTIME_VERSION, str(dest))
    return os.path.realpath(dest / RUNTIME_VERSION)


class Session:
    """The task groups of one rendered job, each a podman container in its own network namespace."""

    def __init__(self, tmp_path: t.Any, image: str, bundle: str, command: t.Sequence[str], size: int = 2,
                 **spec: t.Any) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.keys = generate_keypair()
        spec = dict({"name": "eng-" + self.tag, "image": image, "cluster_size": size, "command": list(command),
                     "resources": {"cpu": 1000, "memory": 256}}, **spec)
        self.plan = plan_session(parse_spec(spec), [{"name": "agent-1", "cpu": 9000, "memory": 9000}],
                                 public_key=self.keys.public_key)
        self.job = render_job(self.plan)
        self.hub = "baien%s-hub" % self.tag
        self.netns: t.List[str] = []
        self.containers: t.Dict[str, str] = {}
        self._add_netns(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        self.addresses = {c.hostname: "10.251.%d.%d" % (int(self.tag[:2], 16), 10 + c.rank) for c in self.plan.containers}
        peers = "".join("%s %s\n" % (self.addresses[h], h) for h in self.plan.hostnames)  # what nomadService renders
        secret = {"ssh_private_key": self.keys.private_key, "ssh_public_key": self.keys.public_key + "\n"}
        self.env: t.Dict[str, t.Dict[str, str]] = {}
        for group, container in zip(self.job["TaskGroups"], self.plan.containers):
            host = container.hostname
            ns = self._add_netns("baien%s-%s" % (self.tag, host))
            outer = "v%s%d" % (self.tag, container.rank)
            sh("ip", "link", "add", outer, "netns", self.hub, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.hub, "link", "set", outer, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", self.addresses[host] + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            top = tmp_path / host
            env = self.env[host] = task_env(self.job, group)
            for dest, (text, mode) in task_files(group, env, secret, peers).items():
                path = top / "task" / dest
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                os.chmod(path, mode)
            (top / "alloc").mkdir()
            (top / "hosts").write_text("127.0.0.1 localhost\n")
            name = "baien%s-%s" % (self.tag, host)
            args = run_args(self.job, host, name=name, netns_path="/run/netns/" + ns, task_dir=str(top / "task"),
                            alloc_dir=str(top / "alloc"), hosts_file=str(top / "hosts"),
                            host_volumes={RUNTIME_VOLUME: bundle}, core_mhz=1000.0)
            self.containers[host] = name  # before the start: a failed start is removed too
            images.podman("run", "-d", *args)

    def _add_netns(self, name: str) -> str:
        sh("ip", "netns", "add", name)
        self.netns.append(name)
        return name

    def wait_for_sshd(self, timeout: float = 30) -> None:
        for host, addr in self.addresses.items():
            probe = "for i in $(seq %d); do exec 3<>/dev/tcp/%s/2200 && exit 0; sleep 0.1; done 2>/dev/null; exit 1" % (
                timeout * 10, addr)
            if sh("ip", "netns", "exec", self.netns[1], "bash", "-c", probe, check=False).returncode != 0:
                raise AssertionError("sshd of %s never listened:\n%s" % (host, self.logs(host)))

    def logs(self, host: str) -> str:
        got = images.podman("logs", self.containers[host], check=False)
        return got.stdout + got.stderr

    def exec(self, host: str, *cmd: str, user: str = "") -> subprocess.CompletedProcess:
        """``cmd`` in the container, as root or as ``user`` (uid:gid), with the image's PATH and the bundle's bin."""
        ids = ["--user", user] if user else []  # (podman sets HOME from the container's /etc/passwd)
        path = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:%s/bin" % RUNTIME_MOUNT
        return images.podman("exec", *ids, "--env", path, self.containers[host], *cmd, check=False)

    def remove(self) -> None:
        for name in self.containers.values():
            images.podman("rm", "--force", "--time", "0", name, check=False)
        for ns in reversed(self.netns):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def sessions() -> t.Iterator[t.List[Session]]:
    made: t.List[Session] = []
    try:
        yield made
    finally:
        for s in made:
            s.remove()
        for s in made:
            left = images.podman("ps", "-a", "--filter", "name=baien" + s.tag, "--format", "{{.Names}}").stdout.split()
            assert not left, "containers left behind: %s" % left
            assert s.tag not in sh("ip", "netns", "list").stdout


#: What separates the parts of one podman exec's output.
MARK = "=== backendai-test"
#: image -> (the user's command, a file only the image has)
IMAGES = {
    "test-busybox": (["sleep", "300"], "/bin/busybox"),
    "test-static": (["/busybox", "sleep", "300"], "/busybox"),
    "test-debian": (["sleep", "300"], "/etc/debian_version"),
    "test-openssh": (["sleep", "300"], "/usr/sbin/sshd"),
    "test-user1000": (["sleep", "300"], "/home/jovyan/.bashrc"),
}


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_every_image_gives_ssh_between_all_pairs_and_the_seed_env(sessions: t.List[Session], tmp_path: t.Any,
                                                                  bundle: str, name: str) -> None:
    command, own_file = IMAGES[name]
    s = Session(tmp_path, images.image(name), bundle, command)
    sessions.append(s)
    s.wait_for_sshd()
    hosts = s.plan.hostnames
    work = "%d:%d" % (s.plan.spec.user.uid, s.plan.spec.user.gid)
    # (each container's logins in one podman exec, and the checks of each container's files: a podman exec is ~0.25 s)
    for src in hosts:
        got = s.exec(src, "sh", "-c", "for h in %s; do echo '%s' $h; ssh -o BatchMode=yes -o ConnectTimeout=5 $h "
                     "'id -un; hostname; env'; echo '%s' $?; done" % (" ".join(hosts), MARK, MARK), user=work)
        assert got.returncode == 0, got.stderr
        logins = got.stdout.split(MARK + " ")[1:]
        assert len(logins) == 2 * len(hosts), got.stdout
        for dst, output, status in zip(hosts, logins[0::2], logins[1::2]):
            assert output.startswith(dst + "\n") and status.strip() == "0", "ssh %s -> %s: %s\n%s\n%s" % (
                src, dst, output, got.stderr, s.logs(src))
            lines = output.splitlines()[1:]
            assert lines[:2] == ["work", dst]
            login_env = dict(line.split("=", 1) for line in lines[2:] if "=" in line)
            for var in SEEDS:
                assert login_env.get(var) == s.env[dst][var], (var, login_env.get(var))
    # scp main1 -> sub1, home to home (the static image has no /tmp)
    home = s.exec(hosts[0], "sh", "-c", "echo hello > ~/f && scp -o BatchMode=yes ~/f %s:g && echo ~" % hosts[1], user=work)
    assert home.returncode == 0, home.stderr
    assert s.exec(hosts[1], "cat", home.stdout.strip() + "/g").stdout == "hello\n"
    # the command: PID 1 after the entrypoint's exec, as the session user, with every seed variable
    for host in hosts:
        status, _sep, environ_text = s.exec(host, "sh", "-c", "cat /proc/1/status; echo %s; cat /proc/1/environ" % MARK,
                                            user=work).stdout.partition(MARK + "\n")
        uids = [line.split()[1:] for line in status.splitlines() if line.startswith(("Uid:", "Gid:"))]
        assert uids == [["1000"] * 4, ["1000"] * 4], uids
        environ = dict(x.split("=", 1) for x in environ_text.split("\0") if "=" in x)
        for var in SESSION_VARIABLES:
            assert environ.get(var) == s.env[host][var], var
    # the image's files, not the host's; a resolver order that does not depend on DNS
    marker = "/var/tmp/baien-host-only-%s" % s.tag
    with open(marker, "w") as f:
        f.write("host\n")
    try:
        files = s.exec(hosts[0], "sh", "-c", "test -e %s; echo $?; test -e %s; echo $?; cat /etc/nsswitch.conf" % (
            own_file, marker)).stdout.split("\n", 2)
    finally:
        os.unlink(marker)
    assert files[:2] == ["0", "1"], files
    assert "hosts:" in files[2]


def test_an_image_with_user_1000_adopts_its_account_as_the_session_user(sessions: t.List[Session], tmp_path: t.Any,
                                                                        bundle: str) -> None:
    """The image's config says USER 1000 (jovyan): the task still starts as root (the job's task ``User``), and the
    account with the session's uid becomes ``work``, keeping its home and files (as Backend.AI renames it)."""
    s = Session(tmp_path, images.image("test-user1000"), bundle, ["sleep", "300"], size=1)
    sessions.append(s)
    s.wait_for_sshd()
    passwd = s.exec("main1", "cat", "/etc/passwd").stdout
    assert "work:x:1000:1000::/home/jovyan:/bin/bash" in passwd.splitlines(), passwd
    assert not [line for line in passwd.splitlines() if line.startswith("jovyan:")], passwd
    got = s.exec("main1", "ssh", "-o", "BatchMode=yes", "main1", "id -un; echo $HOME; ls -a", user="1000:1000")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[:2] == ["work", "/home/jovyan"]
    assert ".bashrc" in got.stdout.split()


def test_a_task_that_does_not_start_as_root_names_the_cause(sessions: t.List[Session], tmp_path: t.Any,
                                                            bundle: str) -> None:
    """Where a driver or client setting makes the task start as another user than the job's (root), the entrypoint
    exits 77 and says which uid it runs as and why that cannot work."""
    s = Session(tmp_path, images.image("test-debian"), bundle, ["sleep", "300"], size=1)
    sessions.append(s)
    images.podman("rm", "--force", "--time", "0", s.containers["main1"])
    group = s.job["TaskGroups"][0]
    group["Tasks"][0]["User"] = "1000"
    top = tmp_path / "main1"
    args = run_args(s.job, "main1", name=s.containers["main1"], netns_path="/run/netns/" + s.netns[1],
                    task_dir=str(top / "task"), alloc_dir=str(top / "alloc"), hosts_file=str(top / "hosts"),
                    host_volumes={RUNTIME_VOLUME: bundle}, core_mhz=1000.0)
    got = images.podman("run", *args, check=False, timeout=60)
    assert got.returncode == 77, got.stdout + got.stderr
    assert "runs as uid 1000" in got.stderr and "root" in got.stderr, got.stderr
