# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the verify step: the session converge made, its containers as testinfra hosts
(``molecule/scenario_helpers.py`` has what the scenarios share: variables, hostnames, sessions).
"""

from __future__ import annotations

import os
import re
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


@pytest.fixture(scope="module")
def envs(session: Session) -> t.Dict[str, t.Dict[str, str]]:
    """Every container's environment in an ssh shell (what `ssh main1` then `env` shows)."""
    return session.on_each(lambda h: session.container(h).environment())


def expected_env(spec: t.Mapping[str, t.Any], hostname: str) -> t.Dict[str, str]:
    """The seed tables' meaning of every variable for ``hostname``, from the spec alone.

    KERNEL_ID, SESSION_ID and TF_CONFIG are checked on their own (IDs are generated; TF_CONFIG is JSON).
    """
    hosts = hostnames(spec)
    size = len(hosts)
    rank = hosts.index(hostname)  # main1 first, then the subs by index
    role, idx = re.fullmatch(r"([a-z]+)([0-9]+)", hostname).groups()  # type: ignore[union-attr]
    roles = [re.sub(r"[0-9]+$", "", h) for h in hosts]
    replicas = ",".join("%s:%d" % (r, roles.count(r)) for r in dict.fromkeys(roles))
    env = {
        "BACKENDAI_CLUSTER_HOST": hostname,              # this container's hostname
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),      # every hostname, comma-separated
        "BACKENDAI_CLUSTER_IDX": str(int(idx)),          # one-based index within the role
        "BACKENDAI_CLUSTER_MODE": "single-node",         # all containers on this one machine
        "BACKENDAI_CLUSTER_ROLE": role,                  # main or sub
        "BACKENDAI_CLUSTER_SIZE": str(size),             # number of containers
        "BACKENDAI_CLUSTER_REPLICAS": replicas,          # role:count pairs
        "BACKENDAI_CLUSTER_LOCAL_RANK": str(rank),       # zero-based global index
        "WORLD_SIZE": str(size),
        "WORLD_RANK": str(rank),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),                         # index among the session's containers on this agent: all are here
        "MASTER_ADDR": "main1",                          # hostname of the main container
        "MASTER_PORT": str(spec["master_port"]),
    }
    env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    return env
