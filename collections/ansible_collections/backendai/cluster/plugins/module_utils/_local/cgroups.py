# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cgroups of local containers: one per container, holding the spec's memory, CPU and a pids limit.

Each of the three controllers (memory, cpu, pids) is used in the hierarchy that has it on this machine:
a cgroup v1 hierarchy mounted with it (``/sys/fs/cgroup/memory`` ...) or the unified (v2) hierarchy whose
root lists it in ``cgroup.controllers`` (then it is enabled in the root's ``cgroup.subtree_control``, once per
session: :func:`enable`).
A container's cgroup is ``<hierarchy>/backendai-cluster.<netns name>`` in each hierarchy used (the netns
name is unique per container on this machine), at the top of the hierarchy: each container is one
entity of the CPU scheduler's top level, as its own session's autogroup made it before it had a cgroup
(under one shared parent, every local container together would weigh as much as one process of the
machine: bring-up on a busy machine took 1.4 times as long). The container's supervisor writes ``0`` (itself) into each
``cgroup.procs`` as its first act, so everything of the container, sshd and the user's command included,
runs inside. A controller that no hierarchy offers is left out with a warning (the session still runs,
without that limit: see the isolation table of docs/local-runtime.md).

Limits: memory = the container's memory (MB), swap included (v1 ``memory.memsw.limit_in_bytes``, v2
``memory.swap.max`` 0) so the limit is not swapped around; CPU quota = cpu MHz / the machine's MHz per core
× the period (100 ms), at most every core, at least the kernel's 1 ms (no quota when this machine tells no
MHz: see :func:`mhz_per_core`); pids = :data:`PIDS_LIMIT`.
"""
from __future__ import annotations

import errno
import os
import time
import typing as t

CONTROLLERS = ("memory", "cpu", "pids")
PREFIX = "backendai-cluster."
#: Processes and threads per container. Threads count: a torch rank with NCCL, OpenMP and data-loader
#: workers runs some hundreds, mpirun and sshd a few each; 4096 leaves the machine's own pid space (32768 by
#: default) to the machine when one container fork-bombs.
PIDS_LIMIT = 4096
CFS_PERIOD_US = 100000
MIN_QUOTA_US = 1000  # the kernel refuses a smaller cfs_quota_us
MOUNTINFO = "/proc/self/mountinfo"


class Hierarchies(t.NamedTuple):
    """Where each controller is: controller -> (mount point, version 1 or 2); and what is missing."""

    places: t.Dict[str, t.Tuple[str, int]]
    missing: t.List[str]

    def dirs(self, leaf: str) -> t.List[str]:
        """The container's cgroup directories (one per hierarchy used)."""
        return sorted({os.path.join(mount, PREFIX + leaf) for mount, _v in self.places.values()})

    def mounts(self) -> t.List[t.Tuple[str, int, t.List[str]]]:
        """(mount point, version, its controllers) of each hierarchy used, by mount point."""
        by_mount: t.Dict[str, t.List[str]] = {}
        for controller, (mount, _v) in self.places.items():
            by_mount.setdefault(mount, []).append(controller)
        return [(mount, self.places[controllers[0]][1], controllers) for mount, controllers in sorted(by_mount.items())]


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def detect(mountinfo: str = MOUNTINFO) -> Hierarchies:
    """The hierarchies this machine offers for :data:`CONTROLLERS` (v1 first: a controller bound to a v1
    hierarchy is absent from v2's ``cgroup.controllers`` anyway)."""
    v1: t.Dict[str, str] = {}
    v2: t.List[str] = []
    try:
        with open(mountinfo, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        pre, _sep, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount = _unescape(fields[4])
        if tail[0] == "cgroup2":
            v2.append(mount)
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                if opt in CONTROLLERS:
                    v1.setdefault(opt, mount)
    places = {c: (m, 1) for c, m in v1.items()}
    for mount in v2[:1]:
        try:
            with open(os.path.join(mount, "cgroup.controllers"), encoding="ascii") as f:
                offered = f.read().split()
        except OSError:
            offered = []
        places.update({c: (mount, 2) for c in CONTROLLERS if c in offered and c not in places})
    return Hierarchies(places, [c for c in CONTROLLERS if c not in places])


def mhz_per_core(cpuinfo: str = "/proc/cpuinfo", cpufreq: str = "/sys/devices/system/cpu/cpu0/cpufreq") -> float:
    """The machine's MHz per core, the way Nomad's fingerprint reads it: the nominal maximum (cpufreq's
    ``cpuinfo_max_freq``, kHz) if the kernel has it, else the highest ``cpu MHz`` of /proc/cpuinfo; 0 when
    neither tells (some VMs and arm machines): then no CPU quota is set, with a warning."""
    try:
        with open(os.path.join(cpufreq, "cpuinfo_max_freq"), encoding="ascii") as f:
            return int(f.read().strip()) / 1000.0
    except (OSError, ValueError):
        pass
    best = 0.0
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _sep, value = line.partition(":")
                if key.strip().lower() == "cpu mhz":
                    try:
                        best = max(best, float(value))
                    except ValueError:
                        pass
    except OSError:
        pass
    return best


def cpu_quota_us(cpu_mhz: int, core_mhz: float, cores: int) -> int:
    """cfs quota for ``cpu_mhz`` per :data:`CFS_PERIOD_US`: cpu_mhz / core_mhz cores (0: no quota)."""
    if core_mhz <= 0 or cpu_mhz <= 0:
        return 0
    quota = int(CFS_PERIOD_US * cpu_mhz / core_mhz)
    return max(MIN_QUOTA_US, min(quota, CFS_PERIOD_US * max(1, cores)))


def shm_size_mb(memory_mb: int) -> int:
    """The container's /dev/shm: half its memory (torch's data loaders and NCCL's shared-memory transport
    need far more than Docker's 64 MB default; tmpfs pages are charged to the container's memory limit
    anyway, so a full /dev/shm cannot take the machine's memory), at least 64 MB."""
    return max(64, memory_mb // 2)


def limits(version: int, controller: str, memory_mb: int, quota_us: int) -> t.List[t.Tuple[str, str]]:
    """(file, value) to write, in order, for one controller in a hierarchy of ``version``."""
    mem = str(memory_mb * 1024 * 1024)
    if controller == "memory":
        if version == 1:
            # memsw (memory + swap) exists with swap accounting; it must be set after the memory limit.
            return [("memory.limit_in_bytes", mem), ("memory.memsw.limit_in_bytes", mem)]
        return [("memory.max", mem), ("memory.swap.max", "0")]
    if controller == "cpu":
        if not quota_us:
            return []
        if version == 1:
            return [("cpu.cfs_period_us", str(CFS_PERIOD_US)), ("cpu.cfs_quota_us", str(quota_us))]
        return [("cpu.max", "%d %d" % (quota_us, CFS_PERIOD_US))]
    return [("pids.max", str(PIDS_LIMIT))]


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def enable(hier: Hierarchies) -> None:
    """Turn the controllers used in the v2 hierarchy on for the children of its root: once per session, before
    its containers' cgroups are made (the root is every container's parent)."""
    for mount, version, controllers in hier.mounts():
        if version == 2:
            _write(os.path.join(mount, "cgroup.subtree_control"), " ".join("+" + c for c in controllers))


def _set(path: str, version: int, controller: str, memory_mb: int, quota_us: int) -> t.List[str]:
    warnings = []
    for name, value in limits(version, controller, memory_mb, quota_us):
        if not os.path.exists(os.path.join(path, name)):  # (cgroupfs refuses to create a file: EACCES)
            if name not in ("memory.memsw.limit_in_bytes", "memory.swap.max"):  # no swap accounting: no swap to escape to
                warnings.append("%s: %s missing" % (path, name))
            continue
        try:
            _write(os.path.join(path, name), value)
        except OSError as e:
            warnings.append("%s: cannot set %s to %s: %s" % (path, name, value, e.strerror))
    return warnings


def create(hier: Hierarchies, leaf: str, memory_mb: int) -> t.List[str]:
    """Make the container's cgroups with their memory and pids limits (the CPU quota comes with
    :func:`set_cpu_quota`; the v2 controllers are on once :func:`enable` ran); returns the warnings (a limit
    this machine refused). Raises OSError when a cgroup cannot be made at all."""
    warnings = []
    for mount, version, controllers in hier.mounts():
        path = os.path.join(mount, PREFIX + leaf)
        os.makedirs(path, exist_ok=True)
        for controller in controllers:
            if controller != "cpu":
                warnings += _set(path, version, controller, memory_mb, 0)
    return warnings


def set_cpu_quota(hier: Hierarchies, leaf: str, quota_us: int) -> t.List[str]:
    """The container's CPU quota (0: none); the runtime sets it once the container has started (its
    processes are in the cgroup from the start: only the value comes later, so that sshd's start-up is
    not throttled to a fraction of a core while the session waits for every sshd)."""
    if "cpu" not in hier.places or not quota_us:
        return []
    mount, version = hier.places["cpu"]
    return _set(os.path.join(mount, PREFIX + leaf), version, "cpu", 0, quota_us)


def release_cpu(dirs: t.Iterable[str]) -> None:
    """Lift the CPU quota before the container is killed: a killed process still has to run to exit, and
    thousands of them (a fork bomb at its pids limit) held to a fraction of a core take minutes to go."""
    for d in dirs:
        for name, value in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
            try:
                _write(os.path.join(d, name), value)
            except OSError:
                pass  # not this hierarchy's file, or the cgroup is gone already


def remove(dirs: t.Iterable[str], timeout: float = 5.0) -> t.List[str]:
    """rmdir the cgroups (their processes are gone by now); safe to repeat. A cgroup whose last process is
    still being torn down by the kernel is busy for a moment: retried until ``timeout``."""
    errors = []
    deadline = time.monotonic() + timeout
    for d in dirs:
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno == errno.EBUSY and time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
                errors.append("rmdir cgroup %s: %s" % (d, e.strerror))
                break
    return errors


def _counter(path: str, key: str) -> int:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                name, _sep, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
    except OSError:
        pass
    return 0


def oom_kills(dirs: t.Iterable[str]) -> int:
    """How many processes the kernel's OOM killer killed in the container's memory cgroup (v1
    ``memory.oom_control`` oom_kill, kernel >= 4.13; v2 ``memory.events`` oom_kill)."""
    return sum(_counter(os.path.join(d, "memory.oom_control"), "oom_kill")
               + _counter(os.path.join(d, "memory.events"), "oom_kill") for d in dirs)
