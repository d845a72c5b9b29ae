# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``nomad`` backend of the ``session`` and ``session_info`` modules.

The spec is parsed once (``present``) and the typed spec flows down; placing yields a plan (as often as fresh
capacity asks), and a create renders its job once, when the claimed slot is known.

Create (``present``, no job yet), in this order:

1. take the cluster's admission lock (``_nomad.admission``: a Nomad variable lock with a TTL), or be
   admitted by its holder (batch admission, ``_nomad.batch``: then it places on the capacity granted);
2. place the containers on live node data (or the given agents), and, holding the lock, the creates
   queued behind it that fit; PENDING releases the lock and fails with the reason, or retries against
   fresh node data for ``wait_for_resources`` seconds;
3. generate the keypair and write it to the secret backend with check-and-set ``cas=0``
   (Nomad Variable ``nomad/jobs/<job>``, or Vault KV v2) BEFORE the job exists: a task whose
   ``nomadVar`` is missing blocks forever (nomad#17220);
4. claim a session network slot (``_nomad.claims``) and render the job, its network args signed with the
   cluster key for that slot (``_nomad.network_control`` read the key and the agents' addresses before step 3),
   and write the session's agent table beside the claim (released with it on a rollback);
5. register the job and follow its evaluation: if Nomad cannot place a group (``FailedTGAllocs``,
   a blocked evaluation), the session is rolled back at once (all or nothing) and, with
   ``wait_for_resources``, placed again; then release the lock;
6. optionally wait until every container's allocation runs.

Every rollback and ``state=absent`` go through one teardown (``_nomad.removal.Remover.teardown``).
A present on an existing session whose containers failed or were lost gives each of those a new
allocation (``_mark_repairs``), keeping the keys and the session ID.

If a step after the secret fails, the run is rolled back: the job is deregistered (purged) if it
carries this run's session ID, the network slot is released if this run claimed it, and the secret
is deleted if it holds this run's public key. The error names the failed step and what was rolled back.

Update (job exists): the keys are never regenerated. The session ID comes from the stored public
key, the job is re-rendered with it (placement prefers the agents the session already uses, and
counts the session's own allocations as free), keeping the network slot its job carries, and Nomad's
plan decides: ``Diff.Type`` None means unchanged. That first plan is read-only and takes no lock: an
unchanged session makes no write request at all. A changed job is placed and planned again under the
admission lock and registered; a failure then is reported, not rolled back (the session existed
before this run). Check mode only reads (the plan endpoint is a dry run).

Stopped (``_nomad.stopping``): the job is stopped without purge, its network slot released, the keypair kept; a
present on a stopped job starts it again through the update (a new slot claim, placement under the admission lock).

Absent: deregister (purge) the job, release its network slot, then delete the secret; nothing there
means no change.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import admission
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.batch import BatchPlanner, placement_request
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import NodeCatalogue
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import MANAGED_META_KEY, register_request, render_network
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim, slot_of_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import (
    SecretExists,
    SecretLocation,
    SecretStore,
    location_of_spec,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import RenderedSession, render_session
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import (
    ALL_NAMESPACES,
    DEFAULT_EVAL_TIMEOUT,
    DEFAULT_POLL_INTERVAL,
    STEP_CLAIM,
    STEP_REGISTER,
    STEP_SECRET,
    STEP_WAIT,
    CheckModePending,
    Placer,
    pending,
    session_result,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.removal import Remover
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.stopping import stop_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.protocol import absent_name
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.update import Updater
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.watch import Watcher
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import (
    failed_placement_reason,
    is_managed,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import plan_summary
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id, generate_keypair
from ansible_collections.backendai.cluster.plugins.module_utils._vault.client import VaultClient, VaultError


class NomadBackend:
    """Session operations against one Nomad cluster (and, for ``secrets.backend: vault``, one Vault).

    The create is here; its collaborators, each constructed with what it needs, do the rest: :class:`Placer` places,
    :class:`Watcher` reads and waits, :class:`Updater` updates an existing session, :class:`Remover` tears down."""

    def __init__(self, nomad: NomadClient, vault: t.Callable[[], VaultClient], hide: t.Callable[..., None],
                 warn: t.Callable[[str], None], sleep: t.Callable[[float], None] = time.sleep,
                 clock: t.Callable[[], float] = time.monotonic, poll_interval: float = DEFAULT_POLL_INTERVAL,
                 lock_ttl: float = admission.DEFAULT_TTL, lock_delay: float = admission.DEFAULT_LOCK_DELAY,
                 lock_wait: float = admission.DEFAULT_LOCK_WAIT, eval_timeout: float = DEFAULT_EVAL_TIMEOUT,
                 network: t.Optional[NetworkControl] = None, node_catalogue: t.Optional[NodeCatalogue] = None) -> None:
        self.nomad = nomad
        #: the node list kept between creates (``_nomad.capacity``), or None: read whole every time
        self.node_catalogue = node_catalogue
        self.network = network or NetworkControl(hide=hide)
        self.lock_options = {"ttl": lock_ttl, "lock_delay": lock_delay, "wait": lock_wait}
        self._vault = vault
        self._hide = hide
        self._warn = warn
        self._sleep = sleep
        self._clock = clock
        self.poll_interval = max(0.05, float(poll_interval))
        conn = nomad.connection
        self.namespace = conn.namespace or ""
        self.region = conn.region or ""
        self.placer = Placer(nomad, node_catalogue, self.namespace, sleep, clock, self.poll_interval)
        self.watcher = Watcher(nomad, node_catalogue, warn, sleep, clock, self.poll_interval, eval_timeout)
        self.remover = Remover(nomad, self.network, self.namespace, self._store)
        self.updater = Updater(nomad, self.network, self.namespace, self.region, self.placer, self.watcher, self._store,
                               self._admission, warn)

    # Helpers ------------------------------------------------------------------------------------
    def _store(self, location: SecretLocation) -> SecretStore:
        return SecretStore(location, self.nomad, self._vault, self._hide)

    def _unclaimed(self, plan: SessionPlan, agents: t.Optional[t.List[t.Dict[str, t.Any]]]) -> RenderedSession:
        """Check mode: ``plan`` rendered with the real addresses and the session's preferred slot, but NOT signed (the
        key is read, so that a missing key fails here too): a job for an unclaimed slot must never be admitted."""
        network = self.network.job_network(self.nomad, plan, agents)
        return render_session(plan, self.namespace, self.region, dataclasses.replace(network, key=None), with_hcl=False)

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
                made = self._create(spec, agents, check_mode, diff, wait, wait_timeout, wait_for_resources)
                return dict(made, created=not check_mode)
            return dict(self.updater.update(spec, existing, agents, check_mode, diff, wait, wait_timeout,
                                            wait_for_resources), created=False)
        except CheckModePending as waiting:
            self._warn("session %s cannot be placed now (PENDING: %s); a real run waits up to %gs for resources"
                       % (spec.name, waiting.summary["reason"], wait_for_resources))
            return {"changed": True, "created": False, "plan": waiting.summary, "job": None, "session": None}

    def _admission(self, owner: str, request: t.Optional[t.Mapping[str, t.Any]] = None) -> admission.AdmissionLock:
        return admission.AdmissionLock(self.nomad, owner, sleep=self._sleep, clock=self._clock, request=request,
                                       **self.lock_options)

    def _create(self, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]], check_mode: bool,
                diff: bool, wait: bool, wait_timeout: float, wait_for_resources: float) -> t.Dict[str, t.Any]:
        if check_mode:
            # no key is made in check mode: the session ID shown is a placeholder
            plan = self.placer.place(spec, agents, derive_session_id(spec.name, ""), None, wait_for_resources, True)
            rendered = self._unclaimed(plan, agents)  # nothing is claimed: unsigned
            return session_result(True, rendered, diff, before="", after=None, session=None, changes=["job %s: added" % spec.name])
        self.network.key()  # a missing or bad cluster key fails before anything is written, the lock included
        keypair = generate_keypair(spec.ssh.key_type, spec.ssh.key_bits or 3072)
        self._hide(keypair.private_key)
        session_id = derive_session_id(spec.name, keypair.public_key)
        deadline = self._clock() + max(0.0, wait_for_resources)
        attempts = 0
        while True:
            attempts += 1
            refused: t.Optional[t.Tuple[str, str]] = None
            # the nodes' addresses do not depend on free capacity: read before the lock, which is held only for
            # what needs it (issue 24: plan from live capacity, write, register, follow the evaluation)
            # (with a node catalogue, the list read inside the lock for live capacity serves: no read here)
            nodes = self.nomad.list_nodes() if agents is None and self.node_catalogue is None else None
            # Admission: plan on live data and register while no other create of this collection does, or as
            # admitted by the holder with its own placement (batch admission, ``_nomad.batch``)
            request = placement_request(spec) if agents is None else None
            with self._admission("%s/%s" % (self.namespace or "default", spec.name), request) as lock:
                if lock.grant is not None:  # placed by the holder on its live capacity read: place on what it granted
                    plan = self.placer.plan(spec, lock.grant, session_id, set())
                else:
                    pool = agents if agents is not None else self.placer.live_capacity()
                    plan = self.placer.plan(spec, pool, session_id, set())
                    if plan.placed and agents is None:
                        lock.admit(BatchPlanner(pool, plan).grant)  # the creates queued behind, same pass
                if plan.placed:
                    store = self._store(location_of_spec(spec))
                    rendered, refused = self._submit(plan, agents, store, keypair, lock, nodes)
            if not plan.placed:
                if agents is None and deadline - self._clock() > 0:
                    self._sleep(min(self.poll_interval, max(0.0, deadline - self._clock())))
                    continue
                pending(plan, agents, wait_for_resources, False, attempts)
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
                                 "plan": plan_summary(plan), "unplaced": reason})
        job = t.cast(t.Dict[str, t.Any], rendered.job)
        stubs: t.Optional[t.List[t.Dict[str, t.Any]]] = None
        if wait:
            try:
                stubs = self.watcher.wait(job, wait_timeout)
            except BaseException as exc:
                rollback = self.remover.rollback(spec.name, session_id, store, keypair.public_key, slot_of_job(job))
                if isinstance(exc, (NomadError, VaultError, BackendAIClusterError)):
                    raise ModuleFailure("creating session %s failed at step '%s': %s. %s" % (spec.name, STEP_WAIT, exc, rollback),
                                        {"changed": False, "failed_step": STEP_WAIT, "rollback": rollback,
                                         "plan": plan_summary(plan)}) from None
                raise
        try:
            # the view of the job as registered: the fields it shows (ID, namespace, Meta, groups, their networks and
            # env, type) are the job's own, which Nomad's canonicalisation keeps, so it is not read back; with the
            # allocation list the wait read last, only the allocations' details are read (their addresses: a list
            # stub has no NetworkStatus, ``AllocListStub`` in Nomad's ``nomad/structs/structs.go``)
            view: t.Optional[t.Dict[str, t.Any]] = self.watcher.view(job, stubs=stubs)
        except NomadError as err:  # the session is made; only reading it back failed
            self._warn("session %s was created, but reading its state failed: %s" % (spec.name, err))
            view = None
        return session_result(True, rendered, diff, before="", after=None, session=view, changes=["job %s: added" % spec.name], location=store.location)

    def _submit(self, plan: SessionPlan, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                store: SecretStore, keypair: t.Any, lock: admission.AdmissionLock,
                nodes: t.Optional[t.List[t.Dict[str, t.Any]]] = None) -> t.Tuple[RenderedSession, t.Optional[t.Tuple[str, str]]]:
        """Write the keypair, claim a network slot, render the job signed for it (the one render of a create),
        register, follow the evaluation (under the lock). Returns the rendered session and None when every group was
        placed, else (Nomad's reason per group, what the rollback did): the new session was rolled back at once."""
        spec, session_id = plan.spec, plan.session_id
        if nodes is None and agents is None and self.node_catalogue is not None:
            nodes = self.node_catalogue.known(self.nomad)  # read for this placement (or by the holder that admitted it)
        catalogue = self.node_catalogue
        node = (lambda node_id: catalogue.node(self.nomad, node_id)) if catalogue is not None and agents is None else None
        # key and addresses, and the session network laid out on them in the preferred block: checked before any write
        network = self.network.job_network(self.nomad, plan, agents, nodes, node)
        laid = render_network(plan, self.namespace, network)
        claim: t.Optional[Claim] = None
        step = STEP_SECRET
        try:
            store.create(keypair)
            step = STEP_CLAIM
            claim = self.network.claims(self.nomad).claim(self.namespace, spec.name, session_id, laid.slots)
            # the claim starts at the preferred block: laid out again only if another run held it
            rendered = render_session(plan, self.namespace, self.region,
                                      dataclasses.replace(network, slot=claim.slot, slots=claim.slots), with_hcl=False,
                                      laid=laid if (laid.slot, laid.slots) == (claim.slot, claim.slots) else None)
            job = t.cast(t.Dict[str, t.Any], rendered.job)
            # the agent table its groups' args sign (args version 4), beside the claim, before any ADD can read it
            self.network.claims(self.nomad).write_table(rendered.table)
            step = STEP_REGISTER
            lock.keep()  # admitted by the holder: its heartbeat, and no register once it may have stopped waiting
            answer = self.nomad.register_job(register_request(job))
            failed = self.watcher.follow_eval(str(answer.get("EvalID") or ""), lock, int(answer.get("EvalCreateIndex") or 0))
        except SecretExists as exc:
            raise ModuleFailure("creating session %s failed at step '%s': %s while job %s does not; it is left from an "
                                "earlier run or another run is creating this session. Nothing was changed; remove it with "
                                "state=absent if it is a leftover" % (spec.name, step, exc, spec.name),
                                {"changed": False, "plan": plan_summary(plan)}) from None
        except BaseException as exc:
            rollback = self.remover.rollback(spec.name, session_id, store, keypair.public_key,
                                             (claim.slot, claim.slots) if claim else None)
            if isinstance(exc, (NomadError, VaultError, BackendAIClusterError)):
                raise ModuleFailure("creating session %s failed at step '%s': %s. %s" % (spec.name, step, exc, rollback),
                                    {"changed": False, "failed_step": step, "rollback": rollback,
                                     "plan": plan_summary(plan)}) from None
            raise
        if not failed:
            return rendered, None
        # Nomad placed some groups and blocked others (capacity taken by a job that is not ours):
        # all or nothing, so the session goes at once, before any of it runs for long.
        return rendered, (failed_placement_reason(failed),
                          self.remover.rollback(spec.name, session_id, store, keypair.public_key, (claim.slot, claim.slots)))

    # absent -------------------------------------------------------------------------------------
    def absent(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
               diff: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
        """Purge the session's job, network slot and keypair (``_nomad.removal.Remover.absent``)."""
        return self.remover.absent(name, spec_raw, check_mode=check_mode, diff=diff, keep_logs=keep_logs)

    # stopped ------------------------------------------------------------------------------------
    def stop(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
             diff: bool = False) -> t.Dict[str, t.Any]:
        """Stop the job without purging it and release its network slot; the keypair stays (``_nomad.stopping``).
        ``state: present`` starts it again (``_nomad.update``)."""
        name = absent_name(name, spec_raw)
        changed, job = stop_session(self.nomad, self.network, self.namespace, name, check_mode)
        current = self.nomad.get_job(name) if changed and not check_mode else job
        result: t.Dict[str, t.Any] = {"changed": changed, "session": self.watcher.view(current) if current else None}
        if diff and changed:
            result["diff"] = {"before": "nomad job %s: running\n" % name, "after": "nomad job %s: stopped\n" % name,
                              "before_header": "session %s" % name, "after_header": "session %s" % name}
        return result

    # info ---------------------------------------------------------------------------------------
    def info(self, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
        """One session (``name``) or all made by this collection; namespace ``*`` looks in every namespace."""
        everywhere = self.namespace == ALL_NAMESPACES
        if name and not everywhere:
            job = self.nomad.get_job(name)
            return [self.watcher.view(job, log_lines)] if job is not None and is_managed(job) else []
        views = []
        for stub in self.nomad.list_jobs(prefix=name, meta=True):
            if (stub.get("Meta") or {}).get(MANAGED_META_KEY) != stub.get("ID") or (name and stub.get("ID") != name):
                continue
            # with '*', each job is read where it lives (Nomad refuses reads in the wildcard namespace)
            backend = self._in_namespace(str(stub.get("Namespace") or "default")) if everywhere else self
            job = backend.nomad.get_job(stub["ID"])
            if job is not None and is_managed(job):
                views.append(backend.watcher.view(job, log_lines))
        return views

    def _in_namespace(self, namespace: str) -> "NomadBackend":
        return NomadBackend(self.nomad.in_namespace(namespace), self._vault, self._hide, self._warn, network=self.network)
