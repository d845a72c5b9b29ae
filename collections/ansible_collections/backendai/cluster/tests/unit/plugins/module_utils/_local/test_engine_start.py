# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's container start and removal without an engine: the CPU quota ``podman run`` gets, and ``podman rm``
tried again when podman is still recording a killed container's exit. No root needed."""

from __future__ import annotations

import subprocess
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import teardown
from ansible_collections.backendai.cluster.plugins.module_utils._local.task_start import (
    CPU_PERIOD_US,
    MIN_CPU_QUOTA_US,
    run_args,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import render_job
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import make_plan


def _cpu_args(cpu: int, core_mhz: float) -> t.List[str]:
    job = render_job(make_plan(cluster_size=2, resources={"cpu": cpu, "memory": 64}))
    volumes = {g["Source"]: "/v" for g in job["TaskGroups"][0]["Volumes"].values()}
    args = run_args(job, "main1", name="c", netns_path="/run/netns/n", task_dir="/t", alloc_dir="/a", hosts_file="/h",
                    host_volumes=volumes, core_mhz=core_mhz)
    return [a for i, a in enumerate(args) if a.startswith("--cpu") or (i and args[i - 1].startswith("--cpu"))]


def test_the_cpu_quota_is_the_share_of_a_one_second_period() -> None:
    assert CPU_PERIOD_US == 1000000
    assert _cpu_args(1000, 2000.0) == ["--cpu-period", "1000000", "--cpu-quota", "500000"]  # half a core
    assert _cpu_args(76, 2445.4) == ["--cpu-period", "1000000", "--cpu-quota", "31079"]
    assert _cpu_args(1, 3000.0) == ["--cpu-period", "1000000", "--cpu-quota", str(MIN_CPU_QUOTA_US)]
    assert _cpu_args(1000, 0.0) == []  # MHz unknown: no quota


class _Podman:
    """``podman rm`` that fails as podman 4.3 does while it records a killed container's exit, ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: t.List[t.List[str]] = []

    def __call__(self, args: t.Sequence[str], conf: str, check: bool = True, **_kw: t.Any) -> "subprocess.CompletedProcess[bytes]":
        self.calls.append(list(args))
        if len(self.calls) <= self.failures:
            return subprocess.CompletedProcess(args, 125, b"", b"Error: cannot remove container 1f as it could not be "
                                               b"stopped: sending SIGKILL to container 1f: container state improper: stopped")
        return subprocess.CompletedProcess(args, 0, b"", b"")


@pytest.mark.parametrize("failures", [0, 1, teardown.RM_ATTEMPTS - 1])
def test_podman_rm_is_tried_again_while_a_killed_container_exit_is_recorded(
        monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
    fake = _Podman(failures)
    monkeypatch.setattr(teardown, "podman", fake)
    monkeypatch.setattr(teardown.time, "sleep", lambda _s: None)
    assert teardown.remove_containers(["a", "b"], "/conf") == []
    assert len(fake.calls) == failures + 1
    assert all(c == ["rm", "--force", "--ignore", "--volumes", "--time", "0", "a", "b"] for c in fake.calls)


def test_podman_rm_that_keeps_failing_is_an_error_naming_podman_s_message(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _Podman(teardown.RM_ATTEMPTS)
    monkeypatch.setattr(teardown, "podman", fake)
    monkeypatch.setattr(teardown.time, "sleep", lambda _s: None)
    (error,) = teardown.remove_containers(["a"], "/conf")
    assert error.startswith("podman rm a: Error: cannot remove container") and "state improper" in error
    assert len(fake.calls) == teardown.RM_ATTEMPTS
