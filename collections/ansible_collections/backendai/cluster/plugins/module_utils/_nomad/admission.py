# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Admission of new sessions, serialised among this collection's clients by a Nomad variable lock.

Nomad has no gang scheduling (hashicorp/nomad#18773): two creates that plan on the same snapshot
of free capacity both register, and each may get some of its groups placed and others blocked.
Here plan and register happen while holding Nomad's variable lock (``PUT /v1/var/:path?lock-acquire``,
Nomad 1.7+) on :data:`LOCK_PATH`, so the placement is computed from live node data that no other
client of this collection is changing; the lock has a TTL and a short lock delay.

How long a killed holder keeps the lock is Nomad's ``CreateVariableLockTTLTimer`` (``nomad/locks.go``):
the server's timer waits ``TTL × 2`` ("a grace period ... to compensate for network and processing
delays"; a renewal restarts it, ``RenewTTLTimer``), then ``LockDelay`` more, and only then removes the
lock from the variable (``invalidateVariableLock``, a raft write). All that time the variable still
holds the dead client's lock, so every acquire gets 409. With this collection's values (TTL 15 s,
delay 1 s) that is 2 × 15 + 1 = 31 s (:func:`killed_holder_keeps`); a live holder renews at TTL / 2.

Scope: the whole cluster (one lock in namespace :data:`LOCK_NAMESPACE`), not one per namespace,
because the capacity being admitted, the client nodes, is shared by every namespace: two
sessions in two namespaces racing for the same node would collide just the same. The token
therefore needs ``write`` on the variable ``backendai-cluster/admission`` of the ``default``
namespace (besides what a session needs in its own namespace). Other Nomad jobs do not take the
lock; the evaluation of every register is followed to catch those races (see ``_nomad.backend``).

Waiting (issue 24): a create whose first acquire finds the lock held joins a queue and waits on
Nomad, not in a poll loop. The queue is one variable per waiter under :data:`QUEUE_PREFIX`, made by a
lock-acquire (so that a killed waiter's entry lapses like a killed holder's lock, ``TTL × 2 + delay``);
its raft ``CreateIndex`` is the waiter's place. Each waiter blocks (``GET /v1/var/:path?index=&wait=``,
Nomad's blocking query) on the entry just ahead of it, and only the head blocks on the lock variable
itself and tries to acquire when it changed (a waiter that is the head as it joins blocks from the index
of its lost first attempt, so a release made while it joined answers at once). So a release wakes one waiter,
not all of them: a create makes one acquire attempt, two when it had to queue (more only if a newcomer's first
attempt lands in the instant between a release and the head's acquire: then the head waits one more hold).
A blocking read ends after TTL / 2 (the entry is renewed between slices); one that ends with nothing changed
blocks again, without listing the queue or trying the lock.
Order: first come (by raft index), first served among the queued; no waiter is starved by the queue,
only newcomers' single first attempts can overtake the head. A waiter whose entry ahead goes tries the lock at
once, before listing the queue again (the waiter ahead was the head in all but one case): only if the one ahead
gave up or died while others still queued ahead of it, and the lock is free in that instant, does it overtake them. An entry ahead that changed without
going away belongs to a waiter that is leaving or died (its lock lapsed): it is passed over (the queue is read
again), and deleted at the release if it is still there then.
Waiters renew their entry's lock every TTL / 2 (a renewal is no raft write: ``RenewLock`` only
restarts a timer). The token needs ``write`` and ``destroy`` on ``backendai-cluster/admission-queue/*``
too.

The lock variable is deleted again when released if nobody queues for it (check-and-set on the
released index, so a variable another client locked meanwhile is left alone), and each queue entry
when its waiter is done: nothing is left behind.
"""

from __future__ import annotations

import time
import typing as t
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import CASConflict, NomadClient, NomadError

LOCK_PATH = "backendai-cluster/admission"
#: The waiters' queue: one variable per waiter, ``<prefix><its lock ID>``.
QUEUE_PREFIX = "backendai-cluster/admission-queue/"
LOCK_NAMESPACE = "default"
#: Nomad's default lock TTL (its minimum is 10 s).
DEFAULT_TTL = 15.0
#: After the TTL timer fired (a killed holder: TTL × 2), how long Nomad still keeps the lock before removing it.
DEFAULT_LOCK_DELAY = 1.0
#: How long a create waits for the lock before failing (a killed holder's lock lasts TTL × 2 + delay, 31 s).
DEFAULT_LOCK_WAIT = 120.0


def killed_holder_keeps(ttl: float = DEFAULT_TTL, lock_delay: float = DEFAULT_LOCK_DELAY) -> float:
    """Seconds a holder that died right after acquiring keeps the lock: Nomad's TTL timer runs ``TTL × 2``, then
    ``LockDelay`` passes before the lock is removed (``CreateVariableLockTTLTimer``, ``nomad/locks.go``)."""
    return 2 * ttl + lock_delay


class AdmissionBusy(BackendAIClusterError):
    """The admission lock could not be taken in time."""


class AdmissionLock:
    """``with AdmissionLock(nomad, owner):`` holds the cluster's admission lock (renew with :meth:`keep`)."""

    def __init__(self, nomad: NomadClient, owner: str, ttl: float = DEFAULT_TTL, lock_delay: float = DEFAULT_LOCK_DELAY,
                 wait: float = DEFAULT_LOCK_WAIT, sleep: t.Callable[[float], None] = time.sleep,
                 clock: t.Callable[[], float] = time.monotonic) -> None:
        self.nomad = nomad.in_namespace(LOCK_NAMESPACE)
        self.owner = owner
        self.ttl = max(10.0, float(ttl))
        self.lock_delay = max(0.001, float(lock_delay))
        self.wait = float(wait)
        self._sleep = sleep
        self._clock = clock
        self.lock_id: t.Optional[str] = None
        self._renewed = 0.0
        #: this waiter's queue entry (path, lock ID, CreateIndex) while it queues or holds after queueing
        self._ticket: t.Optional[t.Tuple[str, str, int]] = None
        self._ticket_renewed = 0.0
        #: queue entries ahead that changed without going away (leaving or dead waiters): skipped
        self._passed: t.Set[str] = set()
        self.waited = 0.0
        #: lock-acquire requests made on the admission lock (reports, tests)
        self.attempts = 0

    # Acquire ------------------------------------------------------------------------------------
    def acquire(self) -> None:
        start = self._clock()
        lock_id = str(uuid.uuid4())  # one ID for every attempt: a retried acquire is granted to us again
        taken, index = self._try(lock_id)
        if taken:
            return self._acquired(start)
        self._join()
        #: the raft index of our last lost attempt while nothing was waited on since: a head with one blocks from
        #: it before trying again (a release made meanwhile has a higher index: the read answers at once)
        lost_at: t.Optional[int] = index
        try:
            while True:
                ahead = self._ahead()
                if ahead is None:  # the head: wait on the lock itself (nobody queues ahead of it: no more listings)
                    while True:
                        if lost_at is None:
                            taken, lost_at = self._try(lock_id)
                            if taken:
                                return self._acquired(start)
                        while True:  # a slice that ends with the lock unchanged (its holder renewing): no new attempt
                            # (the index of a lost attempt is its own raft index, above the variable's: the variable
                            # changed, or went, only if the index answered is above it)
                            _var, seen = self._wait_on(LOCK_PATH, lost_at, start)
                            if seen > lost_at or lost_at <= 0:
                                break
                        lost_at = None
                lost_at = None
                path, modify_index = ahead
                while True:  # the entry ahead unchanged at the end of a slice (its waiter renewing): block again
                    var, _seen = self._wait_on(path, modify_index, start)
                    if var is None or int(var.get("ModifyIndex") or 0) != modify_index:
                        break
                if var is not None:
                    # changed but still there: its waiter is leaving (released, deleting next) or died (the entry's
                    # lock lapsed); passed over now, removed at our release if it is still there then
                    self._passed.add(path)
                # the waiter ahead left: it was the head (it held the lock and released it) unless it gave up or died,
                # so try the lock before listing the queue again; the listing follows only if the attempt lost (then
                # a head blocks from this attempt's index: no second attempt while the same holder holds)
                taken, lost_at = self._try(lock_id)
                if taken:
                    return self._acquired(start)
        except BaseException:
            self._leave()
            raise

    def _try(self, lock_id: str) -> t.Tuple[bool, int]:
        """One acquire attempt: (taken, the raft index of a lost attempt)."""
        self.attempts += 1
        try:
            var = self.nomad.acquire_lock(LOCK_PATH, self.ttl, self.lock_delay, {"holder": self.owner}, lock_id=lock_id)
        except CASConflict as conflict:
            return False, conflict.index
        got = ((var or {}).get("Lock") or {}).get("ID")
        if not got:
            return False, 0
        self.lock_id = str(got)
        return True, 0

    def _acquired(self, start: float) -> None:
        self._renewed = self._clock()
        self.waited = self._renewed - start

    def _join(self) -> None:
        ticket_id = str(uuid.uuid4())
        path = QUEUE_PREFIX + ticket_id
        var = self.nomad.acquire_lock(path, self.ttl, self.lock_delay, {"holder": self.owner}, lock_id=ticket_id)
        self._ticket = (path, ticket_id, int(var.get("CreateIndex") or 0))
        self._ticket_renewed = self._clock()

    def _ahead(self) -> t.Optional[t.Tuple[str, int]]:
        """The queue entry just ahead of ours (path, ModifyIndex), or None: we are the head."""
        if self._ticket is None:
            raise AssertionError("_ahead() is called only while queued")
        path, _id, place = self._ticket
        entries, _index = self.nomad.list_variables_at(QUEUE_PREFIX)
        ahead = [(int(e.get("CreateIndex") or 0), str(e.get("Path")), int(e.get("ModifyIndex") or 0)) for e in entries
                 if (int(e.get("CreateIndex") or 0), str(e.get("Path"))) < (place, path) and e.get("Path") not in self._passed]
        if not ahead:
            return None
        _place, ahead_path, modify_index = max(ahead)
        return ahead_path, modify_index

    def _wait_on(self, path: str, index: int, start: float) -> t.Tuple[t.Optional[t.Dict[str, t.Any]], int]:
        """Block on variable ``path`` until its index is above ``index`` (a slice of the time left: the queue entry
        is renewed between slices); AdmissionBusy when the time is up. (The variable or None if absent, the index
        Nomad answered: ``index`` again when the slice ended with nothing changed.)"""
        left = self.wait - (self._clock() - start)
        if left <= 0:
            raise AdmissionBusy("the admission lock (Nomad variable %s in namespace %s) is still held by another "
                                "create after %gs; Nomad frees the lock of a killed holder %gs after its last "
                                "renewal (TTL %gs × 2 + lock delay %gs)"
                                % (LOCK_PATH, LOCK_NAMESPACE, self.wait, killed_holder_keeps(self.ttl, self.lock_delay),
                                   self.ttl, self.lock_delay))
        if index <= 0:  # no index known yet: read it (at once), then block on it
            _var, index = self.nomad.wait_variable(path, 0, 0.001)
        var, seen = self.nomad.wait_variable(path, index, min(left, self.ttl / 2))
        self._keep_ticket()
        return var, seen

    # Hold and release ---------------------------------------------------------------------------
    def _keep_ticket(self) -> None:
        if self._ticket and self._clock() - self._ticket_renewed >= self.ttl / 2:
            self.nomad.renew_lock(self._ticket[0], self._ticket[1])
            self._ticket_renewed = self._clock()

    def keep(self) -> None:
        """Renew the lock (and the queue entry) when half its TTL has passed (call it while working under the lock)."""
        if self.lock_id and self._clock() - self._renewed >= self.ttl / 2:
            self.nomad.renew_lock(LOCK_PATH, self.lock_id)
            self._renewed = self._clock()
        self._keep_ticket()

    def release(self) -> None:
        if not self.lock_id:
            return
        lock_id, self.lock_id = self.lock_id, None
        try:
            released: t.Optional[t.Dict[str, t.Any]] = self.nomad.release_lock(LOCK_PATH, lock_id)
        except CASConflict:  # lost (TTL × 2 + delay) and taken by another create: nothing of ours to release
            released = None
        try:
            index = (released or {}).get("ModifyIndex")
            if index and not self._others_queued():
                try:  # leave nothing behind; another create that locked it meanwhile makes this a no-op
                    self.nomad.delete_variable(LOCK_PATH, cas=int(index))
                except NomadError:
                    pass
        finally:
            self._leave()  # after the release: the waiter behind this one wakes to a free lock

    def _others_queued(self) -> bool:
        """Whether another waiter queues; entries passed over that are still there belong to dead waiters: deleted."""
        entries, _index = self.nomad.list_variables_at(QUEUE_PREFIX)
        mine = self._ticket[0] if self._ticket else None
        for dead in [e for e in entries if e.get("Path") in self._passed]:
            try:
                self.nomad.delete_variable(str(dead.get("Path")), cas=int(dead.get("ModifyIndex") or 0))
            except NomadError:
                pass
        return any(e.get("Path") not in (mine, None) and e.get("Path") not in self._passed for e in entries)

    def _leave(self) -> None:
        """Leave the queue (release the entry's lock, delete it); errors are left to its TTL."""
        if self._ticket is None:
            return
        path, ticket_id = self._ticket[0], self._ticket[1]
        self._ticket = None
        try:
            self.nomad.release_lock(path, ticket_id)
            self.nomad.delete_variable(path)
        except NomadError:
            pass

    def __enter__(self) -> "AdmissionLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info: t.Any) -> None:
        try:
            self.release()
        except NomadError:
            pass  # the TTL frees it
