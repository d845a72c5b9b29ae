# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults injected into the local runtime from outside: the shipped code has no hook for them.

:func:`inject` wraps ``Journal.record`` (``_local/state.py``) in this process, so that the process is SIGKILLed
(``kill``) or a :class:`LocalRuntimeError` is raised (``raise``) when a journal is about to receive its (N+1)-th
record, i.e. once N side effects were started: every journal counts for itself, as each records its own effects.
A test calls it in process (``raise``, undone by the returned function) or in a creator process of its own
(``kill``: ``conftest.start_creator``).

:func:`signal_command` sends a signal to the command a container runs (a rank killed, told to exit or to hang, in the
failure policy's tests)."""

from __future__ import annotations

import os
import signal
import threading
import time
import typing as t
import weakref

from ansible_collections.backendai.cluster.plugins.module_utils._local import state
from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import inspect_containers

KINDS = ("kill", "raise")


def inject(kind: str, before_record: int) -> t.Callable[[], None]:
    """Make the ``before_record``-th record (counting from 0) of any journal fail as ``kind`` says; returns the undo."""
    if kind not in KINDS or before_record < 0:
        raise ValueError("a fault is one of %s before a record number >= 0, not %r:%r" % (KINDS, kind, before_record))
    original = state.Journal.record
    counts: weakref.WeakKeyDictionary[state.Journal, int] = weakref.WeakKeyDictionary()
    lock = threading.Lock()  # records come from the bring-up's threads: count and write as one step

    def record(journal: state.Journal, op: str, **data: t.Any) -> None:
        with lock:
            done = counts.get(journal, 0)
            if done == before_record:
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise state.LocalRuntimeError("fault injected before journal record %d (%s)" % (done + 1, op))
            original(journal, op, **data)
            counts[journal] = done + 1

    state.Journal.record = record  # type: ignore[method-assign]

    def undo() -> None:
        state.Journal.record = original  # type: ignore[method-assign]

    return undo


#: Where a container's supervisor (``_session.gang``) records its command's process ID, in the container's namespaces.
COMMAND_PID_FILE = "/run/backendai/gang/pid"


def signal_command(engine: str, conf: str, sig: int, supervised: bool = True, timeout: float = 10) -> None:
    """Send ``sig`` to the command the engine container ``engine`` runs: the process its supervisor recorded in
    :data:`COMMAND_PID_FILE`, or (``supervised`` False: policy ``none``, where the entrypoint exec's the command) the
    container's first process. Sent from this machine to that process (the ID the container's PID namespace gives it,
    mapped to this machine's through ``/proc/*/status`` ``NSpid``): what ``kill -SIG PID`` inside the container did,
    less the ``podman exec``, whose runc exec joins the container's cgroup and waits on its CPU quota (1-2 s at 4 % of
    a core, 0.2-0.4 s at 40 %). A command that has just printed its first line may not be recorded yet (its supervisor
    writes the file after the fork): the record is waited for up to ``timeout`` seconds."""
    got = inspect_containers([engine], conf, "{{.State.Pid}}").get(engine)
    assert got and got[0].isdigit() and int(got[0]) > 0, "%s does not run: %r" % (engine, got)
    init = int(got[0])
    namespace = os.readlink("/proc/%d/ns/pid" % init)
    deadline = time.monotonic() + timeout
    while True:
        inner = 1 if not supervised else _recorded_pid("/proc/%d/root%s" % (init, COMMAND_PID_FILE))
        host_pid = _host_pid(namespace, inner) if inner else None
        if host_pid is not None:
            os.kill(host_pid, sig)
            return
        if time.monotonic() > deadline:
            raise AssertionError("no command recorded in %s of %s, or no process %s in its PID namespace"
                                 % (COMMAND_PID_FILE, engine, inner))
        time.sleep(0.02)


def _recorded_pid(path: str) -> t.Optional[int]:
    try:
        with open(path, encoding="ascii") as f:
            words = f.read().split()
    except FileNotFoundError:
        return None
    return int(words[0]) if words else None


def _host_pid(namespace: str, inner: int) -> t.Optional[int]:
    """This machine's ID of the process ``inner`` of the PID namespace ``namespace`` (None: there is none)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % entry) != namespace:
                continue
            with open("/proc/%s/status" % entry, encoding="ascii") as f:
                nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
        except (OSError, StopIteration):  # (a process that ended meanwhile)
            continue
        if int(nspid[-1]) == inner:
            return int(entry)
    return None
