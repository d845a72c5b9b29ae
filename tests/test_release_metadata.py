# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""galaxy.yml, changelogs/changelog.yaml and CHANGELOG.rst agree with each other.

Releasing: add the fragments, run ``antsibull-changelog release --version X`` in the collection and
set galaxy.yml's version to X; this test then passes again.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from repo_helpers import VENV_BIN
from test_collection_build import COLLECTION


def load(name: str) -> dict:
    with open(os.path.join(COLLECTION, name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def version_key(version: str) -> tuple:
    return tuple(int(part) for part in version.split("."))


def test_galaxy_version_is_the_newest_release() -> None:
    galaxy = load("galaxy.yml")
    releases = load("changelogs/changelog.yaml")["releases"]
    assert galaxy["version"] == max(releases, key=version_key)
    text = open(os.path.join(COLLECTION, "galaxy.yml"), encoding="utf-8").read()
    assert "example.invalid" not in text and "example.com" not in text


def test_the_cni_plugin_carries_the_collection_version() -> None:
    """Nomad fingerprints the plugin's version (plugins.cni.version.backendai) from what it prints with no arguments."""
    from ansible_collections.backendai.cluster.plugins.module_utils._network._cni_plugin import PLUGIN_VERSION

    assert PLUGIN_VERSION == load("galaxy.yml")["version"]


@pytest.mark.slow  # antsibull-changelog runs as a process
def test_changelog_rst_is_what_antsibull_changelog_generates(tmp_path: object) -> None:
    copy = os.path.join(str(tmp_path), "cluster")
    os.makedirs(copy)
    for name in ("galaxy.yml", "CHANGELOG.rst"):
        shutil.copy(os.path.join(COLLECTION, name), copy)
    shutil.copytree(os.path.join(COLLECTION, "changelogs"), os.path.join(copy, "changelogs"))
    antsibull = os.path.join(VENV_BIN, "antsibull-changelog")
    lint = subprocess.run([antsibull, "lint"], cwd=copy, capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    gen = subprocess.run([antsibull, "generate"], cwd=copy, capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    with open(os.path.join(copy, "CHANGELOG.rst"), encoding="utf-8") as f:
        generated = f.read()
    with open(os.path.join(COLLECTION, "CHANGELOG.rst"), encoding="utf-8") as f:
        assert f.read() == generated, "CHANGELOG.rst is stale: run antsibull-changelog generate in the collection"
