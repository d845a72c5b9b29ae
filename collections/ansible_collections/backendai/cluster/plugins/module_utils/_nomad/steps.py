# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a Nomad session's lifecycle as errors name them, their timing defaults, and what the create
(:class:`_nomad.nomad_backend.NomadBackend`) and the update (``_nomad.update``) share: placing a parsed spec
(:class:`Placer`), failing as PENDING (:func:`pending`) and the module's result (:func:`session_result`)."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import NodeCatalogue, live_capacity
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import register_request
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import RenderedSession, plan_session
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import SecretLocation, location_of_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import plan_summary

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


class CheckModePending(Exception):
    def __init__(self, summary: t.Dict[str, t.Any]) -> None:
        super().__init__("pending")
        self.summary = summary


def last_event(alloc: t.Mapping[str, t.Any]) -> str:
    for state in (alloc.get("TaskStates") or {}).values():
        events = (state or {}).get("Events") or []
        if events:
            return str(events[-1].get("DisplayMessage") or events[-1].get("Type") or "")
    return ""


class Placer:
    """Places parsed specs on the given agents or on the live free capacity of one namespace's Nomad nodes, retrying on
    fresh node data while ``wait_for_resources`` lasts (``poll_interval`` apart)."""

    def __init__(self, nomad: NomadClient, node_catalogue: t.Optional[NodeCatalogue], namespace: str,
                 sleep: t.Callable[[float], None], clock: t.Callable[[], float], poll_interval: float) -> None:
        self.nomad = nomad
        self.node_catalogue = node_catalogue
        self.namespace = namespace
        self._sleep = sleep
        self._clock = clock
        self.poll_interval = poll_interval

    def live_capacity(self, exclude_job: t.Optional[str] = None) -> t.List[t.Dict[str, t.Any]]:
        """The nodes' free capacity now (``exclude_job``: a session whose own allocations count as free)."""
        return live_capacity(self.nomad, self.node_catalogue, exclude_job=exclude_job, namespace=self.namespace or "default")

    @staticmethod
    def plan(spec: SessionSpec, agents: t.List[t.Dict[str, t.Any]], session_id: str,
             prefer: t.AbstractSet[str]) -> SessionPlan:
        """Place; with ``prefer`` (the agents a session already uses), try those alone first."""
        if prefer:
            subset = [a for a in agents if a.get("name") in prefer]
            if subset:
                plan = plan_session(spec, subset, session_id=session_id)
                if plan.placed:
                    return plan
        return plan_session(spec, agents, session_id=session_id)

    def plan_once(self, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
                  session_id: str, existing: t.Optional[t.Mapping[str, t.Any]]) -> SessionPlan:
        """One placement on the given agents or on the nodes' live free capacity (placed or PENDING)."""
        prefer = {(g.get("Meta") or {}).get("backendai_agent") for g in (existing or {}).get("TaskGroups") or []}
        prefer.discard(None)
        pool = agents if agents is not None else self.live_capacity(spec.name if existing is not None else None)
        return self.plan(spec, pool, session_id, t.cast(t.AbstractSet[str], prefer))

    def place(self, spec: SessionSpec, agents: t.Optional[t.List[t.Dict[str, t.Any]]],
              session_id: str, existing: t.Optional[t.Mapping[str, t.Any]], wait_for_resources: float,
              check_mode: bool) -> SessionPlan:
        """A placed plan, retrying on fresh node data for ``wait_for_resources`` seconds; PENDING fails."""
        deadline = self._clock() + max(0.0, wait_for_resources)
        attempts = 0
        while True:
            attempts += 1
            plan = self.plan_once(spec, agents, session_id, existing)
            if plan.placed:
                return plan
            remaining = deadline - self._clock()
            if agents is not None or check_mode or remaining <= 0:
                break
            self._sleep(min(self.poll_interval, remaining))
        pending(plan, agents, wait_for_resources, check_mode, attempts)


def pending(plan: SessionPlan, agents: t.Optional[t.List[t.Dict[str, t.Any]]], wait_for_resources: float,
            check_mode: bool, attempts: int) -> t.NoReturn:
    """Fail with the PENDING reason (check mode with a wait: tell the caller to warn instead)."""
    summary = plan_summary(plan)
    message = "session %s is PENDING: %s" % (plan.spec.name, plan.reason)
    if agents is not None and wait_for_resources > 0:
        message += " (wait_for_resources has no effect with an explicit agents list)"
    elif check_mode and wait_for_resources > 0:
        raise CheckModePending(summary)
    elif wait_for_resources > 0:
        message += " (still after waiting %gs for resources, %d placement attempts)" % (wait_for_resources, attempts)
    raise ModuleFailure(message, {"changed": False, "plan": summary})


def session_result(changed: bool, rendered: RenderedSession, diff: bool, before: str, after: t.Optional[str],
                   session: t.Optional[t.Dict[str, t.Any]], changes: t.List[str],
                   location: t.Optional[SecretLocation] = None) -> t.Dict[str, t.Any]:
    """The ``session`` module's result of a create or an update (``before``/``after``: the diff, shown with ``diff``;
    ``after`` None: the rendered job's text, made only then: pretty JSON goes through Python's slow encoder)."""
    result: t.Dict[str, t.Any] = {
        "changed": changed,
        "session": session,
        "plan": plan_summary(rendered.plan),
        "job": register_request(rendered.job) if rendered.job is not None else None,
        "changes": changes,
        "secret": (location or location_of_spec(rendered.plan.spec)).public(),
        "network": rendered.network,
    }
    if diff and changed:
        name = rendered.plan.spec.name
        result["diff"] = {"before": before, "after": rendered.job_json if after is None else after, "before_header": "nomad job %s" % name,
                          "after_header": "nomad job %s" % name}
    return result
