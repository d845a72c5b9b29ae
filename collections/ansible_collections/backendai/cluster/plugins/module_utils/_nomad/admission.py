# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Admission of new sessions, serialised among this collection's clients by a Nomad variable lock.

Nomad has no gang scheduling (hashicorp/nomad#18773): two creates that plan on the same snapshot
of free capacity both register, and each may get some of its groups placed and others blocked.
Here plan and register happen while holding Nomad's variable lock (``PUT /v1/var/:path?lock-acquire``,
Nomad 1.7+) on :data:`LOCK_PATH`, so the placement is computed from live node data that no other
client of this collection is changing; the lock has a TTL (a killed client cannot hold it for
longer) and a short lock delay.

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
#: After a TTL expiry (a killed holder), how long Nomad keeps the lock from being taken again.
DEFAULT_LOCK_DELAY = 1.0
#: How long a create waits for the lock before failing (a killed holder's lock lasts TTL + delay).
DEFAULT_LOCK_WAIT = 120.0


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
                                    "create after %gs; a killed holder loses it after its TTL (%gs)"
                                    % (LOCK_PATH, LOCK_NAMESPACE, self.wait, self.ttl))
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
        except CASConflict:  # lost to its TTL and taken by another create: nothing of ours to release
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
