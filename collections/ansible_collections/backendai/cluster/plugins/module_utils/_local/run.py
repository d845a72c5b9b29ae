# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local runtime's one way to run a command: :func:`run`, and ``ip -batch`` on top of it (:func:`ip_batch`).

Commands run with the runtime's sane PATH only (tagged with their session when ``owner`` is given,
see ``_local.state.owner_env``), their output captured; a failure raises
:class:`LocalRuntimeError` with the command's stderr, or is returned to the caller with
``check=False`` (teardown collects errors instead of stopping at the first).
"""

from __future__ import annotations

import subprocess
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SANE_PATH, LocalRuntimeError, owner_env


def run(argv: t.Sequence[str], stdin: str = "", owner: str = "", check: bool = True,
        what: str = "", env: t.Optional[t.Mapping[str, str]] = None) -> "subprocess.CompletedProcess[bytes]":
    """Run ``argv`` with ``stdin``; with ``check``, a non-zero exit raises naming ``what`` (default: the command).

    The environment is ``env`` if given, else the owner's (``owner_env``) or only a sane PATH."""
    if env is None:
        env = owner_env(owner) if owner else {"PATH": SANE_PATH}
    proc = subprocess.run(list(argv), input=stdin.encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env), check=False)
    if check and proc.returncode != 0:
        raise LocalRuntimeError("%s failed: %s" % (what or " ".join(argv), proc.stderr.decode().strip()))
    return proc


def ip_batch(commands: t.Iterable[str], netns: str = "", force: bool = False, owner: str = "", check: bool = True,
             what: str = "") -> "subprocess.CompletedProcess[bytes]":
    """``ip [-n NETNS] [-force] -batch -`` fed ``commands``, one per line."""
    argv = ["ip"] + (["-n", netns] if netns else []) + (["-force"] if force else []) + ["-batch", "-"]
    return run(argv, "".join(c + "\n" for c in commands), owner=owner, check=check,
               what=what or " ".join(argv[:-1]))
