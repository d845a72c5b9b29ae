# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the repository-level tests."""

from __future__ import annotations

import os

import pytest

from repo_helpers import NOMAD_JOB_LINT, SHARED


@pytest.fixture(scope="session")
def shared_dir() -> str:
    if not os.path.isfile(NOMAD_JOB_LINT):
        pytest.fail("../shared/tools/nomad-job-lint is missing: clone the repo with ../shared beside it")
    return SHARED
