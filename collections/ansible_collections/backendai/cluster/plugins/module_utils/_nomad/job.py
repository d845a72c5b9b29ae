# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering a session plan into a Nomad job, as the JSON body of Nomad's HTTP API.

Shape of the job (one task group per container, named by its hostname, ``Count`` 1):

* pinned to the planned agent with a ``${node.unique.name}`` constraint;
* network ``cni/backendai`` for every group, with the container's hostname and the session
  network's parameters in ``cni { args }``, signed for this job and group (``_nomad.job_network``);
  job constraints keep out Nomad clients older than 1.10 and clients without the plugin fingerprinted
  (:data:`PLUGIN_CONSTRAINT`);
* a Nomad-provider service per container, all under one service name and tagged with the
  hostname, so that one constant template renders every peer's address (``nomadService``);
* session-wide values (HOSTS, SIZE, REPLICAS, MODE, SESSION_ID, MASTER_*, the TF worker list)
  live once in job ``Meta``; each group's ``Env`` refers to them as ``${NOMAD_META_...}``, so the
  job grows linearly with the number of containers;
* the SSH keypair is never in the job: the task renders it at runtime from the secret backend
  (``nomadVar "nomad/jobs/<job>"`` or Vault KV v2) into ``secrets/`` with mode 0600;
* only main1 publishes ports (sshd and the spec's ``ports``);
* ``/etc/hosts`` follows the peers: the peers template re-renders when a registration changes (a
  replaced allocation has a new address) and runs ``_session.hosts.HOSTS_SCRIPT`` in the task
  (``change_mode = "script"``, Nomad 1.4+), which rewrites the peers block of ``/etc/hosts``; the
  script is in job Meta once and reaches the task as ``$NOMAD_META_BACKENDAI_HOSTS_SCRIPT`` (Nomad
  puts every Meta key in the task's environment), so no template per container carries it;
* each group's ``disconnect`` block keeps a gang whole through a short node outage (see :data:`DISCONNECT`);
* the spec's mounts are Nomad host volumes (``volume`` in the group, ``volume_mount`` in the task) that
  the operator declares on the clients, never docker bind mounts: the docker driver's ``volumes``
  stays disabled, so no job can bind-mount a host path (see :func:`host_volume_name`);
* every group mounts the session runtime bundle (OpenSSH with its libraries and loader, busybox) read-only
  at :data:`RUNTIME_MOUNT`, a host volume the overlay_agent role declares (:data:`RUNTIME_VOLUME`, named after
  the bundle's layout version): the entrypoint falls back to it when the image has no sshd/ssh.

Every key is one of Nomad's API names (checked against ``nomad-job-lint``). Pure and
deterministic: the same plan gives the same dict, and :func:`dumps` gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import (
    SESSION_VARIABLES,
    container_values,
    session_values,
    tf_workers_json,
)
from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import NETWORK_NAME
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import (
    VERSION_CONSTRAINT,
    JobNetwork,
    RenderedNetwork,
    group_args,
    signing_keys,
    session_network,
    session_slots,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.exec_channel import ENTRYPOINT_LINE as EXEC_CHANNEL_LINE
from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import gang_members, gang_meta
from ansible_collections.backendai.cluster.plugins.module_utils._session.hosts import HOSTS_SCRIPT
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import HostVolume
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import Container, SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import Mount, SessionSpec

#: Job Meta key that marks jobs made by this collection (``session_info`` finds sessions by it).
MANAGED_META_KEY = "backendai_cluster_session"
TF_WORKERS_META_KEY = "BACKENDAI_TF_WORKERS"
SSH_PORT_META_KEY = "BACKENDAI_SSH_PORT"
#: The entrypoint script lives once in job Meta; each task renders it with a one-line template.
ENTRYPOINT_META_KEY = "BACKENDAI_ENTRYPOINT"
#: The script that rewrites /etc/hosts from the peers file (``_session.hosts``), once in job Meta too.
HOSTS_SCRIPT_META_KEY = "BACKENDAI_HOSTS_SCRIPT"
#: The session user (spec ``user``), read by the entrypoint as NOMAD_META_<key>.
USER_META_KEYS = ("BACKENDAI_USER", "BACKENDAI_UID", "BACKENDAI_GID")
#: The session runtime bundle (roles/overlay_agent/files/backendai-runtime-bundle): its layout version, the
#: host volume the role declares for it (a node with another version, or none, lacks the volume: the planner
#: names it, Nomad's HostVolumeChecker keeps the group off it), where the role builds it and where tasks see it.
RUNTIME_VERSION = "1"
RUNTIME_VOLUME = "backendai-runtime-v" + RUNTIME_VERSION
RUNTIME_DIR = "/usr/lib/backendai-cluster/runtime/" + RUNTIME_VERSION
#: (The bundle's builder, which runs on agents without this package, bakes the same path into its wrappers: a test
#: keeps its MOUNT equal to this.)
RUNTIME_MOUNT = "/opt/backendai-runtime"
RUNTIME_LABEL = "runtime"
RUNTIME_META_KEY = "BACKENDAI_RUNTIME_VERSION"
RUNTIME_PURPOSE = "the session runtime bundle, version %s: run the overlay_agent role of this collection there" % RUNTIME_VERSION
#: Items of the secret (Nomad Variable or Vault KV) the tasks read.
PRIVATE_KEY_ITEM = "ssh_private_key"
PUBLIC_KEY_ITEM = "ssh_public_key"
TASK_NAME = "kernel"
SECRETS_SUBDIR = "secrets/backendai"
LOCAL_SUBDIR = "local/backendai"

NANOSECOND = 1
SECOND = 1000000000 * NANOSECOND
MINUTE = 60 * SECOND

#: Each group's ``disconnect`` block (api.DisconnectStrategy, api/tasks.go; Nomad 1.8+, the only form
#: 1.10+ reads). A session is a gang pinned to its agents, so:
#:
#: * ``LostAfter`` 5m: when an agent misses its heartbeats, its allocations are "unknown", not lost, for
#:   5 minutes; a network blip or a restarted Nomad client does not end a training run on every node;
#: * ``Replace`` false: a replacement could only be placed on the same (unreachable) agent, which the
#:   ``${node.unique.name}`` constraint pins the group to; it would wait there and race the original;
#: * ``Reconcile`` keep_original: when the agent is back within that time, the allocation that kept
#:   running (same network namespace and address, its peers never noticed) is kept.
#:
#: After 5 minutes the allocation is lost and Nomad replaces it on the same agent once that is back;
#: the replacement gets a new address, which reaches every peer's /etc/hosts (the peers template).
#: ``StopOnClientAfter`` is not set: Nomad refuses it together with ``LostAfter``
#: (nomad/structs/group.go ``DisconnectStrategy.Validate``).
DISCONNECT = {"LostAfter": 5 * MINUTE, "Replace": False, "Reconcile": "keep_original"}
#: Never reschedule (the job's ``reschedule``): a container is pinned to its agent, it restarts in place a few
#: times (each group's ``RestartPolicy``) and then fails.
RESCHEDULE = {"Attempts": 0, "Unlimited": False}
#: Each group's ``RestartPolicy`` (api.RestartPolicy): restart in place twice in 5 minutes, then fail.
RESTART_POLICY = {"Attempts": 2, "Interval": 300 * SECOND, "Delay": 5 * SECOND, "Mode": "fail"}
#: ... and under a failure policy (``_session.gang``): never. The entrypoint supervises the command and ends only when
#: the gang failed, gave up or the command completed: a Nomad restart of that one task would bring back a container
#: the gang has given up on (Attempts 0: the client's restart tracker answers "no restarts allowed" and does not restart
#: the task, client/allocrunner/taskrunner/restarts/restarts.go ``RestartTracker.GetState``).
GANG_RESTART_POLICY = {"Attempts": 0, "Interval": 300 * SECOND, "Delay": 5 * SECOND, "Mode": "fail"}
#: The peers template's change script (Nomad 1.4+: ``change_mode = "script"``), run in the task after every
#: re-render: ``/local/backendai/hosts``, a script the entrypoint writes before it waits for its peers (a shebang
#: of a shell the task has, the image's /bin/sh or else the bundle's, then ``_session.hosts.HOSTS_SCRIPT`` from
#: job Meta), so the command needs no shell in the image and no arguments in the job. A re-render before the
#: entrypoint wrote it fails the script (Nomad logs it; FailOnError is false) but changes nothing: the entrypoint
#: reads the peers file after that. Timeout given: Nomad's default is 5s (api/tasks.go ChangeScript.Canonicalize).
HOSTS_CHANGE_SCRIPT = {"Command": "/%s/hosts" % LOCAL_SUBDIR, "Timeout": 10 * SECOND}
#: The task's entrypoint: the bundle's static busybox shell, so an image with no shell at all starts (a bundle
#: missing from the mount fails it at exec, naming this path: Nomad places no group where the host volume is not
#: declared, see :data:`RUNTIME_VOLUME`).
ENTRYPOINT_ARGV = (RUNTIME_MOUNT + "/bin/sh", "/%s/entrypoint.sh" % LOCAL_SUBDIR)
#: The task's ``user``: root in the image (uid 0, numeric: an image without /etc/passwd has no name to look up), over
#: the image's own ``USER`` (docker-stacks' images say ``USER 1000``), which the docker and podman drivers apply when
#: the task sets none (drivers/docker/driver.go ``createContainerConfig``: ``User: task.User``). The entrypoint needs
#: root to add the session user and start sshd; logins and the command then run as the session user. Nomad's client
#: checks a task's user against ``user.denylist`` (root) only for ``user.checked_drivers`` (exec, qemu, java by
#: default: client/config/config.go), so docker and podman tasks may set it.
TASK_USER = "0"


def _without_comments(script: str) -> str:
    """``script`` as the job carries it: its comment lines and its end-of-line comments (after two spaces, ``# ``)
    left out. Every session's job carries the entrypoint in its Meta, so its ~1.3 KB of comments were 20 bytes per
    container of a 64-container job; the source keeps them for the reader. A line whose code part leaves a quote open
    is kept whole (the ``#`` is in a string); a script with a here-document is not changed at all."""
    if "<<" in script:
        return script
    kept = []
    for i, line in enumerate(script.split("\n")):
        if i and line.lstrip().startswith("#"):
            continue
        code, sep, _comment = line.partition("  # ")
        if sep and code.count('"') % 2 == 0 and code.count("'") % 2 == 0:
            line = code.rstrip()
        kept.append(line)
    return "\n".join(kept)


# The entrypoint every container runs, as root in the image, with the bundle's busybox sh (standalone: its
# applets, grep, cut, id, su, ..., run whatever the image has, so only the image's own setpriv/runuser and sshd
# are looked up in the image, by path): add the session user if the image lacks it (by writing the account files,
# adopting an account that has the user's uid, or new ones on an image with no /etc at all), give it the session
# keypair in ~/.ssh, wait until every peer is registered, write /etc/hosts, start sshd (root, PermitRootLogin no,
# AllowUsers <user>), then run the user command as the user (the image's setpriv or runuser, else the bundle's
# setpriv, else su) or keep sshd in the foreground for an interactive session. sshd, ssh and scp are the
# image's when it has them, the bundle's otherwise. The user comes from job Meta, which Nomad hands every task
# as NOMAD_META_<KEY> (client/taskenv/env.go, Builder.setAlloc); nothing in the job gives the task extra
# privileges: what it does needs only Nomad's default capabilities (drivers/shared/capabilities/defaults.go:
# CHOWN, SETUID, SETGID, SYS_CHROOT for sshd's privilege separation).
#
# Its cost is every container's start, on both backends (N of them at once on one machine: the local backend), so it
# uses shell builtins wherever one does (read loops over the small account and key files, case and parameter
# expansion instead of grep, cut, tr, id, cat, cp, sleep; the account files written instead of useradd/groupadd):
# about ten processes before sshd where it forked about forty, and about 15 ms of CPU where it took about 65 (useradd
# and groupadd about 35), measured in the container's cgroup (docs/benchmarks.md). Everything that does not need the
# peers (accounts, keys, sshd's options) is done before it waits for them, and the wait polls every 50 ms for its
# first 5 s (then every 0.5 s, as before), blocking in ``read -t`` on a FIFO rather than a ``sleep`` process per poll.
# sshd starts only once /etc/hosts has every peer, as before: an sshd that answers is a container whose ``ssh subN``
# resolves. The command's user switch (setpriv, runuser or su) is chosen after sshd started, and only for a command.
ENTRYPOINT = r"""#!/bin/sh
set -eu
S=${NOMAD_SECRETS_DIR:-/secrets}/backendai L=${NOMAD_TASK_DIR:-/local}/backendai P=$NOMAD_META_BACKENDAI_SSH_PORT
U=${NOMAD_META_BACKENDAI_USER:?not in the task env: job Meta BACKENDAI_USER} UI=$NOMAD_META_BACKENDAI_UID GI=$NOMAD_META_BACKENDAI_GID
H=/home/$U N='
'
fail() { echo "backendai: $2" >&2; exit "$1"; }
IP=${PATH:-/usr/local/bin:/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin  # the image's own directories
own() { R= OI=$IFS; IFS=:; for d in $IP; do if [ -f "$d/$1" ] && [ -x "$d/$1" ]; then R=$d/$1; break; fi; done; IFS=$OI; [ -n "$R" ]; }
B=@RUNTIME_MOUNT@ BV=${NOMAD_META_BACKENDAI_RUNTIME_VERSION:-} BN= BOK=
own sshd || true; SSHD=$R
if [ -r $B/VERSION ]; then read -r BN < $B/VERSION || true; fi
[ -z "$BN" ] || [ "$BN" != "$BV" ] || BOK=1
if [ -n "$BOK" ]; then PATH=${PATH:+$PATH:}$B/bin; export PATH  # the image's own tools first
  [ -n "$SSHD" ] || SSHD=$B/bin/sshd
elif [ -z "$SSHD" ] && [ -z "$BN" ]; then
  fail 78 "sshd not found in the image and no session runtime bundle at $B: this agent lacks the host volume \
backendai-runtime-v$BV (run the overlay_agent role on it)"
elif [ -z "$SSHD" ]; then
  fail 78 "sshd not found in the image and the session runtime bundle at $B is version $BN, this job needs $BV (run the overlay_agent role on this agent)"
fi
echo "backendai: sshd $SSHD" >&2
ME=; if [ -r /proc/self/status ]; then while read -r k r e u; do [ "$k" != Uid: ] || { ME=$e; break; }; done < /proc/self/status; fi
[ -n "$ME" ] || ME=$(id -u)
[ "$ME" = 0 ] || fail 77 "the entrypoint runs as uid $ME, not root: it must start as root in the image (it adds $U \
and starts sshd, then runs logins and the command as $U). The job's task sets user 0 over the image's USER; a driver or \
client setting that overrides it (docker's userns-remap, a forced user) keeps sessions from starting"
X=/bin/sh; [ -x $X ] || X=$B/bin/sh  # the hosts script's shell and the user's (bash if the image has it)
SH=$X; [ ! -x /bin/bash ] || SH=/bin/bash
[ -n "${NOMAD_META_BACKENDAI_HOSTS_SCRIPT:-}" ] || fail 78 "job Meta BACKENDAI_HOSTS_SCRIPT is not in the task env"
{ echo "#!$X"; echo "set -- '$L/peers'"; echo "$NOMAD_META_BACKENDAI_HOSTS_SCRIPT"; } > $L/hosts.new
chmod 755 $L/hosts.new; mv -f $L/hosts.new $L/hosts  # the peers template's change script
[ -d /etc ] || mkdir -p /etc; [ -e /etc/passwd ] || echo "root:x:0:0:root:/root:$X" > /etc/passwd  # an image with no accounts
[ -e /etc/group ] || echo "root:x:0:" > /etc/group
# glibc before 2.35 without nsswitch.conf asks DNS before /etc/hosts: peers must not wait on a resolver
[ -e /etc/nsswitch.conf ] || printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' > /etc/nsswitch.conf
# The accounts (read loops, no grep): $U with uid $UI and gid $GI as it is, or written in, replacing an account of that
# name or uid (ubuntu's, jovyan's are 1000: adopted, renamed to $U, keeping its home if the image has it)
KP= OK= OH= FU= SA=
while IFS= read -r l || [ -n "$l" ]; do  # NAME:PASSWORD:UID:GID:GECOS:HOME:SHELL
  n=${l%%:*}; r=${l#*:}; r=${r#*:}; u=${r%%:*}; r=${r#*:}; g=${r%%:*}; r=${r#*:}; r=${r#*:}; h=${r%%:*}
  [ "$n" != sshd ] || SA=1
  if [ "$U" != root ] && [ "$n:$u:$g" = "$U:$UI:$GI" ]; then OK=1; H=$h
  elif [ "$U" != root ] && { [ "$n" = "$U" ] || [ "$u" = "$UI" ]; }; then
    if [ "$u" = "$UI" ] && [ -z "$FU" ]; then FU=1; [ "$h" = / ] || [ ! -d "$h" ] || OH=$h; fi
    continue
  fi
  KP="$KP$l$N"
done < /etc/passwd
if [ "$U" != root ] && [ -z "$OK" ]; then
  H=${OH:-$H}; printf '%s%s\n' "$KP" "$U:x:$UI:$GI::$H:$SH" > /etc/passwd
  KG= GG= GD=
  while IFS= read -r l || [ -n "$l" ]; do  # NAME:PASSWORD:GID:MEMBERS; a group of the user's name keeps only its gid
    n=${l%%:*}; r=${l#*:}; r=${r#*:}; g=${r%%:*}
    if [ "$n" = "$U" ] && [ "$g" != "$GI" ]; then GD=1; continue; fi
    [ "$g" != "$GI" ] || GG=1; KG="$KG$l$N"
  done < /etc/group
  if [ -z "$GG" ]; then printf '%s%s\n' "$KG" "$U:x:$GI:" > /etc/group
    if [ -f /etc/gshadow ]; then echo "$U:!::" >> /etc/gshadow; fi
  elif [ -n "$GD" ]; then printf '%s' "$KG" > /etc/group; fi
fi
if [ "$U" != root ] && [ -f /etc/shadow ]; then
  # sshd refuses a locked account ('!', what useradd gives) when PAM is off: '*' is no password, not locked
  KS= SOK=
  while IFS= read -r l || [ -n "$l" ]; do
    case $l in "$U:!"*|"$U::"*) continue ;; "$U:"*) SOK=1 ;; esac; KS="$KS$l$N"
  done < /etc/shadow
  [ -n "$SOK" ] || printf '%s%s\n' "$KS" "$U:*:19000:0:99999:7:::" > /etc/shadow
fi
[ "$U" != root ] || H=/root
mkdir -p /run/sshd /run/backendai "$H/.ssh"  # (busybox's mkdir -p -m would give the mode to /home too)
chmod 700 /run/backendai "$H" "$H/.ssh"
K=; while IFS= read -r l || [ -n "$l" ]; do K="$K$l$N"; done < $S/id
(umask 077; printf '%s' "$K" > /run/backendai/host_key; printf '%s' "$K" > "$H/.ssh/id_backendai")
K= PUB=; read -r PUB < $S/id.pub || true
echo "$PUB" >> "$H/.ssh/authorized_keys"
r=${PUB#* }; echo "* ${PUB%% *} ${r%% *}" > "$H/.ssh/known_hosts_backendai"
HL= OI=$IFS; IFS=,; for h in $BACKENDAI_CLUSTER_HOSTS; do HL="$HL $h"; done; IFS=$OI
{ echo "Host$HL"; echo " Port $P"
  echo " IdentityFile $H/.ssh/id_backendai"; echo " StrictHostKeyChecking yes"
  echo " UserKnownHostsFile $H/.ssh/known_hosts_backendai"; } >> "$H/.ssh/config"
# (env | grep: a read loop over the environment reads it a byte at a time, and job Meta puts this script in it)
env | grep -E '^(BACKENDAI_|WORLD_|RANK=|LOCAL_RANK=|MASTER_|TF_CONFIG=)' > "$H/.ssh/environment" || true
[ -z "$BOK" ] || echo "PATH=$PATH" >> "$H/.ssh/environment"  # logins find the bundle's ssh/scp after the image's
chown "$UI:$GI" "$H" "$H/.ssh" "$H/.ssh/"*  # what was written there (an adopted home's other files have the uid)
D="$SSHD -p $P -h /run/backendai/host_key -o AllowUsers=$U"
[ -n "$SA" ] || echo 'sshd:x:65533:65534:sshd privilege separation:/run/sshd:/bin/false' >> /etc/passwd
if [ "$SSHD" = $B/bin/sshd ]; then  # the image has no sshd_config either: the bundle's sshd gets its own
  echo "Subsystem sftp internal-sftp" > /run/backendai/sshd_config; D="$D -f /run/backendai/sshd_config"
fi
RL=no; [ "$U" != root ] || RL=prohibit-password
D="$D -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o PermitUserEnvironment=yes"
D="$D -o AuthorizedKeysFile=.ssh/authorized_keys -o PermitRootLogin=$RL"
peers() { C=0; if [ -r $L/peers ]; then while IFS= read -r l || [ -n "$l" ]; do [ -z "$l" ] || C=$((C+1)); done < $L/peers; fi; }
i=0; peers
if [ "$C" -lt "$BACKENDAI_CLUSTER_SIZE" ]; then  # a wait that is a read with a timeout: no process per poll
  [ -p /run/backendai/tick ] || mkfifo /run/backendai/tick; exec 3<>/run/backendai/tick
  while [ "$C" -lt "$BACKENDAI_CLUSTER_SIZE" ]; do
    i=$((i+1)); [ $i -le 1300 ] || { echo "backendai: peers not all registered after 600s" >&2; exit 75; }
    T=0.5; [ $i -gt 100 ] || T=0.05
    read -t $T TK <&3 || true; peers
  done
  exec 3<&-
fi
(. $L/hosts)
@EXEC_CHANNEL@  # the local backend's session_exec channel, where it gave one (_session.exec_channel)
# an interactive container runs its sshd as its first process, but where the supervisor keeps the session's time and end
case $#,,${NOMAD_META_BACKENDAI_GANG_MEMBERS:-}, in 0,*",$BACKENDAI_CLUSTER_HOST,"*) ;; 0,*) exec $D -D -e;; esac
$D
if [ $# -eq 0 ] || [ "$U" = root ]; then RUN=
elif own setpriv && $R --help 2>&1 | grep -q -e --reuid; then RUN="$R --reuid=$UI --regid=$GI --init-groups"
elif own runuser; then RUN="$R -m -u $U --"
elif [ -n "$BOK" ] && [ -x $B/bin/setpriv ]; then RUN="$B/bin/setpriv --reuid=$UI --regid=$GI --init-groups"
elif command -v su >/dev/null 2>&1; then RUN=su
else fail 78 "cannot run the command as $U: the image has none of setpriv (util-linux), runuser, su"; fi
export HOME="$H"
if [ -n "${NOMAD_META_BACKENDAI_GANG_SCRIPT:-}" ]; then  # a failure policy: supervise the command (_session.gang)
  printf '%s\n' "$NOMAD_META_BACKENDAI_GANG_SCRIPT" > /run/backendai/gang.sh; . /run/backendai/gang.sh
fi
if [ "$RUN" = su ]; then exec su -m -s "$X" "$U" -c 'exec "$0" "$@"' "$@"; fi
exec $RUN "$@"
"""
# the bundle's mount point: one source, the volume_mount's Destination
ENTRYPOINT = _without_comments(ENTRYPOINT.replace("@RUNTIME_MOUNT@", RUNTIME_MOUNT).replace("@EXEC_CHANNEL@", EXEC_CHANNEL_LINE))

PEERS_TEMPLATE = '{{ range nomadService "%s" }}{{ .Address }} {{ index .Tags 0 }}\n{{ end }}'

#: The node attribute a Nomad client sets for the collection's CNI plugin: ``plugins.cni.version.<file name>``
#: for each executable in its ``cni_path`` that prints a semantic version when run with no arguments
#: (client/fingerprint/plugins_cni.go, Nomad 1.5+; the plugin does, see ``_network._cni_plugin.main``).
PLUGIN_ATTRIBUTE = "plugins.cni.version.%s" % NETWORK_NAME
#: Keeps clients without the plugin out of placement (nomad/structs ``ConstraintAttributeIsSet``).
PLUGIN_CONSTRAINT = {"LTarget": "${attr.%s}" % PLUGIN_ATTRIBUTE, "Operand": "is_set"}

#: Nomad host volume names this collection's mounts use start with this (the overlay_agent role
#: declares them with the same rule).
HOST_VOLUME_PREFIX = "backendai-"


def host_volume_name(source: str) -> str:
    """The Nomad host volume that serves a spec mount of host path ``source``.

    ``backendai-<slug>-<8 hex of sha256(path)>``, e.g. ``/srv/datasets`` ->
    ``backendai-srv-datasets-<hash>``: readable, unique per path, and computed the same way by the
    overlay_agent role, which declares it on each client for every data root it is given
    (``overlay_agent_data_roots``: ``client { host_volume "<name>" { path = "<root>" } }``). Nomad's
    ``volume_mount`` has no sub-path (api/tasks.go ``VolumeMount``: Volume, Destination, ReadOnly,
    PropagationMode, SELinuxLabel), so a mount's source is a whole declared root; a node without the
    volume is not feasible for the group (scheduler ``HostVolumeChecker``), so an undeclared path
    leaves the group unplaced instead of reaching the host.
    """
    norm = posixpath.normpath(source)
    slug = re.sub(r"[^a-z0-9]+", "-", norm.lower()).strip("-")[:40] or "root"
    return "%s%s-%s" % (HOST_VOLUME_PREFIX, slug, hashlib.sha256(norm.encode("utf-8")).hexdigest()[:8])


def host_volumes_needed(mounts: t.Sequence[Mount]) -> t.Tuple[HostVolume, ...]:
    """The host volumes a node must declare for the session's groups (each group has every mount), in the
    order of the mounts after the runtime bundle's; a source mounted both ways needs a volume that serves read-write."""
    needed: t.Dict[str, HostVolume] = {RUNTIME_VOLUME: HostVolume(RUNTIME_VOLUME, True, RUNTIME_DIR, RUNTIME_PURPOSE)}
    for m in mounts:
        name = host_volume_name(m.source)
        seen = needed.get(name)
        needed[name] = HostVolume(name, m.read_only and (seen is None or seen.read_only), seen.source if seen else m.source)
    return tuple(needed.values())


def volume_label(index: int) -> str:
    """The group's label of the spec's ``index``-th mount (``volume "mount0" {...}``)."""
    return "mount%d" % index


def _volumes(mounts: t.Sequence[Mount]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """The group's ``volume`` blocks (api.VolumeRequest): the runtime bundle's, one host volume per spec mount."""
    runtime = {RUNTIME_LABEL: {"Name": RUNTIME_LABEL, "Type": "host", "Source": RUNTIME_VOLUME, "ReadOnly": True}}
    runtime.update((volume_label(i), _read_only({"Name": volume_label(i), "Type": "host", "Source": host_volume_name(m.source)},
                                                m.read_only)) for i, m in enumerate(mounts))
    return runtime


def _volume_mounts(mounts: t.Sequence[Mount]) -> t.List[t.Dict[str, t.Any]]:
    """The task's ``volume_mount`` blocks (api.VolumeMount): the runtime bundle's (read-only), the spec's mounts,
    read-only where the spec says so."""
    return [{"Volume": RUNTIME_LABEL, "Destination": RUNTIME_MOUNT, "ReadOnly": True}] + [
        _read_only({"Volume": volume_label(i), "Destination": m.target}, m.read_only) for i, m in enumerate(mounts)]


def _read_only(block: t.Dict[str, t.Any], read_only: bool) -> t.Dict[str, t.Any]:
    """``block`` with ``ReadOnly`` true, or without it: false is what Nomad reads when it is left out (api/tasks.go:
    ``VolumeRequest.ReadOnly`` is a plain bool, ``VolumeMount.Canonicalize`` sets a nil ``ReadOnly`` to false), and
    the bytes count in every group (``benchmarks/plan_render.py``)."""
    if read_only:
        block["ReadOnly"] = True
    return block


def service_name(job_id: str) -> str:
    """One Nomad service name for all containers of a session (a valid RFC 1123 label, ≤ 63)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")[:40] or "session"
    return "bai-%s-%s" % (slug, hashlib.sha256(job_id.encode("utf-8")).hexdigest()[:8])


def secret_path(spec: SessionSpec) -> str:
    """Where the keypair lives: ``nomad/jobs/<job>`` (Nomad Variables) or the Vault KV v2 path."""
    if spec.secrets.backend == "vault":
        return "/".join(p for p in (spec.secrets.path, spec.name) if p)
    return "nomad/jobs/%s" % spec.name


def _secret_template(plan: SessionPlan, item: str) -> str:
    spec = plan.spec
    if spec.secrets.backend == "vault":
        return '{{ with secret "%s/data/%s" }}{{ .Data.data.%s }}{{ end }}' % (spec.secrets.mount, secret_path(spec), item)
    return '{{ with nomadVar "%s" }}{{ .%s }}{{ end }}' % (secret_path(spec), item)


def _env(container: Container) -> t.Dict[str, str]:
    env = dict(container.user_env)
    for name in SESSION_VARIABLES:
        env[name] = "${NOMAD_META_%s}" % name
    # TF_CONFIG keeps the seed's exact JSON; only the worker list comes from Meta.
    env.update(container_values(container, "${NOMAD_META_%s}" % TF_WORKERS_META_KEY))
    return dict(sorted(env.items()))


def _driver_config(container: Container) -> t.Dict[str, t.Any]:
    config: t.Dict[str, t.Any] = {"image": container.image, "entrypoint": list(ENTRYPOINT_ARGV)}
    if container.command:
        config["args"] = list(container.command)
    return config


def _templates(plan: SessionPlan, service: str) -> t.List[t.Dict[str, t.Any]]:
    """The task's templates. The public key's ``Perms`` is left out: 0644 is Nomad's default (api/tasks.go
    ``Template.Canonicalize``), and the bytes count in every group."""
    return [
        {"EmbeddedTmpl": _secret_template(plan, PRIVATE_KEY_ITEM), "DestPath": SECRETS_SUBDIR + "/id",
         "Perms": "0600", "ChangeMode": "noop"},
        {"EmbeddedTmpl": _secret_template(plan, PUBLIC_KEY_ITEM), "DestPath": SECRETS_SUBDIR + "/id.pub", "ChangeMode": "noop"},
        {"EmbeddedTmpl": PEERS_TEMPLATE % service, "DestPath": LOCAL_SUBDIR + "/peers",
         "ChangeMode": "script", "ChangeScript": dict(HOSTS_CHANGE_SCRIPT)},
        {"EmbeddedTmpl": '{{ env "NOMAD_META_%s" }}' % ENTRYPOINT_META_KEY, "DestPath": LOCAL_SUBDIR + "/entrypoint.sh", "Perms": "0755",
         "ChangeMode": "noop"},
    ]


def _group(plan: SessionPlan, container: Container, net: RenderedNetwork, key: t.Optional[bytes],
           namespace: str, templates: t.Sequence[t.Mapping[str, t.Any]], service: str,
           volumes: t.Mapping[str, t.Mapping[str, t.Any]], volume_mounts: t.Sequence[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    """One container's task group (``key``: the signing key of its agent, None: unsigned). Made once per job:
    ``templates`` (:func:`_templates`, copied per group), ``service`` (:func:`service_name`), ``volumes`` and
    ``volume_mounts`` (:func:`_volumes`, :func:`_volume_mounts`: the same for every group, copied per group)."""
    spec = plan.spec
    network: t.Dict[str, t.Any] = {"Mode": plan.network_mode, "Hostname": container.hostname,
                                   "CNI": {"Args": group_args(net, key, namespace, spec.name, container.hostname)}}
    if container.is_main:
        network["DynamicPorts"] = [{"Label": "ssh", "To": spec.ssh.port}] + [
            {"Label": p.label, "To": p.port} for p in spec.ports]
    resources: t.Dict[str, t.Any] = {"CPU": container.resources.cpu, "MemoryMB": container.resources.memory}
    if container.resources.gpu:
        resources["Devices"] = [{"Name": "nvidia/gpu", "Count": container.resources.gpu}]
    task: t.Dict[str, t.Any] = {
        "Name": TASK_NAME,
        "Driver": spec.driver,
        "User": TASK_USER,
        "Config": _driver_config(container),
        "Env": _env(container),
        "Resources": resources,
        "Templates": [dict(x) for x in templates],
        "KillTimeout": 10 * SECOND,
    }
    task["VolumeMounts"] = [dict(m) for m in volume_mounts]
    if spec.secrets.backend == "vault":
        vault: t.Dict[str, t.Any] = {"ChangeMode": "noop"}
        if spec.secrets.role:
            vault["Role"] = spec.secrets.role
        task["Vault"] = vault
    # No ``Count``: Nomad makes a missing one 1 (api/tasks.go ``TaskGroup.Canonicalize``, without ``Scaling``). The
    # container's role and index are its task's BACKENDAI_CLUSTER_ROLE/IDX (``_nomad.job_view`` reads them there).
    group: t.Dict[str, t.Any] = {
        "Name": container.hostname,
        "Meta": {"backendai_agent": container.agent},
        "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": container.agent, "Operand": "="}],
        "Networks": [network],
        "Services": [{"Name": service, "Provider": "nomad", "AddressMode": "alloc",
                      "PortLabel": str(spec.ssh.port), "Tags": [container.hostname, "role-" + container.role]}],
        # A container is pinned to its agent: restart in place a few times, never reschedule elsewhere; under a failure
        # policy the gang restarts commands itself, and a task that ends has ended (:data:`GANG_RESTART_POLICY`).
        "RestartPolicy": dict(GANG_RESTART_POLICY if spec.supervised else RESTART_POLICY),
        "Disconnect": dict(DISCONNECT),
        "Tasks": [task],
    }
    group["Volumes"] = {k: dict(v) for k, v in volumes.items()}
    return group


#: Where the job's page in the Nomad UI points for what the cluster variables mean.
UI_LINK = {"Label": "Backend.AI cluster sessions", "URL": "https://docs.backend.ai/en/latest/concepts/networking.html"}


def job_ui(plan: SessionPlan) -> t.Dict[str, t.Any]:
    """The job's ``ui`` block: what the Nomad UI shows above the job (Markdown), and a link."""
    spec = plan.spec
    hosts = [c.hostname for c in plan.containers]
    shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
    agents = len({c.agent for c in plan.containers})
    where = ("the Nomad variable `nomad/jobs/%s`" % spec.name if spec.secrets.backend == "nomad-variables"
             else "Vault KV v2")
    text = ("Backend.AI cluster session: %d container%s (%s), %s on %d node%s, image `%s`. One task group per "
            "container, named by its hostname; `ssh sub1` works from main1 with the session keypair from %s."
            % (len(hosts), "" if len(hosts) == 1 else "s", shown, spec.cluster_mode, agents,
               "" if agents == 1 else "s", spec.image, where))
    return {"Description": text, "Links": [dict(UI_LINK)]}


def plan_slots(plan: SessionPlan) -> int:
    """How many network slots a PLACED plan's session needs (``_nomad.job_network.session_slots``), before any is
    claimed."""
    return session_slots([c.agent for c in plan.containers])


def render_network(plan: SessionPlan, namespace: str = "", network: t.Optional[JobNetwork] = None) -> RenderedNetwork:
    """The session network of a PLACED plan (see ``_nomad.job_network``)."""
    return session_network(plan.session_id, plan.agents_used, namespace, plan.spec.name, network,
                           plan_slots(plan), plan.spec.underlay_encryption)


def render_job(plan: SessionPlan, namespace: str = "", region: str = "",
               network: t.Optional[JobNetwork] = None, laid: t.Optional[RenderedNetwork] = None) -> t.Dict[str, t.Any]:
    """The bare Nomad job (the value of ``Job`` in a register request) for a PLACED plan.

    ``network``: the claimed slot, the agents' underlay addresses and the cluster key; without it
    (or without its key) the job is rendered unsigned, for reading only (``_nomad.job_network``).
    ``laid``: :func:`render_network` of the same plan, namespace and ``network``, if the caller has it already.
    """
    if not plan.placed:
        raise PlanError("the session cannot be placed (PENDING): %s" % plan.reason)
    spec = plan.spec
    net = laid or render_network(plan, namespace, network)
    keys = net.signing or signing_keys(network, plan.agents_used)  # each group is signed for the agent it is pinned to
    service = service_name(spec.name)
    templates = _templates(plan, service)
    volumes, volume_mounts = _volumes(spec.mounts), _volume_mounts(spec.mounts)
    meta = dict(session_values(plan))
    meta[TF_WORKERS_META_KEY] = tf_workers_json(plan)
    meta[SSH_PORT_META_KEY] = str(spec.ssh.port)
    meta[ENTRYPOINT_META_KEY] = ENTRYPOINT
    meta[HOSTS_SCRIPT_META_KEY] = HOSTS_SCRIPT
    meta[RUNTIME_META_KEY] = RUNTIME_VERSION
    meta.update(zip(USER_META_KEYS, (spec.user.name, str(spec.user.uid), str(spec.user.gid))))
    meta.update(gang_meta(spec, gang_members(plan.containers, spec.has_lifetime)))
    meta[MANAGED_META_KEY] = spec.name
    meta["backendai_cluster_service"] = service
    meta["backendai_secrets_backend"] = spec.secrets.backend
    datacenters = sorted({c.datacenter for c in plan.containers})
    job: t.Dict[str, t.Any] = {
        "ID": spec.name,
        "Name": spec.name,
        # batch: a session that ends by itself (a command, or a lifetime: max_run_time, keep_after), which Nomad's
        # garbage collector then removes (a dead service job is kept until it is stopped: nomad/state/schema.go
        # jobIsGCable); service: an interactive session, up until state=absent
        "Type": "batch" if spec.runs_a_command or spec.has_lifetime else "service",
        "Datacenters": datacenters,
        "UI": job_ui(plan),
        "Meta": dict(sorted(meta.items())),
        # clients older than the minimum do not add Nomad's identity to CNI_ARGS: keep them out
        "Constraints": [dict(VERSION_CONSTRAINT), dict(PLUGIN_CONSTRAINT)],
        # never reschedule a container elsewhere (its group is pinned to its agent): once for the job, which Nomad
        # copies into every group (api/tasks.go ``TaskGroup.Canonicalize``, run on every register and plan request
        # by command/agent/job_endpoint.go ``ApiJobToStructJob``; structs.Job has no job-level policy)
        "Reschedule": dict(RESCHEDULE),
        "TaskGroups": [_group(plan, c, net, keys.get(c.agent), namespace, templates, service, volumes, volume_mounts)
                       for c in plan.containers],
    }
    if namespace:
        job["Namespace"] = namespace
    if region:
        job["Region"] = region
    return job


def register_request(job: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The body of ``PUT /v1/jobs``."""
    return {"Job": job}


def dumps(body: t.Any, pretty: bool = True) -> str:
    """Deterministic JSON text (pretty for files people read, minified for measuring)."""
    if pretty:
        return json.dumps(body, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    return json.dumps(body, separators=(",", ":"), sort_keys=False, ensure_ascii=False)
