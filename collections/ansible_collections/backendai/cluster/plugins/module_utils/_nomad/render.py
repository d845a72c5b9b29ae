# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One call from raw input to everything a backend needs: spec → plan → job JSON/HCL, hostfile.

This is the seam the modules, the benchmarks and the backends share, so that each of them is a
thin layer. Pure: it reads its arguments and returns data.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from ansible_collections.backendai.cluster.plugins.module_utils._session.env import mpi_hostfile
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import JobNetwork
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
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import derive_session_id


@dataclass(frozen=True)
class RenderedSession:
    plan: SessionPlan
    job: t.Optional[t.Dict[str, t.Any]]  # None while PENDING
    hcl: str
    hostfile: str
    network: t.Optional[t.Dict[str, t.Any]] = None  # the session network's summary (secret-free); None while PENDING

    @property
    def job_json(self) -> str:
        """The register request body (``PUT /v1/jobs``) as deterministic, pretty JSON."""
        return dumps(register_request(self.job)) if self.job is not None else ""


def plan_session(spec_raw: t.Any, agents_raw: t.Any, public_key: str = "", session_id: str = "") -> SessionPlan:
    """Validate the spec and agents and place the session.

    The session ID is ``session_id`` if given, else derived from the name and ``public_key``
    (a fresh key makes a fresh ID; no key gives a stable ID, which keeps render-only output
    reproducible). The spec's mounts are host volumes: only agents that declare them (or whose volumes
    are unknown, ``host_volumes`` not given) are considered.
    """
    spec = parse_spec(spec_raw)
    agents = parse_agents(agents_raw)
    return build_plan(spec, agents, session_id or derive_session_id(spec.name, public_key),
                      host_volumes_needed(spec.mounts))


def render_session(spec_raw: t.Any, agents_raw: t.Any, public_key: str = "", session_id: str = "",
                   namespace: str = "", region: str = "", with_hcl: bool = True,
                   network: t.Optional[JobNetwork] = None) -> RenderedSession:
    """``network``: see ``_nomad.job.render_job`` (without it the job is unsigned, for reading only)."""
    plan = plan_session(spec_raw, agents_raw, public_key, session_id)
    if not plan.placed:
        return RenderedSession(plan, None, "", "")
    job = render_job(plan, namespace=namespace, region=region, network=network)
    return RenderedSession(plan, job, render_hcl(job) if with_hcl else "", mpi_hostfile(plan),
                           render_network(plan, namespace, network).summary())
