# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Batch admission's planning (``_nomad.batch``): what a queued create publishes, and how the holder grants."""

from __future__ import annotations

import json
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.batch import BatchPlanner, placement_request
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import RUNTIME_VOLUME
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.render import plan_session
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec


def spec(name: str, size: int = 2, cpu: int = 1000, memory: int = 1024, **extra: t.Any) -> t.Dict[str, t.Any]:
    return dict({"name": name, "image": "python:3.11-slim", "cluster_size": size,
                 "resources": {"cpu": cpu, "memory": memory}}, **extra)


def agents(count: int, cpu: int = 4000, memory: int = 8192) -> t.List[t.Dict[str, t.Any]]:
    return [{"name": "n%d" % i, "cpu": cpu, "memory": memory, "gpu": 0, "datacenter": "dc1", "drivers": ["docker"],
             "node_pool": "default", "host_volumes": {RUNTIME_VOLUME: {"read_only": True}}} for i in range(count)]


def test_the_request_holds_placement_only() -> None:
    raw = spec("secret-name", env={"TOKEN": "s3cr3t"}, image="registry.example/private:1")
    request = placement_request(parse_spec(raw))
    text = json.dumps(request)
    assert request["demands"] == [[1000, 1024, 0], [1000, 1024, 0]]
    for leak in ("secret-name", "s3cr3t", "TOKEN", "registry.example"):
        assert leak not in text


def test_grants_take_exactly_what_they_place_in_queue_order_until_one_does_not_fit() -> None:
    pool = agents(2)  # each holds two 2-container sessions
    own = plan_session(parse_spec(spec("own")), pool)
    planner = BatchPlanner(pool, own)
    granted = [planner.grant(placement_request(parse_spec(spec("w%d" % i)))) for i in range(4)]
    assert all(g is not None for g in granted[:3]) and granted[3] is None, granted
    assert [[(a["name"], a["cpu"], a["memory"]) for a in g or []] for g in granted[:3]] == \
        [[("n0", 2000, 2048)], [("n1", 2000, 2048)], [("n1", 2000, 2048)]]
    # the waiter renders on exactly its grant: placed, on the granted agent
    plan = plan_session(parse_spec(spec("w0")), granted[0])
    assert plan.placed and {c.agent for c in plan.containers} == {"n0"}


def test_a_request_it_cannot_read_is_not_granted() -> None:
    planner = BatchPlanner(agents(1), plan_session(parse_spec(spec("own", size=1)), agents(1)))
    for bad in (None, {}, {"demands": "x"}, {"demands": [[1, 2]]}, {"demands": [[1000, 1024, 0]]}):
        assert planner.grant(bad) is None
