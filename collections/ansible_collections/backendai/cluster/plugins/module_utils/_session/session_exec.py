# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``session_exec`` decides without touching a session. Pure.

:func:`parse_request` checks the module's options into an :class:`ExecRequest` (every problem named with its field and
what is allowed); :func:`select` picks the containers it runs in from a session view's containers (by role and
hostname; a selected container that is not running gets its result at once, ``not_running``, and is not run in);
:func:`outcome` gives one container's result; :func:`summarise` makes the module's result and decides, by
``fail_on``, whether the task fails. Both backends (``_local.session_exec``: ``runc exec``, else ``podman exec``; ``_nomad.session_exec``:
ssh to main1, then over the session network) run the request and return results made by :func:`outcome`.
"""

from __future__ import annotations

import dataclasses
import shlex
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import InputError, ModuleFailure, Problem

ROLES = ("main", "sub")
#: ``session``: the session's user (``work`` by default), as logins and the batch command run; ``root``: root.
USERS = ("session", "root")
#: When the task fails: ``any`` container's command did not succeed, ``all`` of them did not, or ``none`` (never).
FAIL_ON = ("any", "all", "none")
#: A container's result: ``ok`` (exit code 0), ``failed`` (another exit code), ``timed_out`` (still running after
#: ``command_timeout``: its client was killed), ``unreachable`` (it could not be run: the exec or the ssh failed to
#: start), ``not_running`` (the container is not running: nothing was run in it), ``skipped`` (check mode).
OK, FAILED, TIMED_OUT, UNREACHABLE, NOT_RUNNING, SKIPPED = "ok", "failed", "timed_out", "unreachable", "not_running", "skipped"


@dataclasses.dataclass(frozen=True)
class ExecRequest:
    """What to run where: ``argv`` (``("sh", "-c", command)`` for a shell command), as root or the session user."""

    name: str
    argv: t.Tuple[str, ...]
    hostnames: t.Tuple[str, ...] = ()
    roles: t.Tuple[str, ...] = ()
    as_root: bool = False
    fail_on: str = "any"
    timeout: float = 0.0

    @property
    def shell_text(self) -> str:
        """The command as one line for a shell (what ssh hands the login shell)."""
        if self.argv[:2] == ("sh", "-c") and len(self.argv) == 3:
            return self.argv[2]
        return " ".join(shlex.quote(a) for a in self.argv)


def parse_request(params: t.Mapping[str, t.Any]) -> ExecRequest:
    """The module's options as a request; :class:`InputError` naming every field that is wrong and what is allowed."""
    problems = []
    command, argv = params.get("command"), params.get("argv")
    if (command is None) == (argv is None):
        problems.append(Problem("command", "give exactly one of command (a shell command line) and argv (a list: the "
                                "program and its arguments, run without a shell)"))
    elif command is not None and (not isinstance(command, str) or not command.strip()):
        problems.append(Problem("command", "must be a non-empty string", command, True))
    elif argv is not None and (not isinstance(argv, (list, tuple)) or not argv
                               or not all(isinstance(a, str) for a in argv) or not argv[0]):
        problems.append(Problem("argv", "must be a non-empty list of strings, the program first", argv, True))
    name = params.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem("name", "is required: the session to run the command in", name, True))
    lists = {}
    for key in ("hostnames", "roles"):
        value = params.get(key) or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            problems.append(Problem(key, "must be a list of non-empty strings", value, True))
            value = []
        lists[key] = tuple(dict.fromkeys(value))
    for i, role in enumerate(lists["roles"]):
        if role not in ROLES:
            problems.append(Problem("roles[%d]" % i, "must be one of %s" % ", ".join(ROLES), role, True))
    user = params.get("user") or "session"
    if user not in USERS:
        problems.append(Problem("user", "must be one of %s" % ", ".join(USERS), user, True))
    fail_on = params.get("fail_on") or "any"
    if fail_on not in FAIL_ON:
        problems.append(Problem("fail_on", "must be one of %s" % ", ".join(FAIL_ON), fail_on, True))
    timeout = params.get("command_timeout")
    timeout = 0.0 if timeout is None else timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        problems.append(Problem("command_timeout", "must be a number of seconds, 0 or more (0: no limit)", timeout, True))
    if problems:
        raise InputError("session_exec options", problems)
    return ExecRequest(name=name, argv=("sh", "-c", command) if command is not None else tuple(argv),
                       hostnames=lists["hostnames"], roles=lists["roles"], as_root=user == "root",
                       fail_on=fail_on, timeout=float(timeout))


def select(containers: t.Sequence[t.Mapping[str, t.Any]], request: ExecRequest
           ) -> t.Tuple[t.List[t.Mapping[str, t.Any]], t.List[t.Dict[str, t.Any]]]:
    """(the running containers to run in, the results of the selected ones that are not running), in the session's
    order. A container is selected when its hostname is in ``hostnames`` or its role in ``roles``; with neither,
    every container is. A hostname the session does not have is an :class:`InputError` naming the ones it has."""
    known = [str(c.get("hostname")) for c in containers]
    problems = [Problem("hostnames[%d]" % i, "is not a container of session %s (its containers: %s)"
                        % (request.name, ", ".join(known)), h, True)
                for i, h in enumerate(request.hostnames) if h not in known]
    if problems:
        raise InputError("session_exec options", problems)
    everyone = not request.hostnames and not request.roles
    chosen = [c for c in containers if everyone or c.get("hostname") in request.hostnames or c.get("role") in request.roles]
    if not chosen:
        raise InputError("session_exec options", [Problem(
            "roles", "selects no container of session %s (its roles: %s)"
            % (request.name, ", ".join(sorted({str(c.get("role")) for c in containers}))), list(request.roles), True)])
    run = [c for c in chosen if c.get("status") == "running"]
    idle = [outcome(c, request, None, "", "", 0.0, NOT_RUNNING,
                    "the container is %s: nothing was run in it" % (c.get("status") or "unknown"))
            for c in chosen if c.get("status") != "running"]
    return run, idle


def outcome(container: t.Mapping[str, t.Any], request: ExecRequest, exit_code: t.Optional[int], stdout: str,
            stderr: str, seconds: float, result: str = "", reason: str = "") -> t.Dict[str, t.Any]:
    """One container's result; ``result`` defaults to ``ok``/``failed`` by the exit code."""
    if not result:
        result = OK if exit_code == 0 else FAILED
    if not reason and result == FAILED:
        reason = "the command exited %s" % exit_code
    return {"hostname": container.get("hostname"), "role": container.get("role", ""),
            "user": "root" if request.as_root else "session", "result": result, "exit_code": exit_code,
            "stdout": stdout, "stderr": stderr, "time": round(seconds, 3), "reason": reason}


def summarise(request: ExecRequest, results: t.Sequence[t.Dict[str, t.Any]], seconds: float,
              backend: str) -> t.Dict[str, t.Any]:
    """The module's result, in the session's container order; :class:`ModuleFailure` carrying it when ``fail_on``
    says the task fails (``any``: some container's result is not ``ok``; ``all``: none is; ``none``: never)."""
    bad = [r["hostname"] for r in results if r["result"] != OK]
    out = {"changed": any(r["result"] not in (NOT_RUNNING, SKIPPED) for r in results), "session": request.name,
           "backend": backend, "containers": list(results), "failed_hostnames": bad, "time": round(seconds, 3)}
    fails = {"any": bool(bad), "all": bool(results) and len(bad) == len(results), "none": False}[request.fail_on]
    if fails:
        detail = ", ".join("%s (%s)" % (r["hostname"], r["reason"] or r["result"]) for r in results if r["result"] != OK)
        raise ModuleFailure("the command did not succeed in %d of %d containers of session %s: %s (fail_on=%s)"
                            % (len(bad), len(results), request.name, detail, request.fail_on), out)
    return out
