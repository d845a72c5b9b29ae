# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Updating an existing Nomad session: the keys are kept, the job is rendered again and Nomad's plan
decides whether anything changed; broken containers get a new allocation: :class:`Updater`, a
collaborator of :class:`_nomad.nomad_backend.NomadBackend`, constructed with what it reads and writes.

The plan comes first, read-only and without the cluster's admission lock: only a run that will register a
changed job (or write a lost network claim again) takes the lock, so an unchanged re-run writes nothing to
Nomad and never waits behind other creates."""

from __future__ import annotations

import dataclasses
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import admission
from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.plan_diff import changes as job_changes
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.plan_diff import diff_texts
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import plan_slots, register_request
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim, slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import args_version_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import (
    SecretLocation,
    SecretStore,
    location_of_job,
    location_of_spec,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import RenderedSession, render_session
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import (
    container_status,
    current_allocations,
    failed_placement_reason,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.status import BROKEN
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import (
    REPAIR_META,
    STEP_REGISTER,
    STEP_WAIT,
    Placer,
    WaitFailed,
    pending,
    session_result,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.watch import Watcher


class _Planned(t.NamedTuple):
    """One pass of an update: the job to register, Nomad's dry-run plan of it, and what it would need written."""

    rendered: RenderedSession
    job: t.Dict[str, t.Any]
    plan: t.Dict[str, t.Any]
    changed: bool
    new_claim: t.Optional[Claim]
    old_block: t.Optional[t.Tuple[int, int]]
    repaired: bool
    broken: t.List[str]


class Updater:
    """Updates sessions of one namespace: places them with ``placer``, watches them with ``watcher``, reads keypairs
    through ``store`` (the secret store at a location), writes slot claims through ``network`` and registers under
    the admission lock that ``lock_for`` makes for an owner."""

    def __init__(self, nomad: NomadClient, network: NetworkControl, namespace: str, region: str,
                 placer: Placer, watcher: Watcher, store: t.Callable[[SecretLocation], SecretStore],
                 lock_for: t.Callable[[str], admission.AdmissionLock], warn: t.Callable[[str], None]) -> None:
        self.nomad = nomad
        self.network = network
        self.namespace = namespace
        self.region = region
        self.placer = placer
        self.watcher = watcher
        self._store = store
        self._lock_for = lock_for
        self._warn = warn

    def update(self, spec: SessionSpec, existing: t.Mapping[str, t.Any],
               agents: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool, diff: bool, wait: bool,
               wait_timeout: float, wait_for_resources: float) -> t.Dict[str, t.Any]:
        """Plan first, read-only and without the admission lock; lock and register only if the plan changes something.

        An unchanged session (what an idempotent re-run from cron or CI finds) makes GET requests and Nomad's
        read-only plan endpoint only: it never queues behind the creates of the cluster nor fails with
        ``AdmissionBusy``. A changed or repaired session is placed again under the lock on live capacity, as a
        create is, and planned again there (another run may have changed it meanwhile).
        """
        name = spec.name
        stored_at = location_of_job(existing) or location_of_spec(spec)
        public_key = self._store(stored_at).read_public_key()
        if not public_key:
            raise ModuleFailure("session %s: job %s exists but its keypair (%s) is missing; remove the session with "
                                "state=absent and create it again" % (name, name, stored_at.describe()))
        session_id = derive_session_id(name, public_key)
        plan = self.placer.place(spec, agents, session_id, existing, wait_for_resources, check_mode)
        wanted_at = location_of_spec(spec)
        if wanted_at != stored_at:
            raise ModuleFailure("session %s: changing where the keypair lives is not supported (it is in %s, the spec says "
                                "%s); remove the session with state=absent and create it again"
                                % (name, stored_at.describe(), wanted_at.describe()))
        # read-only: a lost claim or a new block shows as "would be written", an unsigned job as a change
        planned = self._plan_update(plan, agents, existing, session_id, dry_run=True)
        if check_mode or not (planned.changed or planned.repaired):
            return self._unchanged_or_checked(planned, existing, diff, wait, wait_timeout, check_mode, stored_at)
        lock = self._lock_for("%s/%s" % (self.namespace or "default", name))
        lock.acquire()
        try:
            plan = self.placer.plan_once(spec, agents, session_id, existing)  # live data, inside the lock
            if not plan.placed:
                pending(plan, agents, 0.0, False, 1)
            planned = self._plan_update(plan, agents, existing, session_id, dry_run=False)
            if not planned.changed:
                lock.release()  # nothing is admitted (a lost claim was made again): waiting is not admission
                return self._unchanged_or_checked(planned, existing, diff, wait, wait_timeout, False, stored_at)
            return self._register_update(planned, existing, diff, wait, wait_timeout, stored_at, lock)
        finally:
            lock.release()

    def _plan_update(self, plan: SessionPlan, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                     existing: t.Mapping[str, t.Any], session_id: str, dry_run: bool) -> _Planned:
        """The signed job for ``plan`` (its slots kept; with ``dry_run`` nothing is written) and Nomad's plan of it."""
        rendered, new_claim, old_block, repaired = self._keep_slot(plan, agents, existing, session_id, dry_run)
        job = t.cast(t.Dict[str, t.Any], rendered.job)
        broken = self._mark_repairs(existing, job)
        dry_run_plan = self.nomad.plan_job(job, diff=True)
        changed = ((dry_run_plan.get("Diff") or {}).get("Type") or "None") != "None"
        return _Planned(rendered, job, dry_run_plan, changed, new_claim, old_block, repaired, broken)

    def _unchanged_or_checked(self, planned: _Planned, existing: t.Mapping[str, t.Any], diff: bool, wait: bool,
                              wait_timeout: float, check_mode: bool, stored_at: SecretLocation) -> t.Dict[str, t.Any]:
        """The result of a run that registers nothing: unchanged (waiting for the containers if asked), or check mode."""
        found = job_changes(planned.plan.get("Diff"))
        before, after = diff_texts(found)
        rendered = planned.rendered
        if check_mode and planned.changed:
            self._warn_unplaceable(planned.plan)
            return session_result(True, rendered, diff, before, after, self.watcher.view(existing), [str(c) for c in found], stored_at)
        if wait and not check_mode:
            try:
                self.watcher.wait(existing, wait_timeout)
            except WaitFailed as err:
                raise ModuleFailure("session %s is unchanged but not all of its containers run: %s"
                                    % (rendered.plan.spec.name, err),
                                    {"changed": False, "session": self.watcher.view(existing)}) from None
        repairs = ["network slot %d: lost claim or agent table made again" % rendered.network["slot"]] \
            if planned.repaired and rendered.network else []
        return session_result(bool(repairs), rendered, diff, before, after, self.watcher.view(existing), repairs, stored_at)

    def _warn_unplaceable(self, plan: t.Mapping[str, t.Any]) -> None:
        failed_groups = sorted((plan.get("FailedTGAllocs") or {}).keys())
        if failed_groups:
            self._warn("Nomad's scheduler reports it cannot place the updated task group(s) %s now"
                       % ", ".join(failed_groups))

    def _register_update(self, planned: _Planned, existing: t.Mapping[str, t.Any], diff: bool, wait: bool,
                         wait_timeout: float, stored_at: SecretLocation, lock: admission.AdmissionLock) -> t.Dict[str, t.Any]:
        """Register the changed job (under ``lock``, released once Nomad's evaluation placed it) and wait for it."""
        rendered, job, new_claim, old_block = planned.rendered, planned.job, planned.new_claim, planned.old_block
        name = rendered.plan.spec.name
        found = job_changes(planned.plan.get("Diff"))
        before, after = diff_texts(found)
        self._warn_unplaceable(planned.plan)
        try:
            # the agent table the new args sign (version 4), before they can be read; an old one stays until removal
            self.network.claims(self.nomad).write_table(rendered.table)
            answer = self.nomad.register_job(register_request(job))
        except NomadError as err:
            if new_claim is not None:
                claims = self.network.claims(self.nomad)
                claims.release(new_claim.slot, new_claim.namespace, new_claim.job, new_claim.session_id, new_claim.slots)
            raise ModuleFailure("updating session %s failed at step '%s': %s. Nothing to roll back: the previous job "
                                "version stays registered and the keypair is unchanged" % (name, STEP_REGISTER, err),
                                {"changed": False, "failed_step": STEP_REGISTER}) from None
        unplaced = self.watcher.follow_eval(str(answer.get("EvalID") or ""), lock, int(answer.get("EvalCreateIndex") or 0))
        lock.release()
        if old_block is not None:  # the session outgrew its block: the new one is in the registered job now
            self.network.claims(self.nomad).release(old_block[0], self.namespace, name, slots=old_block[1])
        current = self.nomad.get_job(name) or job
        if unplaced:
            raise ModuleFailure("%s session %s failed: Nomad cannot place %s. The new job version stays registered (an "
                                "existing session is not rolled back; free capacity or remove it with state=absent)"
                                % ("repairing" if planned.broken else "updating", name, failed_placement_reason(unplaced)),
                                {"changed": True, "failed_step": STEP_REGISTER, "session": self.watcher.view(current)})
        if wait:
            try:
                self.watcher.wait(current, wait_timeout, version=current.get("Version"))
            except (WaitFailed, NomadError) as err:
                raise ModuleFailure("updating session %s failed at step '%s': %s. The new job version stays registered "
                                    "(an existing session is not rolled back; fix the spec and run again, or remove it "
                                    "with state=absent)" % (name, STEP_WAIT, err),
                                    {"changed": True, "failed_step": STEP_WAIT, "session": self.watcher.view(current)}) from None
        return session_result(True, rendered, diff, before, after, self.watcher.view(current), [str(c) for c in found], stored_at)

    def _mark_repairs(self, existing: t.Mapping[str, t.Any], job: t.Dict[str, t.Any]) -> t.List[str]:
        """Containers of ``existing`` that failed, were lost or keep restarting get a new allocation.

        Their group's ``Meta.backendai_repair`` generation is raised (a group Meta change is a
        destructive update in Nomad: a new allocation, placed by the job's constraint, which the
        new placement may have moved off a node that is down); every other group keeps its
        generation, so an unchanged session stays unchanged.
        """
        if existing.get("Stop"):  # a start after a stop: every group gets a new allocation anyway
            return []
        current = current_allocations(self.nomad.job_allocations(str(existing["ID"])))
        generations = {g.get("Name"): int((g.get("Meta") or {}).get(REPAIR_META) or 0)
                       for g in existing.get("TaskGroups") or []}
        broken = sorted(name for name in generations if name in current and container_status(current[name]) in BROKEN)
        for group in job.get("TaskGroups") or []:
            generation = generations.get(group["Name"], 0) + (1 if group["Name"] in broken else 0)
            if generation:
                group.setdefault("Meta", {})[REPAIR_META] = str(generation)
        return broken

    def _keep_slot(self, plan: SessionPlan, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                   existing: t.Mapping[str, t.Any], session_id: str,
                   check_mode: bool) -> t.Tuple[RenderedSession, t.Optional[Claim], t.Optional[t.Tuple[int, int]], bool]:
        """An existing session keeps the slots its job carries (their claims re-made if lost). A job from before the
        session network, or one that outgrew its block, gets a new block: returned, so that a failed registration
        releases it, with the old block, which a successful one releases. Last: whether a lost claim was (or, in check
        mode, would be) made again. The job is rendered once, for the slots kept or claimed."""
        network = self.network.job_network(self.nomad, plan, agents)
        claims = self.network.claims(self.nomad)
        name = plan.spec.name
        need = plan_slots(plan)
        # a stopped job released its slots (``_nomad.stopping``): its start claims again (the same block if still free)
        held = None if existing.get("Stop") else slot_of_job(existing)
        new_claim, old, repaired = None, None, False
        first: t.Optional[int] = None
        slots = need
        if held is not None and held[1] >= need:
            first, slots = held
            repaired = claims.ensure(Claim(first, self.namespace or "default", name, session_id, slots), check_mode)
        elif not check_mode:
            new_claim = claims.claim(self.namespace, name, session_id, need)
            first, slots, old = new_claim.slot, new_claim.slots, held
        else:  # check mode, a new block would be claimed: shown unsigned
            network = dataclasses.replace(network, key=None)
        version = args_version_of_job(existing) or network.args_version
        rendered = render_session(plan, self.namespace, self.region,
                                  dataclasses.replace(network, slot=first, slots=slots, args_version=version), with_hcl=False)
        if rendered.network and rendered.network.get("signed") and new_claim is None:
            # a lost agent table (version 4) is made again like a lost claim: the containers' restarts read it
            repaired = bool(claims.write_table(rendered.table, check_mode)) or repaired
        return rendered, new_claim, old, repaired
