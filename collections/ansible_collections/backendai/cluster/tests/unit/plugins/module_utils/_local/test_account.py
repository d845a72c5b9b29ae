# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session user's account files and mounts of a local container (pure parts of ``_local.account``)."""

from __future__ import annotations

from ansible_collections.backendai.cluster.plugins.module_utils._local import account
from ansible_collections.backendai.cluster.plugins.module_utils._local.session import local_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import SSHKeypair
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import UserSpec
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import make_plan

PASSWD = ("root:x:0:0:root:/root:/bin/bash\n"
          "debian:x:1000:1000:Debian:/home/debian:/bin/bash\n"
          "work:x:1500:1500::/home/work:/bin/sh\n"
          "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n")
GROUP = "root:x:0:\nsudo:x:27:debian,work\ndebian:x:1000:\nwork:x:1500:\nusers:x:100:work\n"
WORK = UserSpec("work", 1000, 1000)


def test_the_user_replaces_host_accounts_of_its_name_or_uid_and_leaves_host_groups() -> None:
    passwd, group = account.account_files(WORK, PASSWD, GROUP, "/bin/bash")
    assert passwd.splitlines() == ["root:x:0:0:root:/root:/bin/bash", "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin",
                                   "work:x:1000:1000:backendai.cluster session user:/home/work:/bin/bash"]
    # the host's gid 1000 stays the user's primary group; the host's "work" group (1500) goes; no host group
    # lists the session user as a member (a host work in sudo must not make it one)
    assert group.splitlines() == ["root:x:0:", "sudo:x:27:debian", "debian:x:1000:", "users:x:100:"]


def test_a_new_gid_gets_a_group_of_the_users_name() -> None:
    _passwd, group = account.account_files(UserSpec("work", 1000, 4343), PASSWD, GROUP, "/bin/sh")
    assert group.splitlines()[-1] == "work:x:4343:" and "work:x:1500:" not in group


def test_root_keeps_the_host_files_and_its_home_is_root() -> None:
    root = UserSpec("root", 0, 0)
    assert account.account_files(root, PASSWD, GROUP, "/bin/sh") == (PASSWD, GROUP)
    assert account.user_mounts(root, "/state/home", "/state/passwd", "/state/group") == [
        ("/state/home", "/root", "none", "bind")]


def test_a_user_gets_its_account_a_private_home_and_an_empty_root() -> None:
    mounts = account.user_mounts(WORK, "/state/home", "/state/passwd", "/state/group")
    assert [(m[1], m[3]) for m in mounts] == [("/etc/passwd", "bind,ro"), ("/etc/group", "bind,ro"),
                                              ("/home", "mode=0755,nosuid,nodev"), ("/home/work", "bind,X-mount.mkdir"),
                                              ("/root", "mode=0700,nosuid,nodev")]
    assert account.switch_prefix(WORK) == "setpriv --reuid=1000 --regid=1000 --init-groups"


def test_the_session_carries_the_spec_user() -> None:
    keys = SSHKeypair("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n", "ssh-ed25519 AAAA test")
    user = local_session(make_plan(user={"name": "alice", "uid": 4242, "gid": 4343}), keys).user
    assert (user.name, user.uid, user.gid, user.home) == ("alice", 4242, 4343, "/home/alice")
