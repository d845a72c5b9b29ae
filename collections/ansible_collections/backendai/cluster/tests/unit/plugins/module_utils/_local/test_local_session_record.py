# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local runtime's typed session: made from the typed plan, then checked for this machine. No root needed."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import session as ls
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError
from ansible_collections.backendai.cluster.plugins.module_utils._session.env import container_env
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Mount
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import make_plan

KEYS = SSHKeypair("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n", "ssh-ed25519 AAAA test")


def test_the_session_is_the_plan_with_the_env_of_the_nomad_job() -> None:
    plan = make_plan(cluster_size=3)
    session = ls.local_session(plan, KEYS)
    assert session.name == plan.spec.name and session.session_id == plan.session_id
    assert session.hostnames == [c.hostname for c in plan.containers]
    assert [c.env for c in session.containers] == [container_env(plan, c) for c in plan.containers]
    assert [(c.command, c.resources) for c in session.containers] == [(c.command, c.resources) for c in plan.containers]
    assert {c.agent for c in session.containers} == {ls.LOCAL_AGENT} and session.agents == {}
    assert [c.publish for c in session.containers] == [True, False, False]
    assert (session.ssh_port, session.keys, session.user) == (plan.spec.ssh.port, KEYS, plan.spec.user)


def test_a_plan_is_checked_only_for_what_the_parser_cannot_know(tmp_path: t.Any) -> None:
    with pytest.raises(LocalRuntimeError, match="mount source /nonexistent-backendai does not exist"):
        ls.from_plan(make_plan(mounts=[{"source": "/nonexistent-backendai", "target": "/data"}]), KEYS)
    with pytest.raises(LocalRuntimeError, match="main1: environment variable X contains a newline"):
        ls.from_plan(make_plan(env={"X": "a\nb"}), KEYS)
    with pytest.raises(LocalRuntimeError, match="the command's first word may not contain '='"):
        ls.from_plan(make_plan(command=["A=1", "run"]), KEYS)
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    ready = ls.from_plan(make_plan(mounts=[{"source": str(tmp_path / "link"), "target": "/data"}]), KEYS,
                         mount_roots=[str(tmp_path)])
    assert ready.mounts == (Mount(str(tmp_path / "d"), "/data", False),)


def test_mounts_only_from_the_mount_roots(tmp_path: t.Any) -> None:
    """The local backend mounts only from its mount roots (real paths): a source elsewhere, a symlink under a
    root that leads out of it, and the backend's own state directories are refused, naming the field."""
    root, elsewhere, state = tmp_path / "data", tmp_path / "elsewhere", tmp_path / "state"
    for d in (root / "proj", elsewhere, state / "s1"):
        d.mkdir(parents=True)
    (root / "escape").symlink_to(elsewhere)
    (root / "state").symlink_to(state)

    def prepare(source: str, roots: t.Sequence[str] = (str(root),)) -> ls.LocalSession:
        return ls.from_plan(make_plan(mounts=[{"source": source, "target": "/data"}]), KEYS,
                            state_root=str(state), mount_roots=roots)

    assert prepare(str(root / "proj")).mounts[0].source == str(root / "proj")
    with pytest.raises(LocalRuntimeError, match=r"mounts\[0\]\.source: %s is not under a mount root; the local backend "
                                                r"mounts only from %s \(option mount_roots\)" % (elsewhere, root)):
        prepare(str(elsewhere))
    with pytest.raises(LocalRuntimeError, match=r"mounts\[0\]\.source: %s \(really %s\) is not under a mount root"
                                                % (root / "escape", elsewhere)):
        prepare(str(root / "escape"))
    with pytest.raises(LocalRuntimeError, match="mounts only from nowhere: mount_roots is empty"):
        prepare(str(root / "proj"), ())
    # the sessions' state (keys of every session) even when a root holds it, through a link or not
    for source in (str(root / "state"), str(state / "s1"), str(tmp_path)):
        with pytest.raises(LocalRuntimeError, match=r"mounts\[0\]\.source: .* must not be %s, below it or a directory "
                                                    r"above it" % state):
            prepare(source, (str(tmp_path),))


def test_key_and_state_paths_behind_a_link_are_refused(tmp_path: t.Any) -> None:
    """The spec refuses /etc/backendai-cluster by its text; a link under a mount root that leads there is caught
    by the real path."""
    (tmp_path / "key").symlink_to("/etc")
    with pytest.raises(LocalRuntimeError, match=r"mounts\[0\]\.source: %s \(really /etc\) must not be "
                                                r"/etc/backendai-cluster, below it or a directory above it" % (tmp_path / "key")):
        ls.from_plan(make_plan(mounts=[{"source": str(tmp_path / "key"), "target": "/data"}]), KEYS,
                     mount_roots=[str(tmp_path)])


def test_resource_names_are_per_state_root_and_session() -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths

    session = ls.local_session(make_plan(cluster_size=2), KEYS)
    one = ls.resource_names(SessionPaths("/a", session.name), session)
    two = ls.resource_names(SessionPaths("/b", session.name), session)
    assert one["bridge"] == two["bridge"]  # the session network's, made by the plugin: one per session
    assert set(one["netns"]) == {"main1", "sub1"} and not set(one["netns"].values()) & set(two["netns"].values())
