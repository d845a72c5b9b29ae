# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cgroups of local containers, on stand-in hierarchies (directories and a mountinfo of their own): v1, v2,
hybrid and none are detected; the limits written; OOM kills read. No root needed (the real hierarchies are
exercised by tests/local_runtime/test_container_isolation.py)."""

from __future__ import annotations

import os
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._local import cgroups as cg


def _mountinfo(tmp: t.Any, v1: t.Dict[str, str], v2: t.Optional[str], v2_controllers: str = "") -> str:
    lines = ["22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw"]
    for i, (ctrls, mount) in enumerate(sorted(v1.items())):
        os.makedirs(mount, exist_ok=True)
        lines.append("%d 31 0:%d / %s rw,relatime - cgroup cgroup rw,%s" % (40 + i, 29 + i, mount, ctrls))
    if v2 is not None:
        os.makedirs(v2, exist_ok=True)
        with open(os.path.join(v2, "cgroup.controllers"), "w", encoding="ascii") as f:
            f.write(v2_controllers + "\n")
        lines.append("60 31 0:50 / %s rw,relatime - cgroup2 cgroup2 rw" % v2)
    path = os.path.join(str(tmp), "mountinfo")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_this_machines_layout_v1_controllers_and_an_empty_v2(tmp_path: t.Any) -> None:
    fs = str(tmp_path / "fs")
    mi = _mountinfo(tmp_path, {"memory": fs + "/memory", "cpu": fs + "/cpu", "pids": fs + "/pids",
                               "cpuacct": fs + "/cpuacct"}, fs + "/unified", "")
    hier = cg.detect(mi)
    assert hier.places == {"memory": (fs + "/memory", 1), "cpu": (fs + "/cpu", 1), "pids": (fs + "/pids", 1)}
    assert hier.missing == []
    assert hier.dirs("bai-x-main1") == sorted("%s/%s/backendai-cluster.bai-x-main1" % (fs, c) for c in cg.CONTROLLERS)


def test_unified_only_and_hybrid_and_none(tmp_path: t.Any) -> None:
    fs = str(tmp_path / "fs")
    unified = cg.detect(_mountinfo(tmp_path, {}, fs, "cpuset cpu io memory hugetlb pids rdma"))
    assert unified.places == {c: (fs, 2) for c in cg.CONTROLLERS} and unified.dirs("n") == [fs + "/backendai-cluster.n"]
    hybrid = cg.detect(_mountinfo(tmp_path, {"cpu,cpuacct": fs + "/cpu,cpuacct"}, fs + "/unified", "memory pids"))
    assert hybrid.places == {"cpu": (fs + "/cpu,cpuacct", 1), "memory": (fs + "/unified", 2), "pids": (fs + "/unified", 2)}
    none = cg.detect(_mountinfo(tmp_path, {}, fs + "/empty", ""))
    assert none.places == {} and none.missing == list(cg.CONTROLLERS) and none.dirs("n") == []
    assert cg.detect(str(tmp_path / "no-such-mountinfo")).missing == list(cg.CONTROLLERS)


def test_cpu_quota_is_mhz_over_mhz_per_core_within_bounds() -> None:
    assert cg.cpu_quota_us(1000, 2000.0, 2) == 50000      # half a core
    assert cg.cpu_quota_us(3000, 2000.0, 2) == 150000     # one and a half
    assert cg.cpu_quota_us(99999, 2000.0, 2) == 200000    # never more than every core
    assert cg.cpu_quota_us(1, 3000.0, 2) == cg.MIN_QUOTA_US
    assert cg.cpu_quota_us(1000, 0.0, 2) == 0             # MHz unknown: no quota


def test_mhz_per_core_prefers_cpufreq_then_cpuinfo(tmp_path: t.Any) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2596.134\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n")
    freq = tmp_path / "cpufreq"
    assert cg.mhz_per_core(str(cpuinfo), str(freq)) == pytest.approx(2596.134)
    freq.mkdir()
    (freq / "cpuinfo_max_freq").write_text("3200000\n")
    assert cg.mhz_per_core(str(cpuinfo), str(freq)) == 3200.0
    assert cg.mhz_per_core(str(tmp_path / "none"), str(tmp_path / "none")) == 0.0


def test_shm_is_half_the_memory_at_least_64_mb() -> None:
    assert cg.shm_size_mb(8192) == 4096 and cg.shm_size_mb(100) == 64


@pytest.mark.parametrize("version", [1, 2])
def test_create_writes_the_limits_and_remove_is_safe_to_repeat(tmp_path: t.Any, version: int) -> None:
    fs = str(tmp_path / "fs")
    if version == 1:
        mi = _mountinfo(tmp_path, {c: "%s/%s" % (fs, c) for c in cg.CONTROLLERS}, None)
    else:
        mi = _mountinfo(tmp_path, {}, fs, "memory cpu pids")
    hier = cg.detect(mi)
    # (a real hierarchy has the controllers' files in a new cgroup; here: files this test makes first)
    for d in hier.dirs("bai-x-main1"):
        os.makedirs(d)
        for controller in cg.CONTROLLERS:
            for name, _value in cg.limits(version, controller, 256, 38520):
                if name not in ("memory.memsw.limit_in_bytes",):  # no swap accounting on this "machine"
                    open(os.path.join(d, name), "w", encoding="ascii").close()
    cg.enable(hier)
    assert cg.create(hier, "bai-x-main1", 256) == []
    assert cg.set_cpu_quota(hier, "bai-x-main1", 38520) == []

    def read(controller: str, name: str) -> str:
        d = next(x for x in hier.dirs("bai-x-main1") if version == 2 or "/%s/" % controller in x)
        with open(os.path.join(d, name), encoding="ascii") as f:
            return f.read()
    if version == 1:
        assert read("memory", "memory.limit_in_bytes") == str(256 << 20)
        assert (read("cpu", "cpu.cfs_period_us"), read("cpu", "cpu.cfs_quota_us")) == ("100000", "38520")
    else:
        assert (read("memory", "memory.max"), read("memory", "memory.swap.max")) == (str(256 << 20), "0")
        assert read("cpu", "cpu.max") == "38520 100000"
        with open(fs + "/cgroup.subtree_control", encoding="ascii") as f:
            assert f.read() == "+memory +cpu +pids"
    assert read("pids", "pids.max") == str(cg.PIDS_LIMIT)
    cg.release_cpu(hier.dirs("bai-x-main1"))
    assert read("cpu", "cpu.cfs_quota_us" if version == 1 else "cpu.max") == ("-1" if version == 1 else "max")
    for d in hier.dirs("bai-x-main1"):  # what the kernel's files would not leave behind
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
    assert cg.remove(hier.dirs("bai-x-main1")) == []
    assert not any(os.path.exists(d) for d in hier.dirs("bai-x-main1"))
    assert cg.remove(hier.dirs("bai-x-main1")) == []


def test_v2_controllers_are_enabled_once_per_session_not_per_container(tmp_path: t.Any) -> None:
    fs = str(tmp_path / "fs")
    hier = cg.detect(_mountinfo(tmp_path, {}, fs, "memory cpu pids"))
    control = os.path.join(fs, "cgroup.subtree_control")
    cg.enable(hier)
    with open(control, encoding="ascii") as f:
        assert f.read() == "+memory +cpu +pids"
    os.unlink(control)
    for leaf in ("bai-x-main1", "bai-x-sub1", "bai-x-sub2"):
        cg.create(hier, leaf, 256)
    assert not os.path.exists(control)  # no container wrote it again
    cg.enable(cg.detect(_mountinfo(tmp_path, {c: "%s/v1/%s" % (fs, c) for c in cg.CONTROLLERS}, None)))
    assert not os.path.exists(control)  # nothing to enable on v1


def test_oom_kills_are_read_from_v1_and_v2(tmp_path: t.Any) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cg.oom_kills([str(v1)]) == 2 and cg.oom_kills([str(v2)]) == 1
    assert cg.oom_kills([str(tmp_path / "gone")]) == 0
