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


def signal_command(engine: str, conf: str, sig: int, supervised: bool = True) -> None:
    """Send ``sig`` to the command the engine container ``engine`` runs: the process its supervisor recorded in
    :data:`COMMAND_PID_FILE`, or (``supervised`` False: policy ``none``, where the entrypoint exec's the command) the
    container's first process. Sent from this machine to that process (the ID the container's PID namespace gives it,
    mapped to this machine's through ``/proc/*/status`` ``NSpid``): what ``kill -SIG PID`` inside the container did,
    less the ``podman exec``, whose runc exec joins the container's cgroup and waits on its CPU quota (1-2 s at 4 % of
    a core, 0.2-0.4 s at 40 %)."""
    got = inspect_containers([engine], conf, "{{.State.Pid}}").get(engine)
    assert got and got[0].isdigit() and int(got[0]) > 0, "%s does not run: %r" % (engine, got)
    init = int(got[0])
    namespace = os.readlink("/proc/%d/ns/pid" % init)
    inner = 1
    if supervised:
        with open("/proc/%d/root%s" % (init, COMMAND_PID_FILE), encoding="ascii") as f:
            inner = int(f.read().split()[0])
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
            os.kill(int(entry), sig)
            return
    raise AssertionError("no process %d in the PID namespace of %s" % (inner, engine))
