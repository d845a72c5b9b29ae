# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Builders shared by the module_utils unit tests (and the repository's tests): specs, agents and plans with fixed
IDs, and what a rendered job gives Nomad's client."""

from __future__ import annotations

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import network_args
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import RenderedSession, plan_session, render_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.placement import parse_agents
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan, build_plan
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "fixtures")
#: A fixed public key, so that session and kernel IDs are the same in every run.
FIXED_PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj1bBt8ZQk0M0oQ2Sx1z8x9m3mJ1vJQ0r5V1c1Vq2Xk test"
FIXED_SESSION_ID = "3614fdf3-0e04-5c2b-9f7e-000000000001"


def spec_dict(**overrides: t.Any) -> t.Dict[str, t.Any]:
    raw: t.Dict[str, t.Any] = {"name": "train-42", "image": "python:3.11-slim", "command": ["python", "train.py"]}
    raw.update(overrides)
    return raw


def agents_list(*specs: t.Tuple[str, int, int, int]) -> t.List[t.Dict[str, t.Any]]:
    return [{"name": n, "cpu": c, "memory": m, "gpu": g} for n, c, m, g in specs]


def make_plan(agents: t.Optional[t.List[t.Dict[str, t.Any]]] = None, **overrides: t.Any) -> SessionPlan:
    if agents is None:
        agents = agents_list(("agent-1", 64000, 262144, 0))
    return build_plan(parse_spec(spec_dict(**overrides)), parse_agents(agents), FIXED_SESSION_ID)


def render_raw(spec_raw: t.Any, agents_raw: t.Any, public_key: str = "", **options: t.Any) -> RenderedSession:
    """A spec and agents as a user writes them, parsed, placed and rendered (``options``: ``render_session``'s)."""
    return render_session(plan_session(parse_spec(spec_raw), agents_raw, public_key=public_key), **options)


def client_args(job: t.Mapping[str, t.Any], group: str) -> t.Dict[str, str]:
    """A group's CNI args as Nomad's client passes them on to the plugins: as the job has them."""
    for name, args in network_args(job):
        if name == group:
            return dict(args)
    raise KeyError("job %r has no group %r" % (job.get("ID"), group))
