# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``session_exec`` on the local backend: a command in a session's containers through the engine's runtime, all at once.

One ``podman container inspect`` of the selected containers (with the collection's containers.conf, ``_local.engine``)
gives what ``runc exec`` needs of each, and the process spec podman's exec would make (``_local.runc_exec``). Each
container with an exec agent (``_local.exec_channel``: forked inside the container, ~20 times cheaper than runc) gets
the command through it, all of them waited for in one ``poll`` loop; the others get one ``runc exec`` with that
spec (the container's namespaces, every one of its cgroups, so its limits count the command, its capabilities,
seccomp filter and environment). Either way as the session user (the account the entrypoint made, in its home) or
root. Where runc cannot be used (another runtime, no runc state, an unknown user),
that container gets ``podman exec --user --workdir`` instead. ``runc exec`` costs about a quarter of ``podman exec``
(``benchmarks/session_exec.py`` measures both). The execs run at once, one thread each waiting for its own (so that no
pipe fills while another is read). The clients carry the session's owner tag (``_local.state``), so a destroy that
runs meanwhile stops them with the session's other processes.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import CONF_ENV, PODMAN
from ansible_collections.backendai.cluster.plugins.module_utils._local import exec_channel, runc_exec
from ansible_collections.backendai.cluster.plugins.module_utils._local.runtime import session_status
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SANE_PATH, SessionPaths, owner_env, read_json
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import ROOT_USER

#: podman exec's own failures (the container is gone or stopped, the engine refused): not the command's exit code
#: (126 and 127, "cannot run" and "not found", are the command's, as in a shell).
PODMAN_EXEC_ERROR = 125
#: Whether a container's exec channel (``_local.exec_channel``) is used where it has one (tests turn it off to compare).
CHANNEL = True


class LocalExec:
    """Runs a :class:`_session.session_exec.ExecRequest` in a local session (``state_root``: the sessions' root)."""

    def __init__(self, state_root: str) -> None:
        self.state_root = os.path.abspath(os.path.expanduser(state_root))

    def containers(self, name: str) -> t.List[t.Dict[str, t.Any]]:
        """The session's containers: hostname, role, status (running, failed, ...) and what exec needs of each."""
        status = session_status(name, self.state_root)
        info = read_json(SessionPaths(self.state_root, name).session_json) if status.get("exists") else None
        if not isinstance(info, dict) or not status.get("containers"):
            raise ModuleFailure("session %s: no such local session with containers under %s (state %s)"
                                % (name, self.state_root, status.get("state", "missing")))
        layout = {c["hostname"]: c for c in info["containers"]}
        return [{"hostname": c["hostname"], "role": layout[c["hostname"]].get("role", ""), "status": c["state"],
                 "engine": layout[c["hostname"]]["engine"]} for c in status["containers"]]

    def run(self, request: plan.ExecRequest, targets: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
        """Every target's result (``_session.session_exec.outcome``), in the order of ``targets``."""
        paths = SessionPaths(self.state_root, request.name)
        info = read_json(paths.session_json)
        conf = ((info or {}).get("engine") or {}).get("conf", "")
        user = ROOT_USER if request.as_root else str((info or {}).get("user") or ROOT_USER)
        home = "/root" if user == ROOT_USER else "/home/" + user
        env = dict(owner_env(paths.root), **{CONF_ENV: conf})
        runc = shutil.which("runc", path=SANE_PATH)
        inspected = _inspect([c["engine"] for c in targets], env) if runc else {}
        results: t.Dict[int, t.Dict[str, t.Any]] = {}
        with tempfile.TemporaryDirectory(prefix="exec-", dir=paths.root) as scratch, \
                concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
            futures, channel = {}, {}
            for i, c in enumerate(targets):
                through = runc_exec.plan(inspected[c["engine"]], user, request.argv) if c["engine"] in inspected else None
                if through is None:
                    command = [PODMAN, "exec", "--user", user, "--workdir", home, c["engine"]] + list(request.argv)
                    futures[i] = pool.submit(_exec_one, c, request, command, env, None)
                    continue
                job = exec_channel.start(os.path.join(paths.container_dir(c["hostname"]), exec_channel.DIR_NAME),
                                         through["process"]) if CHANNEL else None
                if job is not None:
                    channel[i] = job
                    continue
                spec, log = os.path.join(scratch, "%d.json" % i), os.path.join(scratch, "%d.log" % i)
                with open(spec, "w", encoding="utf-8") as f:
                    json.dump(through["process"], f)
                command = [runc, "--log", log, "--log-format", "json", "exec", "--process", spec, through["id"]]
                futures[i] = pool.submit(_exec_one, c, request, command, env, log)
            for i, answer in zip(channel, exec_channel.wait_all(list(channel.values()), request.timeout)):
                results[i] = _channel_outcome(targets[i], request, answer)
            results.update((i, f.result()) for i, f in futures.items())
        return [results[i] for i in range(len(targets))]


def _channel_outcome(container: t.Mapping[str, t.Any], request: plan.ExecRequest,
                     answer: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """One container's result through its exec channel (``_local.exec_channel``)."""
    out, err, seconds = _text(answer["stdout"]), _text(answer["stderr"]), answer["time"]
    if answer["timed_out"]:
        return plan.outcome(container, request, None, out, err, seconds, plan.TIMED_OUT,
                            "still running after %gs: it was killed" % request.timeout)
    if answer.get("lost"):
        return plan.outcome(container, request, None, out, err, seconds, plan.UNREACHABLE,
                            "the container's exec agent did not take the command within %gs"
                            % exec_channel.TAKE_TIMEOUT)
    if answer["exit_code"] is None:
        return plan.outcome(container, request, None, out, err, seconds, plan.UNREACHABLE,
                            "the container's exec agent gave no exit status (the container stopped meanwhile?)")
    return plan.outcome(container, request, answer["exit_code"], out, err, seconds)


def _inspect(engines: t.Sequence[str], env: t.Mapping[str, str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """One ``podman inspect`` of every target: what ``runc exec`` needs of each, by name (empty: use podman exec)."""
    if not engines:
        return {}
    proc = subprocess.run([PODMAN, "container", "inspect"] + list(engines), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(env), check=False)
    try:
        entries = json.loads(proc.stdout.decode("utf-8", errors="replace"))
    except ValueError:
        return {}
    found = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            found[str(entry.get("Name"))] = runc_exec.from_inspect(entry)
    return found


def _exec_one(container: t.Mapping[str, t.Any], request: plan.ExecRequest, command: t.List[str],
              env: t.Mapping[str, str], runc_log: t.Optional[str]) -> t.Dict[str, t.Any]:
    """One container's exec: ``podman exec`` (``runc_log`` None) or ``runc exec`` logging its own errors there."""
    tool = "podman exec" if runc_log is None else "runc exec"
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(env))
    except OSError as exc:
        return plan.outcome(container, request, None, "", "", time.monotonic() - start, plan.UNREACHABLE,
                            "%s could not be started: %s" % (tool, exc))
    try:
        out, err = proc.communicate(timeout=request.timeout or None)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return plan.outcome(container, request, None, _text(out), _text(err), time.monotonic() - start, plan.TIMED_OUT,
                            "still running after %gs: its %s was killed" % (request.timeout, tool))
    seconds = time.monotonic() - start
    if runc_log is None:
        if proc.returncode == PODMAN_EXEC_ERROR:
            return plan.outcome(container, request, None, _text(out), _text(err), seconds, plan.UNREACHABLE,
                                "podman exec failed: %s" % _text(err).strip())
        return plan.outcome(container, request, proc.returncode, _text(out), _text(err), seconds)
    failure = runc_exec.runc_failure(proc.returncode, _read(runc_log))
    if failure is None:
        return plan.outcome(container, request, proc.returncode, _text(out), _text(err), seconds)
    code, message = failure
    if code is None:
        return plan.outcome(container, request, None, _text(out), _text(err), seconds, plan.UNREACHABLE,
                            "runc exec failed: %s" % message)
    return plan.outcome(container, request, code, _text(out), _text(err), seconds)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _text(data: t.Optional[bytes]) -> str:
    return (data or b"").decode("utf-8", errors="replace")
