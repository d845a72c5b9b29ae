# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session network slots, claimed cluster-wide with check-and-set in Nomad Variables.

A slot ``s`` gives a session its VNI and its subnet (``_session_network.slot_network``), so one
claim makes both unique across the cluster: the analogue of Backend.AI's VNI claim in etcd.

* A claim is the variable ``backendai-cluster/network/slots/<s>`` in ONE namespace for the whole
  cluster (the claims namespace, ``default`` unless configured), holding ``{namespace, job,
  session_id, first, slots}`` of the session that owns it: nothing secret (the tasks of a session
  cannot read it anyway: a workload identity reads only ``nomad/jobs/<its job>``). A session that
  needs a block of ``slots`` slots (``_job_network.session_slots``) claims each of them.
* Claiming tries the (block of) slots at a hash of namespace/job with ``PUT ?cas=0`` (create only
  if absent: Nomad's ``VarSetCAS`` with index 0, ``nomad/state/state_store_variables.go``, is what
  makes a claim unique, not a listing); usually free in a cluster with far fewer sessions than
  slots, so a claim costs one request. Only when it is taken are the claimed slots listed once
  (``GET /v1/vars?prefix=``, metadata only) and the free (blocks of) slots tried in probe order; a
  409 means another run took that slot meanwhile: what this run wrote of the block is deleted again
  and the next one is tried.
* Releasing reads the claim and deletes it with ``cas=<its ModifyIndex>`` only if it is the
  session's own (same namespace and job; on a rollback, also the same session ID), so a release
  never frees a slot that someone else holds now.
* The session's *agent table* (args version 4: its agents' underlay addresses and WireGuard keys, once per
  session instead of in every group, ``_session_network.table_items``) lives beside the claims, in the same
  namespace, at ``backendai-cluster/network/agents/<first slot>/<digest>/<k>``: written by the session that
  holds the block's claims (:meth:`NetworkClaims.write_table`, before its job is registered) and deleted with
  them (:meth:`NetworkClaims.release` deletes the tables under the first slot while the claim is still held, so
  they never outlive it and no later holder of the slot loses its own). The agents' CNI plugin reads it with its
  own token (``read`` on ``backendai-cluster/network/agents/*`` in this namespace).
* The slot of a running session is in its job (``BAI_VNI`` of every group's ``cni { args }``):
  re-runs keep it; a session whose job is gone (a create that stopped half-way) is found by
  reading the claimed slots in its probe order.
"""

from __future__ import annotations

import ipaddress
import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import DEFAULT_NAMESPACE, network_args, preferred_slot
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import CASConflict, NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    SUBNET_PREFIX,
    VNI_BASE,
    slot_count,
    table_slot_prefix,
)

CLAIMS_PREFIX = "backendai-cluster/network/slots"
DEFAULT_CLAIMS_NAMESPACE = "default"


class ClaimError(BackendAIClusterError):
    """No slot could be claimed, or a slot is held by another session."""


@dataclass(frozen=True)
class Claim:
    slot: int  # the first slot of the block
    namespace: str
    job: str
    session_id: str
    slots: int = 1

    def items(self) -> t.Dict[str, str]:
        return {"namespace": self.namespace, "job": self.job, "session_id": self.session_id,
                "first": str(self.slot), "slots": str(self.slots)}

    @property
    def block(self) -> range:
        return range(self.slot, self.slot + self.slots)


def claim_path(slot: int) -> str:
    return "%s/%d" % (CLAIMS_PREFIX, slot)


def probe_order(start: int, count: int, step: int = 1) -> t.Iterator[int]:
    """Block starts (multiples of ``step``) from the one holding ``start`` on, wrapping around."""
    blocks = count // step
    for i in range(blocks):
        yield ((start // step + i) % blocks) * step


def slot_of_job(job: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[t.Tuple[int, int]]:
    """(first slot, slots) a rendered job carries (``BAI_VNI``, ``BAI_NET`` of its groups' CNI args), or None
    (none, or groups disagree)."""
    found = set()
    for _group, args in network_args(job):
        try:
            prefix = ipaddress.IPv4Network(str(args.get("BAI_NET"))).prefixlen
            found.add((int(str(args.get("BAI_VNI"))) - VNI_BASE, 1 << max(0, SUBNET_PREFIX - prefix)))
        except ValueError:
            return None
    if len(found) != 1:
        return None
    first, slots = found.pop()
    return (first, slots) if 0 <= first and first + slots <= slot_count() else None


class NetworkClaims:
    """Claims in the claims namespace of one Nomad cluster (``client`` must be bound to that namespace)."""

    def __init__(self, client: NomadClient, count: t.Optional[int] = None) -> None:
        self.nomad = client
        self.count = count or slot_count()

    @property
    def namespace(self) -> str:
        return self.nomad.connection.namespace or DEFAULT_NAMESPACE

    def describe(self, slot: int, slots: int = 1) -> str:
        if slots > 1:
            return "network slots %d-%d (Nomad variables %s..%d in namespace %s)" % (
                slot, slot + slots - 1, claim_path(slot), slot + slots - 1, self.namespace)
        return "network slot %d (Nomad variable %s in namespace %s)" % (slot, claim_path(slot), self.namespace)

    def claimed(self) -> t.Set[int]:
        """The claimed slots, from one listing (metadata only)."""
        out = set()
        for meta in self.nomad.list_variables(prefix=CLAIMS_PREFIX + "/"):
            head, _sep, tail = str(meta.get("Path") or "").rpartition("/")
            if head == CLAIMS_PREFIX and tail.isdigit():
                out.add(int(tail))
        return out

    def read(self, slot: int) -> t.Optional[t.Tuple[t.Dict[str, str], int]]:
        """(items, ModifyIndex) of a claim, or None."""
        var = self.nomad.get_variable(claim_path(slot))
        if var is None:
            return None
        return dict(var.get("Items") or {}), int(var.get("ModifyIndex") or 0)

    def claim(self, namespace: str, job: str, session_id: str, slots: int = 1) -> Claim:
        """Claim the first free block of ``slots`` in the probe order of namespace/job: ``cas=0`` on the preferred block
        first; only after a conflict one listing, then ``cas=0`` on the blocks it shows free, in probe order."""
        namespace = namespace or DEFAULT_NAMESPACE
        order = probe_order(preferred_slot(namespace, job, self.count), self.count, slots)  # (lazily: 2,048 slots)
        claim = Claim(next(order), namespace, job, session_id, slots)
        if self._take(claim):  # the preferred block, without a listing first (cas=0 decides)
            return claim
        taken = self.claimed()
        for first in order:
            claim = Claim(first, namespace, job, session_id, slots)
            if any(s in taken for s in claim.block):
                continue
            if self._take(claim):
                return claim
        raise ClaimError("no free network slot%s: the %d slots in %s/ (namespace %s) are claimed; destroy sessions or "
                         "remove stale claims" % (" block of %d" % slots if slots > 1 else "", self.count,
                                                  CLAIMS_PREFIX, self.namespace))

    def _take(self, claim: Claim) -> bool:
        """Write every slot of ``claim`` with ``cas=0``; False (what was written deleted again) if one is taken."""
        written: t.List[t.Tuple[int, int]] = []
        try:
            for slot in claim.block:
                meta = self.nomad.put_variable(claim_path(slot), claim.items(), cas=0)
                written.append((slot, int(meta.get("ModifyIndex") or 0)))
        except CASConflict:  # another run claimed a slot of it (since the listing, if any): give back ours
            for slot, index in written:
                self._delete(slot, index)
            return False
        return True

    def _delete(self, slot: int, index: int) -> bool:
        try:
            self.nomad.delete_variable(claim_path(slot), cas=index or None)
        except CASConflict:
            return False  # changed since: not ours to delete any more
        return True

    def ensure(self, claim: Claim, check_mode: bool = False) -> bool:
        """Keep a running session's slots claimed (re-create lost claims). True if one had to be written."""
        wrote = False
        for slot in claim.block:
            found = self.read(slot)
            if found is not None:
                items = found[0]
                if (items.get("namespace"), items.get("job")) != (claim.namespace, claim.job):
                    raise ClaimError("%s is claimed by job %r in namespace %r, but job %r in namespace %r uses it; "
                                     "destroy and create the session again" % (
                                         self.describe(slot), items.get("job"), items.get("namespace"), claim.job,
                                         claim.namespace))
                continue
            wrote = True
            if not check_mode:
                try:
                    self.nomad.put_variable(claim_path(slot), claim.items(), cas=0)
                except CASConflict:
                    return self.ensure(claim, check_mode)
        return wrote

    def write_table(self, table: t.Sequence[t.Tuple[str, t.Mapping[str, str]]], check_mode: bool = False) -> int:
        """Write a session's agent table (``RenderedNetwork.table()``; its claims held). Its paths name its digest: a
        table already there is the same table, left as it is. The number of variables written (in ``check_mode``:
        that would be)."""
        wrote = 0
        for path, items in table:
            found = self.nomad.get_variable(path)
            if found is not None and dict(found.get("Items") or {}) == dict(items):
                continue
            if not check_mode:
                self.nomad.put_variable(path, items)
            wrote += 1
        return wrote

    def tables(self, slot: int) -> t.List[str]:
        """Paths of the agent tables written under the block starting at ``slot``."""
        return sorted(str(meta.get("Path")) for meta in self.nomad.list_variables(prefix=table_slot_prefix(slot)))

    def release(self, slot: int, namespace: str, job: str, session_id: str = "", slots: int = 1) -> bool:
        """Delete the claims of the block that are this session's (``session_id`` too, when given), and with the
        first one the agent tables under it (first: the claim still keeps others out). True if any."""
        released = False
        for each in range(slot, slot + slots):
            found = self.read(each)
            if found is None:
                continue
            items, index = found
            if (items.get("namespace"), items.get("job")) != (namespace or DEFAULT_NAMESPACE, job):
                continue
            if session_id and items.get("session_id") != session_id:
                continue
            if each == slot:
                for path in self.tables(slot):
                    self.nomad.delete_variable(path)
            released = self._delete(each, index) or released
        return released

    def owned(self, slot: int, namespace: str, job: str) -> bool:
        found = self.read(slot)
        return found is not None and (found[0].get("namespace"), found[0].get("job")) == (namespace or DEFAULT_NAMESPACE, job)

    def find(self, namespace: str, job: str) -> t.Optional[t.Tuple[int, int]]:
        """(first slot, slots) claimed by namespace/job, read in its probe order (usually the first read hits)."""
        namespace = namespace or DEFAULT_NAMESPACE
        taken = self.claimed()
        for slot in probe_order(preferred_slot(namespace, job, self.count), self.count):
            if slot not in taken:
                continue
            found = self.read(slot)
            if found is not None and (found[0].get("namespace"), found[0].get("job")) == (namespace, job):
                items = found[0]
                try:
                    return int(items.get("first", slot)), int(items.get("slots", 1))
                except ValueError:
                    return slot, 1
        return None
