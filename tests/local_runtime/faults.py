# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults injected into the local runtime from outside: the shipped code has no hook for them.

:func:`inject` wraps ``Journal.record`` (``_local/state.py``) in this process, so that the process is SIGKILLed
(``kill``) or a :class:`LocalRuntimeError` is raised (``raise``) when a journal is about to receive its (N+1)-th
record, i.e. once N side effects were started: every journal counts for itself, as each records its own effects.
A test calls it in process (``raise``, undone by the returned function) or in a creator process of its own
(``kill``: ``conftest.start_creator``)."""

from __future__ import annotations

import os
import signal
import threading
import typing as t
import weakref

from ansible_collections.backendai.cluster.plugins.module_utils._local import state

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
