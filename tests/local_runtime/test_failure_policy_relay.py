# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The supervisors' broadcast tree in real containers (``_session.gang.RELAY_SCRIPT``, FANOUT 4): in a gang of six,
what main1 tells reaches sub5 only through sub1 (rank 5 is rank 1's child), and, once sub1's container is gone, from
main1 in sub1's stead. Under ``restart_one`` a rank's restart is told to the others by a ``note`` alone (a probe's
answer does not carry it), so each container's ``last_failure`` shows whether the note reached it."""

from __future__ import annotations

import typing as t

import images
from test_failure_policy import gang, session, until  # noqa: F401 - gang: the fixture

from ansible_collections.backendai.cluster.plugins.module_utils._session.gang import FANOUT

HOSTS = ["main1"] + ["sub%d" % i for i in range(1, 6)]


def six(name: str, failure: t.Dict[str, t.Any], **kw: t.Any) -> t.Dict[str, t.Any]:
    """A gang of six (500 MHz each: six of the other tests' 1,000 MHz do not fit this 2-core machine)."""
    return dict(session(name, failure, size=len(HOSTS), **kw), resources={"cpu": 500, "memory": 64})


def lasts(g: t.Any) -> t.Dict[str, t.Any]:
    """host -> (host, time) of its last failure, as its status file says."""
    return {c["hostname"]: (c.get("last_failure") or {}).get("host") for c in g.view()["containers"]}


def test_a_note_reaches_the_grandchildren_through_a_relay_and_around_a_gone_one(gang: t.Any) -> None:
    assert FANOUT == 4  # (the ranks below)
    g = gang(six("fp-relay", {"policy": "restart_one", "rejoin_timeout": 120}))
    until(lambda: [g.starts(h) for h in HOSTS], lambda s: all(s), 30)
    g.kill_command("main1")
    got = until(lambda: lasts(g), lambda v: set(v.values()) == {"main1"}, 15)
    assert set(got.values()) == {"main1"}, got
    # sub1 goes; its watchers (sub5 and main1) note it, then main1's second restart is told around it
    images.podman("rm", "--force", "--time", "0", g.engine("sub1"))
    got = until(lambda: lasts(g), lambda v: v["sub5"] == "sub1" and v["main1"] == "sub1", 15)
    assert (got["sub5"], got["main1"]) == ("sub1", "sub1"), got
    until(lambda: g.starts("main1"), lambda s: len(s) == 2, 10)
    g.kill_command("main1")
    got = until(lambda: lasts(g), lambda v: all(v[h] == "main1" for h in HOSTS if h != "sub1"), 15)
    assert {h: got[h] for h in HOSTS if h != "sub1"} == {h: "main1" for h in HOSTS if h != "sub1"}, got


def test_ranks_that_complete_are_told_through_the_tree_and_the_session_ends_terminated(gang: t.Any) -> None:
    """Every command exits 0, one after another (rank order, a second apart): each completion (``done``) goes through the
    tree, so no container takes a completed one for gone (main1 is gone 5 s before the last one ends: its watchers would
    have missed two probes of it four times over); the session ends TERMINATED, not ERROR."""
    script = 'echo "start $BACKENDAI_CLUSTER_HOST 0"; sleep $((1 + ${BACKENDAI_CLUSTER_IDX:-0})); exit 0'
    g = gang(six("fp-done", {"policy": "restart_all"}, script=script))
    view = g.until("TERMINATED", 40)
    assert view["state"] == "TERMINATED", (view["reason"], view["containers"])
    assert {c["status"] for c in view["containers"]} == {"complete"}, view["containers"]
    assert view["failure"]["state"] == "running" and view["failure"]["first_failure"] is None, view["failure"]
