# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the local backend reads of this machine for the engine's limits (``_local.engine``): the MHz of a core, which
turns the spec's CPU MHz into podman's ``--cpus``, as Nomad's fingerprint reads it."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import engine


def test_mhz_per_core_prefers_cpufreq_then_cpuinfo(tmp_path: t.Any) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2596.134\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n")
    freq = tmp_path / "cpufreq"
    assert engine.mhz_per_core(str(cpuinfo), str(freq)) == pytest.approx(2596.134)
    freq.mkdir()
    (freq / "cpuinfo_max_freq").write_text("3200000\n")
    assert engine.mhz_per_core(str(cpuinfo), str(freq)) == 3200.0
    assert engine.mhz_per_core(str(tmp_path / "none"), str(tmp_path / "none")) == 0.0
