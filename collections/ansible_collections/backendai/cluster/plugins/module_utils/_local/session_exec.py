# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``session_exec`` on the local backend: a command in a session's containers through the engine, all at once.

Each selected container gets one ``podman exec`` (with the collection's containers.conf, ``_local.engine``), as the
session user (``--user <user>``, the account the entrypoint made, in its home) or root: the engine puts the command in
the container's namespaces, cgroups (its limits count it), capabilities and environment, exactly as it does for the
container's own processes, which a hand-made ``nsenter`` would not. The execs run at once, one thread each waiting for
its own (so that no pipe fills while another is read); their cost is podman's own (``benchmarks/session_exec.py``
measures it against plain ``podman exec``). The podman clients carry the session's owner tag (``_local.state``), so
a destroy that runs meanwhile stops them with the session's other processes.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import CONF_ENV, PODMAN
from ansible_collections.backendai.cluster.plugins.module_utils._local.runtime import session_status
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths, owner_env, read_json
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import ROOT_USER

#: podman exec's own failures (the container is gone or stopped, the engine refused): not the command's exit code
#: (126 and 127, "cannot run" and "not found", are the command's, as in a shell).
PODMAN_EXEC_ERROR = 125


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
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
            futures = [pool.submit(_exec_one, c, request, ["exec", "--user", user, "--workdir", home, c["engine"]], env)
                       for c in targets]
            return [f.result() for f in futures]


def _exec_one(container: t.Mapping[str, t.Any], request: plan.ExecRequest, args: t.List[str],
              env: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
    start = time.monotonic()
    try:
        proc = subprocess.Popen([PODMAN] + args + list(request.argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(env))
    except OSError as exc:
        return plan.outcome(container, request, None, "", "", time.monotonic() - start, plan.UNREACHABLE,
                            "podman could not be started: %s" % exc)
    try:
        out, err = proc.communicate(timeout=request.timeout or None)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return plan.outcome(container, request, None, _text(out), _text(err), time.monotonic() - start, plan.TIMED_OUT,
                            "still running after %gs: its podman exec was killed" % request.timeout)
    seconds = time.monotonic() - start
    if proc.returncode == PODMAN_EXEC_ERROR:
        return plan.outcome(container, request, None, _text(out), _text(err), seconds, plan.UNREACHABLE,
                            "podman exec failed: %s" % _text(err).strip())
    return plan.outcome(container, request, proc.returncode, _text(out), _text(err), seconds)


def _text(data: t.Optional[bytes]) -> str:
    return (data or b"").decode("utf-8", errors="replace")
