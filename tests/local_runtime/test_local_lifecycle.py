# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One lifecycle for both backends, on engine (podman) containers of images built here from Debian packages
(``scripts/build-images``), started as the tasks of the session's Nomad job: a local batch session follows the
Nomad job's model (a container ends with its command; the session state comes from the rule the Nomad view uses).

ssh from this machine to main1 and on to every container as the session user, the image's files and not the
host's, the runtime bundle read-only; a killed command makes the session DEGRADED within one poll of the playbooks'
wait and ``present`` repairs it with the same keys and ID; an interactive container lives as long as its sshd;
finished commands make it TERMINATED with the log tails; the memory limit's OOM kill is ``failed`` 137 with reason
OOM; a creator killed before or after its containers started leaves nothing that destroy does not remove; and
nothing is left after destroy (containers, their storage, namespaces, rules).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import images
import leaks

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import nomad_backend as _backend_nomad
from ansible_collections.backendai.cluster.plugins.module_utils._errors import SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import NomadTask
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job

pytestmark = pytest.mark.skipif(images.engine_missing() is not None or not os.path.isfile(
    os.path.join(nomad_job.RUNTIME_DIR, "VERSION")), reason="needs podman, mmdebstrap, busybox-static and the session "
                                                            "runtime bundle (scripts/setup installs and builds them)")

#: What the _ansible layer hands the local backend (``_ansible.backends.session_backend``).
TASK = NomadTask(nomad_job.render_job, nomad_job.RUNTIME_VOLUME, nomad_job.RUNTIME_DIR,
                 (nomad_job.PRIVATE_KEY_ITEM, nomad_job.PUBLIC_KEY_ITEM))
#: One poll of playbooks/tasks/wait_for_session.yml (its default wait_poll_interval).
POLL = _backend_nomad.DEFAULT_POLL_INTERVAL
FINISH = "finish"
COMMAND = ["sh", "-c", 'while [ ! -e "$HOME/%s" ]; do sleep 0.1; done; echo "$BACKENDAI_CLUSTER_HOST done"' % FINISH]


def backend(state_root: str, helpers: Any) -> LocalBackend:
    return LocalBackend(state_root, helpers.MOUNT_ROOTS, TASK)


def ssh(state_root: str, name: str, *cmd: str) -> subprocess.CompletedProcess:
    config = os.path.join(state_root, name, "ssh_config")
    return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *cmd],
                          capture_output=True, text=True, timeout=60)


def view_until(b: LocalBackend, name: str, wanted: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        (view,) = b.info(name=name, log_lines=2)
        if view["state"] == wanted or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def records(state_root: str, name: str) -> dict[str, dict[str, Any]]:
    with open(SessionPaths(os.path.abspath(state_root), name).session_json, encoding="utf-8") as f:
        return {c["hostname"]: c for c in json.load(f)["containers"]}


def test_batch_session_lifecycle(state_root: str, helpers: Any) -> None:
    image = images.image("example")
    before = helpers.host_snapshot()
    name = "eng-life"
    spec = {"name": name, "image": image, "cluster_size": 3, "resources": {"cpu": 1000, "memory": 128}, "command": COMMAND}
    b = backend(state_root, helpers)
    marker = "/var/tmp/%s-host-only" % name
    try:
        first = b.present(spec)["session"]
        assert first["state"] == "RUNNING", first
        got = ssh(state_root, name, "main1", "hostname; ssh sub2 'hostname; id -un; cat /etc/debian_version'")
        assert got.returncode == 0, got.stderr
        assert got.stdout.split()[:3] == ["main1", "sub2", "work"], got.stdout
        with open(marker, "w", encoding="utf-8") as f:
            f.write("host\n")
        got = ssh(state_root, name, "main1", "test -e %s; echo $?; touch %s/x 2>/dev/null; echo $?; command -v python3"
                  % (marker, nomad_job.RUNTIME_MOUNT))
        assert got.stdout.split() == ["1", "1", "/usr/bin/python3"], got.stdout + got.stderr
        # kill -9 of sub1's command (the container's first process, seen from here): failed 137, DEGRADED
        os.kill(records(state_root, name)["sub1"]["pid"], signal.SIGKILL)
        start = time.monotonic()
        view = view_until(b, name, "DEGRADED", 10)
        assert view["state"] == "DEGRADED" and time.monotonic() - start <= POLL, view
        statuses = {c["hostname"]: (c["status"], c["exit_code"]) for c in view["containers"]}
        assert statuses == {"main1": ("running", None), "sub1": ("failed", 137), "sub2": ("running", None)}, view
        assert view["reason"] == "sub1 failed on local, exit code 137: the command exited with code 137"
        assert "stopped: sub1 (failed on local, exit code 137)" in view["progress"]["summary"]
        # present brings it back with the same keys and ID
        again = b.present(spec)
        assert again["changed"] is True and again["session"]["state"] == "RUNNING"
        assert again["session"]["session_id"] == first["session_id"]
        # (main1 last: its container ends with its command, and this login with it; a sub's container may end as soon
        # as the file is there, closing that ssh too (255): every container's command completing is checked below)
        got = ssh(state_root, name, "main1", "for h in sub1 sub2; do ssh $h touch ~/%s; r=$?; [ $r = 0 ] || [ $r = 255 ] "
                  "|| exit 9; done; touch ~/%s" % (FINISH, FINISH))
        assert got.returncode in (0, 255) and "closed" in got.stderr + "closed", got.stderr
        view = view_until(b, name, "TERMINATED", 10)
        assert view["state"] == "TERMINATED", view
        assert {(c["status"], c["exit_code"]) for c in view["containers"]} == {("complete", 0)}
        assert view["containers"][1]["log_tail"][-1] == "sub1 done", view["containers"][1]["log_tail"]
        assert b.present(spec)["changed"] is False
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
        b.absent(name)
    helpers.assert_clean(before, state_root, [])
    assert not os.path.exists(os.path.join(state_root, name))


def test_the_memory_limit_oom_kill_is_failed_137_and_present_repairs_it(state_root: str, helpers: Any,
                                                                        tmp_path: Any) -> None:
    image = images.image("example")
    before = helpers.host_snapshot()
    name = "eng-oom"
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(data, 0o777)
    hog = ('while [ ! -e /data/oom-$BACKENDAI_CLUSTER_HOST ]; do sleep 0.1; done; '
           'exec python3 -c "b = bytearray(512 << 20); import time; time.sleep(60)"')
    spec = {"name": name, "image": image, "cluster_size": 2, "resources": {"cpu": 1000, "memory": 96},
            "command": ["sh", "-c", hog], "mounts": [{"source": str(data), "target": "/data"}]}
    b = backend(state_root, helpers)
    try:
        assert b.present(spec)["session"]["state"] == "RUNNING"
        (data / "oom-sub1").write_text("")
        view = view_until(b, name, "DEGRADED", 20)
        sub1 = [c for c in view["containers"] if c["hostname"] == "sub1"][0]
        assert (sub1["status"], sub1["exit_code"]) == ("failed", 137), view
        assert sub1["reason"].startswith("OOM: the kernel killed the container at its memory limit (96 MB)"), sub1
        assert view["reason"].startswith("sub1 failed on local, exit code 137: OOM"), view["reason"]
        (data / "oom-sub1").unlink()
        assert b.present(spec)["session"]["state"] == "RUNNING"
    finally:
        b.absent(name)
    helpers.assert_clean(before, state_root, [])


_CREATOR = r"""
import json, sys
sys.path[:0] = [%r, %r, %r]
import faults
from test_local_lifecycle import backend
import types
faults.inject("kill", %d)
backend(%r, types.SimpleNamespace(MOUNT_ROOTS=%r)).present(json.loads(sys.stdin.read()))
"""


def _kill_spec(name: str) -> dict[str, Any]:
    return {"name": name, "image": images.image("test-busybox"), "cluster_size": 2, "resources": {"cpu": 1000, "memory": 64}}


@pytest.fixture(scope="module")
def journal_ops(run_dir: str, helpers: Any) -> list[str]:
    """The journal's records of a create of :func:`_kill_spec`'s session, in order (a run without a fault tells their
    order), made once for the tests below; its destroy leaves nothing it made (the record's leak check)."""
    root = os.path.join(run_dir, "ops-" + os.urandom(4).hex())
    b = backend(root, helpers)
    b.present(_kill_spec("eng-ops"))
    made = leaks.record(root, ["eng-ops"])
    try:
        return [e["op"] for e in _journal(root, "eng-ops")]
    finally:
        b.absent("eng-ops")
        assert leaks.leaks(None, made) == []


@pytest.mark.parametrize("kill_before", ["engine", "ready"])
def test_a_creator_killed_before_or_after_its_containers_started_leaves_nothing_destroy_misses(
        state_root: str, helpers: Any, kill_before: str, journal_ops: list[str]) -> None:
    """The creator is SIGKILLed as it is about to journal ``engine`` (nothing started yet) or ``ready`` (every
    container up): destroy removes all of it."""
    before = helpers.host_snapshot()
    name = "eng-kill"
    spec = _kill_spec(name)
    here = os.path.dirname(os.path.abspath(__file__))
    b = backend(state_root, helpers)
    ops = journal_ops  # the journal's records up to the one named
    script = _CREATOR % (helpers.collections, here, os.path.join(os.path.dirname(here), "support"), ops.index(kill_before),
                         state_root, helpers.MOUNT_ROOTS)
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (view,) = b.info(name=name)
    if kill_before == "engine":  # nothing started: the record of a create that did not complete
        assert view["state"] == "DEGRADED", view
    else:  # (the session record was written just before: its containers run, the journal lacks "ready")
        names = images.podman("ps", "--all", "--filter", "label=backendai-cluster.session=%s" % os.path.join(
            os.path.abspath(state_root), name), "--format", "{{.Names}}").stdout.split()
        assert len(names) == 2, names  # the containers the killed creator started
    b.absent(name)
    helpers.assert_clean(before, state_root, [])


def _journal(state_root: str, name: str) -> list[dict[str, Any]]:
    with open(SessionPaths(os.path.abspath(state_root), name).journal, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.no_root
def test_image_local_the_removed_host_files_runtime_is_refused_naming_the_field(state_root: str, helpers: Any) -> None:
    """``image: local`` named the host-files runtime the engine replaced: refused when planning, naming each field
    that says it (the session's image, a role's), before anything is made."""
    spec = {"name": "eng-local", "image": "local", "resources": {"cpu": 100, "memory": 64},
            "roles": [{"name": "main", "replicas": 1}, {"name": "worker", "replicas": 1, "image": "local"},
                      {"name": "ps", "replicas": 1, "image": "localhost/backendai-cluster/test-busybox:bookworm"}]}
    with pytest.raises(SpecError) as err:
        backend(state_root, helpers).present(spec)
    assert [p.path for p in err.value.problems] == ["session.image", "session.roles[1].image"], err.value.problems
    assert "the host-files runtime (image 'local') was removed" in str(err.value)
    assert not os.path.exists(os.path.join(state_root, "eng-local"))


def test_a_login_in_an_engine_container_cannot_write_to_a_host_terminal(state_root: str, helpers: Any) -> None:
    """As ``test_container_isolation``'s devpts attack, on the engine: a host process of uid 1000 holds a terminal;
    the session's login as ``work`` (uid 1000 too) writes to that path and nothing arrives (podman gives each
    container a private /dev with its own devpts instance). Control: the same write from the host arrives."""
    from test_container_isolation import assert_a_login_cannot_write_to_a_host_terminal
    name = "eng-ptys"
    b = backend(state_root, helpers)
    b.present({"name": name, "image": images.image("test-debian"), "cluster_size": 1,
               "resources": {"cpu": 1000, "memory": 64}})
    try:
        assert_a_login_cannot_write_to_a_host_terminal(lambda command: ssh(state_root, name, "main1", command))
    finally:
        b.absent(name)


def test_a_multi_node_image_session_spans_local_agents(state_root: str, helpers: Any, run_dir: str) -> None:
    """Engine containers behind two local agents, one on each (the session network's VXLAN between them, main1 published by the
    relay): ssh from here to main1 and on to every container across the agents, as the session user."""
    import uuid
    from ansible_collections.backendai.cluster.plugins.module_utils._local import agents as local_agents
    before = helpers.host_snapshot()
    root = os.path.join(run_dir, "agents-" + uuid.uuid4().hex[:8])
    made = local_agents.create_agents([{"name": "agent%d" % i, "cpu": 2000, "memory": 2048} for i in (1, 2)], root)
    name = "eng-mn"
    b = backend(state_root, helpers)
    try:
        view = b.present({"name": name, "image": images.image("test-busybox"), "cluster_size": 2,
                          "cluster_mode": "multi-node", "resources": {"cpu": 1200, "memory": 64}},
                         agents=made["agents"])["session"]
        assert view["state"] == "RUNNING", view
        assert {c["agent"] for c in view["containers"]} == {"agent1", "agent2"}, view["containers"]
        got = ssh(state_root, name, "main1", "hostname; ssh sub1 'hostname; id -un'")
        assert got.returncode == 0, got.stderr
        assert got.stdout.split() == ["main1", "sub1", "work"], got.stdout
    finally:
        b.absent(name)
        local_agents.destroy_agents(root)
    helpers.assert_clean(before, state_root, [])


def test_interactive_container_fails_when_its_sshd_dies(state_root: str, helpers: Any) -> None:
    """An interactive container (no command) lives as long as its sshd, the container's first process."""
    before = helpers.host_snapshot()
    name = "inter"
    spec = {"name": name, "image": images.image("test-busybox"), "cluster_size": 2, "resources": {"cpu": 1000, "memory": 64}}
    b = backend(state_root, helpers)
    try:
        assert b.present(spec)["session"]["state"] == "RUNNING"
        os.kill(records(state_root, name)["sub1"]["pid"], signal.SIGKILL)
        view = view_until(b, name, "DEGRADED", 10)
        assert view["state"] == "DEGRADED", view
        (sub1,) = [c for c in view["containers"] if c["hostname"] == "sub1"]
        assert sub1["status"] == "failed" and "sshd is gone" in sub1["reason"], sub1
        assert b.present(spec)["session"]["state"] == "RUNNING"
    finally:
        b.absent(name)
    helpers.assert_clean(before, state_root, [])
