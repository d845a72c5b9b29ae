"""Fixtures for the local runtime tests: they bring real sessions up (engine containers of images built here, in
network namespaces the session network's CNI plugin makes), so they need root, podman with the images
``scripts/setup`` builds, the session runtime bundle, containernetworking-plugins, openssh-client, iproute2 and
iptables."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import uuid
from typing import Any, Callable, Iterator

import pytest

import images  # tests/support/images.py: the images built here (scripts/build-images)
import leaks  # tests/support/leaks.py: the one leak check
import local_session_dict  # tests/support/local_session_dict.py: a session given as a dict, brought up by the runtime
from machine_lock import machine_lock  # tests/support/machine_lock.py: the suite's lock for what changes this machine

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._local import runtime as rt  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job  # noqa: E402
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env  # noqa: E402


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "local runtime tests need root (network namespaces, bridges, iptables)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen (openssh-client) is not installed"
    try:
        rt._check_environment()
    except rt.LocalRuntimeError as e:
        return "local runtime prerequisites missing: %s" % e.message
    if images.engine_missing():
        return images.engine_missing()
    if not os.path.isfile(os.path.join(nomad_job.RUNTIME_DIR, "VERSION")):
        return "the session runtime bundle is not at %s (scripts/setup makes it)" % nomad_job.RUNTIME_DIR
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here but the ``no_root`` ones changes this machine: marked ``machine`` (it holds the suite's
    machine lock, tests/support/machine_lock.py), and skipped without root and the runtime's prerequisites."""
    reason = _skip_reason()
    for item in items:
        if "local_runtime" in str(item.fspath) and "no_root" not in item.keywords:
            item.add_marker(pytest.mark.machine)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return new_keypair(str(tmp_path_factory.mktemp("key")))


def make_session(name: str, keypair: tuple[str, str], size: int = 3, command: list[str] | None = None,
                 mounts: list[dict[str, Any]] | None = None, port: int = 2200,
                 user: dict[str, Any] | None = None, resources: dict[str, int] | None = None,
                 image: str | None = None) -> dict[str, Any]:
    """A single-node session as a dict (``tests/support/local_session_dict.py``): engine containers of ``image`` (default: the
    example image), every container's ``env`` the one its Nomad task gets (with the user variable ``TRICKY``),
    ``resources`` every container's cpu MHz and memory MB (the spec's defaults when not given)."""
    sid = str(uuid.uuid4())
    hosts = ["main1"] + ["sub%d" % i for i in range(1, size)]
    containers = []
    for rank, host in enumerate(hosts):
        role, idx = ("main", 1) if rank == 0 else ("sub", rank)
        containers.append({"hostname": host, "role": role, "idx": idx, "agent": "local",
                           "command": list(command or []), "publish": rank == 0})
        if resources:
            containers[-1]["resources"] = dict(resources)
    session = {"name": name, "session_id": sid, "image": image or local_session_dict.DEFAULT_IMAGE,
               "env": {"TRICKY": "a b \"c\" 'd' # e \\ f $HOME %h"}, "containers": containers,
               "ssh": {"port": port, "key_type": "ed25519", "private_key": keypair[0], "public_key": keypair[1]},
               "mounts": list(mounts or []), **({"user": user} if user else {})}
    plan = local_session_dict.plan_of(session)
    for c, planned in zip(containers, plan.containers):
        c["env"] = container_env(plan, planned)
    return session


#: A TCP connect from inside a namespace: ``python -c PROBE ADDRESS PORT`` prints "open" or "closed ...".
PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(1.5)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except OSError as e:
    print("closed", e)
"""


# ------------------------------------------------------------------ host snapshots
# The one leak check of the repository (tests/support/leaks.py): a snapshot before, what the sessions made
# (recorded from their state directories), and everything that changed on the machine since.

def host_snapshot() -> leaks.LeakCheck:
    return leaks.LeakCheck()


def assert_clean(before: leaks.LeakCheck, state_root: str, sessions: list[dict[str, Any]]) -> None:
    """Nothing of the sessions is left (their state directories, processes tagged with the state root, and
    anything that appeared or changed on the machine since ``before``)."""
    before.record(state_root, [s["name"] for s in sessions])
    before.assert_clean()


# ------------------------------------------------------------------ state roots
# Each run of the suite keeps its state roots under RUNS_DIR/run-*, flock'ed while it runs;
# a run that was killed (its lock is free) is cleaned up by the next one.

RUNS_DIR = "/tmp/backendai-cluster-local-tests"
AGENTS_PREFIX = "agents-"  # state roots of local agents (see test_local_multinode.py)
#: The tests mount directories of pytest's tmp_path (the runtime mounts only from its mount roots).
MOUNT_ROOTS = (tempfile.gettempdir(),)


def _sweep_stale_runs() -> None:
    for entry in sorted(os.listdir(RUNS_DIR)):
        if entry.startswith("run-"):  # (new-* are being set up, see run_dir)
            with contextlib.suppress(FileNotFoundError):  # another run swept it first
                _sweep(os.path.join(RUNS_DIR, entry))


def _sweep(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        roots = sorted(r for r in os.listdir(path) if os.path.isdir(os.path.join(path, r)))  # (a test's files too)
        for root in roots:
            if root.startswith(AGENTS_PREFIX):
                continue
            for s in rt.list_sessions(os.path.join(path, root)):
                with contextlib.suppress(rt.LocalRuntimeError):
                    rt.destroy_session(s["name"], os.path.join(path, root))
        for root in roots:  # local agents, after the sessions on them
            if root.startswith(AGENTS_PREFIX):
                for fabric in os.listdir(os.path.join(path, root)):
                    with contextlib.suppress(rt.LocalRuntimeError):
                        local_agents.destroy_agents(os.path.join(path, root), fabric, force=True)
        shutil.rmtree(path, ignore_errors=True)
    except BlockingIOError:
        pass  # a live run
    finally:
        os.close(fd)


@pytest.fixture(scope="session")
def run_dir() -> Iterator[str]:
    if _skip_reason() is None:  # the image the sessions of the tests run (built once, kept while its recipe matches)
        images.image("example")
    while True:  # another run may remove RUNS_DIR when it ends
        os.makedirs(RUNS_DIR, mode=0o700, exist_ok=True)
        try:
            _sweep_stale_runs()
            new = tempfile.mkdtemp(prefix="new-", dir=RUNS_DIR)
            break
        except FileNotFoundError:
            continue
    fd = os.open(new, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    path = os.path.join(RUNS_DIR, "run-" + os.path.basename(new)[4:])
    os.rename(new, path)  # only locked run dirs are ever named run-*
    try:
        yield path
    finally:
        os.close(fd)
        _sweep_stale_runs()  # ours, now unlocked: destroys whatever a failed test left
        with contextlib.suppress(OSError):
            os.rmdir(RUNS_DIR)


@pytest.fixture
def state_root(run_dir: str) -> str:
    return os.path.join(run_dir, uuid.uuid4().hex[:8])


@pytest.fixture
def sessions(state_root: str, keypair: tuple[str, str]) -> Iterator[Callable[..., dict[str, Any]]]:
    """Create sessions with ``sessions(name, **kw)``; on teardown every one is destroyed and
    the host is checked to hold nothing of them."""
    before = host_snapshot()
    made: list[dict[str, Any]] = []

    def create(name: str, **kw: Any) -> dict[str, Any]:
        """``keypair=`` gives the session a keypair of its own (default: the one of the test run)."""
        session = make_session(name, kw.pop("keypair", None) or keypair, **kw)
        made.append(session)
        result = local_session_dict.create_session(session, state_root, MOUNT_ROOTS)
        return dict(result, spec=session)

    yield create
    before.record(state_root, [s["name"] for s in made])  # what they made, while it is there
    for session in made:
        rt.destroy_session(session["name"], state_root)
    assert_clean(before, state_root, made)


@contextlib.contextmanager
def module_session(run_dir: str, keypair: tuple[str, str], name: str, **kw: Any) -> Iterator[dict[str, Any]]:
    """A session that the tests of a module share (``make_session``'s arguments), in a state root of its own; at the
    end it is destroyed and nothing it made may be left. Its leak check is the record's (what it made, read from its
    state before the destroy), not a diff of the machine: between its tests the machine lock is free and other runs
    change the machine."""
    root = os.path.join(run_dir, "m-" + uuid.uuid4().hex[:8])
    session = make_session(name, keypair, **kw)
    try:
        yield dict(local_session_dict.create_session(session, root, MOUNT_ROOTS), spec=session)
    finally:
        made = leaks.record(root, [name])
        rt.destroy_session(name, root)
        assert leaks.leaks(None, made) == []


@pytest.fixture(scope="session")
def example_session(run_dir: str, keypair: tuple[str, str]) -> Iterator[dict[str, Any]]:
    """One interactive session of the example image (main1, sub1, sub2; ``make_session``'s defaults) for every test that
    only looks at a running session or works inside it and leaves it as it found it (the create's result, with its
    ``spec``): made once in a run, where a session of a test's own costs a bring-up and a teardown of several seconds.
    A test that kills, stops or changes a container makes a session of its own (``sessions``). It lives through the
    run, so a test's leak check (a snapshot before and after) sees it in both; its own is the record's, at the end of
    the run (under the machine lock: the run's last test need not be a machine test)."""
    made = module_session(run_dir, keypair, "example")
    result = made.__enter__()  # in the setup of the first machine test that asks for it, under its lock
    try:
        yield result
    finally:
        with machine_lock():
            made.__exit__(None, None, None)


def ssh(result: dict[str, Any], host: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a command in a container through the session's user-facing ssh_config."""
    return subprocess.run(["ssh", "-F", result["ssh_config"], host, command], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)


_CREATOR = """
import json, sys
sys.path[:0] = [%r, %r, %r]
from local_session_dict import create_session
if %r:
    import faults
    faults.inject("kill", %r)
create_session(json.load(sys.stdin), %r, %r)
"""


def start_creator(session: dict[str, Any], state_root: str, kill: str = "") -> subprocess.Popen[bytes]:
    """create_session() in a process of its own, fed the session on stdin.

    ``kill`` = ``records:N`` makes the process SIGKILL itself at journal record N (``faults.inject``, installed in
    it before the runtime starts); ``after:SECONDS`` SIGKILLs it from here after that delay. The caller waits for
    the process.
    """
    how, _sep, arg = kill.partition(":")
    records = int(arg) if how == "records" else -1
    here = os.path.dirname(os.path.abspath(__file__))
    script = _CREATOR % (COLLECTIONS, here, os.path.join(os.path.dirname(here), "support"), how == "records", records, state_root, MOUNT_ROOTS)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(session).encode())
    proc.stdin.close()
    if how == "after":
        time.sleep(float(arg))
        proc.send_signal(signal.SIGKILL)
    return proc


@pytest.fixture(scope="session")
def helpers() -> types.SimpleNamespace:
    """This file's helpers, for the tests (a second ``conftest`` module cannot be imported by name)."""
    return types.SimpleNamespace(collections=COLLECTIONS, make_session=make_session, host_snapshot=host_snapshot,
                                 assert_clean=assert_clean, ssh=ssh, module_session=module_session, start_creator=start_creator, new_keypair=new_keypair,
                                 MOUNT_ROOTS=MOUNT_ROOTS)


def new_keypair(directory: str) -> tuple[str, str]:
    """A keypair of its own (private, public), made in ``directory``."""
    key = os.path.join(directory, "id_%s" % uuid.uuid4().hex[:8])
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "backendai-cluster", "-f", key], check=True)
    with open(key, encoding="ascii") as f, open(key + ".pub", encoding="ascii") as g:
        return f.read(), g.read()
