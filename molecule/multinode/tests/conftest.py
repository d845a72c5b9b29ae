# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the verify step: the local agents prepare made and the two sessions converge made
(``molecule/scenario_helpers.py`` has what the scenarios share: variables, hostnames, sessions).
Expected values are computed here from the specs, the agents and the seed rules, never by the collection.
"""

from __future__ import annotations

import os
import sys
import typing as t

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from scenario_helpers import (  # noqa: E402,F401  (fixtures and helpers of the tests)
    PY,
    Session,
    hostnames,
    parametrize_hostname,
    session,
    spec,
    svars,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_hostname(metafunc)


def expected_agents(spec: t.Mapping[str, t.Any], agents: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[str]:
    """The seed rule for a multi-node session that fits on no single agent, concentrated: fill the agents
    that take the most containers first (ties by name), in global order (all agents here are equal)."""
    need = spec["resources"]
    out: t.List[str] = []
    for agent in sorted(agents, key=lambda a: a["name"]):
        fits = min(agent["cpu"] // need["cpu"], agent["memory"] // need["memory"])
        out += [agent["name"]] * fits
    return out[:int(spec["cluster_size"])]


@pytest.fixture(scope="module")
def agents(svars: t.Mapping[str, t.Any]) -> t.List[t.Dict[str, t.Any]]:
    with open(svars["agents_file"], encoding="utf-8") as f:
        import yaml  # (molecule's own dependency)
        return yaml.safe_load(f)["agents"]


@pytest.fixture(scope="module")
def other(svars: t.Mapping[str, t.Any]) -> t.Iterator[Session]:
    s = Session(svars["session_state_dir"], svars["other_session"]["name"])
    yield s
    s.close()
