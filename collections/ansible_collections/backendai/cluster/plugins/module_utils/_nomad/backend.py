# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``nomad`` backend of the ``session`` and ``session_info`` modules.

Create (``present``, no job yet), in this order:

1. take the cluster's admission lock (``_admission``: a Nomad variable lock with a TTL);
2. place the containers on live node data (or the given agents); PENDING releases the lock and
   fails with the reason, or retries against fresh node data for ``wait_for_resources`` seconds;
3. generate the keypair and write it to the secret backend with check-and-set ``cas=0``
   (Nomad Variable ``nomad/jobs/<job>``, or Vault KV v2) BEFORE the job exists: a task whose
   ``nomadVar`` is missing blocks forever (nomad#17220);
4. claim a session network slot (``_network_claims``) and sign the job's network args with the
   cluster key (``_nomad_network``);
5. register the job and follow its evaluation: if Nomad cannot place a group (``FailedTGAllocs``,
   a blocked evaluation), the session is rolled back at once (all or nothing) and, with
   ``wait_for_resources``, placed again; then release the lock;
6. optionally wait until every container's allocation runs.

Every rollback and ``state=absent`` go through one teardown (:meth:`NomadBackend._teardown`).
A present on an existing session whose containers failed or were lost gives each of those a new
allocation (``_mark_repairs``), keeping the keys and the session ID.

If a step after the secret fails, the run is rolled back: the job is deregistered (purged) if it
carries this run's session ID, the network slot is released if this run claimed it, and the secret
is deleted if it holds this run's public key. The error names the failed step and what was rolled back.

Update (job exists): the keys are never regenerated. The session ID comes from the stored public
key, the job is re-rendered with it (placement prefers the agents the session already uses, and
counts the session's own allocations as free), keeping the network slot its job carries, and Nomad's
plan decides: ``Diff.Type`` None means unchanged. A changed job is registered again; a failure then is reported, not rolled back (the
session existed before this run). Check mode only reads (the plan endpoint is a dry run).

Absent: deregister (purge) the job, release its network slot, then delete the secret; nothing there
means no change.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import admission
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, ModuleFailure, SpecError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.plan_diff import changes as job_changes
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.plan_diff import diff_texts
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import live_agents
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import MANAGED_META_KEY, TASK_NAME, dumps, register_request
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network import NetworkControl, signed
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim, NetworkClaims, slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import (
    NOMAD_VARIABLES,
    SecretExists,
    SecretLocation,
    SecretStore,
    location_of_job,
    location_of_plan,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import RenderedSession, plan_session, render_session
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.view import (
    build_view,
    container_status,
    current_allocations,
    failed_placement_reason,
    is_managed,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.backend import absent_name
from ansible_collections.backendai.cluster.plugins.module_utils._session.state import BROKEN
from ansible_collections.backendai.cluster.plugins.module_utils._session.view import plan_summary, wait_progress
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id, generate_keypair
from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultClient, VaultError

DEFAULT_POLL_INTERVAL = 2.0
#: How long a create follows its evaluation (under the admission lock) for Nomad's placement verdict.
DEFAULT_EVAL_TIMEOUT = 10.0
STEP_SECRET = "write keypair secret"
STEP_CLAIM = "claim network slot"
STEP_REGISTER = "register job"
STEP_WAIT = "wait for containers"
#: Group Meta key raised to give a broken container a new allocation (see ``_mark_repairs``).
REPAIR_META = "backendai_repair"


#: The namespace that means every namespace (Nomad's wildcard); only for reading sessions.
ALL_NAMESPACES = "*"


def refuse_all_namespaces(namespace: t.Optional[str], module: str) -> None:
    """A session is created, changed or rendered in one namespace: ``*`` is for reading only."""
    if namespace == ALL_NAMESPACES:
        raise ModuleFailure("namespace: '*' (every namespace) is only for backendai.cluster.session_info; %s needs the "
                            "session's own namespace (a name, or omit it for 'default')" % module)


class WaitFailed(BackendAIClusterError):
    """The containers did not all reach running (a container failed, or the time ran out)."""


class NomadBackend:
    """Session operations against one Nomad cluster (and, for ``secrets.backend: vault``, one Vault)."""

    def __init__(self, nomad: NomadClient, vault: t.Callable[[], VaultClient], hide: t.Callable[..., None],
                 warn: t.Callable[[str], None], sleep: t.Callable[[float], None] = time.sleep,
                 clock: t.Callable[[], float] = time.monotonic, poll_interval: float = DEFAULT_POLL_INTERVAL,
                 lock_ttl: float = admission.DEFAULT_TTL, lock_delay: float = admission.DEFAULT_LOCK_DELAY,
                 lock_wait: float = admission.DEFAULT_LOCK_WAIT, eval_timeout: float = DEFAULT_EVAL_TIMEOUT,
                 network: t.Optional[NetworkControl] = None) -> None:
        self.nomad = nomad
        self.network = network or NetworkControl(hide=hide)
        self.lock_options = {"ttl": lock_ttl, "lock_delay": lock_delay, "wait": lock_wait}
        self.eval_timeout = eval_timeout
        self._vault = vault
        self._hide = hide
        self._warn = warn
        self._sleep = sleep
        self._clock = clock
        self.poll_interval = max(0.05, float(poll_interval))
        conn = nomad.connection
        self.namespace = conn.namespace or ""
        self.region = conn.region or ""

    # Helpers ------------------------------------------------------------------------------------
    def _store(self, location: SecretLocation) -> SecretStore:
        return SecretStore(location, self.nomad, self._vault, self._hide)

    def _render(self, spec_raw: t.Any, agents: t.List[t.Dict[str, t.Any]], session_id: str,
                prefer: t.AbstractSet[str]) -> RenderedSession:
        """Render; with ``prefer`` (the agents a session already uses), try those alone first."""
        if prefer:
            subset = [a for a in agents if a.get("name") in prefer]
            if subset:
                rendered = render_session(spec_raw, subset, session_id=session_id, namespace=self.namespace,
                                          region=self.region, with_hcl=False)
                if rendered.plan.placed:
                    return rendered
        return render_session(spec_raw, agents, session_id=session_id, namespace=self.namespace,
                              region=self.region, with_hcl=False)

    def _plan_once(self, spec_raw: t.Any, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                   session_id: str, existing: t.Optional[t.Mapping[str, t.Any]]) -> RenderedSession:
        """One rendering on the given agents or on the nodes' live free capacity (placed or PENDING)."""
        prefer = {(g.get("Meta") or {}).get("backendai_agent") for g in (existing or {}).get("TaskGroups") or []}
        prefer.discard(None)
        pool = agents if agents is not None else live_agents(
            self.nomad, exclude_job=spec.name if existing is not None else None, namespace=self.namespace or "default")
        return self._render(spec_raw, pool, session_id, t.cast(t.AbstractSet[str], prefer))

    def _place(self, spec_raw: t.Any, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
               session_id: str, existing: t.Optional[t.Mapping[str, t.Any]], wait_for_resources: float,
               check_mode: bool) -> RenderedSession:
        """A placed rendering, retrying on fresh node data for ``wait_for_resources`` seconds; PENDING fails."""
        deadline = self._clock() + max(0.0, wait_for_resources)
        attempts = 0
        while True:
            attempts += 1
            rendered = self._plan_once(spec_raw, spec, agents, session_id, existing)
            if rendered.plan.placed:
                return rendered
            remaining = deadline - self._clock()
            if agents is not None or check_mode or remaining <= 0:
                break
            self._sleep(min(self.poll_interval, remaining))
        self._pending(spec, rendered, agents, wait_for_resources, check_mode, attempts)
        raise AssertionError("unreachable")

    def _pending(self, spec: SessionSpec, rendered: RenderedSession, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                 wait_for_resources: float, check_mode: bool, attempts: int) -> None:
        """Fail with the PENDING reason (check mode with a wait: tell the caller to warn instead)."""
        summary = plan_summary(rendered.plan)
        message = "session %s is PENDING: %s" % (spec.name, rendered.plan.reason)
        if agents is not None and wait_for_resources > 0:
            message += " (wait_for_resources has no effect with an explicit agents list)"
        elif check_mode and wait_for_resources > 0:
            raise _CheckModePending(summary)
        elif wait_for_resources > 0:
            message += " (still after waiting %gs for resources, %d placement attempts)" % (wait_for_resources, attempts)
        raise ModuleFailure(message, {"changed": False, "plan": summary})

    def _unclaimed(self, rendered: RenderedSession, agents: t.Optional[t.List[t.Dict[str, t.Any]]]) -> RenderedSession:
        """Check mode: ``rendered`` with the real addresses and the session's preferred slot, but NOT signed (the key is
        read, so that a missing key fails here too): a job for an unclaimed slot must never be admitted."""
        network = self.network.job_network(self.nomad, rendered, agents, None)
        return signed(rendered, dataclasses.replace(network, key=None), self.namespace, self.region)

    def _logs(self, alloc: t.Mapping[str, t.Any], lines: int) -> t.List[str]:
        """The last ``lines`` lines of stdout, then the last ``lines`` lines of stderr."""
        if container_status(alloc) in ("pending", "unplaced"):
            return []
        out: t.List[str] = []
        for stream in ("stdout", "stderr"):
            try:
                out.extend(self.nomad.read_logs(alloc["ID"], TASK_NAME, stream, lines=lines).splitlines())
            except NomadError as err:
                out.append("[%s unavailable: %s]" % (stream, err))
        return out

    def view(self, job: t.Mapping[str, t.Any], log_lines: int = 0) -> t.Dict[str, t.Any]:
        """The session view of a job (allocations read now)."""
        stubs = self.nomad.job_allocations(job["ID"])
        current = current_allocations(stubs)
        full: t.Dict[str, t.Mapping[str, t.Any]] = {}
        for alloc in current.values():
            detail = self.nomad.allocation(alloc["ID"])
            if detail is not None:
                full[alloc["ID"]] = detail
        logs = None
        if log_lines > 0:
            logs = {group: self._logs(alloc, log_lines) for group, alloc in current.items()}
        location = location_of_job(job)
        view = build_view(job, stubs, full, logs, location.public() if location else None)
        if any(c["node_id"] and not c["address"] for c in view["containers"]):
            # no address of its own reported (host networking, or an older Nomad): the node's address
            nodes = {n.get("ID"): n.get("Address") or "" for n in self.nomad.list_nodes()}
            for c in view["containers"]:
                if not c["address"]:
                    c["address"] = nodes.get(c["node_id"], "")
        return view

    def _wait(self, job: t.Mapping[str, t.Any], timeout: float, version: t.Optional[int] = None) -> None:
        """Until every container's allocation runs (a batch container may also have completed)."""
        deadline = self._clock() + max(0.0, timeout)
        groups = [g.get("Name") for g in job.get("TaskGroups") or []]
        batch = job.get("Type") == "batch"
        delay = min(0.25, self.poll_interval)
        while True:
            stubs = [a for a in self.nomad.job_allocations(job["ID"]) if version is None or a.get("JobVersion") == version]
            current = current_allocations(stubs)
            status = {g: container_status(current.get(g)) for g in groups}
            broken = [g for g, s in status.items() if s in ("failed", "lost")]
            if broken:
                details = []
                for g in broken:
                    alloc = current[g]
                    why = alloc.get("ClientDescription") or _last_event(alloc)
                    details.append("%s %s%s" % (g, status[g], (" (%s)" % why) if why else ""))
                raise WaitFailed("container(s) failed: %s" % ", ".join(details))
            if all(s == "running" or (batch and s == "complete") for s in status.values()):
                return
            remaining = deadline - self._clock()
            if remaining <= 0:
                progress = wait_progress([{"hostname": g, "status": s, "agent": (current.get(g) or {}).get("NodeName")}
                                          for g, s in status.items()], batch=batch)
                hint = " (unplaced: Nomad could not place the allocation)" if "unplaced" in status.values() else ""
                raise WaitFailed("containers not all running after %gs: %s%s" % (timeout, progress["summary"], hint))
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self.poll_interval)

    # present ------------------------------------------------------------------------------------
    def present(self, spec_raw: t.Any, agents: t.Optional[t.List[t.Dict[str, t.Any]]] = None, check_mode: bool = False,
                diff: bool = False, wait: bool = True, wait_timeout: float = 300.0,
                wait_for_resources: float = 0.0) -> t.Dict[str, t.Any]:
        spec = parse_spec(spec_raw)
        existing = self.nomad.get_job(spec.name)
        if existing is not None and not is_managed(existing):
            namespace = existing.get("Namespace") or "default"
            raise ModuleFailure("a Nomad job %r exists in namespace %r but was not made by backendai.cluster (its Meta has "
                                "no %s); choose another session name" % (spec.name, namespace, MANAGED_META_KEY))
        try:
            if existing is None:
                made = self._create(spec_raw, spec, agents, check_mode, diff, wait, wait_timeout, wait_for_resources)
                return dict(made, created=not check_mode)
            return dict(self._update(spec_raw, spec, existing, agents, check_mode, diff, wait, wait_timeout,
                                     wait_for_resources), created=False)
        except _CheckModePending as pending:
            self._warn("session %s cannot be placed now (PENDING: %s); a real run waits up to %gs for resources"
                       % (spec.name, pending.summary["reason"], wait_for_resources))
            return {"changed": True, "created": False, "plan": pending.summary, "job": None, "session": None}

    def _admission(self, owner: str) -> admission.AdmissionLock:
        return admission.AdmissionLock(self.nomad, owner, sleep=self._sleep, clock=self._clock, **self.lock_options)

    def _follow_eval(self, eval_id: str, lock: t.Optional[admission.AdmissionLock]) -> t.Dict[str, t.Any]:
        """Nomad's verdict on a register: the groups it could not place (``FailedTGAllocs``), else {}.

        Polls ``/v1/evaluation/:id`` until it is processed (at most ``eval_timeout``: then no verdict).
        """
        if not eval_id:
            return {}
        deadline = self._clock() + self.eval_timeout
        delay = min(0.05, self.poll_interval)
        while True:
            ev = self.nomad.evaluation(eval_id) or {}
            status = ev.get("Status") or "pending"
            if status not in ("pending", ""):
                failed = dict(ev.get("FailedTGAllocs") or {})
                if status in ("failed", "canceled", "blocked") and not failed:
                    failed = {"*": {"reason": "evaluation %s %s: %s" % (eval_id, status, ev.get("StatusDescription") or "")}}
                return failed
            if self._clock() >= deadline:
                self._warn("Nomad did not process evaluation %s within %gs; the wait for the containers decides"
                           % (eval_id, self.eval_timeout))
                return {}
            if lock is not None:
                lock.keep()
            self._sleep(delay)
            delay = min(delay * 2, self.poll_interval)

    def _create(self, spec_raw: t.Any, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool,
                diff: bool, wait: bool, wait_timeout: float, wait_for_resources: float) -> t.Dict[str, t.Any]:
        if check_mode:
            # no key is made in check mode: the session ID shown is a placeholder
            rendered = self._place(spec_raw, spec, agents, derive_session_id(spec.name, ""), None, wait_for_resources, True)
            rendered = self._unclaimed(rendered, agents)  # nothing is claimed: unsigned
            return self._result(True, rendered, diff, before="", after=dumps(register_request(rendered.job)),
                                session=None, changes=["job %s: added" % spec.name])
        self.network.key()  # a missing or bad cluster key fails before anything is written, the lock included
        keypair = generate_keypair(spec.ssh.key_type, spec.ssh.key_bits or 3072)
        self._hide(keypair.private_key)
        session_id = derive_session_id(spec.name, keypair.public_key)
        deadline = self._clock() + max(0.0, wait_for_resources)
        attempts = 0
        while True:
            attempts += 1
            refused: t.Optional[t.Tuple[str, str]] = None
            # Admission: plan on live data and register while no other create of this collection does.
            with self._admission("%s/%s" % (self.namespace or "default", spec.name)) as lock:
                rendered = self._plan_once(spec_raw, spec, agents, session_id, None)
                if rendered.plan.placed:
                    store = self._store(location_of_plan(rendered.plan))
                    rendered, refused = self._submit(spec, rendered, agents, store, keypair, lock)
            if not rendered.plan.placed:
                if agents is None and deadline - self._clock() > 0:
                    self._sleep(min(self.poll_interval, max(0.0, deadline - self._clock())))
                    continue
                self._pending(spec, rendered, agents, wait_for_resources, False, attempts)
            if refused is None:
                break
            reason, rollback = refused
            if deadline - self._clock() > 0:
                self._sleep(min(self.poll_interval, max(0.0, deadline - self._clock())))
                continue
            waited = " (still after waiting %gs for resources, %d attempts)" % (wait_for_resources, attempts) \
                if wait_for_resources > 0 else ""
            raise ModuleFailure("creating session %s failed at step '%s': Nomad cannot place every container now%s: %s. %s"
                                % (spec.name, STEP_REGISTER, waited, reason, rollback),
                                {"changed": False, "failed_step": STEP_REGISTER, "rollback": rollback,
                                 "plan": plan_summary(rendered.plan), "unplaced": reason})
        job = t.cast(t.Dict[str, t.Any], rendered.job)
        if wait:
            try:
                self._wait(job, wait_timeout)
            except BaseException as exc:
                rollback = self._rollback(spec.name, session_id, store, keypair.public_key, slot_of_job(job))
                if isinstance(exc, (NomadError, VaultError, BackendAIClusterError)):
                    raise ModuleFailure("creating session %s failed at step '%s': %s. %s" % (spec.name, STEP_WAIT, exc, rollback),
                                        {"changed": False, "failed_step": STEP_WAIT, "rollback": rollback,
                                         "plan": plan_summary(rendered.plan)}) from None
                raise
        try:
            view: t.Optional[t.Dict[str, t.Any]] = self.view(self.nomad.get_job(spec.name) or job)
        except NomadError as err:  # the session is made; only reading it back failed
            self._warn("session %s was created, but reading its state failed: %s" % (spec.name, err))
            view = None
        return self._result(True, rendered, diff, before="", after=dumps(register_request(job)), session=view,
                            changes=["job %s: added" % spec.name], location=store.location)

    def _submit(self, spec: SessionSpec, rendered: RenderedSession, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                store: SecretStore, keypair: t.Any,
                lock: admission.AdmissionLock) -> t.Tuple[RenderedSession, t.Optional[t.Tuple[str, str]]]:
        """Write the keypair, claim a network slot and sign the job's network args, register, follow the
        evaluation (under the lock). Returns the signed session and None when every group was placed, else
        (Nomad's reason per group, what the rollback did): the new session was rolled back at once."""
        session_id = rendered.plan.session_id
        network = self.network.job_network(self.nomad, rendered, agents, None)  # key and addresses: before any write
        claim: t.Optional[Claim] = None
        step = STEP_SECRET
        try:
            store.create(keypair)
            step = STEP_CLAIM
            claim = self.network.claims(self.nomad).claim(self.namespace, spec.name, session_id,
                                                          (rendered.network or {}).get("slots", 1))
            rendered = signed(rendered, dataclasses.replace(network, slot=claim.slot, slots=claim.slots),
                              self.namespace, self.region)
            job = t.cast(t.Dict[str, t.Any], rendered.job)
            step = STEP_REGISTER
            answer = self.nomad.register_job(register_request(job))
            failed = self._follow_eval(str(answer.get("EvalID") or ""), lock)
        except SecretExists as exc:
            raise ModuleFailure("creating session %s failed at step '%s': %s while job %s does not; it is left from an "
                                "earlier run or another run is creating this session. Nothing was changed; remove it with "
                                "state=absent if it is a leftover" % (spec.name, step, exc, spec.name),
                                {"changed": False, "plan": plan_summary(rendered.plan)}) from None
        except BaseException as exc:
            rollback = self._rollback(spec.name, session_id, store, keypair.public_key,
                                      (claim.slot, claim.slots) if claim else None)
            if isinstance(exc, (NomadError, VaultError, BackendAIClusterError)):
                raise ModuleFailure("creating session %s failed at step '%s': %s. %s" % (spec.name, step, exc, rollback),
                                    {"changed": False, "failed_step": step, "rollback": rollback,
                                     "plan": plan_summary(rendered.plan)}) from None
            raise
        if not failed:
            return rendered, None
        # Nomad placed some groups and blocked others (capacity taken by a job that is not ours):
        # all or nothing, so the session goes at once, before any of it runs for long.
        return rendered, (failed_placement_reason(failed),
                          self._rollback(spec.name, session_id, store, keypair.public_key, (claim.slot, claim.slots)))

    def _rollback(self, name: str, session_id: str, store: SecretStore, public_key: str,
                  block: t.Optional[t.Tuple[int, int]] = None) -> str:
        """Undo a create of this run through the one teardown ``state=absent`` uses (only what is this run's:
        the job with this session ID, the network slots this run claimed, the keypair holding this public key)."""
        try:
            job = self.nomad.get_job(name)
            ours = job is not None and (job.get("Meta") or {}).get("BACKENDAI_SESSION_ID") == session_id
        except NomadError:
            job, ours = None, True  # cannot tell: the job did not exist when this run began, so try
        done, failed = self._teardown(name, ours, [store], public_key, block, session_id)
        text = "Rolled back: %s" % ("; ".join(done) if done else "nothing had been created")
        if failed:
            text += ". Rollback INCOMPLETE: %s; remove the leftovers with state=absent" % "; ".join(failed)
        return text

    def _teardown(self, name: str, job_there: bool, stores: t.Sequence[SecretStore],
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

    def _update(self, spec_raw: t.Any, spec: SessionSpec, existing: t.Mapping[str, t.Any],
                agents: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool, diff: bool, wait: bool,
                wait_timeout: float, wait_for_resources: float) -> t.Dict[str, t.Any]:
        lock = None if check_mode else self._admission("%s/%s" % (self.namespace or "default", spec.name))
        try:
            return self._update_locked(spec_raw, spec, existing, agents, check_mode, diff, wait, wait_timeout,
                                       wait_for_resources, lock)
        finally:
            if lock is not None:
                lock.release()

    def _update_locked(self, spec_raw: t.Any, spec: SessionSpec, existing: t.Mapping[str, t.Any],
                       agents: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool, diff: bool, wait: bool,
                       wait_timeout: float, wait_for_resources: float,
                       lock: t.Optional[admission.AdmissionLock]) -> t.Dict[str, t.Any]:
        """``_update``; a changed or repaired session is placed again under the admission lock, as a create."""
        name = spec.name
        stored_at = location_of_job(existing) or location_of_plan(plan_session(spec_raw, []))
        public_key = self._store(stored_at).read_public_key()
        if not public_key:
            raise ModuleFailure("session %s: job %s exists but its keypair (%s) is missing; remove the session with "
                                "state=absent and create it again" % (name, name, stored_at.describe()))
        session_id = derive_session_id(name, public_key)
        rendered = self._place(spec_raw, spec, agents, session_id, existing, wait_for_resources, check_mode)
        if lock is not None:
            # placed (waiting for resources if need be) without the lock; placed again inside it on live data
            lock.acquire()
            rendered = self._plan_once(spec_raw, spec, agents, session_id, existing)
            if not rendered.plan.placed:
                self._pending(spec, rendered, agents, 0.0, False, 1)
        wanted_at = location_of_plan(rendered.plan)
        if wanted_at != stored_at:
            raise ModuleFailure("session %s: changing where the keypair lives is not supported (it is in %s, the spec says "
                                "%s); remove the session with state=absent and create it again"
                                % (name, stored_at.describe(), wanted_at.describe()))
        rendered, new_claim, old_block, repaired = self._keep_slot(rendered, agents, existing, session_id, check_mode)
        job = t.cast(t.Dict[str, t.Any], rendered.job)
        broken = self._mark_repairs(existing, job)
        plan = self.nomad.plan_job(job, diff=True)
        found = job_changes(plan.get("Diff"))
        changed = ((plan.get("Diff") or {}).get("Type") or "None") != "None"
        failed_groups = sorted((plan.get("FailedTGAllocs") or {}).keys())
        if changed and failed_groups:
            self._warn("Nomad's scheduler reports it cannot place the updated task group(s) %s now"
                       % ", ".join(failed_groups))
        before, after = diff_texts(found)
        if not changed:
            if lock is not None:
                lock.release()  # nothing is admitted: waiting for the containers is not admission
            if wait and not check_mode:
                try:
                    self._wait(existing, wait_timeout)
                except WaitFailed as err:
                    raise ModuleFailure("session %s is unchanged but not all of its containers run: %s" % (name, err),
                                        {"changed": False, "session": self.view(existing)}) from None
            repairs = ["network slot %d: lost claim made again" % rendered.network["slot"]] if repaired and rendered.network else []
            return self._result(bool(repairs), rendered, diff, before, after, self.view(existing), repairs, stored_at)
        if check_mode:
            return self._result(True, rendered, diff, before, after, self.view(existing), [str(c) for c in found], stored_at)
        try:
            answer = self.nomad.register_job(register_request(job))
        except NomadError as err:
            if new_claim is not None:
                claims = self.network.claims(self.nomad)
                claims.release(new_claim.slot, new_claim.namespace, new_claim.job, new_claim.session_id, new_claim.slots)
            raise ModuleFailure("updating session %s failed at step '%s': %s. Nothing to roll back: the previous job "
                                "version stays registered and the keypair is unchanged" % (name, STEP_REGISTER, err),
                                {"changed": False, "failed_step": STEP_REGISTER}) from None
        unplaced = self._follow_eval(str(answer.get("EvalID") or ""), lock)
        if lock is not None:
            lock.release()
        if old_block is not None:  # the session outgrew its block: the new one is in the registered job now
            self.network.claims(self.nomad).release(old_block[0], self.namespace, name, slots=old_block[1])
        current = self.nomad.get_job(name) or job
        if unplaced:
            raise ModuleFailure("%s session %s failed: Nomad cannot place %s. The new job version stays registered (an "
                                "existing session is not rolled back; free capacity or remove it with state=absent)"
                                % ("repairing" if broken else "updating", name, failed_placement_reason(unplaced)),
                                {"changed": True, "failed_step": STEP_REGISTER, "session": self.view(current)})
        if wait:
            try:
                self._wait(current, wait_timeout, version=current.get("Version"))
            except (WaitFailed, NomadError) as err:
                raise ModuleFailure("updating session %s failed at step '%s': %s. The new job version stays registered "
                                    "(an existing session is not rolled back; fix the spec and run again, or remove it "
                                    "with state=absent)" % (name, STEP_WAIT, err),
                                    {"changed": True, "failed_step": STEP_WAIT, "session": self.view(current)}) from None
        return self._result(True, rendered, diff, before, after, self.view(current), [str(c) for c in found], stored_at)

    def _mark_repairs(self, existing: t.Mapping[str, t.Any], job: t.Dict[str, t.Any]) -> t.List[str]:
        """Containers of ``existing`` that failed, were lost or keep restarting get a new allocation.

        Their group's ``Meta.backendai_repair`` generation is raised (a group Meta change is a
        destructive update in Nomad: a new allocation, placed by the job's constraint, which the
        new placement may have moved off a node that is down); every other group keeps its
        generation, so an unchanged session stays unchanged.
        """
        current = current_allocations(self.nomad.job_allocations(str(existing["ID"])))
        generations = {g.get("Name"): int((g.get("Meta") or {}).get(REPAIR_META) or 0)
                       for g in existing.get("TaskGroups") or []}
        broken = sorted(name for name in generations if name in current and container_status(current[name]) in BROKEN)
        for group in job.get("TaskGroups") or []:
            generation = generations.get(group["Name"], 0) + (1 if group["Name"] in broken else 0)
            if generation:
                group.setdefault("Meta", {})[REPAIR_META] = str(generation)
        return broken

    def _keep_slot(self, rendered: RenderedSession, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                   existing: t.Mapping[str, t.Any], session_id: str,
                   check_mode: bool) -> t.Tuple[RenderedSession, t.Optional[Claim], t.Optional[t.Tuple[int, int]], bool]:
        """An existing session keeps the slots its job carries (their claims re-made if lost). A job from before the
        session network, or one that outgrew its block, gets a new block: returned, so that a failed registration
        releases it, with the old block, which a successful one releases. Last: whether a lost claim was (or, in check
        mode, would be) made again."""
        network = self.network.job_network(self.nomad, rendered, agents, None)
        claims = self.network.claims(self.nomad)
        name = rendered.plan.spec.name
        need = (rendered.network or {}).get("slots", 1)
        held, new_claim, old, repaired = slot_of_job(existing), None, None, False
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
        return (signed(rendered, dataclasses.replace(network, slot=first, slots=slots), self.namespace, self.region),
                new_claim, old, repaired)

    def _result(self, changed: bool, rendered: RenderedSession, diff: bool, before: str, after: str,
                session: t.Optional[t.Dict[str, t.Any]], changes: t.List[str],
                location: t.Optional[SecretLocation] = None) -> t.Dict[str, t.Any]:
        result: t.Dict[str, t.Any] = {
            "changed": changed,
            "session": session,
            "plan": plan_summary(rendered.plan),
            "job": register_request(rendered.job) if rendered.job is not None else None,
            "changes": changes,
            "secret": (location or location_of_plan(rendered.plan)).public(),
            "network": rendered.network,
        }
        if diff and changed:
            name = rendered.plan.spec.name
            result["diff"] = {"before": before, "after": after, "before_header": "nomad job %s" % name,
                              "after_header": "nomad job %s" % name}
        return result

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
            locations.append(location_of_plan(plan_session(spec_raw, [])))
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
        _done, failed = self._teardown(name, job is not None, present, block=block)
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

    # info ---------------------------------------------------------------------------------------
    def info(self, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
        """One session (``name``) or all made by this collection; namespace ``*`` looks in every namespace."""
        everywhere = self.namespace == ALL_NAMESPACES
        if name and not everywhere:
            job = self.nomad.get_job(name)
            return [self.view(job, log_lines)] if job is not None and is_managed(job) else []
        views = []
        for stub in self.nomad.list_jobs(prefix=name, meta=True):
            if (stub.get("Meta") or {}).get(MANAGED_META_KEY) != stub.get("ID") or (name and stub.get("ID") != name):
                continue
            # with '*', each job is read where it lives (Nomad refuses reads in the wildcard namespace)
            backend = self._in_namespace(str(stub.get("Namespace") or "default")) if everywhere else self
            job = backend.nomad.get_job(stub["ID"])
            if job is not None and is_managed(job):
                views.append(backend.view(job, log_lines))
        return views

    def _in_namespace(self, namespace: str) -> "NomadBackend":
        return NomadBackend(self.nomad.in_namespace(namespace), self._vault, self._hide, self._warn, network=self.network)


class _CheckModePending(Exception):
    def __init__(self, summary: t.Dict[str, t.Any]) -> None:
        super().__init__("pending")
        self.summary = summary


def _last_event(alloc: t.Mapping[str, t.Any]) -> str:
    for state in (alloc.get("TaskStates") or {}).values():
        events = (state or {}).get("Events") or []
        if events:
            return str(events[-1].get("DisplayMessage") or events[-1].get("Type") or "")
    return ""
