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

The lock variable is deleted again when released (check-and-set on the released index, so a
variable another client locked meanwhile is left alone): nothing is left behind.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import CASConflict, NomadClient, NomadError

LOCK_PATH = "backendai-cluster/admission"
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
                 clock: t.Callable[[], float] = time.monotonic, poll: float = 0.2) -> None:
        self.nomad = nomad.in_namespace(LOCK_NAMESPACE)
        self.owner = owner
        self.ttl = max(10.0, float(ttl))
        self.lock_delay = max(0.001, float(lock_delay))
        self.wait = float(wait)
        self._sleep = sleep
        self._clock = clock
        self._poll = poll
        self.lock_id: t.Optional[str] = None
        self._renewed = 0.0
        self.waited = 0.0

    def acquire(self) -> None:
        start = self._clock()
        delay = min(0.05, self._poll)
        while True:
            try:
                var = self.nomad.acquire_lock(LOCK_PATH, self.ttl, self.lock_delay, {"holder": self.owner})
            except CASConflict:
                var = None
            lock_id = ((var or {}).get("Lock") or {}).get("ID")
            if lock_id:
                self.lock_id = str(lock_id)
                self._renewed = self._clock()
                self.waited = self._renewed - start
                return
            if self._clock() - start >= self.wait:
                raise AdmissionBusy("the admission lock (Nomad variable %s in namespace %s) is still held by another "
                                    "create after %gs; Nomad frees the lock of a killed holder %gs after its last "
                                    "renewal (TTL %gs × 2 + lock delay %gs)"
                                    % (LOCK_PATH, LOCK_NAMESPACE, self.wait, killed_holder_keeps(self.ttl, self.lock_delay),
                                       self.ttl, self.lock_delay))
            self._sleep(delay)
            delay = min(delay * 2, self._poll)

    def keep(self) -> None:
        """Renew the lock when half its TTL has passed (call it while working under the lock)."""
        if self.lock_id and self._clock() - self._renewed >= self.ttl / 2:
            self.nomad.renew_lock(LOCK_PATH, self.lock_id)
            self._renewed = self._clock()

    def release(self) -> None:
        if not self.lock_id:
            return
        lock_id, self.lock_id = self.lock_id, None
        try:
            released = self.nomad.release_lock(LOCK_PATH, lock_id)
        except CASConflict:  # lost (TTL × 2 + delay) and taken by another create: nothing of ours to release
            return
        index = released.get("ModifyIndex")
        if index:
            try:  # leave nothing behind; another create that locked it meanwhile makes this a no-op
                self.nomad.delete_variable(LOCK_PATH, cas=int(index))
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
