# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the Molecule scenarios' verify tests share (each scenario's ``tests/conftest.py`` imports it).

The scenario's variables are its inventory (``molecule.yml``), read with testinfra's Ansible runner, so
converge, verify and destroy read the same values. A container is entered the way users enter it:
``ssh -F <state>/<name>/ssh_config main1`` (the subs through main1, by the config's ProxyJump). Expected
values are computed from the spec and the seed tables, never by the collection. What a session leaves
behind is checked by the create/destroy playbooks, with the repository's one leak check (``tests/support/leaks.py``,
run as a script).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import typing as t
from concurrent.futures import ThreadPoolExecutor

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner


#: The Python inside a container (the host's Debian one; a root shell's PATH may start with pyenv shims).
PY = "/usr/bin/python3"


@functools.lru_cache(maxsize=None)
def scenario_vars() -> t.Dict[str, t.Any]:
    """localhost's variables in the scenario's inventory."""
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "<scenario>")
        pytest.exit("run these tests with `molecule verify -s %s` (MOLECULE_INVENTORY_FILE is not set)" % scenario,
                    returncode=2)
    return AnsibleRunner(inventory).get_variables("localhost")


def hostnames(spec: t.Mapping[str, t.Any]) -> t.List[str]:
    """The seeds: main1, then sub1, sub2, ... up to the cluster size."""
    return ["main1"] + ["sub%d" % i for i in range(1, int(spec["cluster_size"]))]


def parametrize_hostname(metafunc: pytest.Metafunc) -> None:
    """A test taking ``hostname`` runs once per container of the scenario's session."""
    if "hostname" in metafunc.fixturenames:
        metafunc.parametrize("hostname", hostnames(scenario_vars()["session"]))


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
        self.agent = {c["hostname"]: c["agent"] for c in self.info["containers"]}
        self.pid = {c["hostname"]: c["pid"] for c in self.info["containers"]}
        self.netns = {c["hostname"]: c["netns"] for c in self.info["containers"]}
        self._control_dir: t.Optional[str] = None

    def container(self, hostname: str) -> t.Any:
        """The container as a testinfra host, over ssh with the session's ssh_config. Its commands share one ssh
        connection (a control master, as Ansible's ssh connection does): a container takes several commands over verify,
        and each fresh login costs 0.3-1.3 s here (a sub's twice: through main1). Every command is still a login
        shell of its own (a new session channel); :meth:`close` ends the masters."""
        if self._control_dir is None:
            self._control_dir = tempfile.mkdtemp(prefix="bc-ssh-")  # (short: a unix socket's path has 108 bytes)
        return testinfra.get_host("ssh://" + hostname, ssh_config=self.ssh_config, controlpersist=60,
                                  controlpath=os.path.join(self._control_dir, hostname))

    def close(self) -> None:
        """End the control masters :meth:`container` started (a master would otherwise outlive verify by a minute)."""
        if self._control_dir is None:
            return
        for hostname in os.listdir(self._control_dir):
            control_path = os.path.join(self._control_dir, hostname)
            subprocess.run(["ssh", "-F", self.ssh_config, "-o", "ControlPath=" + control_path, "-O", "exit", hostname],
                           capture_output=True, timeout=30, check=False)
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = None

    def ssh(self, hostname: str, command: str, stdin: t.Optional[bytes] = None) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", self.ssh_config, hostname, command], input=stdin, capture_output=True,
                              timeout=120, check=False)

    def command_env(self, hostname: str) -> t.Dict[str, str]:
        """The environment the container's command (`env`) printed into its log (the engine's k8s-file log:
        ``<time> <stream> <F|P> <text>`` a line)."""
        with open(os.path.join(self.dir, "logs", hostname + ".log"), encoding="utf-8") as f:
            lines = [line.split(" ", 3)[3] for line in f.read().splitlines() if line.count(" ") >= 3]
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def in_netns(self, hostname: str, command: str) -> str:
        """``command`` (a shell line of this machine's tools) in the container's network namespace."""
        return subprocess.run(["ip", "netns", "exec", self.netns[hostname], "sh", "-c", command], capture_output=True,
                              text=True, timeout=60, check=True).stdout

    def on_each(self, fn: t.Callable[[str], t.Any], hosts: t.Optional[t.Sequence[str]] = None) -> t.Dict[str, t.Any]:
        """``fn(hostname)`` for every container at once (each ssh login costs ~0.3 s here)."""
        hosts = list(hosts or self.hosts)
        with ThreadPoolExecutor(len(hosts)) as pool:
            return dict(zip(hosts, pool.map(fn, hosts)))

    def reachable(self, hostname: str, targets: t.Sequence[str], port: int) -> t.Dict[str, bool]:
        """From inside ``hostname``'s network namespace (nsenter, no ssh): which ``targets`` accept a TCP
        connection on ``port`` within a second (all at once: a dropped SYN is never answered, so each unreachable
        target takes the whole second)."""
        script = ("import json, socket, sys, concurrent.futures as cf\n"
                  "def ok(a):\n"
                  "    try:\n"
                  "        socket.create_connection((a, %d), 1.0).close()\n"
                  "        return True\n"
                  "    except OSError:\n"
                  "        return False\n"
                  "with cf.ThreadPoolExecutor(len(sys.argv) - 1) as pool:\n"
                  "    print(json.dumps(dict(zip(sys.argv[1:], pool.map(ok, sys.argv[1:])))))\n" % port)
        out = subprocess.run(["nsenter", "-t", str(self.pid[hostname]), "-n", "--", PY, "-c", script] + list(targets),
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)


@pytest.fixture(scope="module")
def svars() -> t.Dict[str, t.Any]:
    return scenario_vars()


@pytest.fixture(scope="module")
def spec(svars: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    return dict(svars["session"])


@pytest.fixture(scope="module")
def session(svars: t.Mapping[str, t.Any], spec: t.Mapping[str, t.Any]) -> t.Iterator[Session]:
    s = Session(svars["session_state_dir"], spec["name"])
    yield s
    s.close()
