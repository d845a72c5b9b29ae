# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Variables and their locks, after ``nomad/variables_endpoint.go``, ``nomad/state/state_store_variables.go``
(``VarSet`` with check-and-set, ``VarLockAcquire``, ``VarLockRelease``, ``isLocked``), ``nomad/locks.go`` (the
lock's TTL timer) and ``nomad/structs/variables.go`` (``ValidatePath``, the reserved ``nomad/`` prefix, lock TTL
10 s to 24 h, default TTL and lock delay 15 s, ``VariableLock.Canonicalize``).

A check-and-set that does not match, or a write/delete of a locked variable without its lock ID, raises
:class:`Conflict` (409 with the current variable, or its zero value). A bad path is a 400 (Nomad's
``canonicalizeAndValidate`` wraps ``ValidatePath`` in a 400 ``CodedError``). A held lock answers an acquire with
409 and the variable's zero value; an acquire that carries the holder's own lock ID succeeds again
(``isLocked`` compares IDs; ``Canonicalize`` keeps a given ID and makes one only when it is empty).

The lock's lifetime follows ``CreateVariableLockTTLTimer`` (``nomad/locks.go``): the server's timer runs
``TTL × 2`` from the acquire or the last renewal (``RenewTTLTimer``), then ``LockDelay`` passes, then
``invalidateVariableLock`` removes the lock from the variable (a raft write: a new ModifyIndex). Until then the
variable holds the lock: reads show it, acquires get 409. After the timer fired a renewal is refused (409,
``errVarIsLocked``: the timer is gone) but the holder may still release it. A released lock can be taken again
at once (``LockDelay`` applies only after a lost TTL). A lock release answers the variable's metadata without
Items (``makeVariablesApplyResponse`` copies the request's Items, which a release must not carry).

Time is :attr:`VariablesModel.clock` (``time.monotonic``; tests may replace it on the model).

Blocking reads (:meth:`VariablesModel.wait_for_variables`), after ``Variables.Read`` and ``Variables.List``
(both run through ``blockingRPC``, ``nomad/rpc.go``): the index a read answers is the variable's ModifyIndex,
or, when it is absent (and for a list), the variables table's index (``setReplyQueryMeta(s,
state.TableVariables, ...)``). With ``index`` > 0 the read waits until that index is above ``index``, or
``wait`` passes (default and limit 300 s, plus up to ``wait / 16`` of jitter: ``TimeToBlock``,
``helper.RandomStagger``), then answers what it has. Here every variable write (any change of the table)
wakes the waiting reads, which look again: Nomad wakes a read on its own variable's radix node (an absent
variable's watch is a broader one), so both may wake more often than they answer, never less.

What it does not model: encryption and keyrings (Items are stored as given), variable ACL policies (the one
token may read and write everything, and sees ``Lock`` as a management token does), Nomad's late invalidation
releasing whatever lock the variable holds by then (``invalidateVariableLock`` sends no lock ID: a lock released
by its holder in the delay window and taken by another would lose the new lock too; here the timer belongs to
its lock), the namespace's variables quota (``errQuotaExhausted``; the 64 KiB limit of one variable's items,
``maxVariableSize``, is modelled), and variable events.
"""

from __future__ import annotations

import random
import re
import threading
import time
import typing as t
import uuid

from .state import CodedError, Conflict, ModelState, json_copy

_VAR_PATH = re.compile(r"^[a-zA-Z0-9-_~/]{1,128}$")
#: Nomad's TTL timer runs this many TTLs before the lock delay starts (``CreateVariableLockTTLTimer``).
TTL_TIMER_FACTOR = 2
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")


def go_duration(value: t.Any) -> float:
    """Seconds of a Go duration: a string (``"15s"``, ``"1m30s"``) or integer nanoseconds."""
    if value in (None, "", 0):
        return 0.0
    if isinstance(value, (int, float)):
        return float(value) / 1e9
    text = str(value)
    parts = _DURATION.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError('time: invalid duration "%s"' % text)
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def go_duration_text(seconds: float) -> str:
    return ("%gs" % seconds) if seconds < 60 else ("%dm%gs" % divmod(seconds, 60)).replace("m0s", "m")


#: ``maxVariableSize`` of nomad/structs/variables.go: the items of one variable, keys and values, in bytes.
MAX_VARIABLE_SIZE = 65536


def validate_path(path: str) -> None:
    """``structs.ValidatePath``, as the 400 that ``canonicalizeAndValidate`` makes of it."""
    if not path:
        raise CodedError(400, "variable requires path")
    if not _VAR_PATH.match(path):
        raise CodedError(400, 'invalid path "%s"' % path)
    parts = path.split("/")
    if parts[0] != "nomad":
        return
    if len(parts) == 1:
        raise CodedError(400, '"nomad" is a reserved top-level directory path, but you may write variables to '
                              '"nomad/jobs", "nomad/job-templates", "nomad/sentinel", or below')
    if parts[1] in ("jobs", "sentinel") or (parts[1] == "job-templates" and len(parts) == 3):
        return
    if parts[1] == "job-templates":
        raise CodedError(400, '"nomad/job-templates" is a reserved directory path, but you may write variables at the '
                              'level below it, for example, "nomad/job-templates/template-name"')
    raise CodedError(400, 'only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths under the '
                          'top-level "nomad" directory')


class VariablesModel(ModelState):
    """Variables per (namespace, path): the public fields, plus ``lock_*`` bookkeeping never shown."""

    #: the model's clock for lock timers (a test may set a fake one on the model)
    clock: t.Callable[[], float] = staticmethod(time.monotonic)
    #: with a fake :attr:`clock`, how many of its seconds pass per real second: a test's faster clock (its clients
    #: then ask for blocking reads of ``wait`` clock seconds, served in ``wait / clock_rate`` real ones, and a blocked
    #: read wakes when a lock lapses on it); None: a clock the test steps by hand (no timer of its own)
    clock_rate: t.Optional[float] = None
    #: the variables table's index (``tableIndex`` of ``state.TableVariables``): the last index a variable changed at
    variables_index = 0
    _variables_changed: t.Optional[threading.Condition] = None
    #: lock renewals so far (no raft write, but they move a lock's timer) and the last :meth:`lock_invalidation_due`
    _renewals = 0
    _due: t.Optional[t.Tuple[t.Tuple[int, int, int], t.Optional[float]]] = None

    def _changed(self) -> threading.Condition:
        with self.lock:
            if self._variables_changed is None:
                self._variables_changed = threading.Condition(self.lock)
            return self._variables_changed

    def wake_condition(self) -> threading.Condition:
        """The condition (over :attr:`lock`) blocked reads wait on: notified when a variable changes or the double stops."""
        return self._changed()

    def variable_written(self, index: int) -> int:
        """A variable changed at ``index``: the table's index moves, blocked reads look again."""
        with self.lock:
            self.variables_index = max(self.variables_index, index)
            self._changed().notify_all()
        return index

    def wake_blocked_reads(self) -> None:
        """Every blocked read looks again now (the double is stopping)."""
        with self.lock:
            self._changed().notify_all()

    def wait_for_variables(self, index: int, wait: float, read: t.Callable[[], t.Tuple[t.Any, int]],
                           stopping: t.Callable[[], bool]) -> t.Tuple[t.Any, int]:
        """``blockingRPC``: ``read()`` gives (answer, its index); with ``index`` > 0, wait until that index is above
        ``index``, or ``wait`` seconds (with Nomad's jitter) passed. Call with :attr:`lock` held."""
        answer, at = read()
        if index <= 0 or at > index:
            return answer, at
        wait = wait if 0 < wait <= 300.0 else 300.0
        rate = 1.0 if self.clock is VariablesModel.clock else self.clock_rate  # clock seconds per real second
        deadline = time.monotonic() + (wait + random.uniform(0, wait / 16)) / (rate or 1.0)
        while at <= index and not stopping():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            due = self.lock_invalidation_due()  # a lock removed by its timer is a write nobody makes
            if due is not None and rate:
                remaining = min(remaining, max(0.005, (due - self.clock()) / rate))
            self._changed().wait(remaining)
            answer, at = read()
        return answer, at

    @staticmethod
    def var_meta(var: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        return {k: var[k] for k in ("Namespace", "Path", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime")}

    @staticmethod
    def var_public(var: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        return {k: json_copy(v) if isinstance(v, (dict, list)) else v for k, v in var.items() if not k.startswith("lock_")}

    def expire_lock(self, var: t.Optional[t.Dict[str, t.Any]]) -> None:
        """``invalidateVariableLock``: ``TTL × 2`` after the last renewal the timer fires, ``LockDelay`` later the
        lock is removed from the variable (a raft write: a new ModifyIndex)."""
        lock = (var or {}).get("Lock")
        if var is not None and lock and self.clock() >= var["lock_timer_fires"] + var["lock_delay"]:
            var["Lock"] = None
            var["ModifyIndex"] = self.variable_written(self.next_index())

    def lock_invalidation_due(self) -> t.Optional[float]:
        """When (on :attr:`clock`) the next held lock will be removed, if any lock is held. (Kept until a variable
        changes or a lock is renewed: every blocked read asks at every wake-up.)"""
        key = (self.variables_index, self._renewals, len(self.variables))
        if self._due is None or self._due[0] != key:
            due = [v["lock_timer_fires"] + v["lock_delay"] for v in self.variables.values() if v.get("Lock")]
            self._due = (key, min(due) if due else None)
        return self._due[1]

    def locked_against(self, var: t.Optional[t.Dict[str, t.Any]], lock_id: t.Optional[str]) -> bool:
        """``isLocked``: the variable holds a lock and the request does not carry its ID."""
        self.expire_lock(var)
        lock = (var or {}).get("Lock")
        return bool(lock) and lock_id != lock["ID"]

    def _conflict(self, ns: str, path: str, current: t.Optional[t.Mapping[str, t.Any]]) -> Conflict:
        """409 with the current variable (Items included: the double's token can read), as Nomad answers."""
        if current is None:  # zero-value conflict: the variable does not exist
            return Conflict({"Namespace": ns, "Path": path, "CreateIndex": 0, "ModifyIndex": 0,
                             "CreateTime": 0, "ModifyTime": 0, "Items": None}, 0)
        return Conflict(self.var_public(current), current["ModifyIndex"])

    # Test-side access ---------------------------------------------------------------------------
    def lock_of(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        """The lock a variable holds now (after TTL expiry: None), for tests."""
        with self.lock:
            var = self.variables.get((namespace, path))
            self.expire_lock(var)
            return json_copy(var.get("Lock")) if var and var.get("Lock") else None

    def stored_variable(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        with self.lock:
            var = self.variables.get((namespace, path))
            return self.var_public(var) if var else None

    # Operations ---------------------------------------------------------------------------------
    def list_variables(self, ns: str, prefix: str) -> t.List[t.Dict[str, t.Any]]:
        return [self.var_meta(v) for (vns, path), v in sorted(self.variables.items())
                if (ns == "*" or vns == ns) and path.startswith(prefix)]

    def variable(self, ns: str, path: str) -> t.Dict[str, t.Any]:
        var = self.variables.get((ns, path))
        if var is None:
            raise CodedError(404, "variable not found")
        self.expire_lock(var)
        return self.var_public(var)

    def put_variable(self, ns: str, path: str, items: t.Mapping[str, t.Any], cas: t.Optional[int],
                     lock_id: t.Optional[str]) -> t.Dict[str, t.Any]:
        # VariableDecrypted.Validate (nomad/structs/variables.go): Items.Size() is the keys' and values' lengths
        # (Go's len: bytes), at most maxVariableSize; canonicalizeAndValidate makes it a 400
        if sum(len(str(k).encode("utf-8")) + len(str(v).encode("utf-8")) for k, v in items.items()) > MAX_VARIABLE_SIZE:
            raise CodedError(400, "variables are limited to 64KiB in total size")
        validate_path(path)
        current = self.variables.get((ns, path))
        if cas is not None and (current["ModifyIndex"] if current else 0) != cas:
            raise self._conflict(ns, path, current)
        if self.locked_against(current, lock_id):
            raise self._conflict(ns, path, None)
        index = self.variable_written(self.next_index())
        now = time.time_ns()
        var = {"Namespace": ns, "Path": path, "CreateIndex": current["CreateIndex"] if current else index,
               "ModifyIndex": index, "CreateTime": current["CreateTime"] if current else now, "ModifyTime": now,
               "Items": dict(items)}
        if current is not None and current.get("Lock"):
            var.update(Lock=current["Lock"], **{k: v for k, v in current.items() if k.startswith("lock_")})
        self.variables[(ns, path)] = var
        return self.var_public(var)

    def delete_variable(self, ns: str, path: str, cas: t.Optional[int], lock_id: t.Optional[str]) -> int:
        """Delete (absent: no error); the new index."""
        current = self.variables.get((ns, path))
        if cas is not None and (current["ModifyIndex"] if current else 0) != cas:
            raise self._conflict(ns, path, current)
        if self.locked_against(current, lock_id):
            raise self._conflict(ns, path, None)
        if self.variables.pop((ns, path), None) is None:
            return self.next_index()
        return self.variable_written(self.next_index())

    def lock_acquire(self, ns: str, path: str, items: t.Mapping[str, t.Any], lock: t.Mapping[str, t.Any]
                     ) -> t.Dict[str, t.Any]:
        current = self.variables.get((ns, path))
        self.expire_lock(current)
        try:
            ttl = go_duration(lock.get("TTL")) or 15.0
            delay = go_duration(lock.get("LockDelay")) or 15.0
        except ValueError as err:
            raise CodedError(400, str(err)) from None
        if not 10.0 <= ttl <= 86400.0:
            raise CodedError(400, "TTL must be between 10 seconds and 24 hours")
        validate_path(path)
        if self.locked_against(current, lock.get("ID")):
            # the attempt went through raft all the same: the 409 carries its index (variableLockOperation's
            # setIndex(resp, out.WriteMeta.Index)), above the variable's ModifyIndex
            raise Conflict(self._conflict(ns, path, None).body, self.next_index())
        index = self.variable_written(self.next_index())
        wall = time.time_ns()
        var = {"Namespace": ns, "Path": path, "CreateIndex": current["CreateIndex"] if current else index,
               "ModifyIndex": index, "CreateTime": current["CreateTime"] if current else wall, "ModifyTime": wall,
               "Items": dict(items),
               "Lock": {"ID": str(lock.get("ID") or uuid.uuid4()), "TTL": go_duration_text(ttl),
                        "LockDelay": go_duration_text(delay)},
               "lock_delay": delay, "lock_ttl": ttl}
        if current is not None and current.get("Lock"):  # the holder again: Nomad keeps the running timer
            var["lock_timer_fires"] = current["lock_timer_fires"]
        else:
            var["lock_timer_fires"] = self.clock() + TTL_TIMER_FACTOR * ttl
        self.variables[(ns, path)] = var
        return self.var_public(var)

    def _held(self, ns: str, path: str, lock: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """The variable whose lock ``lock["ID"]`` is, for a renew or a release."""
        current = self.variables.get((ns, path))
        self.expire_lock(current)
        if current is None:
            raise CodedError(404, "variable not found")
        if not current.get("Lock"):
            raise CodedError(409, "variable doesn't hold a lock")
        if not lock.get("ID"):
            raise CodedError(400, "missing lock information")
        if lock["ID"] != current["Lock"]["ID"]:
            raise self._conflict(ns, path, None)
        return current

    def lock_renew(self, ns: str, path: str, lock: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """The timer starts again (``TTL × 2``); the variable's metadata with its lock. Once the timer fired the lock
        cannot be renewed (``RenewTTLTimer`` finds no timer: 409)."""
        current = self._held(ns, path, lock)
        if self.clock() >= current["lock_timer_fires"]:
            raise CodedError(409, "attempting to modify locked variable")
        current["lock_timer_fires"] = self.clock() + TTL_TIMER_FACTOR * current["lock_ttl"]
        self._renewals += 1
        return dict(self.var_meta(current), Lock=json_copy(current["Lock"]))

    def lock_release(self, ns: str, path: str, lock: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """The lock is removed (also in the lock delay: ``VarLockRelease`` does not look at the timer); the variable's
        metadata, no Items, no Lock."""
        validate_path(path)
        current = self._held(ns, path, lock)
        current["Lock"] = None
        current["ModifyIndex"] = self.variable_written(self.next_index())
        return self.var_meta(current)
