# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local images the engine tests run, built from Debian packages by ``scripts/build-images`` (no registry).

:func:`image` builds an image once (the script keeps it while its recipe label matches: a second run costs a
``podman image inspect``) and returns its name; :func:`engine_conf` is the containers.conf every podman command of
the tests runs with (``CONTAINERS_CONF``), the one the script writes after detecting what this machine needs.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import typing as t

from repo_helpers import REPO

BUILD = os.path.join(REPO, "scripts", "build-images")


def engine_missing() -> t.Optional[str]:
    """Why the engine tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root"
    missing = [x for x in ("podman", "mmdebstrap") if shutil.which(x) is None]
    if missing or not os.access("/bin/busybox", os.X_OK):
        return "needs podman, mmdebstrap and busybox-static (scripts/setup installs them)"
    return None


def _build(*args: str) -> str:
    proc = subprocess.run([sys.executable, BUILD] + list(args), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError("scripts/build-images %s failed:\n%s" % (" ".join(args), proc.stderr))
    return proc.stdout


@functools.lru_cache(maxsize=None)
def engine_conf() -> str:
    return _build("--conf").strip()


@functools.lru_cache(maxsize=None)
def image(name: str) -> str:
    """``localhost/backendai-cluster/<name>:bookworm``, built if missing or out of date."""
    (line,) = _build(name).splitlines()
    return line.split()[1]


def podman(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, CONTAINERS_CONF=engine_conf())
    proc = subprocess.run(["podman"] + list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("podman %s failed: %s" % (" ".join(args[:3]), proc.stderr))
    return proc
