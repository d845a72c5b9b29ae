# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Removing a Nomad session: the one teardown every rollback and ``state=absent`` go through
(purge the job, release the network slot, delete the keypair): :class:`Remover`, a collaborator of
:class:`_nomad.nomad_backend.NomadBackend`, constructed with what it writes to."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure, SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import MANAGED_META_KEY
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import NetworkClaims, slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import (
    NOMAD_VARIABLES,
    SecretLocation,
    SecretStore,
    location_of_job,
    location_of_spec,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import (
    is_managed,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.protocol import absent_name
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultError


class Remover:
    """Removes sessions of one namespace: their jobs (``nomad``), network slots (``network``'s claims) and keypairs
    (``store``: the secret store at a location)."""

    def __init__(self, nomad: NomadClient, network: NetworkControl, namespace: str,
                 store: t.Callable[[SecretLocation], SecretStore]) -> None:
        self.nomad = nomad
        self.network = network
        self.namespace = namespace
        self._store = store

    def rollback(self, name: str, session_id: str, store: SecretStore, public_key: str,
                 block: t.Optional[t.Tuple[int, int]] = None) -> str:
        """Undo a create of this run through the one teardown ``state=absent`` uses (only what is this run's:
        the job with this session ID, the network slots this run claimed, the keypair holding this public key)."""
        try:
            job = self.nomad.get_job(name)
            ours = job is not None and (job.get("Meta") or {}).get("BACKENDAI_SESSION_ID") == session_id
        except NomadError:
            job, ours = None, True  # cannot tell: the job did not exist when this run began, so try
        done, failed = self.teardown(name, ours, [store], public_key, block, session_id)
        text = "Rolled back: %s" % ("; ".join(done) if done else "nothing had been created")
        if failed:
            text += ". Rollback INCOMPLETE: %s; remove the leftovers with state=absent" % "; ".join(failed)
        return text

    def teardown(self, name: str, job_there: bool, stores: t.Sequence[SecretStore],
                 public_key: t.Optional[str] = None, block: t.Optional[t.Tuple[int, int]] = None,
                 session_id: str = "") -> t.Tuple[t.List[str], t.List[str]]:
        """The one teardown of a session (``state=absent`` and every rollback): purge the job, release its
        network slots (``block``: first slot, count; with ``session_id``, only claims of that session), then
        delete the keypair (with ``public_key``: only a keypair holding that key). Returns (done, failed)."""
        done: t.List[str] = []
        failed: t.List[str] = []
        if job_there:
            try:
                self.nomad.deregister_job(name, purge=True)
                done.append("job %s deregistered (purged)" % name)
            except NomadError as err:
                failed.append("deregistering job %s: %s" % (name, err))
        if block is not None:  # after the job: its allocations hold the slot's VNI and subnet until then
            claims = self.network.claims(self.nomad)
            try:
                if claims.release(block[0], self.namespace, name, session_id, slots=block[1]):
                    done.append("%s released" % claims.describe(*block))
            except NomadError as err:
                failed.append("releasing %s: %s" % (claims.describe(*block), err))
        for store in stores:
            try:
                if public_key is not None:
                    if store.delete_if_ours(public_key):
                        done.append("%s deleted" % store.location.describe())
                else:
                    store.delete()
                    done.append("%s deleted" % store.location.describe())
            except (NomadError, VaultError) as err:
                failed.append("deleting %s: %s" % (store.location.describe(), err))
        return done, failed

    # absent -------------------------------------------------------------------------------------
    def absent(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
               diff: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
        """Purge the session's job, network slot and keypair (``keep_logs``: Nomad keeps no logs past a purge)."""
        name = absent_name(name, spec_raw)
        spec = None
        if spec_raw is not None:
            try:  # a full spec tells where a Vault-stored keypair is; {name: ...} alone is enough otherwise
                spec = parse_spec(spec_raw)
            except SpecError:
                spec = None
        job = self.nomad.get_job(name)
        if job is not None and not is_managed(job):
            raise ModuleFailure("the Nomad job %r was not made by backendai.cluster (its Meta has no %s); not removing it"
                                % (name, MANAGED_META_KEY))
        locations: t.List[SecretLocation] = []
        from_job = location_of_job(job) if job is not None else None
        if from_job is not None:
            locations.append(from_job)
        if spec is not None:
            locations.append(location_of_spec(spec))
        if not locations:
            locations.append(SecretLocation(NOMAD_VARIABLES, "nomad/jobs/%s" % name))
        stores = [self._store(loc) for loc in dict.fromkeys(locations)]
        present = [s for s in stores if s.exists()]
        claims = self.network.claims(self.nomad)
        block = self._claimed_block(claims, name, job, bool(present))
        changed = job is not None or bool(present) or block is not None
        result: t.Dict[str, t.Any] = {
            "changed": changed,
            "session": None,
            "removed": {"job": job is not None, "secrets": [s.location.describe() for s in present],
                        "network_slot": block[0] if block else None},
        }
        if diff and changed:
            before = ""
            if job is not None:
                meta = job.get("Meta") or {}
                before += "nomad job %s: session %s, containers %s\n" % (
                    name, meta.get("BACKENDAI_SESSION_ID", "?"), ",".join(g.get("Name") or "" for g in job.get("TaskGroups") or []))
            if block is not None:
                before += "%s\n" % claims.describe(*block)
            for s in present:
                before += "keypair: %s\n" % s.location.describe()
            result["diff"] = {"before": before, "after": "", "before_header": "session %s" % name,
                              "after_header": "session %s" % name}
        if check_mode or not changed:
            return result
        _done, failed = self.teardown(name, job is not None, present, block=block)
        if failed:
            raise ModuleFailure("removing session %s is incomplete: %s; run state=absent again" % (name, "; ".join(failed)),
                                {"changed": True, "removed": result["removed"]})
        return result

    def _claimed_block(self, claims: NetworkClaims, name: str, job: t.Optional[t.Mapping[str, t.Any]],
                       secret: bool) -> t.Optional[t.Tuple[int, int]]:
        """(first slot, slots) namespace/name holds: the block its job carries, else (a create that stopped half-way
        leaves a secret) the one found by reading the claims; None when nothing of the session is left."""
        block = slot_of_job(job) if job is not None else None
        if block is not None and claims.owned(block[0], self.namespace, name):
            return block
        if job is None and not secret:
            return None  # the claim is made after the secret and released before it
        return claims.find(self.namespace, name)
