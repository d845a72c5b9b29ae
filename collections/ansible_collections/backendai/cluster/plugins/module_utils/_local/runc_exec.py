# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A command in a podman container through the OCI runtime podman runs it with (``runc exec``), without podman.

``podman exec`` costs ~0.2 s of machine time per container (a podman process reading its database, conmon, then
runc); ``runc exec`` alone is ~3.5 times cheaper, which is what puts 64 execs within 2 s on two cores
(``benchmarks/session_exec.py``). What podman exec adds is rebuilt here from podman's own record of the container, as
podman 4.3 does it (libpod ``prepareProcessExec``): the process is the container's own OCI process (its ``config.json``:
environment, rlimits, ``noNewPrivileges``, AppArmor profile, umask) with the arguments, the working directory and the
user replaced; the user is looked up in the container's ``/etc/passwd`` and ``/etc/group`` (uid, gid, supplementary
groups, ``HOME``); capabilities: root keeps the container's bounding set as effective and permitted, any other user
gets none (no inheritable for anyone). runc then joins the container's namespaces and every one of its cgroups (runc
``setnsProcess.start`` writes the process into each cgroup path of the container's state), and applies its seccomp
filter and no-new-privileges, as for podman's exec.

:func:`plan` returns ``None`` where this is not possible (another runtime such as crun, no runc state where podman
as root keeps it, a user the container does not know): the caller falls back to ``podman exec``.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import typing as t

#: runc's state directory when run as root without ``--root``: podman (as root) passes no ``--root`` to runc.
RUNC_ROOT = "/run/runc"
#: runc's exit code when it could not run the process at all (``exec failed: ...``, runc ``exec.go``).
RUNC_EXEC_FAILED = 255


def from_inspect(entry: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """What :func:`plan` needs of one container of ``podman container inspect``'s output."""
    state = entry.get("State") if isinstance(entry.get("State"), dict) else {}
    driver = entry.get("GraphDriver") if isinstance(entry.get("GraphDriver"), dict) else {}
    data = driver.get("Data") if isinstance(driver.get("Data"), dict) else {}
    return {"name": entry.get("Name"), "id": entry.get("Id"), "runtime": entry.get("OCIRuntime"),
            "config": entry.get("OCIConfigPath"), "running": state.get("Running") is True, "rootfs": data.get("MergedDir"),
            "pid": state.get("Pid")}


def plan(inspected: t.Mapping[str, t.Any], user: str, argv: t.Sequence[str],
         runc_root: str = RUNC_ROOT) -> t.Optional[t.Dict[str, t.Any]]:
    """The runc process spec for ``argv`` as ``user`` in the inspected container, or ``None`` (use podman exec)."""
    cid = str(inspected.get("id") or "")
    if (inspected.get("runtime") != "runc" or not inspected.get("running") or not cid or "/" in cid
            or not os.path.isfile(os.path.join(runc_root, cid, "state.json"))):
        return None
    try:
        with open(str(inspected.get("config")), encoding="utf-8") as f:
            process = copy.deepcopy(json.load(f)["process"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    account = lookup_user(str(inspected.get("rootfs") or ""), user)
    if account is None or not isinstance(process, dict):
        return None
    uid, gid, home, groups = account
    if not process.get("rlimits") and isinstance(inspected.get("pid"), int) and inspected["pid"] > 0:
        process["rlimits"] = init_rlimits(inspected["pid"])
    process["args"] = list(argv)
    process["cwd"] = home
    process["terminal"] = False
    process.pop("consoleSize", None)
    process["user"] = dict(process.get("user") or {}, uid=uid, gid=gid, additionalGids=groups)
    process["env"] = [e for e in process.get("env") or [] if not e.startswith("HOME=")] + ["HOME=" + home]
    caps = dict(process.get("capabilities") or {})
    bounding = list(caps.get("bounding") or [])
    kept = bounding if uid == 0 else []
    process["capabilities"] = {"bounding": bounding, "effective": kept, "permitted": kept, "inheritable": [],
                               "ambient": []}
    return {"id": cid, "process": process}


#: ``/proc/<pid>/limits`` names of the limits an OCI process spec can set.
LIMITS = {"Max cpu time": "RLIMIT_CPU", "Max file size": "RLIMIT_FSIZE", "Max data size": "RLIMIT_DATA",
          "Max stack size": "RLIMIT_STACK", "Max core file size": "RLIMIT_CORE", "Max processes": "RLIMIT_NPROC",
          "Max open files": "RLIMIT_NOFILE", "Max locked memory": "RLIMIT_MEMLOCK", "Max address space": "RLIMIT_AS",
          "Max file locks": "RLIMIT_LOCKS", "Max pending signals": "RLIMIT_SIGPENDING",
          "Max msgqueue size": "RLIMIT_MSGQUEUE", "Max nice priority": "RLIMIT_NICE",
          "Max realtime priority": "RLIMIT_RTPRIO"}
UNLIMITED = 2 ** 64 - 1


def init_rlimits(pid: int, limits_file: str = "") -> t.List[t.Dict[str, t.Any]]:
    """The container's own processes' rlimits (its init's), as OCI rlimits. A spec without rlimits (podman's
    ``default_ulimits = []``) leaves them to whoever starts the runtime: the container's processes have podman's, so
    an exec from here is given the same rather than this process's."""
    try:
        with open(limits_file or "/proc/%d/limits" % pid, encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    found = []
    for line in lines:
        name = line[:26].strip()
        words = line[26:].split()
        if name in LIMITS and len(words) >= 2:
            soft, hard = (UNLIMITED if w == "unlimited" else int(w) if w.isdigit() else None for w in words[:2])
            if soft is not None and hard is not None and _may_set(LIMITS[name], hard):
                found.append({"type": LIMITS[name], "soft": soft, "hard": hard})
    return found


def _may_set(kind: str, hard: int) -> bool:
    """Whether a hard limit is within this process's own (raising it needs CAP_SYS_RESOURCE, which root lacks on
    some machines): a limit that is not is left as runc inherits it rather than failing the exec."""
    number = getattr(resource, kind, None)
    if number is None:
        return False
    own = resource.getrlimit(number)[1]
    return own == resource.RLIM_INFINITY or hard <= own


def lookup_user(rootfs: str, user: str) -> t.Optional[t.Tuple[int, int, str, t.List[int]]]:
    """(uid, gid, home, supplementary gids) of ``user`` in the container's own account files, or ``None``."""
    if not rootfs or not os.path.isdir(rootfs):
        return None
    passwd, group = _read_inside(rootfs, "etc/passwd"), _read_inside(rootfs, "etc/group")
    if passwd is None:
        return None
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[0] == user and fields[2].isdigit() and fields[3].isdigit():
            uid, gid, home = int(fields[2]), int(fields[3]), fields[5] or "/"
            groups: t.List[int] = []  # the groups that list the user (podman's exec: runc's GetExecUser Sgids)
            for entry in (group or "").splitlines():
                g = entry.split(":")
                if len(g) >= 4 and g[2].isdigit() and user in g[3].split(",") and int(g[2]) not in groups:
                    groups.append(int(g[2]))
            return uid, gid, home, groups
    return None


def _read_inside(rootfs: str, relative: str) -> t.Optional[str]:
    """A file of the container's root filesystem, refused when a symlink would lead it out of that filesystem."""
    root = os.path.realpath(rootfs)
    path = os.path.realpath(os.path.join(root, relative))
    if not path.startswith(root + os.sep):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def runc_failure(exit_code: int, log_text: str) -> t.Optional[t.Tuple[t.Optional[int], str]]:
    """When runc itself failed (exit 255 with an error in its log): (the exit code a shell would give, or ``None``
    for "could not be run", and runc's message); ``None`` when the exit code is the command's."""
    if exit_code != RUNC_EXEC_FAILED:
        return None
    errors = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") in ("error", "fatal"):
            errors.append(str(entry.get("msg", "")))
    if not errors:
        return None
    message = errors[-1]
    if "executable file not found" in message or "no such file or directory" in message:
        return 127, message  # as podman exec and a shell report a command that is not there
    if "permission denied" in message:
        return 126, message
    return None, message
