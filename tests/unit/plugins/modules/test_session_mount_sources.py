# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Mount sources through the ``session`` module, on both backends: the network key and the state paths are
refused before anything is written (Nomad: not one request that changes something, against the Nomad API
double; local: no session state), and on Nomad a mount is a host volume, never a docker bind mount, placed
only on nodes that declare it (read-write where a mount is)."""

from __future__ import annotations

import json
import os
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import RUNTIME_MOUNT, RUNTIME_VOLUME, host_volume_name
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import NOMAD_TOKEN, ModuleRun, spec, writes
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import lint_job_files

REFUSED = ["/etc/backendai-cluster", "/etc/backendai-cluster/network.key", "/etc", "/",
           "/run/backendai-cluster/cni", "/root/.config/backendai-cluster", "/root/.local/state/backendai-cluster/sessions",
           # through the links every distribution has (/var/run -> /run, /lib -> usr/lib): the plugin's state, the CNI
           # plugins Nomad runs as root; the Nomad client's data dir (every allocation's secrets/), and /var above it
           "/var/run/backendai-cluster", "/var/run", "/lib/cni", "/opt/nomad/data", "/var/lib/nomad/alloc", "/var"]


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:  # noqa: F811 - the fixture imported above
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=4000, memory=8192, host_volumes={host_volume_name("/srv/datasets"): ("/srv/datasets", False)})
    return double


@pytest.mark.parametrize("source", REFUSED)
def test_key_and_state_paths_are_refused_on_nomad(nomad: NomadAPIDouble, run: ModuleRun, source: str) -> None:
    result = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN,
                                  "spec": spec(mounts=[{"source": source, "target": "/data"}])})
    assert result["failed"] and "session.mounts[0].source: must not be" in result["msg"], result
    assert writes(nomad, admission=True) == [] and nomad.model.jobs == {}


@pytest.mark.parametrize("source", REFUSED)
def test_key_and_state_paths_are_refused_on_the_local_backend(run: ModuleRun, tmp_path: t.Any, source: str) -> None:
    state = tmp_path / "state"
    result = run(session_module, {"backend": "local", "state_dir": str(state), "mount_roots": ["/"],
                                  "spec": spec(mounts=[{"source": source, "target": "/data"}])})
    assert result["failed"] and "session.mounts[0].source: must not be" in result["msg"], result
    assert not state.exists() or os.listdir(state) == []


def test_nomad_mounts_are_host_volumes(nomad: NomadAPIDouble, run: ModuleRun, tmp_path: t.Any) -> None:
    result = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN, "wait": False,
                                  "spec": spec(mounts=[{"source": "/srv/datasets", "target": "/data", "read_only": True}])})
    assert result.get("changed"), result
    job = nomad.stored_job("s1")
    assert job is not None
    text = json.dumps(job)
    assert '"type": "bind"' not in text and "/srv/datasets" not in text
    for group in job["TaskGroups"]:
        assert group["Volumes"]["mount0"]["Source"] == host_volume_name("/srv/datasets")
        assert group["Tasks"][0]["VolumeMounts"] == [{"Volume": "runtime", "Destination": RUNTIME_MOUNT, "ReadOnly": True},
                                                     {"Volume": "mount0", "Destination": "/data", "ReadOnly": True}]
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"Job": job}))
    lint = lint_job_files(str(path))
    assert lint.returncode == 0, lint.stdout


def test_nomad_places_mounts_only_on_nodes_that_declare_them(nomad_double_factory: t.Any,  # noqa: F811
                                                             run: ModuleRun) -> None:
    """The planner reads each node's HostVolumes from the node list and skips a node that lacks one or declares it
    read-only for a read-write mount (Nomad's HostVolumeChecker would leave the group pending there): the
    session goes to the one node that can serve it, and the double's scheduler, which models that checker, runs it."""
    data, models = host_volume_name("/srv/datasets"), host_volume_name("/srv/models")
    double = nomad_double_factory(token=NOMAD_TOKEN)
    # the tightest fits come first (concentrated): a1 declares nothing, a2 the data root read-only
    double.add_node("a1", cpu=2000, memory=2048)
    double.add_node("a2", cpu=3000, memory=4096, host_volumes={data: ("/srv/datasets", True), models: ("/m", True)})
    double.add_node("a3", cpu=8000, memory=16384, host_volumes={data: ("/srv/datasets", False), models: ("/m", True)})
    mounts = [{"source": "/srv/datasets", "target": "/data"}, {"source": "/srv/models", "target": "/models",
                                                               "read_only": True}]
    result = run(session_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": spec(mounts=mounts)})
    assert result.get("changed") and not result.get("failed"), result
    assert {c["agent"] for c in result["session"]["containers"]} == {"a3"}
    assert {c["status"] for c in result["session"]["containers"]} == {"running"}


def test_nomad_mounts_no_node_declares_are_pending_with_how_to_declare_them(nomad_double_factory: t.Any,  # noqa: F811
                                                                            run: ModuleRun) -> None:
    data = host_volume_name("/srv/datasets")
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("a1")
    double.add_node("a2", host_volumes={data: ("/srv/datasets", True)})
    result = run(session_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN,
                                  "spec": spec(mounts=[{"source": "/srv/datasets", "target": "/data"}])})
    assert result["failed"] and result["msg"].startswith("session s1 is PENDING: no agent is eligible: "), result
    assert "a1: no host volume %s (mount source /srv/datasets)" % data in result["msg"]
    assert "a2: host volume %s (mount source /srv/datasets) is declared read-only, a mount of it is read-write" % data \
        in result["msg"]
    assert "overlay_agent role's overlay_agent_data_roots" in result["msg"]
    assert writes(double) == [] and double.model.jobs == {}


def test_nomad_agents_without_the_runtime_bundle_are_named(nomad_double_factory: t.Any,  # noqa: F811
                                                          run: ModuleRun) -> None:
    """An agent the overlay_agent role has not prepared (or prepared with another bundle version) lacks the bundle's
    host volume: the session is never placed there, and when no agent has it the reason names each one."""
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("a1", runtime_bundle=False)
    double.add_node("a2", runtime_bundle=False, host_volumes={"backendai-runtime-v0": ("/usr/lib/backendai-cluster/runtime/0", True)})
    result = run(session_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": spec()})
    assert result["failed"], result
    for agent in ("a1", "a2"):
        assert "%s: no host volume %s (the session runtime bundle, version" % (agent, RUNTIME_VOLUME) in result["msg"], result
    assert "run the overlay_agent role" in result["msg"] and writes(double) == [] and double.model.jobs == {}
    double.add_node("a3")
    placed = run(session_module, {"nomad_addr": double.url, "token": NOMAD_TOKEN, "spec": spec()})
    assert placed.get("changed") and {c["agent"] for c in placed["session"]["containers"]} == {"a3"}, placed


HIDING_TARGETS = {"/": "/proc", "/etc": "/etc/hosts", "/etc/hosts": "/etc/hosts", "/etc/passwd": "/etc/passwd",
                  RUNTIME_MOUNT: RUNTIME_MOUNT, "/home/work/.ssh": "/home/work/.ssh", "/home/work": "/home/work/.ssh",
                  "/secrets": "/secrets", "/run": "/run/backendai"}


@pytest.mark.parametrize("target", sorted(HIDING_TARGETS))
def test_targets_that_hide_what_the_container_start_provides_are_refused_on_nomad(
        nomad: NomadAPIDouble, run: ModuleRun, target: str) -> None:
    result = run(session_module, {"nomad_addr": nomad.url, "token": NOMAD_TOKEN,
                                  "spec": spec(mounts=[{"source": "/srv/datasets", "target": target}])})
    assert result["failed"] and "session.mounts[0].target: " in result["msg"], result
    assert "%s, which the container start provides" % HIDING_TARGETS[target] in result["msg"], result["msg"]
    assert writes(nomad, admission=True) == [] and nomad.model.jobs == {}


@pytest.mark.parametrize("target", sorted(HIDING_TARGETS))
def test_targets_that_hide_what_the_container_start_provides_are_refused_on_the_local_backend(
        run: ModuleRun, tmp_path: t.Any, target: str) -> None:
    state = tmp_path / "state"
    result = run(session_module, {"backend": "local", "state_dir": str(state), "mount_roots": [str(tmp_path)],
                                  "spec": spec(mounts=[{"source": str(tmp_path), "target": target}])})
    assert result["failed"] and "session.mounts[0].target: " in result["msg"], result
    assert "%s, which the container start provides" % HIDING_TARGETS[target] in result["msg"], result["msg"]
    assert not state.exists() or os.listdir(state) == []
