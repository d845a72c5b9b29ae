# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad job's entrypoint, run for real with OpenSSH in network namespaces, in several kinds of image.

No Nomad binary can run here, so this test plays the parts Nomad would: for each task group of a
rendered job it makes a network + mount + UTS namespace, renders the task's files the way its
templates would (the key pair into ``secrets/``, the peers file that ``nomadService`` would give
into ``local/``, the entrypoint from job Meta), interpolates ``${NOMAD_META_...}`` into the
group's Env, adds job Meta as ``NOMAD_META_<KEY>`` (client/taskenv/env.go, Builder.setAlloc), bind-mounts
the session runtime bundle read-only (built by the role's builder) where the group's host volume would be, and
starts the task's entrypoint (the driver config's, the bundle's busybox sh) as root. The "image" is either

* ``debian``: the host's own root (Debian: util-linux setpriv, useradd, PAM) with a private,
  writable /etc (overlayfs), /home, /root, /run, /var/log and /var/mail, so the host's files stay
  as they were; or
* ``busybox``: a chroot of busybox-static plus OpenSSH's sshd and ssh with their libraries, an
  /etc/passwd of root and sshd only: no useradd, no util-linux (busybox's setpriv cannot change ids,
  so the command switches with the bundle's setpriv); or
* ``bare``: static busybox alone (no libc, no sshd, no ssh); or ``debian-nossh``: the host's root with
  OpenSSH hidden (the bundle's sshd, ssh and scp are used); or
* ``distroless``: nothing but the user's command, a static ELF of 159 bytes made here (no shell, no libc, no
  /etc but the hosts file the container runtime adds, no accounts): everything else comes from the bundle.

Then it checks the seeds' promises (``ssh sub1 hostname`` from main1 with no prompt, every pair, each
ssh shell carrying its container's variables) and the session user's: logins and the command run as
the user, never root. Last, a container moves to a new address (as a replaced allocation does): the
peers file is rendered again and the peers template's change script runs in every task, as Nomad's
``change_mode = "script"`` would, and ``ssh sub2`` works again from every peer. Everything it makes (namespaces, veths, bridge, processes, mounts: they live in
the containers' mount namespaces) is gone at the end.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import shlex
import shutil
import signal
import subprocess
import time
import typing as t
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    ENTRYPOINT_META_KEY,
    LOCAL_SUBDIR,
    RUNTIME_MOUNT,
    RUNTIME_VERSION,
    render_job,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import generate_keypair
from repo_helpers import REPO

META_REF = re.compile(r"\$\{NOMAD_META_([A-Za-z0-9_]+)\}")
TOOLS = ("ip", "unshare", "nsenter", "ssh", "chroot", "ldd")
BUSYBOX = "/bin/busybox"  # Debian's busybox-static (scripts/setup installs it)
BUNDLER = os.path.join(REPO, "collections/ansible_collections/backendai/cluster/roles/overlay_agent/files/backendai-runtime-bundle")

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/sbin/sshd") or not all(shutil.which(x) for x in TOOLS),
    reason="needs root, iproute2, util-linux and OpenSSH (scripts/setup installs them)")
pytestmark = [pytest.mark.machine, needs_root]


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


#: A static x86-64 program that writes "hello" and then waits for signals (pause(2) in a loop): the only file
#: of the ``distroless`` image. Code: write(1, msg, 6); loop: pause(); jmp loop; msg: "hello\n".
HELLO_CODE = bytes.fromhex("b801000000" "bf01000000" "488d3510000000" "ba06000000" "0f05" "b822000000" "0f05" "ebf7") + b"hello\n"


def _hello_elf() -> bytes:
    """HELLO_CODE as an ELF executable: the ELF header, one PT_LOAD program header (read + execute) mapping the
    whole file at 0x400000, the code right after them."""
    base, headers = 0x400000, 64 + 56
    size = headers + len(HELLO_CODE)
    ehdr = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, 0x3E, 1, base + headers, 64, 0, 0,
                       64, 56, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    return ehdr + phdr + HELLO_CODE


def _distroless_root(root: t.Any) -> None:
    """An image with nothing but its command (/hello); the mount points the container runtime makes (/dev, /proc,
    /run, /etc with the hosts file it adds) and the bundle's mount point."""
    root.mkdir(parents=True)
    (root / "hello").write_bytes(_hello_elf())
    os.chmod(root / "hello", 0o755)
    for d in ("dev", "proc", "run", "etc", RUNTIME_MOUNT.lstrip("/")):
        (root / d).mkdir(parents=True, exist_ok=True)


def _busybox_root(root: t.Any, accounts: str = "", openssh: bool = True) -> None:
    """A minimal image: busybox applets, sshd and ssh with the shared libraries they load, the account files
    of an image that installed OpenSSH (root and sshd), an empty sshd_config (sshd needs the file). Without
    ``openssh``: static busybox alone (no libc, no loader, no sshd, no ssh) and root's account."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for applet in sh(BUSYBOX, "--list").stdout.split():
        if applet != "busybox":
            os.symlink("busybox", root / "bin" / applet)
    libs = set()
    for binary in ("/usr/sbin/sshd", "/usr/bin/ssh") if openssh else ():
        (root / binary.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, root / binary.lstrip("/"))
        libs |= {w for w in sh("ldd", binary).stdout.split() if w.startswith("/")}
    for lib in libs:
        (root / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), root / lib.lstrip("/"))
    for d in (("etc/ssh",) if openssh else ("etc",)) + ("dev", "proc", "tmp", "run", "root", RUNTIME_MOUNT.lstrip("/")):
        (root / d).mkdir(parents=True, exist_ok=True)
    sshd_account = "sshd:x:100:65534::/run/sshd:/bin/false\n" if openssh else ""
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n" + sshd_account + accounts)
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    if openssh:
        (root / "etc/ssh/sshd_config").write_text("# the image's sshd_config\n")
    else:
        assert not list(root.glob("lib*")) and not list(root.glob("usr/lib*")) and not list(root.glob("**/ssh*"))
    assert not (root / "bin/useradd").exists() and not (root / "usr/sbin/useradd").exists()


class Session:
    """The containers of one rendered job, started by their entrypoint in the given kind of image."""

    def __init__(self, namespaces: Namespaces, tmp_path: t.Any, image: str, spec: t.Dict[str, t.Any],
                 bundle: t.Optional[str], accounts: str = "", wait: bool = True) -> None:
        """``image``: debian, busybox (both with OpenSSH), bare (static busybox alone), debian-nossh (the host's
        root with sshd, ssh and scp hidden) or distroless (the command alone); ``bundle``: the runtime bundle to
        bind-mount read-only at RUNTIME_MOUNT, as the task's host volume would be (None: an empty mount point)."""
        self.keys = generate_keypair()
        self.plan = plan_session(parse_spec(spec), [{"name": "agent-1", "cpu": 9000, "memory": 9000}], public_key=self.keys.public_key)
        self.job = render_job(self.plan)
        self.namespaces, self.image = namespaces, image
        self.pids: t.Dict[str, int] = {}
        self.ns: t.Dict[str, str] = {}
        self.roots: t.Dict[str, t.Any] = {}
        self.task_env: t.Dict[str, t.Dict[str, str]] = {}
        tag = namespaces.tag
        hub = namespaces.add(namespaces.hub) if namespaces.hub not in namespaces.netns else namespaces.hub
        sh("ip", "netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", hub, "ip", "link", "set", "br0", "up")
        self.addresses = {c.hostname: "10.250.%d.%d" % (int(tag[:2], 16), 10 + c.rank) for c in self.plan.containers}
        peers = "".join("%s %s\n" % (self.addresses[h], h) for h in self.plan.hostnames)  # what nomadService renders
        meta = self.job["Meta"]
        for group, container in zip(self.job["TaskGroups"], self.plan.containers):
            host = container.hostname
            ns = self.ns[host] = namespaces.add("baiep%s-%s" % (tag, host))
            inner, outer = "eth0", "v%s%d" % (tag, container.rank)
            sh("ip", "link", "add", outer, "netns", hub, "type", "veth", "peer", "name", inner, "netns", ns)
            sh("ip", "netns", "exec", hub, "ip", "link", "set", outer, "master", "br0", "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", self.addresses[host] + "/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            top = tmp_path / host
            chroot = image in ("busybox", "bare", "distroless")
            root = self.roots[host] = top / "rootfs" if chroot else top
            if image == "distroless":
                _distroless_root(root)
            elif chroot:
                _busybox_root(root, accounts, openssh=image == "busybox")
            for sub in ("secrets/backendai", "local/backendai", "roothome", "etc-upper", "etc-work"):
                (root / sub).mkdir(parents=True, exist_ok=True)
            (root / "secrets/backendai/id").write_text(self.keys.private_key)
            os.chmod(root / "secrets/backendai/id", 0o600)
            (root / "secrets/backendai/id.pub").write_text(self.keys.public_key + "\n")
            (root / "local/backendai/peers").write_text(peers)
            (root / "local/backendai/entrypoint.sh").write_text(meta[ENTRYPOINT_META_KEY])
            (root / "hosts").write_text("127.0.0.1 localhost\n")
            os.chmod(root / "roothome", 0o700)
            task = group["Tasks"][0]
            env = {k: META_REF.sub(lambda m: meta[m.group(1)], v) for k, v in task["Env"].items()}
            env.update({"NOMAD_META_" + k.upper(): v for k, v in meta.items()})
            env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", HOME="/root")
            args = " ".join(shlex.quote(a) for a in task["Config"].get("args", []))
            shell, entrypoint = task["Config"]["entrypoint"]  # the bundle's sh and the rendered entrypoint
            if chroot:
                runtime = "mount -o bind,ro {b} {r}{m} && " if bundle else ""
                env.update(NOMAD_SECRETS_DIR="/secrets", NOMAD_TASK_DIR="/local")
                script = ("hostname {h} && mount --bind {r}/hosts {r}/etc/hosts 2>/dev/null || cp {r}/hosts {r}/etc/hosts; "
                          "mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc && mount -t tmpfs tmpfs {r}/run && "
                          + runtime + "exec chroot {r} {s} {e} {a}")
            else:
                env.update(NOMAD_SECRETS_DIR=str(root / "secrets"), NOMAD_TASK_DIR=str(root / "local"))
                # The container: its own hostname, a writable /etc over the host's, its own /etc/hosts, /root,
                # /home, /run, /var/log and /var/mail (useradd writes lastlog/faillog and may make a mail spool).
                # /opt of the host is not the image's: a fresh one with the bundle's mount point
                runtime = "mount -t tmpfs tmpfs /opt && mkdir -p {m} && " + ("mount -o bind,ro {b} {m} && " if bundle else "")
                if image == "debian-nossh":  # sshd, ssh, scp hidden by overlayfs whiteouts (char device 0:0)
                    for d, names in (("usr/sbin", ("sshd",)), ("usr/bin", ("ssh", "scp"))):
                        upper, work = top / ("hide-" + d.replace("/", "-")), top / ("hide-work-" + d.replace("/", "-"))
                        upper.mkdir()
                        work.mkdir()
                        for name in names:
                            os.mknod(upper / name, stat.S_IFCHR, os.makedev(0, 0))
                        runtime += "mount -t overlay overlay -o lowerdir=/%s,upperdir=%s,workdir=%s /%s && " % (
                            d, shlex.quote(str(upper)), shlex.quote(str(work)), d)
                script = ("hostname {h} && mount -t overlay overlay -o lowerdir=/etc,upperdir={r}/etc-upper,"
                          "workdir={r}/etc-work /etc && mount --bind {r}/hosts /etc/hosts && mount --bind {r}/roothome /root "
                          "&& for d in /home /run /var/log /var/mail; do mount -t tmpfs tmpfs $d || exit 1; done && "
                          + runtime + "exec {s} {r}{e} {a}")
            script = script.format(h=host, r=shlex.quote(str(root)), a=args, b=shlex.quote(bundle or ""), m=RUNTIME_MOUNT,
                                   s=shlex.quote(shell), e=shlex.quote(entrypoint))
            self.task_env[host] = env
            self.started = time.monotonic()  # (the last container's start: benchmarks/runtime_bundle.py)
            proc = subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
                                     "sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            namespaces.procs.append(proc)
            self.pids[host] = proc.pid
        if wait:
            self.wait_for_sshd()

    def wait_for_sshd(self) -> None:
        deadline = time.monotonic() + 30
        for host, addr in self.addresses.items():
            while True:
                probe = sh("ip", "netns", "exec", self.ns["main1"], "bash", "-c", "exec 3<>/dev/tcp/%s/2200" % addr,
                           check=False)
                if probe.returncode == 0:
                    break
                for proc in self.namespaces.procs:
                    assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "sshd of %s never listened" % host
                time.sleep(0.1)

    def run(self, host: str, *cmd: str, user: t.Optional[t.Tuple[int, int]] = None) -> subprocess.CompletedProcess:
        """A command in the container (its root too: the chroot), as root or as ``user`` (uid, gid)."""
        ids = ["-S", str(user[0]), "-G", str(user[1])] if user else []
        return sh("nsenter", "-t", str(self.pids[host]), "-m", "-u", "-n", "-r", *ids, *cmd, check=False)

    def sshd_programs(self, host: str) -> t.Set[str]:
        """Which sshd binaries the container's processes run, named by their path in the container: read from the
        files mapped into each process (/proc/<pid>/maps; argv and exe would show the bundle's loader)."""
        out = set()
        for pid in sh("ip", "netns", "pids", self.ns[host]).stdout.split():
            try:
                with open("/proc/%s/maps" % pid, encoding="utf-8") as f:
                    mapped = {line.split()[-1] for line in f if line.rstrip().endswith("sshd")}
            except FileNotFoundError:
                continue
            out |= {RUNTIME_MOUNT + "/real/sshd" if m.endswith("/real/sshd") else "/usr/sbin/sshd" for m in mapped
                    if m.endswith(("/real/sshd", "/usr/sbin/sshd"))}
        return out

    def command_ids(self, host: str, argv0: str) -> t.List[t.List[str]]:
        """Uid and Gid lines of /proc/<pid>/status of the container's processes running ``argv0``."""
        out = []
        for pid in sh("ip", "netns", "pids", self.ns[host]).stdout.split():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if f.read().split(b"\0")[0] != argv0.encode():
                        continue
                with open("/proc/%s/status" % pid, encoding="utf-8") as f:
                    out += [line.split() for line in f if line.startswith(("Uid:", "Gid:"))]
            except FileNotFoundError:
                continue
        return out


IMAGES = ("debian", "busybox", "distroless")
SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> t.Dict[str, str]:
    """The session runtime bundle built by the role's builder from this host's packages (the job's version), and
    one of another version (an agent the role has not updated)."""
    if not os.path.exists(BUSYBOX):
        pytest.skip("needs busybox-static (scripts/setup installs it)")
    dest = tmp_path_factory.mktemp("runtime")
    out = {}
    for version in (RUNTIME_VERSION, "0"):
        got = sh("/usr/bin/python3", "-IS", BUNDLER, version, str(dest))
        assert got.stdout.strip() == "changed", got.stderr
        out[version] = os.path.realpath(dest / version)
    assert sh("/usr/bin/python3", "-IS", BUNDLER, RUNTIME_VERSION, str(dest)).stdout.strip() == "unchanged"  # the same packages: nothing to do
    return out


@pytest.fixture(params=IMAGES)
def image(request: pytest.FixtureRequest) -> str:
    if request.param != "debian" and not os.path.exists(BUSYBOX):
        pytest.skip("needs busybox-static (scripts/setup installs it)")
    return t.cast(str, request.param)


def _in(*cmd: str) -> t.Tuple[str, ...]:
    """A command run in a container the way a user's shell there would: the image's PATH, then the bundle's bin
    (``env`` is the bundle's: the distroless image has none)."""
    return (RUNTIME_MOUNT + "/bin/env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin:%s/bin" % RUNTIME_MOUNT) + cmd


def _command(image: str, seconds: int = 300) -> t.List[str]:
    """The user's command: sleep, or in the distroless image its only program (which waits too)."""
    return ["/hello"] if image == "distroless" else ["sleep", str(seconds)]


def test_entrypoint_gives_passwordless_ssh_and_the_seed_env(namespaces: Namespaces, tmp_path: t.Any, image: str,
                                                            bundles: t.Dict[str, str]) -> None:
    spec = {"name": "ep-test", "image": "unused", "cluster_size": 3, "command": _command(image)}
    s = Session(namespaces, tmp_path, image, spec, bundles[RUNTIME_VERSION])
    work = (1000, 1000)
    got = s.run("main1", *_in(*SSH, "sub1", "hostname"), user=work)
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    pairs = [(src, dst) for src in s.plan.hostnames for dst in s.plan.hostnames]
    with ThreadPoolExecutor(len(pairs)) as pool:  # every container reaches every other and itself, by name (all at once)
        logins = list(pool.map(lambda pair: s.run(pair[0], *_in(*SSH, pair[1], "cat /proc/sys/kernel/hostname"), user=work),
                               pairs))
        shells = list(pool.map(lambda c: s.run("main1", *_in(*SSH, c.hostname, "env"), user=work), s.plan.containers))
    for (src, dst), got in zip(pairs, logins):
        assert (got.returncode, got.stdout.strip()) == (0, dst), (src, dst, got.stderr)
    for container, got in zip(s.plan.containers, shells):  # an ssh shell has the container's variables
        shell_env = dict(line.split("=", 1) for line in got.stdout.splitlines() if "=" in line)
        expected = container_env(s.plan, container)
        assert {k: shell_env.get(k) for k in expected} == expected
    getent = s.run("sub2", "getent", "hosts", "main1") if image == "debian" else s.run("sub2", *_in("cat", "/etc/hosts"))
    assert s.addresses["main1"] in getent.stdout.split()  # MASTER_ADDR resolves

    # sub2 is replaced: its new allocation has a new address. Its peers' /etc/hosts still name the old one ...
    old, new = s.addresses["sub2"], s.addresses["sub2"].rsplit(".", 1)[0] + ".200"
    sh("ip", "netns", "exec", s.ns["sub2"], "ip", "addr", "del", old + "/24", "dev", "eth0")
    sh("ip", "netns", "exec", s.ns["sub2"], "ip", "addr", "add", new + "/24", "dev", "eth0")
    # (the old address answers no ARP: the connect waits for its timeout; a connect on this bridge takes milliseconds)
    quick = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=1")
    assert s.run("main1", *_in(*quick, "sub2", "hostname"), user=work).returncode != 0
    # ... until Nomad renders the peers template again and runs its change script in each task, with the task's
    # environment (the task dir is /local in a Nomad task and in the chroots, root/local in the debian one)
    moved = "".join("%s %s\n" % (new if h == "sub2" else s.addresses[h], h) for h in s.plan.hostnames)
    for group in s.job["TaskGroups"]:
        host, root = group["Name"], s.roots[group["Name"]]
        (root / "local/backendai/peers").write_text(moved)
        change = next(x for x in group["Tasks"][0]["Templates"] if x["DestPath"] == LOCAL_SUBDIR + "/peers")["ChangeScript"]
        argv = [change["Command"]] + change.get("Args", [])
        if image == "debian":
            argv = [a.replace("/local/", str(root / "local") + "/", 1) for a in argv]
        got = s.run(host, RUNTIME_MOUNT + "/bin/env", "-i", *["%s=%s" % kv for kv in s.task_env[host].items()], *argv)
        assert got.returncode == 0, got.stderr
    with ThreadPoolExecutor(len(s.plan.hostnames)) as pool:
        logins = list(pool.map(lambda src: s.run(src, *_in(*SSH, "sub2", "cat /proc/sys/kernel/hostname"), user=work),
                               s.plan.hostnames))
    for src, got in zip(s.plan.hostnames, logins):
        assert (got.returncode, got.stdout.strip()) == (0, "sub2"), (src, got.stderr)
        hosts = s.run(src, *_in("cat", "/etc/hosts")).stdout
        assert hosts.count(" sub2") == 1 and hosts.startswith("127.0.0.1 localhost\n"), hosts


def test_logins_and_the_command_run_as_the_user_and_root_is_refused(namespaces: Namespaces, tmp_path: t.Any,
                                                                    image: str, bundles: t.Dict[str, str]) -> None:
    spec = {"name": "ep-user", "image": "unused", "cluster_size": 2, "command": _command(image),
            "user": {"name": "alice", "uid": 4242, "gid": 4343}}
    s = Session(namespaces, tmp_path, image, spec, bundles[RUNTIME_VERSION])
    alice = (4242, 4343)
    got = s.run("main1", *_in(*SSH, "sub1", "id -un; id -u; id -gn; id -g; echo $HOME; ls -ld ~/.ssh ~/.ssh/id_backendai"),
                user=alice)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[:5] == ["alice", "4242", "alice", "4343", "/home/alice"], got.stdout
    assert [line.split()[0] + " " + line.split()[2] for line in lines[5:]] == ["drwx------ alice", "-rw------- alice"]
    # the batch command runs with the user's ids, in every container
    for host in s.plan.hostnames:
        assert s.command_ids(host, spec["command"][0]) == [["Uid:"] + ["4242"] * 4, ["Gid:"] + ["4343"] * 4], host
    # root is refused by sshd even when root's own home authorizes the session key (PermitRootLogin no) ...
    planted = s.run("sub1", *_in("sh", "-c", "mkdir -p -m 700 /root/.ssh && cp /home/alice/.ssh/authorized_keys /root/.ssh/"))
    assert planted.returncode == 0, planted.stderr
    root = s.run("main1", *_in(*SSH, "-i", "/home/alice/.ssh/id_backendai", "-l", "root", "sub1", "id -un"), user=alice)
    assert root.returncode == 255 and "Permission denied" in root.stderr and root.stdout == "", root.stderr
    # ... and so is any account but the user (AllowUsers)
    other = s.run("main1", *_in(*SSH, "-l", "sshd", "sub1", "id -un"), user=alice)
    assert other.returncode == 255 and "Permission denied" in other.stderr, other.stderr


def test_an_image_that_has_the_user_keeps_its_account_and_home(namespaces: Namespaces, tmp_path: t.Any,
                                                               bundles: t.Dict[str, str]) -> None:
    spec = {"name": "ep-own", "image": "unused", "cluster_size": 2, "command": ["sleep", "300"]}
    s = Session(namespaces, tmp_path, "busybox", spec, bundles[RUNTIME_VERSION],
                accounts="work:x:1000:1000:the image's:/workspace:/bin/sh\n")
    got = s.run("main1", *_in(*SSH, "sub1", "id -un; echo $HOME; ls -a ~/.ssh | grep -c authorized_keys"), user=(1000, 1000))
    assert got.stdout.split() == ["work", "/workspace", "1"], got.stderr
    assert (s.roots["sub1"] / "etc/passwd").read_text().count("work:") == 1


@pytest.mark.parametrize("kind", ["bare", "debian-nossh", "distroless"])
def test_an_image_without_openssh_runs_the_bundles(namespaces: Namespaces, tmp_path: t.Any, bundles: t.Dict[str, str],
                                                   kind: str) -> None:
    """Static busybox alone (no libc, no loader), glibc without OpenSSH, or no shell and no libc at all: sshd, ssh
    and scp come from the bundle mounted read-only; ssh works from the container and from an ssh login (mpirun's
    launcher), as the user."""
    spec = {"name": "ep-bundle", "image": "unused", "cluster_size": 3, "command": _command(kind)}
    s = Session(namespaces, tmp_path, kind, spec, bundles[RUNTIME_VERSION])
    work = (1000, 1000)
    image_path = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"  # the image has none
    assert s.run("main1", RUNTIME_MOUNT + "/bin/env", image_path, RUNTIME_MOUNT + "/bin/sh", "-c",
                 "command -v ssh || ls /usr/sbin/sshd").returncode != 0
    if kind == "distroless":  # nor any shell, library or tool
        assert not [p for p in ("bin", "sbin", "lib", "lib64", "usr") if (s.roots["main1"] / p).exists()]
    got = s.run("main1", *_in(*SSH, "sub1", "hostname; id -un"), user=work)
    assert (got.returncode, got.stdout.split()) == (0, ["sub1", "work"]), got.stderr
    for host in s.plan.hostnames:
        assert s.sshd_programs(host) == {RUNTIME_MOUNT + "/real/sshd"}, host
    # a login finds ssh (~/.ssh/environment PATH): what mpirun's ssh launcher runs on each node
    got = s.run("main1", *_in(*SSH, "sub1", "ssh -o BatchMode=yes sub2 hostname"), user=work)
    assert (got.returncode, got.stdout.strip()) == (0, "sub2"), got.stderr
    got = s.run("main1", *_in("sh", "-c", "cd /home/work && echo payload > f && scp -q f sub2:g && ssh sub2 cat g"), user=work)
    assert (got.returncode, got.stdout.strip()) == (0, "payload"), got.stderr
    # the command runs as the user
    for host in s.plan.hostnames:
        assert s.command_ids(host, spec["command"][0]) == [["Uid:"] + ["1000"] * 4, ["Gid:"] + ["1000"] * 4], host


def test_the_images_own_openssh_is_preferred(namespaces: Namespaces, tmp_path: t.Any, bundles: t.Dict[str, str]) -> None:
    spec = {"name": "ep-own-ssh", "image": "unused", "cluster_size": 2, "command": ["sleep", "300"]}
    s = Session(namespaces, tmp_path, "busybox", spec, bundles[RUNTIME_VERSION])
    got = s.run("main1", *_in(*SSH, "sub1", "hostname"), user=(1000, 1000))
    assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
    for host in s.plan.hostnames:
        assert s.sshd_programs(host) == {"/usr/sbin/sshd"}, host


@pytest.mark.parametrize("bundle,code,reason", [
    # the host volume's directory empty (Nomad places no group where the volume is not declared): the driver cannot
    # exec the task's entrypoint, and says which file is missing
    (None, 127, "%s/bin/sh" % RUNTIME_MOUNT),
    ("0", 78, "the session runtime bundle at %s is version 0, this job needs %s" % (RUNTIME_MOUNT, RUNTIME_VERSION)),
])
def test_no_sshd_and_no_usable_bundle_fails_with_the_reason(namespaces: Namespaces, tmp_path: t.Any,
                                                            bundles: t.Dict[str, str], bundle: t.Optional[str],
                                                            code: int, reason: str) -> None:
    spec = {"name": "ep-nobundle", "image": "unused", "cluster_size": 2, "command": ["sleep", "300"]}
    s = Session(namespaces, tmp_path, "bare", spec, bundles[bundle] if bundle else None, wait=False)
    for proc in namespaces.procs:
        out = proc.communicate(timeout=20)[0].decode()
        assert proc.returncode == code and reason in out, out
    assert s.pids
