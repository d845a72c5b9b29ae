# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local backend's container engine: podman, run with a containers.conf this collection owns.

Podman reads the file named by ``CONTAINERS_CONF`` instead of the machine's ``/etc/containers`` files (podman 4.x:
with the variable set, no other containers.conf is read), so the machine's configuration is never edited: the
backend writes its own under its state root (``<state_dir>/.engine/containers.conf``, :func:`write_conf`) and runs
every podman command with it (:func:`podman`). What goes in it is detected on this machine, never assumed:

* ``[engine] runtime = "runc"`` where the cgroups are *hybrid* (v1 controllers, an empty cgroup2 at
  ``/sys/fs/cgroup/unified``): crun (podman's default where installed) refuses them ("cgroups in hybrid mode not
  supported"), runc accepts; elsewhere podman's own choice stands;
* ``[containers] default_ulimits = []`` where root cannot raise ``RLIMIT_NOFILE``/``RLIMIT_NPROC`` to podman's
  default of 1048576 (no ``CAP_SYS_RESOURCE``, as in some VMs): the container start would fail with
  "setrlimit ... Operation not permitted"; containers then keep the limits podman itself has.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._files import ensure_file
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SANE_PATH, LocalRuntimeError, owner_env

PODMAN = "podman"
CONF_ENV = "CONTAINERS_CONF"
CONF_NAME = "containers.conf"
#: Where under a state root the containers.conf is kept (``session_names`` skips dot-directories).
ENGINE_DIR = ".engine"
#: The file a container's conmon writes into its working directory when the kernel's OOM killer struck in the
#: container's cgroup (conmon 2.1 as Debian 12 ships it, cgroup v1: observed here; podman 4.3 then reports no
#: ``OOMKilled``): the local backend runs ``podman run`` in the container's directory and reads it there.
OOM_MARKER = "oom"
#: podman's default soft and hard limit of open files and processes for a root container (libpod define.RLimitDefaultValue).
PODMAN_RLIMIT = 1048576


def _mount_types() -> t.Dict[str, str]:
    """Mount point -> file system type, from /proc/self/mounts."""
    out = {}
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3:
                    out[fields[1]] = fields[2]
    except OSError:
        pass
    return out


def hybrid_cgroups(mounts: t.Optional[t.Mapping[str, str]] = None) -> bool:
    """v1 controllers at /sys/fs/cgroup with a cgroup2 beside them (systemd's "hybrid" layout)."""
    mounts = _mount_types() if mounts is None else mounts
    return mounts.get("/sys/fs/cgroup") != "cgroup2" and mounts.get("/sys/fs/cgroup/unified") == "cgroup2"


def can_raise_rlimits() -> bool:
    """Whether a root process here may set podman's default open-files and processes limits (dash's ``ulimit``
    sets the soft and the hard limit: raising the hard one above its current value needs CAP_SYS_RESOURCE)."""
    proc = subprocess.run(["sh", "-c", "ulimit -n %d && ulimit -u %d" % (PODMAN_RLIMIT, PODMAN_RLIMIT)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": SANE_PATH}, check=False)
    return proc.returncode == 0


def conf_text(hybrid: bool, rlimits: bool, runc: bool) -> str:
    """The containers.conf this machine needs (see the module's docstring)."""
    lines = ["# Written by backendai.cluster's local backend, which runs podman with CONTAINERS_CONF set to this file",
             "# (the machine's /etc/containers is not read then). Detected on this machine; rewritten when that changes."]
    lines.append("[containers]")
    if not rlimits:
        lines.append("# root cannot raise RLIMIT_NOFILE/RLIMIT_NPROC to podman's default (no CAP_SYS_RESOURCE)")
        lines.append("default_ulimits = []")
    lines.append("[engine]")
    if hybrid:
        if not runc:
            raise LocalRuntimeError("this machine's cgroups are hybrid (v1 controllers, cgroup2 at /sys/fs/cgroup/unified), "
                                    "which crun refuses: install runc (apt-get install runc; scripts/setup does)")
        lines.append("# hybrid cgroups (v1 controllers, cgroup2 at /sys/fs/cgroup/unified): crun refuses them, runc accepts")
        lines.append('runtime = "runc"')
    return "\n".join(lines) + "\n"


def write_conf(directory: str) -> str:
    """Detect what this machine needs, write it to ``<directory>/containers.conf`` when it differs, return the path."""
    if shutil.which(PODMAN, path=SANE_PATH) is None:
        raise LocalRuntimeError("podman is not installed: install it with apt-get install podman runc (scripts/setup does)")
    text = conf_text(hybrid_cgroups(), can_raise_rlimits(), shutil.which("runc", path=SANE_PATH) is not None)
    path = os.path.join(directory, CONF_NAME)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ensure_file(path, text)
    return path


def podman(args: t.Sequence[str], conf: str, check: bool = True, what: str = "",
           timeout: t.Optional[float] = 120, cwd: t.Optional[str] = None,
           owner: t.Optional[str] = None) -> "subprocess.CompletedProcess[bytes]":
    """``podman ARGS`` with this collection's containers.conf (``conf``, from :func:`write_conf`), in ``cwd`` (its
    conmon's too: see :data:`OOM_MARKER`); a failure raises naming ``what`` (default: the command) and podman's
    message, or is returned with ``check=False``. ``owner``: the session's state directory, in podman's environment
    (``_local.state.owner_env``), so that a teardown kills a ``podman run`` a killed creator left running before it
    removes the session's containers (else that run makes its container after the removal)."""
    env = dict(owner_env(owner) if owner else {"PATH": SANE_PATH}, **{CONF_ENV: conf})
    try:
        proc = subprocess.run([PODMAN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              check=False, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise LocalRuntimeError("%s: podman did not answer in %ss" % (what or "podman " + " ".join(args[:2]), timeout)) from None
    if check and proc.returncode != 0:
        raise LocalRuntimeError("%s failed: %s" % (what or "podman " + " ".join(args[:2]),
                                                   proc.stderr.decode(errors="replace").strip()))
    return proc


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


def inspect_containers(names: t.Sequence[str], conf: str, fields: str) -> t.Dict[str, t.List[str]]:
    """Name -> the values of ``fields`` (podman templates separated by spaces, each a single word) of every named
    container, in one ``podman container inspect`` for all of them: a call costs ~40-100 ms here whatever the number of
    names, so one per container made a 64-container status read take seconds. A container that is gone is left out
    (podman prints the others and fails for it)."""
    if not names:
        return {}
    got = podman(["container", "inspect", "--format", "{{.Name}} " + fields] + list(names), conf, check=False)
    out = {}
    for line in got.stdout.decode(errors="replace").splitlines():
        words = line.split()
        if words:
            out[words[0]] = words[1:]
    return out


#: The file in a container's directory that ``podman run --cidfile`` writes the container's ID into as soon as the
#: container exists (before it starts): what teardown finds a container's cgroups by, also after a killed creator.
ENGINE_CIDFILE = "cid"
#: Where podman puts a container's cgroup in a hierarchy: under the cgroupfs manager's parent (podman without
#: systemd, as here: ``libpod_parent/libpod-<id>``) or the systemd manager's (``machine.slice/libpod-<id>.scope``).
CGROUP_PATTERNS = ("libpod_parent/libpod-%s", "machine.slice/libpod-%s.scope")
#: How long teardown waits for a container's cgroup to empty (its processes were killed just before) (s).
CGROUP_EMPTY_WAIT = 2.0


def read_cids(paths: t.Iterable[str]) -> t.List[str]:
    """The container IDs in these ``--cidfile`` files (a file that is not there: a container never made)."""
    out = []
    for path in paths:
        try:
            with open(path, encoding="ascii") as f:
                cid = f.read().strip()
        except (OSError, ValueError):
            continue
        if len(cid) == 64 and all(c in "0123456789abcdef" for c in cid):
            out.append(cid)
    return out


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> t.List[str]:
    """Every cgroup hierarchy (v1 and v2) mounted here."""
    out = set()
    try:
        with open(mountinfo, encoding="utf-8") as f:
            for line in f:
                pre, _sep, post = line.partition(" - ")
                if post.split()[:1] in (["cgroup"], ["cgroup2"]):
                    out.add(pre.split()[4].replace("\\040", " "))
    except OSError:
        pass
    return sorted(out)


def container_cgroups(cids: t.Iterable[str], mounts: t.Optional[t.Sequence[str]] = None) -> t.List[str]:
    """The cgroup directories of these containers that exist now, in every hierarchy."""
    mounts = cgroup_mounts() if mounts is None else mounts
    return [d for cid in cids for m in mounts for d in (os.path.join(m, p % cid) for p in CGROUP_PATTERNS)
            if os.path.isdir(d)]


def remove_cgroups(cids: t.Sequence[str], mounts: t.Optional[t.Sequence[str]] = None,
                   wait: float = CGROUP_EMPTY_WAIT) -> t.List[str]:
    """Remove the cgroups podman left of these (removed) containers: a ``podman run`` killed half-way leaves its
    container's cgroups behind, empty (conmon, which removes them when the container ends, never ran), and
    ``podman rm`` does not remove them. An empty cgroup is removed with ``rmdir`` (sub-groups first); one that still
    has processes after ``wait`` seconds is reported (its processes outlived the session's kill), never forced."""
    deadline = time.monotonic() + wait
    errors: t.List[str] = []
    for top in container_cgroups(cids, mounts):
        below = sorted((os.path.join(d, s) for d, subs, _f in os.walk(top) for s in subs), key=len, reverse=True)
        for d in below + [top]:
            while True:
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError as exc:  # EBUSY: processes in it (still exiting); EROFS and the like: not ours to fix
                    if exc.errno == errno.EBUSY and time.monotonic() < deadline:
                        time.sleep(0.05)
                        continue
                    errors.append("cgroup %s of a removed container: %s" % (d, exc.strerror))
                break
    return errors
