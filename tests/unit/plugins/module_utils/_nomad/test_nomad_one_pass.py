# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One pass from spec to job on the Nomad path (issue 23), against the Nomad API double (not Nomad): a create
parses the spec once, lays out the session network once and renders the job once, signed for the slot it claimed;
an unchanged re-run and a check-mode create render once too."""

from __future__ import annotations

import collections
import json
import os
import sys
import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import NETWORK_ENV
from ansible_collections.backendai.cluster.plugins.module_utils._nomad import job as nomad_job
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadConnection
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nomad_backend import NomadBackend
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim, claim_path
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import preferred_slot
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._session import spec as session_spec
from module_helpers import NOMAD_TOKEN, spec
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble

PREFIX = "ansible_collections.backendai.cluster.plugins.module_utils."
#: The steps counted, wherever the collection's modules imported them.
COUNTED = {"parse_spec": session_spec.parse_spec, "render_network": nomad_job.render_network,
           "render_job": nomad_job.render_job}
OTHER_SESSION = "3614fdf3-0e04-5c2b-9f7e-000000000002"


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> t.Counter[str]:
    """How often each step of :data:`COUNTED` ran: every module of the collection that holds it calls a counter."""
    counted: t.Counter[str] = collections.Counter()

    def counting(name: str, fn: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
        def wrapper(*args: t.Any, **kwargs: t.Any) -> t.Any:
            counted[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for module_name, module in list(sys.modules.items()):
        if module_name.startswith(PREFIX):
            for name, fn in COUNTED.items():
                if getattr(module, name, None) is fn:
                    monkeypatch.setattr(module, name, counting(name, fn))
    return counted


def backend(double: NomadAPIDouble) -> NomadBackend:
    client = NomadClient(NomadConnection(nomad_addr=double.url, token=NOMAD_TOKEN))
    network = NetworkControl(key_file=os.environ[NETWORK_ENV["network_key_file"]])  # the tests' key (conftest)
    return NomadBackend(client, lambda: None, lambda *a: None, lambda msg: None, poll_interval=0.2, network=network)


def double_with_nodes(factory: t.Any) -> NomadAPIDouble:
    double = factory(token=NOMAD_TOKEN)
    double.add_node("n1", cpu=4000, memory=8192)
    double.add_node("n2", cpu=4000, memory=8192)
    return double


def test_a_create_parses_lays_out_and_renders_once(nomad_double_factory: t.Any, calls: t.Counter[str]) -> None:
    double = double_with_nodes(nomad_double_factory)
    result = backend(double).present(spec("one", size=3, cluster_mode="multi-node"), wait=False)
    assert result["changed"] and result["network"]["signed"]
    assert dict(calls) == {"parse_spec": 1, "render_network": 1, "render_job": 1}
    # the one render is the registered job, signed for the slot it claimed
    registered = double.stored_job("one")
    assert registered is not None
    assert json.dumps(registered["TaskGroups"][0]["Networks"][0]["CNI"]["Args"], sort_keys=True) == \
        json.dumps(result["job"]["Job"]["TaskGroups"][0]["Networks"][0]["CNI"]["Args"], sort_keys=True)


def test_a_create_whose_preferred_block_is_taken_lays_the_network_out_again(nomad_double_factory: t.Any,
                                                                            calls: t.Counter[str]) -> None:
    double = double_with_nodes(nomad_double_factory)
    b = backend(double)
    claims = b.network.claims(b.nomad)
    slot = preferred_slot("default", "two", claims.count)
    # another session holds the slot "two" prefers: its claim lands elsewhere
    claims.nomad.put_variable(claim_path(slot), Claim(slot, "default", "other", OTHER_SESSION).items(), cas=0)
    calls.clear()
    result = b.present(spec("two"), wait=False)
    assert result["network"]["slot"] != slot
    assert dict(calls) == {"parse_spec": 1, "render_network": 2, "render_job": 1}


def test_an_unchanged_rerun_and_a_check_mode_create_render_once(nomad_double_factory: t.Any,
                                                                calls: t.Counter[str]) -> None:
    double = double_with_nodes(nomad_double_factory)
    b = backend(double)
    b.present(spec("three"), wait=False)
    calls.clear()
    again = b.present(spec("three"), wait=False)
    assert not again["changed"]
    assert dict(calls) == {"parse_spec": 1, "render_network": 1, "render_job": 1}
    calls.clear()
    checked = b.present(spec("four"), check_mode=True)
    assert checked["changed"] and not checked["network"]["signed"]
    assert dict(calls) == {"parse_spec": 1, "render_network": 1, "render_job": 1}
