# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exec channel: a way into a running local container that is already inside it (docs/operating.md). Pure.

``runc exec`` costs ~55 ms of CPU per container (a Go process, ``runc init`` joining the namespaces and compiling
the container's seccomp profile with libseccomp each time: measured with ``perf``), so 64 of them need ~1.8 s of the
two cores' time before the command runs. A process that is already in the container (its namespaces, cgroups,
seccomp filter, no-new-privileges, rlimits, capabilities) has all of that, and its children inherit it: a fork and
two ``exec``\\ s cost about 2 ms. :data:`AGENT_SCRIPT` is that process, in the runtime bundle's busybox sh (so images
with no shell or python have it too).

Where it runs: the local backend binds a directory of its own per container, ``<container dir>/exec`` (mode 0700,
root), at :data:`MOUNT` and writes :data:`AGENT_FILE` there; the entrypoint (``_nomad.job.ENTRYPOINT``) starts it in
the background when that file exists (on Nomad it never does: nothing changes there). Only root in that container and
root on the host can enter the directory: the session user (``work``) cannot, and no other container has it.

The protocol, all in that directory: the host makes three FIFOs ``<id>.out``, ``<id>.err``, ``<id>.rc`` (``id``: 16
random hex digits) and opens them for reading, writes ``<id>.req`` (sh: the working directory ``C``, the umask ``M``
and a function ``go``, :func:`request_text`), and writes ``run <id>`` to the agent's FIFO ``req``. The agent runs, in
a child, ``cd C; umask M; go``: ``exec env -i -- ENV... setpriv --reuid=UID --regid=GID --groups=GIDS --inh-caps=-all
-- ARGV...``, with stdin ``/dev/null`` and stdout/stderr the two FIFOs, waits for it and writes its exit status to
``<id>.rc``; ``kill <id>`` kills a command and its descendants (a timeout). ``env`` is the bundle's busybox, but it only runs ``setpriv``
by its path: the program itself is looked up by util-linux ``setpriv`` in the new environment's ``PATH``, as runc
does (busybox would prefer its own applets: its ``sh`` where the image's is dash). The
process spec (environment, user, groups, home, umask) is the one ``runc exec`` would get (``_local.runc_exec.plan``:
the container's own OCI process as podman's exec builds it); the user switch is the one the entrypoint uses for the
command (the image's util-linux ``setpriv``, else the bundle's): a uid other than 0 keeps no capability but the
bounding set, as with podman exec.
"""

from __future__ import annotations

import shlex
import typing as t

#: Where the container sees its exec directory, and the agent's script in it.
MOUNT = "/run/backendai-exec"
AGENT_FILE = "agent.sh"
#: The agent's request FIFO (it makes it when it starts: a FIFO with no reader is an agent that is not there).
REQUEST_FIFO = "req"

# Sourced, in a background subshell, by the entrypoint (as root, after the accounts and the peers, before sshd): it
# has the entrypoint's ``own`` (a program of the image's PATH, in R), B (the bundle), BOK (the bundle matches) and U.
AGENT_SCRIPT = r"""set +eu
cd @MOUNT@ || exit 0
E=$B/bin/env SP=
[ -n "$BOK" ] && [ -x "$E" ] || exit 0
if own setpriv && $R --help 2>&1 | grep -q -e --reuid; then SP=$R
elif [ -x $B/bin/setpriv ]; then SP=$B/bin/setpriv; fi
[ -n "$SP" ] || exit 0
rm -f @REQ@ && mkfifo -m 600 @REQ@ || exit 0
exec 3<>@REQ@
run() {
  x=$1; if ! . "./$x.req"; then echo > "$x.pid"; : > "$x.out"; : > "$x.err"; echo 126 > "$x.rc"; exit 0; fi
  (cd "$C" && umask "$M" && go) </dev/null >"$x.out" 2>"$x.err" 3>&- &
  echo $! > "$x.pid"; wait $!; echo $? > "$x.rc"
}
kids() { ps -o pid,ppid | while read -r c pp; do [ "$pp" != "$1" ] || echo "$c"; done; }
tree() { for c in $(kids "$1"); do tree "$c"; done; kill -KILL "$1"; }  # a command and what it started
while read -r op id <&3; do
  case $id in ''|*[!0-9a-f]*) continue ;; esac
  case $op in
    run) (run "$id") 3>&- & ;;
    kill) p=; read -r p < "$id.pid" && tree "$p" ;;
  esac
done
""".replace("@MOUNT@", MOUNT).replace("@REQ@", REQUEST_FIFO)


def request_text(process: t.Mapping[str, t.Any]) -> str:
    """``<id>.req`` for a runc process spec (``args``, ``env``, ``cwd``, ``user``: uid, gid, additionalGids, umask):
    every word quoted for sh; ``$E`` and ``$SP`` are the agent's ``env`` and ``setpriv``."""
    user = process["user"]
    umask = user.get("umask")
    groups = ",".join(str(int(g)) for g in user.get("additionalGids") or [])
    words = ["exec", '"$E"', "-i", "--"] + [shlex.quote(str(e)) for e in process.get("env") or [] if "=" in str(e)]
    words += ['"$SP"', "--reuid=%d" % int(user["uid"]), "--regid=%d" % int(user["gid"]), "--groups=" + groups if groups else "--clear-groups",
              "--inh-caps=-all", "--"] + [shlex.quote(str(a)) for a in process["args"]]
    cwd = shlex.quote(str(process.get("cwd") or "/"))
    return "C=%s M=%04o\ngo() { %s; }\n" % (cwd, umask if isinstance(umask, int) else 0o022, " ".join(words))


#: The entrypoint's line that starts the agent where the local backend gave the container its exec directory.
ENTRYPOINT_LINE = "[ ! -f %s/%s ] || (. %s/%s) </dev/null >/dev/null 2>&1 &" % (MOUNT, AGENT_FILE, MOUNT, AGENT_FILE)
