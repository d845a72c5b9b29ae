# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which Nomad nodes the planner places sessions on (``_nomad.nodes.live_agents``), against the Nomad API double.

Only nodes that can run the session network: the ``backendai`` CNI plugin fingerprinted by the client
(``plugins.cni.version.backendai``, client/fingerprint/plugins_cni.go) at Nomad 1.10 or later (only 1.10 adds
the allocation's own identity to CNI_ARGS). Node names pin containers (``${node.unique.name}``), so two live
nodes of one name are refused. And the plugin itself prints the version Nomad's fingerprinter looks for.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._network._cni_plugin import PLUGIN_VERSION, SHIM
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadConnection
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import live_agents
from module_helpers import NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import REPO

PLUGIN = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "plugins", "module_utils",
                      "_network", "_cni_plugin.py")
# hashicorp/go-version's SemverRegexp, which client/fingerprint/plugins_cni.go parses each word of the output with
GO_SEMVER = re.compile(r"^v?([0-9]+(\.[0-9]+){0,2})(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+"
                       r"[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?$")


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:  # noqa: F811 - the fixture imported above
    return nomad_double_factory(token=NOMAD_TOKEN)


def agents(double: NomadAPIDouble) -> t.List[str]:
    with NomadClient(NomadConnection(nomad_addr=double.url, token=NOMAD_TOKEN)) as client:
        return [a["name"] for a in live_agents(client)]


def test_only_nodes_with_the_plugin_at_nomad_1_10_or_later(nomad: NomadAPIDouble) -> None:
    nomad.add_node("ready")                                          # prepared by the overlay_agent role
    nomad.add_node("newer", nomad_version="1.11.2+ent")
    nomad.add_node("no-plugin", cni_plugins=("bridge", "loopback", "portmap"))  # the role never ran there
    nomad.add_node("old", nomad_version="1.9.6")     # passes the job's own NOMAD_* args to CNI unchanged
    nomad.add_node("beta", nomad_version="1.10.0-beta.1")  # before 1.10.0, as the job's semver constraint says
    assert agents(nomad) == ["newer", "ready"]


def test_agents_carry_the_host_volumes_their_nodes_declare(nomad: NomadAPIDouble) -> None:
    """From the node list stub (HostVolumes, nomad/structs Node.Stub since 0.11.0): no request per node."""
    nomad.add_node("a1", runtime_bundle=False, host_volumes={"backendai-srv-x-00000000": ("/srv/x", True), "other": ("/o", False)})
    nomad.add_node("a2", runtime_bundle=False)
    with NomadClient(NomadConnection(nomad_addr=nomad.url, token=NOMAD_TOKEN)) as client:
        got = {a["name"]: a["host_volumes"] for a in live_agents(client)}
    assert got == {"a1": {"backendai-srv-x-00000000": {"read_only": True}, "other": {"read_only": False}}, "a2": {}}
    assert [r.path for r in nomad.requests if r.path.startswith("/v1/node")] == ["/v1/nodes"]


def test_duplicate_node_names_are_refused(nomad: NomadAPIDouble) -> None:
    nomad.add_node("a1")
    nomad.add_node("a1", address="10.0.0.99")  # another client that calls itself a1
    nomad.add_node("b1")
    with pytest.raises(PlanError, match=r"Nomad node names must be unique, since a session pins each container with "
                                        r"\$\{node.unique.name\}: a1 is the name of nodes \S+, \S+; give each client"):
        agents(nomad)


def test_a_down_twin_is_no_duplicate(nomad: NomadAPIDouble) -> None:
    """A re-installed client keeps its name and gets a new node ID; the old entry stays down until Nomad's GC."""
    nomad.add_node("a1", status="down")
    nomad.add_node("a1", address="10.0.0.99")
    assert agents(nomad) == ["a1"]


def test_a_twin_without_the_plugin_is_not_considered(nomad: NomadAPIDouble) -> None:
    """The job's constraints keep a node without the plugin out, so its name cannot take a session's container."""
    nomad.add_node("a1")
    nomad.add_node("a1", address="10.0.0.99", cni_plugins=("bridge",))
    assert agents(nomad) == ["a1"]


def test_the_plugin_prints_a_version_nomad_fingerprints(tmp_path: t.Any) -> None:
    """Nomad runs each executable of cni_path with no arguments: exit 0 and a word that parses as semver, or the node
    gets no plugins.cni.version.backendai attribute and no session (client/fingerprint/plugins_cni.go). Run as the
    role installs it: the shim, under -IS."""
    shim = tmp_path / "backendai"
    shim.write_text(SHIM % {"lib": os.path.dirname(PLUGIN)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    proc = subprocess.run([sys.executable, "-IS", str(shim)], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    versions = [word for word in (proc.stdout + proc.stderr).split() if GO_SEMVER.match(word)]
    assert versions[:1] == ["v" + PLUGIN_VERSION], proc
