# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``session_exec`` on Nomad: a command in a session's containers through what reaches a session from outside today.

That is main1's published ssh port and the session keypair; nothing new is exposed. The job tells where the keypair
lives (``_nomad.secrets``: Nomad Variables or Vault) and the session view where main1 listens (``_nomad.job_view``:
the allocation's ``ssh`` port). One ``ssh`` to main1, as the session user, with the session key written to a file of
mode 0600 in a private temporary directory (removed afterwards; the key is registered with ``hide`` first, so it is
masked should it ever show) and main1's host key checked against the session's public key (the entrypoint makes the
session key sshd's host key: no first-use trust). On main1 a POSIX sh script (:func:`fanout_script`, fed on stdin)
runs the command there and, at once, ``ssh <hostname>`` to every other selected container over the session network,
with the keys and ``~/.ssh/config`` the entrypoint already put in main1's home; it prints one frame per container
(:func:`parse_frames`: exit code, start and end from ``/proc/uptime``, stdout, stderr, by length). The command thus
runs as the session user: the containers' sshd admit no one else (``PermitRootLogin no``), so ``user: root`` is
refused here unless the session's user is root.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import USER_META_KEYS
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import SecretStore, location_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import ROOT_USER
from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultClient

FRAME = b"BAI-EXEC "
#: What the frame of a timed-out container carries instead of an exit code.
TIMED_OUT_MARK = "t"
#: The host key alias main1's key is checked under (its address may be any node's).
HOST_KEY_ALIAS = "backendai-session-main1"
#: Seconds the ssh client waits for main1 (and main1's for each peer) to answer.
CONNECT_TIMEOUT = 15

_SCRIPT_HEAD = r"""set -u
C=%(command)s
T=$(mktemp -d 2>/dev/null) || { T=/tmp/bai-exec.$$; mkdir -m 700 "$T"; } || exit 70
trap 'rm -rf "$T"' EXIT
start() { read -r s _ < /proc/uptime; echo "$s" > "$T/$1.s"; }
finish() { echo $! > "$T/$1.p"; wait $!; r=$?; read -r e _ < /proc/uptime; echo "$r $(cat "$T/$1.s") $e" > "$T/$1.r"; }
here() { start "$1"; "${SHELL:-/bin/sh}" -c "$C" < /dev/null > "$T/$1.o" 2> "$T/$1.e" & finish "$1"; }
peer() { start "$1"; ssh -o BatchMode=yes -o ConnectTimeout=%(connect)d "$2" "$C" < /dev/null > "$T/$1.o" 2> "$T/$1.e" & finish "$1"; }
P=
"""
_SCRIPT_TAIL = r"""W=
if [ %(timeout)d -gt 0 ]; then
  (sleep %(timeout)d; for p in "$T"/*.p; do i=${p%%.p}; [ -e "$i.r" ] || { : > "$i.t"; kill -9 "$(cat "$p")"; }; done) \
    > /dev/null 2>&1 &
  W=$!
fi
wait $P
[ -z "$W" ] || kill "$W" 2> /dev/null
for i in %(indexes)s; do
  r=$(cat "$T/$i.r" 2> /dev/null || echo "- 0 0"); [ ! -e "$T/$i.t" ] || r="%(mark)s ${r#* }"
  printf 'BAI-EXEC %%s %%s %%s %%s\n' "$i" "$r" "$(wc -c < "$T/$i.o")" "$(wc -c < "$T/$i.e")"
  cat "$T/$i.o" "$T/$i.e"
done
"""


def fanout_script(command: str, hosts: t.Sequence[str], main: str, timeout: float) -> str:
    """The sh script main1 runs (on stdin): ``command`` in ``hosts`` at once, main1 itself (``main``) without ssh; a
    frame per host, in order, once all are done. ``timeout`` (seconds, 0: none) kills the clients still running."""
    lines = [_SCRIPT_HEAD % {"command": shlex.quote(command), "connect": CONNECT_TIMEOUT}]
    for i, host in enumerate(hosts):
        call = "here %d" % i if host == main else "peer %d %s" % (i, shlex.quote(host))
        lines.append("%s & P=\"$P $!\"\n" % call)
    lines.append(_SCRIPT_TAIL % {"timeout": int(-(-timeout // 1)) if timeout else 0,
                                 "indexes": " ".join(str(i) for i in range(len(hosts))), "mark": TIMED_OUT_MARK})
    return "".join(lines)


def parse_frames(data: bytes) -> t.Dict[int, t.Tuple[str, float, bytes, bytes]]:
    """Index -> (exit code field: a number, ``-`` when none was recorded, or the timed-out mark; seconds; stdout;
    stderr) of every whole frame in the script's output (anything else, before or between frames, is skipped)."""
    out: t.Dict[int, t.Tuple[str, float, bytes, bytes]] = {}
    pos = 0
    while True:
        at = data.find(FRAME, pos)
        if at < 0:
            return out
        end = data.find(b"\n", at)
        fields = data[at + len(FRAME):end].split() if end >= 0 else []
        try:
            index, code, started, ended, n_out, n_err = (fields[0], fields[1].decode("ascii"), float(fields[2]),
                                                         float(fields[3]), int(fields[4]), int(fields[5]))
            index = int(index)
        except (IndexError, ValueError, UnicodeDecodeError):
            pos = at + len(FRAME)
            continue
        body = data[end + 1:end + 1 + n_out + n_err]
        if len(body) < n_out + n_err:  # cut short
            return out
        out[index] = (code, max(0.0, ended - started), body[:n_out], body[n_out:])
        pos = end + 1 + n_out + n_err


class NomadExec:
    """Runs a :class:`_session.session_exec.ExecRequest` in a session on Nomad (see the module docstring)."""

    def __init__(self, nomad: NomadClient, vault: t.Callable[[], VaultClient], hide: t.Callable[..., None],
                 info: t.Callable[[str], t.List[t.Dict[str, t.Any]]]) -> None:
        self.nomad = nomad
        self._vault = vault
        self._hide = hide
        self._info = info
        self._job: t.Dict[str, t.Any] = {}
        self._view: t.Dict[str, t.Any] = {}

    def containers(self, request: plan.ExecRequest) -> t.List[t.Dict[str, t.Any]]:
        """The session's containers (hostname, role, status); :class:`ModuleFailure` when the session is not there, or
        for ``user: root`` when its sshd admit only another user."""
        views = self._info(request.name)
        job = self.nomad.get_job(request.name) if views else None
        if not views or job is None:
            raise ModuleFailure("session %s: no such session on Nomad (namespace %s)"
                                % (request.name, self.nomad.connection.namespace or "default"))
        self._view, self._job = views[0], job
        user = self.user
        if request.as_root and user != ROOT_USER:
            raise ModuleFailure(
                "user: root is not possible on the nomad backend for session %s: session_exec reaches the containers "
                "through main1's ssh and the session network, whose sshd admit only the session user %s "
                "(PermitRootLogin no); run as the session user (user: session), or give the session user: "
                "{name: root, allow_root: true}" % (request.name, user))
        return [{"hostname": c["hostname"], "role": c.get("role", ""), "status": c.get("status")}
                for c in self._view.get("containers") or []]

    @property
    def user(self) -> str:
        """The session user (job Meta); a job made before there was one ran everything as root."""
        return str((self._job.get("Meta") or {}).get(USER_META_KEYS[0]) or ROOT_USER)

    def run(self, request: plan.ExecRequest, targets: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
        """Every target's result, in the order of ``targets`` (call :meth:`containers` first)."""
        main = self._view.get("main1") or {}
        address, port = main.get("address"), main.get("ssh_port")
        main_host = str(main.get("hostname") or "main1")
        by_host = {c["hostname"]: c for c in self._view.get("containers") or []}
        if not address or not port or (by_host.get(main_host) or {}).get("status") != "running":
            return [plan.outcome(c, request, None, "", "", 0.0, plan.UNREACHABLE,
                                 "main1 is not running with a published ssh port: session_exec reaches the containers "
                                 "through it") for c in targets]
        ssh = shutil.which("ssh")
        if ssh is None:
            raise ModuleFailure("session_exec on Nomad needs the OpenSSH client (ssh) on the controller")
        location = location_of_job(self._job)
        keys = SecretStore(location, self.nomad, self._vault, self._hide).read_keypair() if location else None
        if keys is None:
            raise ModuleFailure("session %s: its keypair could not be read from %s (the token needs read on it)"
                                % (request.name, location.describe() if location else "the job (it names no secret)"))
        script = fanout_script(request.shell_text, [str(c["hostname"]) for c in targets], main_host, request.timeout)
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="backendai-exec-") as private:
            key, known = os.path.join(private, "id"), os.path.join(private, "known_hosts")
            for path, text in ((key, keys.private_key), (known, "%s %s\n" % (HOST_KEY_ALIAS, " ".join(
                    keys.public_key.split()[:2])))):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text if text.endswith("\n") else text + "\n")
            argv = [ssh, "-p", str(port), "-l", self.user, "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                    "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + known,
                    "-o", "GlobalKnownHostsFile=/dev/null", "-o", "HostKeyAlias=" + HOST_KEY_ALIAS,
                    "-o", "ConnectTimeout=%d" % CONNECT_TIMEOUT, "-o", "LogLevel=ERROR", "-T", str(address), "sh", "-s"]
            try:
                proc = subprocess.run(argv, input=script.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      timeout=request.timeout + 2 * CONNECT_TIMEOUT + 30 if request.timeout else None,
                                      check=False)
                stdout, stderr = proc.stdout, proc.stderr.decode("utf-8", errors="replace").strip()
            except subprocess.TimeoutExpired:
                stdout, stderr = b"", "the ssh to main1 did not end in time"
        frames = parse_frames(stdout)
        results = []
        for i, c in enumerate(targets):
            if i not in frames:
                results.append(plan.outcome(c, request, None, "", "", time.monotonic() - start, plan.UNREACHABLE,
                                            "ssh to main1 (%s:%s) failed: %s" % (address, port, stderr or "no answer")))
                continue
            code, seconds, out, err = frames[i]
            text_out, text_err = out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
            if code == TIMED_OUT_MARK:
                results.append(plan.outcome(c, request, None, text_out, text_err, seconds, plan.TIMED_OUT,
                                            "still running after %gs: its client on main1 was killed" % request.timeout))
            elif not code.lstrip("-").isdigit():
                results.append(plan.outcome(c, request, None, text_out, text_err, seconds, plan.UNREACHABLE,
                                            "main1 recorded no exit code"))
            else:
                results.append(plan.outcome(c, request, int(code), text_out, text_err, seconds))
        return results
