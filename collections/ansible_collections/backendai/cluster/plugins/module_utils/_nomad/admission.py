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
lock; the evaluation of every register is followed to catch those races (see ``_nomad.nomad_backend``).

Waiting (issue 24): a create whose first acquire finds the lock held joins a queue and waits on
Nomad, not in a poll loop. The queue is one variable per waiter under :data:`QUEUE_PREFIX`, a plain check-and-set
variable (created with ``PUT ?cas=0``, every later write and the delete with ``?cas=<its last ModifyIndex>``), not a
locked one: Nomad keeps a variable's data on ``lock-release`` and a ``DELETE`` carries no lock ID, so a locked entry
cost a release and a delete to leave (``VarLockRelease`` and ``isLocked`` in ``nomad/state/state_store_variables.go``);
this one costs the delete alone. Its raft ``CreateIndex`` is the waiter's place. Each waiter blocks (``GET /v1/var/:path?index=&wait=``,
Nomad's blocking query) on the entry just ahead of it, and only the head blocks on the lock variable
itself and tries to acquire when it changed (a waiter that is the head as it joins blocks from the index
of its lost first attempt, so a release made while it joined answers at once). So a release wakes one waiter,
not all of them: a create makes one acquire attempt, two when it had to queue (more only if a newcomer's first
attempt lands in the instant between a release and the head's acquire: then the head waits one more hold).
A blocking read ends after TTL / 2; the waiter then rewrites its entry if TTL / 2 passed since its last write (its
heartbeat, :data:`HEARTBEAT_ITEM`, the time of the write: a raft write, where a lock renewal was a timer restart on
the server, ``RenewLock``; the same number of requests). One that ends with nothing changed blocks again, without
listing the queue or trying the lock; one woken by the heartbeat of the entry ahead blocks again from its new index.
An entry whose heartbeat is older than a TTL is dead: the waiter behind it finds so when a slice of its blocking read
ends with the entry unwritten (so a dead waiter delays the one behind it a TTL to 1.5 TTL after its last heartbeat,
where a lapsing entry lock took ``TTL × 2 + delay``); clocks are assumed within TTL / 2 of each other, as for grants.
Order: first come (by raft index), first served among the queued; no waiter is starved by the queue,
only newcomers' single first attempts can overtake the head. A waiter whose entry ahead goes tries the lock at
once, before listing the queue again (the waiter ahead was the head in all but one case): only if the one ahead
gave up or died while others still queued ahead of it, and the lock is free in that instant, does it overtake
them. A dead entry ahead is passed over (the queue is read again), and deleted at this create's release if it is
still there then and unwritten since (a check-and-set delete on the index it was found dead at: an entry written
since is alive and kept).

Batch admission (issue 24): a waiter publishes its placement request in its entry (``_nomad.batch``: resources,
counts, constraints; no name, image, environment or key), and its digest in the entry's path
(``<prefix><its ID>~<digest>``, :func:`request_digest`). The holder, after placing its own session on its one
live capacity read, lists the entries queued behind it (at most :data:`BATCH_LIMIT`) and places them in queue
order on what is left, stopping at the first that does not fit (:meth:`AdmissionLock.admit`). It reads an entry's
request only for the first entry of each digest (checking that the digest is the request's), and for entries
written again since they joined (their ``ModifyIndex`` is not their ``CreateIndex``: a new variable has both at the
same raft index, ``varSetTxn`` in ``nomad/state/state_store_variables.go``): creates that ask for the same session
shape (a class starting its sessions, a sweep) cost the holder one read, not one each. Once it has registered its own
session (:meth:`AdmissionLock.release`), the holder admits in a second pass, on what its placement has left, the
creates that queued since its first (after those admitted already: the lock variable then holds all the hold's
grants), so that one hold serves the creates that arrive while it lasts. Its grants (entry
-> the agents granted, with exactly the capacity granted, and when) go into the lock variable's Items: a write
only the lock's holder can make (``isLocked``, ``nomad/state/state_store_variables.go``: a locked variable is
written only with its lock ID; ``VarLockAcquire`` by the same ID overwrites the data). An admitted waiter learns
it where it blocks: the head from its blocking read of the lock variable, the others from the entry ahead, which
its admitted waiter (or the holder, for its own entry) writes again with a ``granted`` mark and a copy of the
grants (with the lock variable's index they were written at), so that its grant is read in the same blocking read,
not from the lock variable; or after a lost attempt; it then marks its own entry, renders its job on its grant and
registers it itself, with its own keypair and token (the holder never sees its secrets nor acts for it), and leaves
the queue. (The copy is checked as the original is, its age the same; this collection writes a queue entry only from
its own create, with a check-and-set on its last write, so another create of this collection, with the same token as
any holder of the admission lock, never overwrites it. What the check-and-set entry weakens: a locked entry refused
a write without its lock ID, and this one takes any write that names its current index, or any plain ``PUT`` without
``cas``. Neither stopped a client with the same token that means to write it (the lock ID was the entry's name, in
every listing; the index is in every listing too): only an accidental plain write, say ``nomad var put`` on the
path, that a locked entry refused, now lands, and could forge a copy of the grants for the waiter behind. That
client could register jobs outright with the same token; the holder's own grants stay in the lock variable, which
only the lock's holder writes, and a create that races the holder's placement is caught by the evaluation it
follows, as for any job that does not take the lock.)
A waiter that finds the entry ahead marked but no grant of its own is next: the holder admits a prefix of the
queue, so every live waiter ahead was admitted and none of them will try the lock. It blocks on the lock variable
from the grants' index (the holder's next write of it clears them just before it releases), not on each admitted
entry ahead as it goes (which cost a listing, a read of the lock variable and an acquire attempt each). The holder keeps the lock
until each admitted entry is gone (:meth:`AdmissionLock.release`), so no other holder plans on capacity granted
but not yet registered. The admitted creates run side by side, so it waits on the queue's listing (each entry's
``ModifyIndex``), blocking between listings on the last admitted entry still there: a few listings and reads per
hold, not a read per admitted create; an admitted waiter marks its entry every TTL / 4 (its heartbeat) and stops without
registering after TTL / 2 without one, and the holder stops waiting for one it has not heard of for a TTL (it
died), so a dead admitted waiter keeps the lock one TTL at most. Before it releases, the holder clears its grants
(Nomad keeps a variable's data on ``lock-release``), and a grant older than a TTL is not taken (a dead holder's
lock lapses 1.5 TTL after its grants at the earliest; clocks are assumed within TTL / 2 of each other).
Not covered: a waiter that reads its grant and then stalls past its checks (the same window as a holder that
stalls between its last renewal and its register).
Waiters rewrite their entry (its heartbeat) every TTL / 2 while they queue. The token needs ``write`` and
``destroy`` on ``backendai-cluster/admission-queue/*`` too.

The lock variable is deleted again when released if nobody queues for it (check-and-set on the
released index, so a variable another client locked meanwhile is left alone), and each queue entry
when its waiter is done: nothing is left behind.
"""

from __future__ import annotations

import hashlib
import json
import time
import typing as t
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import CASConflict, NomadClient, NomadError

LOCK_PATH = "backendai-cluster/admission"
#: The waiters' queue: one variable per waiter, ``<prefix><its ID>[~<digest of its request>]``.
QUEUE_PREFIX = "backendai-cluster/admission-queue/"
LOCK_NAMESPACE = "default"
#: Nomad's default lock TTL (its minimum is 10 s).
DEFAULT_TTL = 15.0
#: After the TTL timer fired (a killed holder: TTL × 2), how long Nomad still keeps the lock before removing it.
DEFAULT_LOCK_DELAY = 1.0
#: How long a create waits for the lock before failing (a killed holder's lock lasts TTL × 2 + delay, 31 s).
DEFAULT_LOCK_WAIT = 120.0
#: The most queued creates one holder admits with its own (each costs it a placement pass; a read per distinct request).
#: Measured (benchmarks/admission.py, 100 creates at once): 16 gave 6 holds of 17 sessions and 18.5 requests per
#: session, 64 gives 2 holds and 18.1 (both before the holder read requests by digest and waited on listings), at the
#: same throughput; the hold grows with the batch (the holder waits for every create it admitted).
BATCH_LIMIT = 64
#: Items of the lock variable (the holder's grants: queue entry path -> granted agents, JSON) and of a queue entry
#: (its placement request, JSON; its mark once granted, which wakes the waiter behind it).
GRANTS_ITEM = "grants"
REQUEST_ITEM = "request"
GRANTED_ITEM = "granted"
#: When the holder wrote its grants (Unix seconds): a grant is taken only while younger than a TTL.
GRANTED_AT_ITEM = "granted_at"
#: In a marked queue entry: the lock variable's ModifyIndex at the grants copied there.
GRANTS_INDEX_ITEM = "grants_index"
#: In a queue entry: when its waiter last wrote it (Unix seconds; rewritten every TTL / 2): older than a TTL, it is dead.
HEARTBEAT_ITEM = "heartbeat"


#: In a queue entry's path, before the digest of its request (``<prefix><ID>~<digest>``; ``~`` is a path
#: character Nomad allows, ``validVariablePath`` in ``nomad/structs/variables.go``, and no UUID has one).
DIGEST_MARK = "~"


class QueueEntry(t.NamedTuple):
    """A queue entry as the listing gives it: its place (raft ``CreateIndex``), path and ``ModifyIndex``."""
    place: int
    path: str
    index: int


def request_digest(request: t.Mapping[str, t.Any]) -> str:
    """The digest of a placement request (16 hex digits of SHA-256 of its canonical JSON)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _heartbeat_age(items: t.Mapping[str, t.Any], wall: t.Callable[[], float] = time.time) -> float:
    """Seconds since a queue entry's heartbeat (an entry without a readable one: as good as dead)."""
    try:
        return wall() - float(items.get(HEARTBEAT_ITEM) or 0)
    except (TypeError, ValueError):
        return float("inf")


def killed_holder_keeps(ttl: float = DEFAULT_TTL, lock_delay: float = DEFAULT_LOCK_DELAY) -> float:
    """Seconds a holder that died right after acquiring keeps the lock: Nomad's TTL timer runs ``TTL × 2``, then
    ``LockDelay`` passes before the lock is removed (``CreateVariableLockTTLTimer``, ``nomad/locks.go``)."""
    return 2 * ttl + lock_delay


class AdmissionBusy(BackendAIClusterError):
    """The admission lock could not be taken in time."""


class GrantLapsed(BackendAIClusterError):
    """A create admitted by another holder stalled so long that the holder may have stopped waiting for it."""


class AdmissionLock:
    """``with AdmissionLock(nomad, owner):`` holds the cluster's admission lock (renew with :meth:`keep`)."""

    def __init__(self, nomad: NomadClient, owner: str, ttl: float = DEFAULT_TTL, lock_delay: float = DEFAULT_LOCK_DELAY,
                 wait: float = DEFAULT_LOCK_WAIT, sleep: t.Callable[[float], None] = time.sleep,
                 clock: t.Callable[[], float] = time.monotonic,
                 request: t.Optional[t.Mapping[str, t.Any]] = None, wall: t.Callable[[], float] = time.time) -> None:
        self.nomad = nomad.in_namespace(LOCK_NAMESPACE)
        self.owner = owner
        self.ttl = max(10.0, float(ttl))
        self.lock_delay = max(0.001, float(lock_delay))
        self.wait = float(wait)
        self._sleep = sleep
        self._clock = clock
        #: the time written into queue entries and grants, which other clients compare with theirs
        self._wall = wall
        self.lock_id: t.Optional[str] = None
        self._renewed = 0.0
        #: this waiter's queue entry (path, CreateIndex) while it queues or holds after queueing, the
        #: ModifyIndex of our last write of it (every write of it is a check-and-set on that) and the items it carries
        #: besides the request and heartbeat (a granted mark and the grants copied, once granted)
        self._ticket: t.Optional[t.Tuple[str, int]] = None
        self._ticket_index = 0
        self._ticket_extra: t.Dict[str, str] = {}
        #: when this create last wrote its entry: its heartbeat (once granted, every write of it is a mark)
        self._ticket_renewed = 0.0
        #: queue entries passed over (dead waiters, admitted ones ahead) -> the ModifyIndex they were passed at: not
        #: waited on again; deleted at this create's release only if still unwritten since (a check-and-set delete)
        self._passed: t.Dict[str, int] = {}
        self.waited = 0.0
        #: lock-acquire requests made on the admission lock (reports, tests)
        self.attempts = 0
        #: the placement request this create publishes in its queue entry (``_nomad.batch``), or None: not admitted
        #: by another holder (it places itself when it holds the lock)
        self.request = dict(request) if request is not None else None
        #: the agents a holder granted this create (then it renders on them and registers without the lock), or None
        self.grant: t.Optional[t.List[t.Dict[str, t.Any]]] = None
        #: entries ahead seen marked granted
        self._marked: t.Set[str] = set()
        #: queue entries (path, ModifyIndex) this holder granted: waited for before the lock is released
        self._granted: t.List[t.Tuple[str, int]] = []
        #: the lock variable's index at the grants last read (where a waiter not admitted blocks from), and the grants'
        #: items this create copies into its entry's marks (the waiter behind reads them there, not the lock variable)
        self._grants_index = 0
        self._copied: t.Dict[str, str] = {}
        #: this holder's grants so far (entry -> agents), the placement it grants from, and the requests it read, by
        #: their digest (:func:`request_digest`)
        self._grants: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {}
        self._grant_fn: t.Optional[t.Callable[[t.Any], t.Optional[t.List[t.Dict[str, t.Any]]]]] = None
        self._known: t.Dict[str, t.Any] = {}

    # Acquire ------------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Hold the lock, or be admitted by its holder (then :attr:`grant` is set and the lock is not held)."""
        start = self._clock()
        lock_id = str(uuid.uuid4())  # one ID for every attempt: a retried acquire is granted to us again
        taken, index = self._try(lock_id)
        if taken:
            return self._acquired(start)
        self._join()
        #: the raft index of our last lost attempt while nothing was waited on since: a head with one blocks from
        #: it before trying again (a release made meanwhile has a higher index: the read answers at once)
        lost_at: t.Optional[int] = index
        #: set once the entry ahead was seen admitted by the holder and this one not: nobody queued ahead of it waits
        #: for the lock any more (a holder admits a prefix of the queue), so it blocks on the lock itself, no listing
        next_in_line = False
        try:
            while True:
                ahead = None if next_in_line else self._ahead()
                if ahead is None:  # the head: wait on the lock itself (nobody queues ahead of it: no more listings)
                    while True:
                        if lost_at is None:
                            taken, lost_at = self._try(lock_id)
                            if taken:
                                return self._acquired(start)
                            if self._admitted_by(None):
                                return self._admitted(start)
                        while True:  # a slice that ends with the lock unchanged (its holder renewing): no new attempt
                            # (the index of a lost attempt is its own raft index, above the variable's: the variable
                            # changed, or went, only if the index answered is above it)
                            var, seen = self._wait_on(LOCK_PATH, lost_at, start)
                            if self._admitted_by(var):
                                return self._admitted(start)
                            if seen > lost_at or lost_at <= 0:  # (grants for others: tried all the same, since
                                break  # a read cannot tell whether the lock is still held for them or released since)
                        lost_at = None
                lost_at = None
                path, modify_index = ahead
                while True:  # the entry ahead alive (rewritten, its heartbeat) or unchanged but young: block again
                    var, _seen = self._wait_on(path, modify_index, start)
                    if var is None:
                        break
                    changed_to = int(var.get("ModifyIndex") or 0)
                    items = var.get("Items") or {}
                    if path not in self._marked and items.get(GRANTED_ITEM):
                        # the waiter ahead was admitted by the holder (its mark, with a copy of the holder's grants):
                        # this one may be too
                        self._marked.add(path)
                        if self._admitted_by(None, var):
                            return self._admitted(start)
                        # not this one: the holder admitted every live waiter ahead (a prefix of the queue) and keeps
                        # the lock until they are done. This one is next: it blocks on the lock from the grants' index
                        # (the holder's next write of it clears them just before its release), not on the entries
                        # ahead as each goes. The one ahead is passed over: deleted at this one's release if it is
                        # still there then, unwritten since (a live admitted create rewrites it every TTL / 4)
                        self._passed[path] = changed_to
                        next_in_line, lost_at = True, self._grants_index
                        break
                    if changed_to != modify_index:  # its heartbeat (or a mark not for us): alive, block on again
                        modify_index = changed_to
                        continue
                    if _heartbeat_age(items, self._wall) >= self.ttl:
                        # a slice ended with the entry unwritten and its heartbeat older than a TTL (its waiter writes
                        # it every TTL / 2): dead. Passed over, deleted at our release if still unwritten then
                        self._passed[path] = changed_to
                        break
                if next_in_line:
                    continue
                # the waiter ahead left: it was the head (it held the lock and released it) unless it gave up or died,
                # so try the lock before listing the queue again; the listing follows only if the attempt lost (then
                # a head blocks from this attempt's index: no second attempt while the same holder holds)
                taken, lost_at = self._try(lock_id)
                if taken:
                    return self._acquired(start)
                if self._admitted_by(None):  # lost: the lock may be held for us
                    return self._admitted(start)
        except BaseException:
            self._leave()
            raise

    def _admitted_by(self, var: t.Optional[t.Dict[str, t.Any]], ahead: t.Optional[t.Dict[str, t.Any]] = None) -> bool:
        """Whether the holder granted this create (``var``: the lock variable just read; None: read it now, unless
        ``ahead``, the marked entry ahead just read, carries a copy of the grants). If so, take the grant and mark
        the queue entry with the grants (the waiter behind it wakes and looks for its own there)."""
        if self._ticket is None or self.request is None:
            return False
        items = (ahead or {}).get("Items") or {}
        if GRANTS_ITEM in items:  # copied by the waiter ahead from the lock variable at GRANTS_INDEX_ITEM
            try:
                self._grants_index = int(items.get(GRANTS_INDEX_ITEM) or 0)
            except ValueError:
                self._grants_index = 0
        else:
            if var is None:
                var = self.nomad.get_variable(LOCK_PATH)
            items = (var or {}).get("Items") or {}
            self._grants_index = int((var or {}).get("ModifyIndex") or 0)
        try:
            grants = json.loads(str(items.get(GRANTS_ITEM) or "{}"))
            age = self._wall() - float(items.get(GRANTED_AT_ITEM) or 0)
        except ValueError:
            return False
        # a holder clears its grants before it releases; grants older than a TTL may be a dead holder's (its lock
        # lapses 1.5 TTL after its grants at the earliest): not taken (clocks are assumed within TTL / 2 of each other)
        if not -self.ttl / 2 < age < self.ttl:
            return False
        mine = grants.get(self._ticket[0]) if isinstance(grants, dict) else None
        if not isinstance(mine, list) or not mine:
            return False
        self.grant = mine
        self._copied = {GRANTS_ITEM: str(items.get(GRANTS_ITEM)), GRANTED_AT_ITEM: str(items.get(GRANTED_AT_ITEM)),
                        GRANTS_INDEX_ITEM: str(self._grants_index)}
        self._mark()
        return True

    def _mark(self) -> None:
        """Write this granted create's entry again (a raft write: a new ModifyIndex): the holder, blocked on it, sees
        it alive, and the waiter behind it wakes."""
        if self._ticket is None:
            raise AssertionError("_mark() is called only while queued")
        self._write_granted_entry(self._copied)

    def _write_granted_entry(self, copied: t.Mapping[str, str]) -> None:
        """Write this create's queue entry again as granted, with the grants ``copied`` from the lock variable (a raft
        write, so whoever blocks on the entry wakes)."""
        self._ticket_extra = dict(copied, **{GRANTED_ITEM: "1"})
        self._write_entry()

    def _write_entry(self) -> None:
        """Write this create's queue entry again (check-and-set on our last write: a raft write, so whoever blocks on
        it wakes), with a new heartbeat. A check-and-set write is not retried blindly (a write whose answer was lost
        moved the index: the retry would conflict), so after an error the entry is read and written once more on the
        index it has (only this create writes it); an entry gone (deleted as dead: we stalled past a TTL) is an error."""
        path = t.cast(t.Tuple[str, int], self._ticket)[0]
        try:
            var = self.nomad.put_variable(path, dict(self._entry_items(), **self._ticket_extra), cas=self._ticket_index)
        except NomadError:
            current = self.nomad.get_variable(path)
            if current is None:
                raise
            self._ticket_index = int(current.get("ModifyIndex") or 0)
            var = self.nomad.put_variable(path, dict(self._entry_items(), **self._ticket_extra), cas=self._ticket_index)
        self._ticket_index = int(var.get("ModifyIndex") or 0)
        self._ticket_renewed = self._clock()

    def _admitted(self, start: float) -> None:
        self.waited = self._clock() - start

    def _entry_items(self) -> t.Dict[str, str]:
        items = {"holder": self.owner, HEARTBEAT_ITEM: "%.3f" % self._wall()}
        if self.request is not None:
            items[REQUEST_ITEM] = json.dumps(self.request, sort_keys=True)
        return items

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
        if self.request is not None:  # its digest in the path: the holder reads one entry per distinct request
            path += DIGEST_MARK + request_digest(self.request)
        try:
            var = self.nomad.put_variable(path, self._entry_items(), cas=0)  # created, never overwritten
        except NomadError:  # (not retried blindly: a create whose answer was lost would conflict with itself)
            current = self.nomad.get_variable(path)  # the path is ours alone (a new UUID): there, it is our create
            var = current if current is not None else self.nomad.put_variable(path, self._entry_items(), cas=0)
        self._ticket = (path, int(var.get("CreateIndex") or 0))
        self._ticket_index, self._ticket_extra = int(var.get("ModifyIndex") or 0), {}
        self._ticket_renewed = self._clock()

    def _queue(self) -> t.Tuple[t.List[QueueEntry], t.List[QueueEntry]]:
        """The queue now (one listing, ``GET /v1/vars?prefix=``: metadata, no Items): (the entries of the other waiters,
        in queue order; the entries passed over, :attr:`_passed`, that are still there)."""
        entries, _index = self.nomad.list_variables_at(QUEUE_PREFIX)
        mine = self._ticket[0] if self._ticket else None
        listed = sorted(QueueEntry(int(e.get("CreateIndex") or 0), str(e.get("Path")), int(e.get("ModifyIndex") or 0))
                        for e in entries if e.get("Path") not in (mine, None))
        return [e for e in listed if e.path not in self._passed], [e for e in listed if e.path in self._passed]

    def _ahead(self) -> t.Optional[t.Tuple[str, int]]:
        """The queue entry just ahead of ours (path, ModifyIndex), or None: we are the head."""
        if self._ticket is None:
            raise AssertionError("_ahead() is called only while queued")
        path, place = self._ticket
        ahead = [e for e in self._queue()[0] if (e.place, e.path) < (place, path)]
        return (ahead[-1].path, ahead[-1].index) if ahead else None

    def _wait_on(self, path: str, index: int, start: float) -> t.Tuple[t.Optional[t.Dict[str, t.Any]], int]:
        """Block on variable ``path`` until its index is above ``index`` (a slice of the time left: the queue entry's
        heartbeat is written between slices); AdmissionBusy when the time is up. (The variable or None if absent, the index
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
            self._write_entry()  # its heartbeat: a raft write (a lock renewal was only a timer restart)

    def keep(self) -> None:
        """Renew the lock (and the queue entry) when half its TTL has passed (call it while working under the lock).

        A create admitted by the holder marks its entry again every TTL / 4 instead (its heartbeat: the holder stops
        waiting for a create it has not heard of for a TTL), and refuses to go on (:class:`GrantLapsed`) once half a
        TTL passed without one: the holder may stop waiting before what it does next takes effect."""
        if self.lock_id and self._clock() - self._renewed >= self.ttl / 2:
            self.nomad.renew_lock(LOCK_PATH, self.lock_id)
            self._renewed = self._clock()
        if self.grant is not None:
            silent = self._clock() - self._ticket_renewed
            if silent >= self.ttl / 2:
                raise GrantLapsed("admitted by the admission lock's holder, this create was silent for %.0fs (the "
                                  "holder waits %gs for it): it registers nothing; run it again" % (silent, self.ttl))
            if silent >= self.ttl / 4:
                self._mark()
            return
        self._keep_ticket()

    # Batch admission (the holder) ---------------------------------------------------------------
    def admit(self, grant: t.Callable[[t.Any], t.Optional[t.List[t.Dict[str, t.Any]]]],
              limit: int = BATCH_LIMIT) -> int:
        """Admit the creates queued now, in queue order while they fit (``grant``: a request -> its agents, or None,
        ``_nomad.batch.BatchPlanner.grant``): their grants go into the lock variable (this holder's write), and the
        lock is held (:meth:`release`) until each is done. Returns how many were admitted; on an error, none.

        Called again (:meth:`release`, once this holder registered its own session), it admits the creates that
        queued since, after those admitted already (the lock variable then holds all the grants of this hold), on
        what ``grant`` has left: one hold serves the creates that arrived while it lasted."""
        if not self.lock_id:
            return 0
        self._grant_fn = grant
        first = not self._grants
        try:
            grants: t.Dict[str, t.List[t.Dict[str, t.Any]]] = {}
            admitted: t.List[t.Tuple[str, int]] = []
            known = self._known  # requests read in this hold, by the digest their entries' paths carry
            queued = [e for e in self._queue()[0] if e.path not in self._grants]
            for entry in queued[:max(0, limit - len(self._grants))]:
                digest = entry.path.rpartition(DIGEST_MARK)[2] if DIGEST_MARK in entry.path else ""
                index = entry.index
                if entry.index == entry.place and digest in known:
                    # written once, at its join (a mark or a heartbeat is a raft write: a new ModifyIndex), with the
                    # request of this digest, read and checked already in this pass: not read again
                    request = known[digest]
                else:
                    var = self.nomad.get_variable(entry.path)
                    if var is None:  # left meanwhile
                        continue
                    items = var.get("Items") or {}
                    if items.get(GRANTED_ITEM):  # another holder's (this one's lock lapsed?): stop
                        break
                    try:
                        request = json.loads(str(items.get(REQUEST_ITEM) or ""))
                    except ValueError:  # a create that does not publish one: it places itself at its turn
                        break
                    if digest and request_digest(request) == digest:
                        known[digest] = request
                    index = int(var.get("ModifyIndex") or 0)
                agents = grant(request)
                if agents is None:  # does not fit now: it and those behind it wait for their turn (queue order)
                    break
                grants[entry.path] = agents
                admitted.append((entry.path, index))
            if not grants:
                return 0
            grants = dict(self._grants, **grants)  # (those admitted before still read theirs here)
            copied = {GRANTS_ITEM: json.dumps(grants, sort_keys=True), GRANTED_AT_ITEM: "%.3f" % self._wall()}
            written = self.nomad.acquire_lock(LOCK_PATH, self.ttl, self.lock_delay, dict(copied, holder=self.owner),
                                              lock_id=self.lock_id)
            copied[GRANTS_INDEX_ITEM] = str(int((written or {}).get("ModifyIndex") or 0))
            self._renewed = self._clock()
        except NomadError:
            return 0  # nobody saw a grant: this holder goes on alone
        self._grants = grants
        self._granted.extend(admitted)
        if first and self._ticket is not None:  # the first one admitted may block on this holder's own entry: wake it
            try:
                self._write_granted_entry(copied)
            except NomadError:
                pass  # it wakes when this entry goes
        return len(admitted)

    def _await_admitted(self) -> None:
        """Until each create this holder admitted is done (its entry gone) or silent for a TTL (it marks its entry
        every TTL / 4 while admitted, and stops before registering after TTL / 2 of silence): no other holder plans
        on capacity granted but not yet registered.

        The admitted creates run side by side and end at about the same time, so the holder does not block on each
        entry in turn (a read each): it lists the queue (each entry's ModifyIndex: a
        mark or a heartbeat moves it), blocks on the last admitted entry still there (at most TTL / 2), and lists
        again; the entries that went meanwhile cost nothing more. An entry whose index did not move for a TTL
        belongs to a create that died (or never saw its grant): passed over."""
        if not self._granted:
            return
        if self._grant_fn is not None:  # a busy queue: admit those that queued since the first pass, in this hold
            self.admit(self._grant_fn)
        pending = dict(self._granted)  # entry -> its ModifyIndex as last seen
        heard = {path: self._clock() for path in pending}
        while pending:
            now = {e.path: e.index for e in self._queue()[0]}
            for path in list(pending):
                if path not in now:  # done: it left the queue
                    del pending[path]
                elif now[path] != pending[path]:
                    pending[path], heard[path] = now[path], self._clock()
                elif self._clock() - heard[path] >= self.ttl:  # a whole TTL without a heartbeat: it died
                    self._passed[path] = pending[path]
                    del pending[path]
            if not pending:
                break
            last = [path for path, _index in self._granted if path in pending][-1]
            var, _seen = self.nomad.wait_variable(last, pending[last], self.ttl / 2)
            self.keep()
            if var is None:
                del pending[last]
            elif int(var.get("ModifyIndex") or 0) != pending[last]:
                pending[last], heard[last] = int(var.get("ModifyIndex") or 0), self._clock()
        self._granted, self._grants, self._grant_fn = [], {}, None
        if self.lock_id:  # no grant outlives the hold: a create that reads one later places itself at its turn
            self.nomad.acquire_lock(LOCK_PATH, self.ttl, self.lock_delay, {"holder": self.owner}, lock_id=self.lock_id)

    def release(self) -> None:
        if not self.lock_id:
            self._leave()  # admitted by the holder: its entry goes, and the holder waiting for it goes on
            return
        try:
            self._await_admitted()
        except NomadError:
            pass  # (reads failed after their retries) released anyway: a holder never keeps the lock for good
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
        """Whether another waiter queues; entries passed over that are still there unwritten since belong to dead
        waiters: deleted (check-and-set on the index they were passed at: an entry written since is alive, kept)."""
        others, passed = self._queue()
        alive = False
        for dead in passed:
            if dead.index != self._passed[dead.path]:
                alive = True
                continue
            try:
                self.nomad.delete_variable(dead.path, cas=dead.index)
            except NomadError:
                alive = True
        return bool(others) or alive

    def _leave(self) -> None:
        """Leave the queue: one delete of the entry (check-and-set on our last write of it); on an error it is left to
        the waiter behind and the holder, who pass it over and delete it once its heartbeat is a TTL old."""
        if self._ticket is None:
            return
        path = self._ticket[0]
        self._ticket = None
        try:
            self.nomad.delete_variable(path, cas=self._ticket_index)
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
