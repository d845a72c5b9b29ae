# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection builds into a tarball that installs and whose plugins load from the install."""

from __future__ import annotations

import glob
import os
import subprocess
import typing as t

from repo_helpers import REPO, VENV_BIN

COLLECTION = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster")


def run(*cmd: str, cwd: str, env: t.Optional[t.Dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_build_install_and_load(tmp_path: t.Any) -> None:
    out, dest = str(tmp_path / "dist"), str(tmp_path / "installed")
    # Away from the repository's ansible.cfg, whose collections path already holds this collection
    # (ansible-galaxy would then report it as installed and do nothing).
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=dest, ANSIBLE_CONFIG=str(cfg))
    built = run(os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", out, COLLECTION,
                cwd=str(tmp_path), env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = glob.glob(os.path.join(out, "backendai-cluster-*.tar.gz"))
    listing = run("tar", "tzf", tarball, cwd=str(tmp_path)).stdout.splitlines()
    assert "plugins/modules/session.py" in listing and "meta/runtime.yml" in listing
    assert not [n for n in listing if n.startswith("tests/output") or "__pycache__" in n]
    installed = run(os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", dest, tarball,
                    cwd=str(tmp_path), env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert os.path.isfile(os.path.join(dest, "ansible_collections", "backendai", "cluster", "MANIFEST.json"))
    doc = run(os.path.join(VENV_BIN, "ansible-doc"), "-t", "module", "backendai.cluster.session", cwd=str(tmp_path), env=env)
    assert doc.returncode == 0 and dest in doc.stdout, doc.stderr
