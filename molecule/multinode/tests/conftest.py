# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the verify step: the local agents prepare made and the two sessions converge made.

The specs, the agents and the state directories are the scenario's inventory variables (molecule.yml),
read with testinfra's Ansible runner. Containers are entered the way users enter them:
``ssh -F <state>/<name>/ssh_config main1`` (the subs through main1). Expected values are computed
here from the specs, the agents and the seed rules, never by the collection.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import typing as t

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

#: The Python inside a container (the host's Debian one; a root shell's PATH may start with pyenv shims).
PY = "/usr/bin/python3"


@functools.lru_cache(maxsize=None)
def scenario_vars() -> t.Dict[str, t.Any]:
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        pytest.exit("run these tests with `molecule verify -s multinode` (MOLECULE_INVENTORY_FILE is not set)", returncode=2)
    return AnsibleRunner(inventory).get_variables("localhost")


def hostnames(spec: t.Mapping[str, t.Any]) -> t.List[str]:
    return ["main1"] + ["sub%d" % i for i in range(1, int(spec["cluster_size"]))]


def expected_agents(spec: t.Mapping[str, t.Any], agents: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[str]:
    """The seed rule for a multi-node session that fits on no single agent, concentrated: fill the agents
    that take the most containers first (ties by name), in global order (all agents here are equal)."""
    need = spec["resources"]
    out: t.List[str] = []
    for agent in sorted(agents, key=lambda a: a["name"]):
        fits = min(agent["cpu"] // need["cpu"], agent["memory"] // need["memory"])
        out += [agent["name"]] * fits
    return out[:int(spec["cluster_size"])]


class Session:
    """A running local session as its state directory describes it."""

    def __init__(self, state_root: str, name: str) -> None:
        self.dir = os.path.join(state_root, name)
        with open(os.path.join(self.dir, "session.json"), encoding="utf-8") as f:
            self.info = json.load(f)
        self.ssh_config = os.path.join(self.dir, "ssh_config")
        self.hosts = [c["hostname"] for c in self.info["containers"]]
        self.address = {c["hostname"]: c["address"] for c in self.info["containers"]}
        self.agent = {c["hostname"]: c["agent"] for c in self.info["containers"]}
        self.pid = {c["hostname"]: c["pid"] for c in self.info["containers"]}

    def container(self, hostname: str) -> t.Any:
        """The container as a testinfra host, over ssh with the session's ssh_config (no control master)."""
        return testinfra.get_host("ssh://" + hostname, ssh_config=self.ssh_config, controlpersist=0)

    def ssh(self, hostname: str, command: str, stdin: t.Optional[bytes] = None) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", self.ssh_config, hostname, command], input=stdin, capture_output=True,
                              timeout=120, check=False)

    def command_env(self, hostname: str) -> t.Dict[str, str]:
        """The environment the container's command (`env`) printed into its log."""
        with open(os.path.join(self.dir, "logs", hostname + ".log"), encoding="utf-8") as f:
            return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)

    def probe(self, hostname: str, targets: t.Sequence[str], port: int) -> t.Dict[str, bool]:
        """From inside ``hostname`` (its network namespace): which ``targets`` accept a TCP connection on ``port``."""
        script = ("import json, socket, sys\n"
                  "def ok(a):\n"
                  "    try:\n"
                  "        socket.create_connection((a, %d), 1.0).close()\n"
                  "        return True\n"
                  "    except OSError:\n"
                  "        return False\n"
                  "print(json.dumps({a: ok(a) for a in sys.argv[1:]}))\n" % port)
        out = subprocess.run(["nsenter", "-t", str(self.pid[hostname]), "-n", "--", PY, "-c", script] + list(targets),
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)


@pytest.fixture(scope="module")
def svars() -> t.Dict[str, t.Any]:
    return scenario_vars()


@pytest.fixture(scope="module")
def agents(svars: t.Mapping[str, t.Any]) -> t.List[t.Dict[str, t.Any]]:
    with open(svars["agents_file"], encoding="utf-8") as f:
        import yaml  # (molecule's own dependency)
        return yaml.safe_load(f)["agents"]


@pytest.fixture(scope="module")
def spec(svars: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    return dict(svars["session"])


@pytest.fixture(scope="module")
def session(svars: t.Mapping[str, t.Any], spec: t.Mapping[str, t.Any]) -> Session:
    return Session(svars["session_state_dir"], spec["name"])


@pytest.fixture(scope="module")
def other(svars: t.Mapping[str, t.Any]) -> Session:
    return Session(svars["session_state_dir"], svars["other_session"]["name"])
