# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local backend's container start: a task group of the session's rendered Nomad job, started as a podman
container the way Nomad's client and docker driver would start it. The engine's container config is read off the
job, never made up beside it, so a local session is a run of the job's tasks (one entrypoint for both backends).

From the job (``TaskGroups[i].Tasks[0]``):

* image, entrypoint and args: the task's driver ``Config`` (``image``, ``entrypoint``, ``args``); ``User``;
* env: the task's ``Env`` with ``${NOMAD_META_*}`` interpolated, plus ``NOMAD_META_<KEY>`` (upper-cased) and
  ``NOMAD_META_<key>`` for every key of job, group and task ``Meta`` (client/taskenv/env.go, ``Builder.setAlloc``:
  both spellings), and the task directories as Nomad sets them for the docker driver (``NOMAD_TASK_DIR=/local``,
  ``NOMAD_SECRETS_DIR=/secrets``, ``NOMAD_ALLOC_DIR=/alloc``);
* files: each template rendered with the values Nomad would give it (the secret's items for ``nomadVar``/Vault
  ``secret``, the peers for ``nomadService``, the env for ``env``) at its ``DestPath`` in the task directory, with
  its ``Perms``;
* mounts: the task directory's ``local``/``secrets`` and the allocation directory (what the docker driver binds,
  drivers/docker/driver.go ``containerBinds``), ``/etc/hosts`` from the task's own file (the driver mounts one from the
  alloc dir with a bridge/CNI network, ``Setup /etc/hosts``), every ``VolumeMounts`` entry from the host path of its
  group ``Volumes`` source (a map the caller gives: what the client's ``host_volume`` blocks declare), read-only
  where the job says;
* resources: ``MemoryMB`` as the memory limit with no swap (the driver sets ``MemorySwap`` to the memory limit),
  and the capabilities Nomad's docker driver grants by default (drivers/shared/capabilities, ``NomadDefaults``);
* network: the group's ``Hostname``, and the network namespace the caller made (``ns:/run/netns/NAME``: what the
  CNI plugin gives the group on a Nomad client too).

The job comes from the Nomad renderer through :class:`NomadTask`, which the ``_ansible`` layer hands the backend
(the two backends never import each other).

What differs from Nomad's docker driver, on purpose: CPU is a hard quota (the MHz over the core's MHz of each period
of :data:`CPU_PERIOD_US`) where the driver gives relative shares unless ``cpu_hard_limit`` is set (with its
``cpu_cfs_period`` at 1 s, the driver sets the same quota), and a pids limit is always set (the
driver's default is none): one machine runs every container of a session, and one container must not starve the
others or fork-bomb the host. Podman is told not to add the task's user to the image's ``/etc/passwd``
(``--passwd=false``: docker does not; podman would make the file mode 0600 where the image has none).
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import Problem, SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import LocalRuntimeError

META_REF = re.compile(r"\$\{(NOMAD_META_[A-Za-z0-9_]+)\}")
#: What Nomad's docker driver grants a task by default (drivers/shared/capabilities/defaults.go, HCLSpecLiteral).
NOMAD_DEFAULT_CAPS = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                      "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
#: Where the docker driver mounts the task's directories (client/allocdir: TaskLocalContainerPath and friends).
TASK_MOUNTS = {"local": "/local", "secrets": "/secrets"}
ALLOC_MOUNT = "/alloc"
PIDS_LIMIT = 4096
#: The CPU quota's period (µs): 1 s, the longest the kernel and Nomad's docker driver allow (its ``cpu_cfs_period``,
#: 0 to 1000000, drivers/docker/driver.go); the quota is the spec's MHz over the core's MHz of each period. A container
#: starts with a burst of about 0.1 s of CPU (runc, the entrypoint, sshd): within one second's quota it runs at full
#: speed, where podman's default period of 100 ms throttled it to its share from the first 100 ms (a session of 64
#: containers on 2 cores gets 31 ms in 1,000 where it got 3.1 ms in 100; the share over a second is the same).
CPU_PERIOD_US = 1000000
#: The kernel's smallest CFS quota (µs).
MIN_CPU_QUOTA_US = 1000

_SECRET_ITEM = re.compile(r"\{\{ with (?:nomadVar|secret) \"[^\"]*\" \}\}\{\{ \.(?:Data\.data\.)?([A-Za-z0-9_]+) \}\}\{\{ end \}\}$")
_ENV_REF = re.compile(r"\{\{ env \"([A-Za-z0-9_]+)\" \}\}$")


#: What the host-files runtime was named by (the spec's ``image: local``, removed): refused when planning (``refuse_host_files``).
REMOVED_IMAGE = "local"


@dataclasses.dataclass(frozen=True)
class NomadTask:
    """What the local backend needs of the Nomad side: the job renderer (a placed plan -> the bare job) and the
    host volume of the session runtime bundle with the directory it serves here (the overlay_agent role's)."""

    render: t.Callable[[t.Any], t.Mapping[str, t.Any]]
    runtime_volume: str
    runtime_dir: str
    #: the items of the session's secret the key templates read (``nomadVar``/Vault), private key first
    key_items: t.Tuple[str, str]


@dataclasses.dataclass(frozen=True)
class EngineRun:
    """A session's engine start: its rendered job and where the job's host volumes are here."""

    job: t.Mapping[str, t.Any]
    task: NomadTask


def refuse_host_files(spec_raw: t.Mapping[str, t.Any]) -> None:
    """``image: local`` named the host-files runtime, which the engine replaced: a planning-time error naming the field
    (the session's ``image``, or a role's: ``spec_raw`` is the spec as given, already parsed), never a fallback."""
    fields = [("session.image", spec_raw.get("image"))] + [
        ("session.roles[%d].image" % i, r.get("image")) for i, r in enumerate(spec_raw.get("roles") or [])]
    problems = [Problem(where, "the host-files runtime (image %r) was removed: the local backend runs the spec's container "
                               "image on podman, as Nomad runs the job; name an image (scripts/setup builds "
                               "localhost/backendai-cluster/example:bookworm)" % REMOVED_IMAGE, image, True)
                for where, image in fields if image == REMOVED_IMAGE]
    if problems:
        raise SpecError(problems)


def group_of(job: t.Mapping[str, t.Any], name: str) -> t.Mapping[str, t.Any]:
    for group in job["TaskGroups"]:
        if group["Name"] == name:
            return group
    raise LocalRuntimeError("the job has no task group %s" % name)


def task_env(job: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
    """The task's environment as Nomad's client builds it (the parts this job uses)."""
    task = group["Tasks"][0]
    env: t.Dict[str, str] = {"NOMAD_TASK_DIR": TASK_MOUNTS["local"], "NOMAD_SECRETS_DIR": TASK_MOUNTS["secrets"],
                             "NOMAD_ALLOC_DIR": ALLOC_MOUNT, "NOMAD_JOB_ID": job["ID"], "NOMAD_JOB_NAME": job["Name"],
                             "NOMAD_GROUP_NAME": group["Name"], "NOMAD_TASK_NAME": task["Name"], "NOMAD_ALLOC_INDEX": "0",
                             "NOMAD_MEMORY_LIMIT": str(task["Resources"]["MemoryMB"]),
                             "NOMAD_CPU_LIMIT": str(task["Resources"]["CPU"])}
    for meta in (job.get("Meta") or {}, group.get("Meta") or {}, task.get("Meta") or {}):
        for key, value in meta.items():
            env["NOMAD_META_" + key.upper()] = value
            env["NOMAD_META_" + key] = value
    for key, value in (task.get("Env") or {}).items():
        env[key] = META_REF.sub(lambda m: env.get(m.group(1), ""), value)
    return env


def task_files(group: t.Mapping[str, t.Any], env: t.Mapping[str, str], secret: t.Mapping[str, str],
               peers: str) -> t.Dict[str, t.Tuple[str, int]]:
    """DestPath (relative to the task directory) -> (text, mode) of every template, rendered with what Nomad would
    give it: ``secret``'s items, ``peers`` (the ``nomadService`` lines), the task's env."""
    out = {}
    for tmpl in group["Tasks"][0].get("Templates") or []:
        text = tmpl["EmbeddedTmpl"]
        item, ref = _SECRET_ITEM.match(text), _ENV_REF.match(text)
        if item:
            if item.group(1) not in secret:
                raise LocalRuntimeError("template %s reads secret item %s, which was not given" % (tmpl["DestPath"], item.group(1)))
            rendered = secret[item.group(1)]
        elif ref:
            rendered = env.get(ref.group(1), "")
        elif "nomadService" in text:
            rendered = peers
        else:
            raise LocalRuntimeError("template %s: cannot render %r here" % (tmpl["DestPath"], text[:60]))
        out[tmpl["DestPath"]] = (rendered, int(tmpl.get("Perms") or "0644", 8))
    return out


def run_args(job: t.Mapping[str, t.Any], group_name: str, *, name: str, netns_path: str, task_dir: str,
             alloc_dir: str, hosts_file: str, host_volumes: t.Mapping[str, str], core_mhz: float,
             extra: t.Sequence[str] = ()) -> t.List[str]:
    """``podman run`` arguments (after ``run``) for the group's task, its files already in ``task_dir``."""
    group = group_of(job, group_name)
    task = group["Tasks"][0]
    config = task["Config"]
    env = task_env(job, group)
    network = (group.get("Networks") or [{}])[0]
    # --passwd=false: podman would add the task's user to an image's /etc/passwd (a file of mode 0600 where the image has
    # none); docker does not, and the entrypoint makes the accounts itself
    args = ["--name", name, "--network", "ns:" + netns_path, "--passwd=false", "--cap-drop", "all"]
    for cap in NOMAD_DEFAULT_CAPS:
        args += ["--cap-add", cap]
    if network.get("Hostname"):
        args += ["--hostname", network["Hostname"]]
    if task.get("User"):
        args += ["--user", task["User"]]
    if config.get("entrypoint"):
        args += ["--entrypoint", json.dumps(config["entrypoint"])]
    memory = "%dm" % task["Resources"]["MemoryMB"]
    args += ["--memory", memory, "--memory-swap", memory, "--pids-limit", str(PIDS_LIMIT)]
    if core_mhz > 0:
        quota = max(MIN_CPU_QUOTA_US, round(task["Resources"]["CPU"] / core_mhz * CPU_PERIOD_US))
        args += ["--cpu-period", str(CPU_PERIOD_US), "--cpu-quota", str(quota)]
    for sub, target in TASK_MOUNTS.items():
        args += ["--volume", "%s/%s:%s" % (task_dir, sub, target)]
    args += ["--volume", "%s:%s" % (alloc_dir, ALLOC_MOUNT), "--volume", "%s:/etc/hosts" % hosts_file]
    volumes = group.get("Volumes") or {}
    for mount in task.get("VolumeMounts") or []:
        volume = volumes[mount["Volume"]]
        if volume["Source"] not in host_volumes:
            raise LocalRuntimeError("host volume %s (for %s) is not declared here" % (volume["Source"], mount["Destination"]))
        ro = mount.get("ReadOnly") or volume.get("ReadOnly")
        args += ["--volume", "%s:%s%s" % (host_volumes[volume["Source"]], mount["Destination"], ":ro" if ro else "")]
    for key, value in sorted(env.items()):
        args += ["--env", "%s=%s" % (key, value)]
    args += list(extra)
    args.append(config["image"])
    args += list(config.get("args") or [])
    return args
