# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Session network slots, claimed cluster-wide with check-and-set in Nomad Variables.

A slot ``s`` gives a session its VNI and its subnet (``_session_network.slot_network``), so one
claim makes both unique across the cluster: the analogue of Backend.AI's VNI claim in etcd.

* A claim is the variable ``backendai-cluster/network/slots/<s>`` in ONE namespace for the whole
  cluster (the claims namespace, ``default`` unless configured), holding ``{namespace, job,
  session_id}`` of the session that owns it: nothing secret (the tasks of a session cannot read it
  anyway: a workload identity reads only ``nomad/jobs/<its job>``).
* Claiming lists the claimed slots once (``GET /v1/vars?prefix=``, metadata only), then tries the
  free ones in probe order, starting at a hash of namespace/job, with ``PUT ?cas=0`` (create only
  if absent); a 409 means another run took that slot meanwhile: try the next.
* Releasing reads the claim and deletes it with ``cas=<its ModifyIndex>`` only if it is the
  session's own (same namespace and job; on a rollback, also the same session ID), so a release
  never frees a slot that someone else holds now.
* The slot of a running session is in its job (``BAI_VNI`` of every group's ``cni { args }``):
  re-runs keep it; a session whose job is gone (a create that stopped half-way) is found by
  reading the claimed slots in its probe order.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._job_network import DEFAULT_NAMESPACE, preferred_slot
from ansible_collections.backendai.cluster.plugins.module_utils._nomad_api import CASConflict, NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._session_network import VNI_BASE, slot_count

CLAIMS_PREFIX = "backendai-cluster/network/slots"
DEFAULT_CLAIMS_NAMESPACE = "default"


class ClaimError(BackendAIClusterError):
    """No slot could be claimed, or a slot is held by another session."""


@dataclass(frozen=True)
class Claim:
    slot: int
    namespace: str
    job: str
    session_id: str

    def items(self) -> t.Dict[str, str]:
        return {"namespace": self.namespace, "job": self.job, "session_id": self.session_id}

    @property
    def path(self) -> str:
        return claim_path(self.slot)


def claim_path(slot: int) -> str:
    return "%s/%d" % (CLAIMS_PREFIX, slot)


def probe_order(start: int, count: int) -> t.Iterator[int]:
    for i in range(count):
        yield (start + i) % count


def slot_of_job(job: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[int]:
    """The slot a rendered job carries (``BAI_VNI`` of its groups' CNI args), or None (none, or groups disagree)."""
    slots = set()
    for group in (job or {}).get("TaskGroups") or []:
        for network in group.get("Networks") or []:
            vni = ((network.get("CNI") or {}).get("Args") or {}).get("BAI_VNI")
            try:
                slots.add(int(str(vni)) - VNI_BASE)
            except ValueError:
                return None
    if len(slots) != 1:
        return None
    slot = slots.pop()
    return slot if 0 <= slot < slot_count() else None


class NetworkClaims:
    """Claims in the claims namespace of one Nomad cluster (``client`` must be bound to that namespace)."""

    def __init__(self, client: NomadClient, count: t.Optional[int] = None) -> None:
        self.nomad = client
        self.count = count or slot_count()

    @property
    def namespace(self) -> str:
        return self.nomad.connection.namespace or DEFAULT_NAMESPACE

    def describe(self, slot: int) -> str:
        return "network slot %d (Nomad variable %s in namespace %s)" % (slot, claim_path(slot), self.namespace)

    def claimed(self) -> t.Set[int]:
        """The claimed slots, from one listing (metadata only)."""
        out = set()
        for meta in self.nomad.list_variables(prefix=CLAIMS_PREFIX + "/"):
            head, _, tail = str(meta.get("Path") or "").rpartition("/")
            if head == CLAIMS_PREFIX and tail.isdigit():
                out.add(int(tail))
        return out

    def read(self, slot: int) -> t.Optional[t.Tuple[t.Dict[str, str], int]]:
        """(items, ModifyIndex) of a claim, or None."""
        var = self.nomad.get_variable(claim_path(slot))
        if var is None:
            return None
        return dict(var.get("Items") or {}), int(var.get("ModifyIndex") or 0)

    def claim(self, namespace: str, job: str, session_id: str) -> Claim:
        """Claim the first free slot in the probe order of namespace/job (one listing, then ``cas=0`` writes)."""
        namespace = namespace or DEFAULT_NAMESPACE
        taken = self.claimed()
        for slot in probe_order(preferred_slot(namespace, job, self.count), self.count):
            if slot in taken:
                continue
            claim = Claim(slot, namespace, job, session_id)
            try:
                self.nomad.put_variable(claim.path, claim.items(), cas=0)
            except CASConflict:
                continue  # another run claimed it since the listing
            return claim
        raise ClaimError("no free network slot: all %d slots in %s/ (namespace %s) are claimed; destroy sessions "
                         "or remove stale claims" % (self.count, CLAIMS_PREFIX, self.namespace))

    def ensure(self, claim: Claim, check_mode: bool = False) -> bool:
        """Keep a running session's slot claimed (re-create a lost claim). True if it had to be written."""
        found = self.read(claim.slot)
        if found is not None:
            items = found[0]
            if (items.get("namespace"), items.get("job")) != (claim.namespace, claim.job):
                raise ClaimError("%s is claimed by job %r in namespace %r, but job %r in namespace %r uses it; destroy "
                                 "and create the session again" % (self.describe(claim.slot), items.get("job"),
                                                                   items.get("namespace"), claim.job, claim.namespace))
            return False
        if not check_mode:
            try:
                self.nomad.put_variable(claim.path, claim.items(), cas=0)
            except CASConflict:
                return self.ensure(claim, check_mode)
        return True

    def release(self, slot: int, namespace: str, job: str, session_id: str = "") -> bool:
        """Delete the claim if it is this session's (``session_id`` too, when given). True if deleted."""
        found = self.read(slot)
        if found is None:
            return False
        items, index = found
        if (items.get("namespace"), items.get("job")) != (namespace or DEFAULT_NAMESPACE, job):
            return False
        if session_id and items.get("session_id") != session_id:
            return False
        try:
            self.nomad.delete_variable(claim_path(slot), cas=index)
        except CASConflict:
            return False  # changed since we read it: not ours to delete any more
        return True

    def find(self, namespace: str, job: str) -> t.Optional[int]:
        """The slot claimed by namespace/job, read in its probe order (usually the first read hits)."""
        namespace = namespace or DEFAULT_NAMESPACE
        taken = self.claimed()
        for slot in probe_order(preferred_slot(namespace, job, self.count), self.count):
            if slot not in taken:
                continue
            found = self.read(slot)
            if found is not None and (found[0].get("namespace"), found[0].get("job")) == (namespace, job):
                return slot
        return None
