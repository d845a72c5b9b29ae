# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a local container's fstab-style mount entries become mount(2) calls (``_local.spawn.mount_calls``): the
flags util-linux mount would pass, a read-only bind remounted, the move, the target directory made first. No
root needed (the mounts themselves are made by every local runtime test: tests/local_runtime)."""

from __future__ import annotations

from ansible_collections.backendai.cluster.plugins.module_utils._local import spawn as sp
from ansible_collections.backendai.cluster.plugins.module_utils._local.containers import ContainerSetup, mount_entries
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Mount


def test_filesystem_options_are_flags_and_data() -> None:
    (tmpfs,) = sp.mount_calls([("container-shm", "/dev/shm", "tmpfs", "nosuid,nodev,mode=1777,size=128m")])
    assert tmpfs == sp.MountCall(b"container-shm", b"/dev/shm", b"tmpfs", sp.MS_NOSUID | sp.MS_NODEV,
                                 b"mode=1777,size=128m", False)
    (sysfs,) = sp.mount_calls([("container-sysfs", "/sys", "sysfs", "ro,nosuid,nodev,noexec")])
    assert sysfs.flags == sp.MS_RDONLY | sp.MS_NOSUID | sp.MS_NODEV | sp.MS_NOEXEC and sysfs.data is None


def test_a_read_only_bind_is_a_bind_then_a_remount() -> None:
    # the kernel ignores every flag but MS_REC on the bind call itself: read-only takes a remount of the bind
    bind, remount = sp.mount_calls([("/srv/data", "/data", "none", "bind,ro,X-mount.mkdir")])
    assert bind == sp.MountCall(b"/srv/data", b"/data", None, sp.MS_BIND, None, True)
    assert remount == sp.MountCall(None, b"/data", None, sp.MS_REMOUNT | sp.MS_BIND | sp.MS_RDONLY, None, False)
    assert sp.mount_calls([("/srv/data", "/data", "none", "bind")]) == [
        sp.MountCall(b"/srv/data", b"/data", None, sp.MS_BIND, None, False)]


def test_a_container_s_mounts_stage_its_run_then_move_it() -> None:
    paths = SessionPaths("/var/lib/bai", "s1")
    mounts = [Mount("/srv/ro", "/tmp/ro", True)]
    entries = mount_entries(paths, ContainerSetup("main1", "ns1", {}, [], mounts, shm_mb=512))
    targets = [e[1] for e in entries]
    staging = paths.container_dir("main1") + "/run"
    move = entries.index((staging, "/run", "none", sp.MOVE_OPTION))
    # /run is made beside the state it must show (bound into it) before it covers the machine's /run; the
    # mount's source is bound before /tmp is covered, its target after
    assert targets[:move] == [staging, staging + "/sshd", staging + "/backendai-cluster", staging + "/backendai-cluster-mounts/0"]
    assert targets.index("/tmp") < targets.index("/tmp/ro")
    assert ("container-shm", "/dev/shm", "tmpfs", "nosuid,nodev,mode=1777,size=512m,X-mount.mkdir") in entries
    # its own /dev (made before its devices, its devpts and its /dev/shm), ptmx leading to its own devpts
    dev = targets.index("/dev")
    assert dev < targets.index("/dev/null") < targets.index("/dev/pts") < targets.index("/dev/ptmx") \
        < targets.index("/dev/shm")
    assert ("pts/ptmx", "/dev/ptmx", sp.LINK_TYPE, "") in entries
    assert any(e[1] == "/dev/pts" and e[2] == "devpts" and "ptmxmode=0666" in e[3] for e in entries)
    assert max(i for i, e in enumerate(entries) if e[0] == "/dev/null") < dev  # (login records: the machine's null)
    calls = sp.mount_calls(entries)
    assert sp.MountCall(staging.encode(), b"/run", None, sp.MS_MOVE, None, False) in calls
    # the session's read-only mount stays read-only where the container sees it
    assert sp.MountCall(None, b"/tmp/ro", None, sp.MS_REMOUNT | sp.MS_BIND | sp.MS_RDONLY, None, False) in calls


def test_device_nodes_and_links_are_files_not_mounts() -> None:
    node, link = sp.mount_calls([("1:3", "/dev/null", sp.NODE_TYPE, ""), ("pts/ptmx", "/dev/ptmx", sp.LINK_TYPE, "")])
    assert node == sp.MountCall(b"1:3", b"/dev/null", sp.NODE_TYPE.encode(), 0, None, False)
    assert link == sp.MountCall(b"pts/ptmx", b"/dev/ptmx", sp.LINK_TYPE.encode(), 0, None, False)
