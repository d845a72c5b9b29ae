# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stopping a Nomad session to start it again later (``state: stopped``; docs/session-lifecycle.md).

The job is deregistered WITHOUT purge: Nomad keeps it (``Stop: true``) with its versions, stops its allocations and
gives their capacity back (``command/agent/job_endpoint.go`` ``jobDelete``: ``purge`` false sends a ``JobDeregisterRequest``
with ``Purge: false``, and ``nomad/job_endpoint.go`` ``Job.Deregister`` then only marks the job stopped). The keypair
stays where it is (Nomad Variables or Vault), so a start keeps the keys and the session ID. The session network slot
is released (another session may take it meanwhile): a start claims one again, the same one when it is still free
(its preferred slot). The admission lock is not involved: stopping only gives capacity back. Starting again is
``state: present`` (``_nomad.update.Updater``: a stopped job is registered again, which Nomad's ``Job.Register``
treats as a new start, ``Stop`` false, placed on live capacity under the admission lock like a create).
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import MANAGED_META_KEY
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import is_managed
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl


def stop_session(nomad: NomadClient, network: NetworkControl, namespace: str, name: str,
                 check_mode: bool = False) -> t.Tuple[bool, t.Optional[t.Dict[str, t.Any]]]:
    """Stop the job ``name`` (no purge) and release its network slot. Returns (changed, the job before)."""
    job = nomad.get_job(name)
    if job is None:
        raise ModuleFailure("session %s does not exist: there is nothing to stop (state=present creates it)" % name)
    if not is_managed(job):
        raise ModuleFailure("the Nomad job %r was not made by backendai.cluster (its Meta has no %s); not stopping it"
                            % (name, MANAGED_META_KEY))
    claims = network.claims(nomad)
    block = slot_of_job(job)
    session_id = str((job.get("Meta") or {}).get("BACKENDAI_SESSION_ID") or "")
    held = block is not None and claims.owned(block[0], namespace, name)
    if job.get("Stop") and not held:
        return False, job
    if check_mode:
        return True, job
    if not job.get("Stop"):
        nomad.deregister_job(name, purge=False)
    if block is not None:  # after the stop: the allocations being stopped hold the slot's VNI and subnet until then
        claims.release(block[0], namespace, name, session_id, slots=block[1])
    return True, job
