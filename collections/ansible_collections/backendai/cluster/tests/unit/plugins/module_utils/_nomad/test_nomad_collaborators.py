# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nomad backend's collaborators alone (issue 23): each is constructed with what it needs and tested without a
NomadBackend, against small stand-ins for the one client call it makes (the HTTP flows are the double's tests)."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.removal import Remover
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import Placer
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.watch import Watcher
from ansible_collections.backendai.cluster.plugins.module_utils._session.spec import parse_spec
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import FIXED_SESSION_ID, agents_list, spec_dict


class Clock:
    """A clock that moves only when the code sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: t.List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def placer(clock: Clock) -> Placer:
    return Placer(t.cast(t.Any, None), None, "", clock.sleep, clock, 0.5)  # agents given: Nomad is never read


def test_the_placer_places_on_the_given_agents_and_prefers_those_a_session_uses() -> None:
    spec = parse_spec(spec_dict(cluster_size=2, resources={"cpu": 1000, "memory": 1024}))
    agents = agents_list(("a", 4000, 8192, 0), ("b", 4000, 8192, 0))
    existing = {"TaskGroups": [{"Meta": {"backendai_agent": "b"}}]}
    plan = placer(Clock()).place(spec, agents, FIXED_SESSION_ID, existing, 0.0, False)
    assert plan.placed and plan.agents_used == ("b",)


def test_the_placer_fails_pending_at_once_with_given_agents() -> None:
    spec = parse_spec(spec_dict(cluster_size=2, resources={"cpu": 1000, "memory": 1024}))
    small = agents_list(("a", 500, 8192, 0))
    clock = Clock()
    with pytest.raises(ModuleFailure, match="wait_for_resources has no effect with an explicit agents list"):
        placer(clock).place(spec, small, FIXED_SESSION_ID, None, 30.0, False)
    assert clock.slept == []  # given agents do not change: no retry
    with pytest.raises(ModuleFailure, match="is PENDING"):
        placer(clock).place(spec, small, FIXED_SESSION_ID, None, 0.0, True)


class _Evaluations:
    def __init__(self, answers: t.List[t.Dict[str, t.Any]]) -> None:
        self.answers = answers
        self.asked: t.List[t.Tuple[str, int]] = []

    def evaluation(self, eval_id: str, index: int = 0, wait: float = 0.0) -> t.Dict[str, t.Any]:
        self.asked.append((eval_id, index))
        return self.answers.pop(0)


class _Lock:
    kept = 0

    def keep(self) -> None:
        self.kept += 1


def test_the_watcher_follows_an_evaluation_to_its_verdict_renewing_the_lock() -> None:
    clock = Clock()
    nomad = _Evaluations([{"Status": "pending", "ModifyIndex": 12},
                          {"Status": "complete", "FailedTGAllocs": {"sub1": {"NodesExhausted": 1}}}])
    warned: t.List[str] = []
    watcher = Watcher(t.cast(t.Any, nomad), None, warned.append, clock.sleep, clock, 0.5, 10.0)
    lock = _Lock()
    assert watcher.follow_eval("e1", t.cast(t.Any, lock), index=10) == {"sub1": {"NodesExhausted": 1}}
    assert nomad.asked == [("e1", 10), ("e1", 12)] and lock.kept == 1 and not warned


def test_the_watcher_gives_no_verdict_after_its_timeout_and_says_so() -> None:
    clock = Clock()
    nomad = _Evaluations([{"Status": "pending"}] * 100)
    warned: t.List[str] = []
    assert Watcher(t.cast(t.Any, nomad), None, warned.append, clock.sleep, clock, 0.5, 2.0).follow_eval("e1", None) == {}
    assert clock.now >= 2.0 and warned and "within 2s" in warned[0]


class _Store:
    def __init__(self, name: str, ours: bool) -> None:
        self.ours = ours
        self.location = t.cast(t.Any, type("Location", (), {"describe": lambda _self: "keypair " + name})())

    def delete_if_ours(self, public_key: str) -> bool:
        return self.ours


class _Unreachable:
    def deregister_job(self, name: str, purge: bool = False) -> None:
        raise NomadError("connection refused")


def test_the_remover_goes_on_past_a_failed_step_and_reports_it() -> None:
    remover = Remover(t.cast(t.Any, _Unreachable()), NetworkControl(key_file="/nonexistent"), "", lambda location: t.cast(t.Any, None))
    done, failed = remover.teardown("s1", True, [t.cast(t.Any, _Store("a", True)), t.cast(t.Any, _Store("b", False))],
                                    public_key="ssh-ed25519 AAAA")
    assert failed == ["deregistering job s1: connection refused"]
    assert done == ["keypair a deleted"]  # the other store holds another run's key: left alone
