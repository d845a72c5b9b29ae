# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session user inside a local container: its account, its home and the switch to it.

A local container runs the host's binaries on the host's filesystem, so it sees the host's
``/etc/passwd``. The user (``work`` by default, the spec's ``user``) is added to copies of the host's
``/etc/passwd`` and ``/etc/group`` (:func:`account_files`) kept in the session's state directory and
bound read-only over ``/etc/passwd`` and ``/etc/group`` inside each container's mount namespace
(:func:`user_mounts`): the host's own files are never written. The user's home is the container's own
directory in the state directory, bound over ``/home/<name>`` on a private ``/home`` (the host's homes
stay out), and holds the session keys in ``~/.ssh`` owned by the user (:func:`make_home`). The batch
command switches to the user with util-linux ``setpriv`` (:func:`switch_prefix`); sshd, which stays
root, switches for logins itself.

The user is the spec's :class:`UserSpec` (``_local.session.LocalSession.user``).
"""
from __future__ import annotations

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import UserSpec

#: Where the home directories are: a private tmpfs in every container (unless the user is root).
HOME_ROOT = "/home"
GECOS = "backendai.cluster session user"


def login_shell() -> str:
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def account_files(user: UserSpec, passwd: str, group: str, shell: str) -> t.Tuple[str, str]:
    """The container's /etc/passwd and /etc/group: the host's ``passwd`` and ``group`` texts with the user in.

    A host account of the same name or uid goes (so ``id -un`` and ``ls -l`` name the session user), a host
    group of the same name goes, a host group with the user's gid stays as the user's primary group, and the
    user's name leaves every host group's member list (a host ``work`` in ``sudo`` must not make the session
    user a member)."""
    name, uid, gid = user.name, user.uid, user.gid
    if user.is_root:
        return passwd, group
    users = []
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and (fields[0] == name or fields[2] == str(uid)):
            continue
        users.append(line)
    users.append(":".join((name, "x", str(uid), str(gid), GECOS, user.home, shell)))
    groups = []
    has_gid = False
    for line in group.splitlines():
        fields = line.split(":")
        if len(fields) < 4:
            groups.append(line)
            continue
        if fields[0] == name and fields[2] != str(gid):
            continue
        has_gid = has_gid or fields[2] == str(gid)
        fields[3] = ",".join(m for m in fields[3].split(",") if m and m != name)
        groups.append(":".join(fields))
    if not has_gid:
        groups.append("%s:x:%d:" % (name, gid))
    return "\n".join(users) + "\n", "\n".join(groups) + "\n"


def make_home(home: str, user: UserSpec) -> str:
    """A container's home (on the host, in the state dir) with an empty ``~/.ssh`` for the session keys
    (``_local.sshd.key_files``, written by the bring-up), both 0700 and owned by the user (what sshd's StrictModes
    wants); returns ``~/.ssh``."""
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, mode=0o700)  # a new home (the session's state directory is new)
    for d in (ssh, home):
        os.chmod(d, 0o700)
        os.chown(d, user.uid, user.gid)
    return ssh


def user_mounts(user: UserSpec, home: str, passwd: str, group: str) -> t.List[t.Tuple[str, str, str, str]]:
    """fstab entries (source, target, type, options) that give a container the user: its account files, a
    private /home with the user's home in it, and (for a user other than root) an empty /root, so that the
    host root's dotfiles and keys stay out as they did when the container's home was /root."""
    if user.is_root:
        return [(home, "/root", "none", "bind")]
    return [
        (passwd, "/etc/passwd", "none", "bind,ro"),
        (group, "/etc/group", "none", "bind,ro"),
        ("tmpfs", HOME_ROOT, "tmpfs", "mode=0755,nosuid,nodev"),
        (home, user.home, "none", "bind,X-mount.mkdir"),
        ("tmpfs", "/root", "tmpfs", "mode=0700,nosuid,nodev"),
    ]


def switch_prefix(user: UserSpec) -> str:
    """The words that run what follows as the user: its uid and gid, and the groups /etc/group gives it."""
    return "setpriv --reuid=%d --regid=%d --init-groups" % (user.uid, user.gid)
