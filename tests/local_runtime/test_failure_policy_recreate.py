# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local engine container removed under a gang that waits for it (``restart_all``, ``restart_one``) is brought back
by ``state: present`` alone (``_local.recreate``): the other containers keep running (same engine containers), the
removed one is started again with its first arguments (same name, address, keys), and the gang takes it back in
(docs/failure-policy.md). Nothing of the session runs outside it, so nothing brings it back before ``present``."""

from __future__ import annotations

import typing as t

import pytest

import images
from test_failure_policy import RANK, gang, session, until  # noqa: F401 - gang: the fixture

from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import inspect_containers

HOSTS = ("main1", "sub1", "sub2")


def container_ids(g: t.Any) -> t.Dict[str, str]:
    """host -> podman's ID of its engine container ('' when gone)."""
    names = {g.engine(h): h for h in HOSTS}
    got = inspect_containers(list(names), images.engine_conf(), "{{.Id}}")
    return {h: (got.get(n) or [""])[0] for n, h in names.items()}


@pytest.mark.parametrize("policy", ["restart_all", "restart_one"])
def test_present_starts_a_removed_container_again_and_the_gang_takes_it_back(gang: t.Any, policy: str) -> None:
    g = gang(session("fp-back-" + policy.replace("_", ""), {"policy": policy, "rejoin_timeout": 60}))
    until(lambda: [g.starts(h) for h in HOSTS], lambda s: all(s), 20)
    before = container_ids(g)
    images.podman("rm", "--force", "--time", "0", g.engine("sub2"))
    if policy == "restart_all":  # the others stop their commands and wait for sub2
        assert g.until("RESTARTING", 15)["state"] == "RESTARTING"
    else:  # the others run on, sub2 is gone
        view = until(g.view, lambda v: {c["hostname"]: c["status"] for c in v["containers"]}["sub2"] == "failed", 15)
        assert view["state"] == "DEGRADED", view
    result = g.backend.present(g.spec)
    assert result["changed"] is True and result["created"] is False, result
    after = container_ids(g)
    assert after["sub2"] and after["sub2"] != before["sub2"], (before, after)
    assert {h: after[h] for h in ("main1", "sub1")} == {h: before[h] for h in ("main1", "sub1")}, (before, after)
    view = g.until("RUNNING", 30)
    assert view["state"] == "RUNNING", view
    if policy == "restart_all":  # every rank started again together, at the gang's generation 1
        starts = until(lambda: [g.starts(h) for h in ("main1", "sub1")], lambda s: all(len(x) == 2 for x in s), 15)
        assert starts == [["start %s 0" % h, "start %s 1" % h] for h in ("main1", "sub1")], starts
        assert view["failure"]["restarts"] == 1, view
        assert "start sub2 1" in g.starts("sub2"), g.starts("sub2")
    else:  # only sub2 started again; the others' commands never stopped
        assert [g.starts(h) for h in ("main1", "sub1")] == [["start main1 0"], ["start sub1 0"]]
    # present again: nothing to do
    assert g.backend.present(g.spec)["changed"] is False
