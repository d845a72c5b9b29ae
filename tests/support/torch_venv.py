# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The torch venv the torch tests mount into their sessions (``tests/local_runtime/test_torch_gloo.py``): a venv of the
machine's ``/usr/bin/python3`` (Debian's, as the example image's) under the repository's ``.cache/`` (kept between runs,
ignored by git), with ``pip install torch==2.13.0`` (a CPU build, about 0.9 GB installed, which pip on this project's
machines finds on their disk; elsewhere point pip at PyTorch's CPU index, e.g.
``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``).

Making it takes about half a minute of pip. ``scripts/run-tests`` starts ``python tests/support/torch_venv.py`` beside
the tests when its pytest step begins, so that the machine tests (one after another under the machine lock) do not
wait for pip: a test that needs the venv takes the same file lock (``.cache/torch-venv.lock``) and so waits only if the
maker has not finished, then finds the venv made (or makes it itself, when run without ``scripts/run-tests``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import typing as t

from repo_helpers import REPO

TORCH = "torch==2.13.0"
CACHE = os.path.join(REPO, ".cache")
VENV = os.path.join(CACHE, "torch-venv")
PYTHON = os.path.join(VENV, "bin", "python")
LOCK = os.path.join(CACHE, "torch-venv.lock")


def _made() -> bool:
    """The venv holds TORCH (its public version: a CPU build is ``2.13.0+cpu``). A venv that does is taken as it is: its
    package metadata says so in a tenth of a second, where importing torch takes seconds, and the tests that use it
    import it in their containers anyway."""
    installed = [PYTHON, "-c", "import importlib.metadata as m; print(m.version('torch'))"]
    return os.path.exists(PYTHON) and subprocess.run(installed, capture_output=True, text=True, check=False
                                                     ).stdout.strip().split("+")[0] == TORCH.split("==")[1]


def ensure() -> t.Optional[str]:
    """Make the venv unless it is made (under the file lock, so a maker beside the tests and a test never both make
    it); None when it is ready, else why it cannot be made."""
    os.makedirs(CACHE, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _made():
            return None
        steps = [["/usr/bin/python3", "-m", "venv", "--clear", VENV],
                 [PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", TORCH],
                 [PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"]]
        for step in steps:
            p = subprocess.run(step, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                return "cannot install %s for the containers (%s): %s" % (TORCH, " ".join(step[:4]), p.stderr[-600:])
        return None
    finally:
        os.close(fd)


if __name__ == "__main__":
    reason = ensure()
    print(reason or "torch venv ready: " + VENV)
    sys.exit(1 if reason else 0)
