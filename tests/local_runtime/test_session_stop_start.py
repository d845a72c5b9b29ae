# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``state: stopped`` and the start after it on the local backend, with real engine containers
(docs/session-lifecycle.md): a stop removes the containers, their network namespaces and the session network (the
CPU and memory are back), keeps the state directory's keys and record; ``present`` starts the session again with the
same keys, session ID and names, and ``ssh sub1`` from main1 works again; nothing is left after ``absent``."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

import images

from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import netns_path
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")

TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))


def ssh(state_root: str, name: str, *cmd: str) -> subprocess.CompletedProcess:
    config = os.path.join(state_root, name, "ssh_config")
    return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *cmd],
                          capture_output=True, text=True, timeout=60)


def containers(paths: SessionPaths) -> dict[str, dict[str, Any]]:
    with open(paths.session_json, encoding="utf-8") as f:
        return {c["hostname"]: c for c in json.load(f)["containers"]}


def test_stop_frees_the_containers_and_a_start_keeps_keys_id_and_names(state_root: str, helpers: Any) -> None:
    before = helpers.host_snapshot()
    name = "stop-start"
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": 2,
            "resources": {"cpu": 100, "memory": 64}}
    b = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
    paths = SessionPaths(os.path.abspath(state_root), name)
    try:
        first = b.present(spec)["session"]
        assert first["state"] == "RUNNING", first
        got = ssh(state_root, name, "main1", "ssh sub1 hostname")
        assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
        with open(paths.private_key, encoding="utf-8") as f:
            key = f.read()
        running = containers(paths)
        engines = [c["engine"] for c in running.values()]
        namespaces = [c["netns"] for c in running.values() if c.get("netns")]
        assert engines and namespaces

        stopped = b.stop(name=name)
        assert stopped["changed"] is True and stopped["session"]["state"] == "STOPPED", stopped["session"]
        assert stopped["session"]["session_id"] == first["session_id"]
        for engine in engines:  # the engine containers are gone (their cgroups, CPU and memory with them)
            assert images.podman("container", "exists", engine, check=False).returncode == 1, engine
        for ns in namespaces:
            assert not os.path.exists(netns_path(ns)), ns
        assert not os.path.exists(paths.journal)
        (view,) = b.info(name=name)
        assert view["state"] == "STOPPED" and [c["hostname"] for c in view["containers"]] == ["main1", "sub1"]
        assert b.stop(name=name)["changed"] is False

        started = b.present(spec)
        assert started["changed"] is True and started["created"] is False
        view = started["session"]
        assert view["state"] == "RUNNING" and view["session_id"] == first["session_id"], view
        assert [c["hostname"] for c in view["containers"]] == ["main1", "sub1"]
        with open(paths.private_key, encoding="utf-8") as f:
            assert f.read() == key, "the start keeps the session keypair"
        got = ssh(state_root, name, "main1", "ssh sub1 hostname")
        assert (got.returncode, got.stdout.strip()) == (0, "sub1"), got.stderr
        assert b.present(spec)["changed"] is False
    finally:
        b.absent(name)
    helpers.assert_clean(before, state_root, [])
    assert not os.path.exists(paths.root)


def test_stopping_a_missing_session_fails(state_root: str, helpers: Any) -> None:
    b = LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)
    with pytest.raises(Exception, match="session nothere does not exist"):
        b.stop(name="nothere")
