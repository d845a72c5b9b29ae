# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""From a parsed spec to everything a backend needs, in two steps: place it (:func:`plan_session`), then render the
placed plan once (:func:`render_session`: job JSON/HCL, hostfile, the session network's summary).

This is the seam the modules, the benchmarks and the backends share, so that each of them is a
thin layer. The spec is parsed once by the caller (``_session.spec.parse_spec``) and the typed spec flows
down; a backend places as often as it must (fresh capacity, a subset of agents first) and renders once, when
the session network (the claimed slot, the addresses, the key) is known. Pure: it reads its arguments and returns data.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import mpi_hostfile
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import JobNetwork, RenderedNetwork
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.hcl import render_hcl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import (
    dumps,
    host_volumes_needed,
    register_request,
    render_job,
    render_network,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan, build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SessionSpec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id


@dataclass(frozen=True)
class RenderedSession:
    plan: SessionPlan
    job: t.Optional[t.Dict[str, t.Any]]  # None while PENDING
    hcl: str
    hostfile: str
    network: t.Optional[t.Dict[str, t.Any]] = None  # the session network's summary (secret-free); None while PENDING
    #: (variable path, items) of the session's agent table (args version 4), to write in the claims namespace
    #: before the job registers (``_nomad.claims.NetworkClaims.write_table``); () before version 4 and while PENDING.
    table: t.Sequence[t.Tuple[str, t.Dict[str, str]]] = ()

    @property
    def job_json(self) -> str:
        """The register request body (``PUT /v1/jobs``) as deterministic, pretty JSON."""
        return dumps(register_request(self.job)) if self.job is not None else ""


def plan_session(spec: SessionSpec, agents_raw: t.Any, public_key: str = "", session_id: str = "") -> SessionPlan:
    """Validate the agents and place the (parsed) session on them.

    The session ID is ``session_id`` if given, else derived from the name and ``public_key``
    (a fresh key makes a fresh ID; no key gives a stable ID, which keeps render-only output
    reproducible). The spec's mounts are host volumes: only agents that declare them (or whose volumes
    are unknown, ``host_volumes`` not given) are considered.
    """
    return build_plan(spec, parse_agents(agents_raw), session_id or derive_session_id(spec.name, public_key),
                      host_volumes_needed(spec.mounts))


def render_session(plan: SessionPlan, namespace: str = "", region: str = "", network: t.Optional[JobNetwork] = None,
                   with_hcl: bool = True, laid: t.Optional[RenderedNetwork] = None) -> RenderedSession:
    """The placed plan rendered once (a PENDING plan: nothing to render).

    ``network``: see ``_nomad.job.render_job`` (without it, or without its key, the job is unsigned, for reading
    only). ``laid``: the session network already laid out for this plan, namespace and ``network``
    (``_nomad.job.render_network``, e.g. checked before anything was written), so that it is not laid out again."""
    if not plan.placed:
        return RenderedSession(plan, None, "", "")
    laid = laid or render_network(plan, namespace, network)
    job = render_job(plan, namespace=namespace, region=region, network=network, laid=laid)
    return RenderedSession(plan, job, render_hcl(job) if with_hcl else "", mpi_hostfile(plan), laid.summary(),
                           tuple(laid.table()))
