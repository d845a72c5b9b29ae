# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's own documentation covers what it ships: README (every module, inventory plugin,
role and playbook) and the docsite guide (valid reStructuredText, every cluster variable)."""

from __future__ import annotations

import glob
import os
import subprocess

from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import RESERVED_ENV
from repo_helpers import VENV_BIN
from test_collection_build import COLLECTION


def names(pattern: str) -> list:
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(COLLECTION, pattern))
                  if not os.path.basename(p).startswith("_"))


def test_readme_covers_every_module_plugin_role_and_playbook() -> None:
    with open(os.path.join(COLLECTION, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    shipped = (["backendai.cluster.%s" % n for n in names("plugins/modules/*.py")]
               + ["backendai.cluster.%s" % n for n in names("plugins/inventory/*.py")]
               + ["backendai.cluster.%s" % n for n in names("roles/*")]
               + ["`%s`" % n for n in names("playbooks/*.yml")])
    assert len(shipped) >= 11  # 4 modules, 1 inventory plugin, 1 role, 5 playbooks: the globs found them
    assert [n for n in shipped if n not in readme] == []
    assert "example.invalid" not in readme and "repository README" not in readme


def test_docsite_guide_is_valid_rst_with_every_cluster_variable() -> None:
    guide = os.path.join(COLLECTION, "docs", "docsite", "rst", "guide.rst")
    checked = subprocess.run([os.path.join(VENV_BIN, "rstcheck"), "--report-level", "warning", guide],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with open(guide, encoding="utf-8") as f:
        text = f.read()
    assert [v for v in sorted(RESERVED_ENV) if "``%s``" % v not in text] == []
    with open(os.path.join(COLLECTION, "docs", "docsite", "extra-docs.yml"), encoding="utf-8") as f:
        assert "- guide" in f.read()
