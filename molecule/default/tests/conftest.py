# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the verify step: the session converge made, its containers as testinfra hosts.

The spec and the state directory are the scenario's inventory variables (molecule.yml), read
with testinfra's Ansible runner. Containers are entered the way users enter them:
``ssh -F <state>/<name>/ssh_config main1`` (the subs through main1, by the config's ProxyJump).
Expected values are computed here from the spec and the seed tables, never by the collection.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import typing as t
from concurrent.futures import ThreadPoolExecutor

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

SCENARIO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.dirname(os.path.dirname(SCENARIO_DIR))
VENV_BIN = os.path.dirname(sys.executable)
sys.path.insert(0, SCENARIO_DIR)

import leftovers  # noqa: E402  (molecule/default/leftovers.py, also used by destroy.yml)

#: The Python inside a container (the host's Debian one; a root shell's PATH may start with pyenv shims).
PY = "/usr/bin/python3"


@functools.lru_cache(maxsize=None)
def scenario_vars() -> t.Dict[str, t.Any]:
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        pytest.exit("run these tests with `molecule verify` (MOLECULE_INVENTORY_FILE is not set)", returncode=2)
    return AnsibleRunner(inventory).get_variables("localhost")


def hostnames(spec: t.Mapping[str, t.Any]) -> t.List[str]:
    """The seeds: main1, then sub1, sub2, ... up to the cluster size."""
    return ["main1"] + ["sub%d" % i for i in range(1, int(spec["cluster_size"]))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hostname" in metafunc.fixturenames:
        metafunc.parametrize("hostname", hostnames(scenario_vars()["session"]))


def run_playbook(playbook: str, state_root: str, extra: t.Mapping[str, t.Any]) -> subprocess.CompletedProcess:
    """``ansible-playbook playbooks/<playbook>`` from the repository top, as a user runs it."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"), ANSIBLE_NOCOLOR="1",
               PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), os.path.join("playbooks", playbook),
           "-e", json.dumps(dict(extra)), "-e", "session_state_dir=" + state_root]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


class Session:
    """A running local session as its state directory describes it."""

    def __init__(self, state_root: str, name: str) -> None:
        self.state_root = state_root
        self.name = name
        self.dir = os.path.join(state_root, name)
        with open(os.path.join(self.dir, "session.json"), encoding="utf-8") as f:
            self.info = json.load(f)
        self.ssh_config = os.path.join(self.dir, "ssh_config")
        self.hosts = [c["hostname"] for c in self.info["containers"]]
        self.address = {c["hostname"]: c["address"] for c in self.info["containers"]}

    def container(self, hostname: str) -> t.Any:
        """The container as a testinfra host, over ssh with the session's ssh_config (no control master)."""
        return testinfra.get_host("ssh://" + hostname, ssh_config=self.ssh_config, controlpersist=0)

    def command_env(self, hostname: str) -> t.Dict[str, str]:
        """The environment the container's command (`env`) printed into its log."""
        with open(os.path.join(self.dir, "logs", hostname + ".log"), encoding="utf-8") as f:
            return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)

    def on_each(self, fn: t.Callable[[str], t.Any], hosts: t.Optional[t.Sequence[str]] = None) -> t.Dict[str, t.Any]:
        """``fn(hostname)`` for every container at once (each ssh login costs ~0.3 s here)."""
        hosts = list(hosts or self.hosts)
        with ThreadPoolExecutor(len(hosts)) as pool:
            return dict(zip(hosts, pool.map(fn, hosts)))

    def probe(self, hostname: str, targets: t.Sequence[t.Tuple[str, int]], timeout: float = 1.0) -> t.Dict[str, t.Any]:
        """From inside ``hostname``: ``{"reached": {"addr:port": bool}, "main1": <main1's address there>}``.

        A peer on the session's bridge answers a SYN in well under a millisecond; a dropped one never does."""
        script = (
            "import json, socket, sys, concurrent.futures as cf\n"
            "def ok(t):\n"
            "    try:\n"
            "        socket.create_connection((t[0], t[1]), %r).close()\n"
            "        return True\n"
            "    except OSError:\n"
            "        return False\n"
            "ts = json.loads(sys.argv[1])\n"
            "with cf.ThreadPoolExecutor(len(ts)) as p:\n"
            "    reached = dict(zip(['%%s:%%d' %% tuple(t) for t in ts], p.map(ok, ts)))\n"
            "print(json.dumps({'reached': reached, 'main1': socket.gethostbyname('main1')}))\n" % timeout)
        out = self.container(hostname).check_output("%s -c %s %s", PY, script, json.dumps([list(x) for x in targets]))
        return json.loads(out)


@pytest.fixture(scope="module")
def svars() -> t.Dict[str, t.Any]:
    return scenario_vars()


@pytest.fixture(scope="module")
def spec(svars: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    return dict(svars["session"])


@pytest.fixture(scope="module")
def session(svars: t.Mapping[str, t.Any], spec: t.Mapping[str, t.Any]) -> Session:
    return Session(svars["session_state_dir"], spec["name"])


@pytest.fixture(scope="module")
def envs(session: Session) -> t.Dict[str, t.Dict[str, str]]:
    """Every container's environment in an ssh shell (what `ssh main1` then `env` shows)."""
    return session.on_each(lambda h: session.container(h).environment())


def expected_env(spec: t.Mapping[str, t.Any], hostname: str) -> t.Dict[str, str]:
    """The seed tables' meaning of every variable for ``hostname``, from the spec alone.

    KERNEL_ID, SESSION_ID and TF_CONFIG are checked on their own (IDs are generated; TF_CONFIG is JSON).
    """
    hosts = hostnames(spec)
    size = len(hosts)
    rank = hosts.index(hostname)  # main1 first, then the subs by index
    role, idx = re.fullmatch(r"([a-z]+)([0-9]+)", hostname).groups()  # type: ignore[union-attr]
    roles = [re.sub(r"[0-9]+$", "", h) for h in hosts]
    replicas = ",".join("%s:%d" % (r, roles.count(r)) for r in dict.fromkeys(roles))
    env = {
        "BACKENDAI_CLUSTER_HOST": hostname,              # this container's hostname
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),      # every hostname, comma-separated
        "BACKENDAI_CLUSTER_IDX": str(int(idx)),          # one-based index within the role
        "BACKENDAI_CLUSTER_MODE": "single-node",         # all containers on this one machine
        "BACKENDAI_CLUSTER_ROLE": role,                  # main or sub
        "BACKENDAI_CLUSTER_SIZE": str(size),             # number of containers
        "BACKENDAI_CLUSTER_REPLICAS": replicas,          # role:count pairs
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),       # zero-based global index
        "WORLD_SIZE": str(size),
        "WORLD_RANK": str(rank),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),                         # index among the session's containers on this agent: all are here
        "MASTER_ADDR": "main1",                          # hostname of the main container
        "MASTER_PORT": str(spec["master_port"]),
    }
    env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    return env
