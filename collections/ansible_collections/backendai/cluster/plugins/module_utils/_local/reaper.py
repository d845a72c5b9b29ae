# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``keep_after`` on the local backend: who removes a finished session when no daemon runs (docs/session-lifecycle.md).

The containers' supervisors keep a finished session's containers up for ``keep_after`` seconds (``_session.gang``:
its sshd, network and logs stay), but nothing inside a container can remove the container, its network namespace or
the session network. So the run that creates a session with ``keep_after`` leaves one small process behind: a
**reaper**, forked from it (a double fork into a session of its own, its standard streams on /dev/null and every other
descriptor closed, so the module's caller does not wait for it and no lock of the caller is held). It reads the
session's state once a second (``_local.runtime.session_status``, what ``session_info`` reads) and, ``keep_after``
seconds after it first saw the session finished (``TERMINATED`` or ``ERROR``), removes it with the same destroy
``state: absent`` runs (containers, logs, network, state directory). It exits when the session it was started for is
gone, recreated (another state directory), or stopped; ``absent``, ``stopped`` and a recreating ``present`` end it
first (:func:`end_reaper`), so two removals never race. A reaper killed (or the machine rebooted) leaves the session
as it is: ``state: absent`` removes it as always.
"""
from __future__ import annotations

import os
import signal
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.netns import is_alive, proc_stat
from ansible_collections.backendai.cluster.plugins.module_utils._local.runtime import destroy_session, session_status
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import ERROR, TERMINATED

#: The reaper's record in the session's state directory: ``<pid> <start time>`` (the start time tells a pid reused).
REAPER_FILE = "reaper"
#: How often the reaper reads the session's state (s).
POLL = 1.0
FINISHED = (TERMINATED, ERROR)


def start_reaper(name: str, state_root: str, keep_after: int, poll: float = POLL) -> None:
    """Fork the reaper of session ``name`` (see the module docstring); returns at once in the caller."""
    paths = SessionPaths(os.path.abspath(os.path.expanduser(state_root)), name)
    incarnation = os.stat(paths.root).st_ino
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the first child exits once the reaper is recorded: the reaper is nobody's child
        return
    try:
        os.setsid()
        reaper = os.fork()
        if reaper:  # the record is there when this returns: a removal right after the create finds the reaper to end
            with open(os.path.join(paths.root, REAPER_FILE), "w", encoding="utf-8") as f:
                f.write("%d %d\n" % (reaper, proc_stat(reaper)[1]))
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 65536)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _reap(paths, incarnation, keep_after, poll)
    except BaseException:  # nothing to report to: the session stays, state=absent removes it
        pass
    os._exit(0)


def _reap(paths: SessionPaths, incarnation: int, keep_after: int, poll: float) -> None:
    finished: t.Optional[float] = None
    while True:
        time.sleep(poll)
        try:
            if os.stat(paths.root).st_ino != incarnation:
                return  # recreated by another run (which started its own reaper) or removed
        except FileNotFoundError:
            return
        state = session_status(paths.name, paths.state_root).get("state")
        if state not in FINISHED:
            if state == "STOPPED" or state == "missing":
                return
            finished = None  # (repaired meanwhile)
            continue
        finished = finished if finished is not None else time.monotonic()
        if time.monotonic() - finished >= keep_after:
            destroy_session(paths.name, paths.state_root)
            return


def end_reaper(name: str, state_root: str) -> None:
    """End the session's reaper, if it runs (before a run of this machine removes, stops or recreates the session)."""
    paths = SessionPaths(os.path.abspath(os.path.expanduser(state_root)), name)
    try:
        with open(os.path.join(paths.root, REAPER_FILE), encoding="utf-8") as f:
            pid_text, started = (f.read().split() + ["", ""])[:2]
    except OSError:
        return
    if not pid_text.isdigit() or not started.isdigit() or int(pid_text) == os.getpid() \
            or not is_alive(int(pid_text), int(started)):
        return
    try:
        os.kill(int(pid_text), signal.SIGKILL)
    except ProcessLookupError:
        return
    for _attempt in range(100):  # gone (or a zombie, or in its exit) within 2 s
        if not is_alive(int(pid_text), int(started)):
            return
        time.sleep(0.02)
