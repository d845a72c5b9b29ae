# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``state: stopped`` and the start after it on the nomad backend, against the Nomad API double
(docs/session-lifecycle.md): the job is stopped without purge (``DELETE /v1/job/:id?purge=false``, what
``nomad job stop`` sends), the keypair stays in Nomad Variables, the network slot claim is released; ``present``
registers the job again (``Stop`` false) with the same session ID, claims the slot again and places it on live
capacity. The double models a stopped job's allocations as stopped (``complete``); it runs no task."""

from __future__ import annotations

import typing as t

import requests

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import claim_path, slot_of_job
from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from module_helpers import ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_info_nomad import conn, info, nomad  # noqa: F401 - a one-node double and its helpers


def session(run: ModuleRun, double: NomadAPIDouble, **extra: t.Any) -> t.Dict[str, t.Any]:
    result = run(session_module, conn(double, **extra))
    assert not result.get("failed"), result.get("msg")
    return result


def test_stop_then_start_keeps_the_identity_and_gives_the_capacity_back(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    s = spec(size=3, resources={"cpu": 2500, "memory": 4096})
    created = session(run, nomad, spec=s)["session"]
    key = nomad.stored_variable("nomad/jobs/s1")["Items"]["ssh_public_key"]
    slot, _slots = slot_of_job(nomad.stored_job("s1"))
    assert nomad.stored_variable(claim_path(slot)) is not None

    nomad.clear_requests()
    stopped = session(run, nomad, name="s1", state="stopped")
    assert stopped["changed"] is True and stopped["session"]["state"] == "STOPPED", stopped["session"]
    (delete,) = nomad.find("DELETE", "^/v1/job/s1$")
    assert delete.q("purge") in ("false", "False"), "a stop must not purge the job (its versions and Meta stay)"
    assert nomad.stored_job("s1")["Stop"] is True
    assert nomad.stored_variable("nomad/jobs/s1")["Items"]["ssh_public_key"] == key, "the keypair stays"
    assert nomad.stored_variable(claim_path(slot)) is None, "the network slot is released while stopped"
    assert all(a["DesiredStatus"] == "stop" for a in nomad.allocations_of("s1"))
    (view,) = info(run, nomad, name="s1")
    assert view["state"] == "STOPPED" and view["session_id"] == created["session_id"]

    # the capacity is back: a session that needs most of the node fits while s1 is stopped
    other = session(run, nomad, spec=spec(name="s2", size=2, resources={"cpu": 3000, "memory": 4096}))
    assert other["session"]["state"] == "RUNNING"
    session(run, nomad, name="s2", state="absent")

    again = session(run, nomad, name="s1", state="stopped")
    assert again["changed"] is False and again["session"]["state"] == "STOPPED"

    started = session(run, nomad, spec=s)
    assert started["changed"] is True and started["created"] is False
    view = started["session"]
    assert view["state"] == "RUNNING" and view["session_id"] == created["session_id"], view
    assert [c["hostname"] for c in view["containers"]] == ["main1", "sub1", "sub2"]
    assert [c["agent"] for c in view["containers"]] == [c["agent"] for c in created["containers"]]
    job = nomad.stored_job("s1")
    assert job["Stop"] is False and job["Meta"]["BACKENDAI_SESSION_ID"] == created["session_id"]
    assert nomad.stored_variable("nomad/jobs/s1")["Items"]["ssh_public_key"] == key
    assert slot_of_job(job)[0] == slot and nomad.stored_variable(claim_path(slot))["Items"]["job"] == "s1", \
        "the start claims the slot again (the same one: it was free)"
    assert session(run, nomad, spec=s)["changed"] is False, "a started session is unchanged by the same spec"


def test_a_stopped_session_is_removed_whole(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    session(run, nomad, spec=spec(size=2))
    session(run, nomad, name="s1", state="stopped")
    removed = session(run, nomad, name="s1", state="absent")
    assert removed["changed"] is True and nomad.stored_job("s1") is None
    assert nomad.stored_variable("nomad/jobs/s1") is None


def test_stopping_a_missing_session_fails_and_writes_nothing(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    result = run(session_module, conn(nomad, name="nope", state="stopped"))
    assert result.get("failed") and "session nope does not exist" in result["msg"], result
    assert nomad.find("DELETE", ".") == [] and nomad.find("PUT", ".") == []


def test_check_mode_stops_nothing(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    session(run, nomad, spec=spec(size=2))
    result = run(session_module, conn(nomad, name="s1", state="stopped"), check=True)
    assert result["changed"] is True and nomad.stored_job("s1")["Stop"] is False


def test_a_start_claims_another_slot_when_its_old_one_was_taken(nomad: NomadAPIDouble, run: ModuleRun) -> None:
    s = spec(size=2)
    session(run, nomad, spec=s)
    slot, _slots = slot_of_job(nomad.stored_job("s1"))
    session(run, nomad, name="s1", state="stopped")
    # another session claimed the slot meanwhile (as its claim writes it: cas=0)
    items = {"namespace": "default", "job": "other", "session_id": "x", "first": str(slot), "slots": "1"}
    requests.put(nomad.url + "/v1/var/" + claim_path(slot) + "?cas=0", json={"Path": claim_path(slot), "Items": items},
                 headers={"X-Nomad-Token": conn(nomad)["token"]}, timeout=10).raise_for_status()
    started = session(run, nomad, spec=s)
    new_slot, _ = slot_of_job(nomad.stored_job("s1"))
    assert started["session"]["state"] == "RUNNING" and new_slot != slot
    assert nomad.stored_variable(claim_path(new_slot))["Items"]["job"] == "s1"
    assert nomad.stored_variable(claim_path(slot))["Items"]["job"] == "other", "the other session's claim is untouched"
