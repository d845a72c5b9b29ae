# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""session_exec's pure part: the request checked field by field, the selection, one result, the task's failure."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import InputError, ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as se

CONTAINERS = [{"hostname": "main1", "role": "main", "status": "running"},
              {"hostname": "sub1", "role": "sub", "status": "running"},
              {"hostname": "sub2", "role": "sub", "status": "failed"},
              {"hostname": "sub3", "role": "sub", "status": "running"}]


def request(**params: t.Any) -> se.ExecRequest:
    return se.parse_request(dict({"name": "s1", "command": "hostname"}, **params))


def problems(**params: t.Any) -> t.List[str]:
    with pytest.raises(InputError) as err:
        se.parse_request(dict({"name": "s1"}, **params))
    return err.value.details()["problems"]


def test_request_defaults_and_shell_text() -> None:
    r = request()
    assert r == se.ExecRequest("s1", ("sh", "-c", "hostname"))
    assert r.shell_text == "hostname" and not r.as_root and r.fail_on == "any" and r.timeout == 0.0
    argv = request(command=None, argv=["printf", "%s|", "a b", "$HOME"], user="root", command_timeout=3)
    assert argv.argv == ("printf", "%s|", "a b", "$HOME") and argv.as_root and argv.timeout == 3.0
    assert argv.shell_text == "printf '%s|' 'a b' '$HOME'"


@pytest.mark.parametrize("params, field", [
    ({}, "command: give exactly one of command"),
    ({"command": "x", "argv": ["x"]}, "command: give exactly one of command"),
    ({"command": "  "}, "command: must be a non-empty string"),
    ({"argv": []}, "argv: must be a non-empty list"),
    ({"argv": ["", "x"]}, "argv: must be a non-empty list"),
    ({"command": "x", "roles": ["main", "worker"]}, "roles[1]: must be one of main, sub"),
    ({"command": "x", "hostnames": "main1"}, "hostnames: must be a list"),
    ({"command": "x", "user": "admin"}, "user: must be one of session, root"),
    ({"command": "x", "fail_on": "some"}, "fail_on: must be one of any, all, none"),
    ({"command": "x", "command_timeout": -1}, "command_timeout: must be a number of seconds"),
    ({"command": "x", "command_timeout": True}, "command_timeout: must be a number of seconds"),
    ({"command": "x", "name": ""}, "name: is required"),
])
def test_each_bad_field_is_named(params: t.Dict[str, t.Any], field: str) -> None:
    assert any(p.startswith(field) for p in problems(**params)), problems(**params)


def test_every_problem_at_once() -> None:
    got = problems(command="x", roles=["x"], user="x", fail_on="x")
    assert [p.split(":")[0] for p in got] == ["roles[0]", "user", "fail_on"]


def test_selection_by_role_or_hostname_in_session_order() -> None:
    def hosts(**params: t.Any) -> t.Tuple[t.List[str], t.List[str]]:
        run, idle = se.select(CONTAINERS, request(**params))
        return [c["hostname"] for c in run], [r["hostname"] for r in idle]

    assert hosts() == (["main1", "sub1", "sub3"], ["sub2"])
    assert hosts(roles=["main"]) == (["main1"], [])
    assert hosts(hostnames=["sub3", "sub1"]) == (["sub1", "sub3"], [])
    assert hosts(hostnames=["sub3"], roles=["main"]) == (["main1", "sub3"], [])
    _run, (idle,) = se.select(CONTAINERS, request(hostnames=["sub2"]))
    assert (idle["result"], idle["exit_code"]) == ("not_running", None) and "failed" in idle["reason"]


def test_selection_errors_name_what_the_session_has() -> None:
    with pytest.raises(InputError) as err:
        se.select(CONTAINERS, request(hostnames=["sub1", "sub9"]))
    assert err.value.details()["problems"] == [
        'hostnames[1]: is not a container of session s1 (its containers: main1, sub1, sub2, sub3) (got "sub9")']
    with pytest.raises(InputError, match="selects no container"):
        se.select([c for c in CONTAINERS if c["role"] == "main"], request(roles=["sub"]))


def test_outcome_by_exit_code() -> None:
    r = request(user="root")
    assert se.outcome(CONTAINERS[1], r, 0, "a", "", 0.1234)["result"] == "ok"
    failed = se.outcome(CONTAINERS[1], r, 2, "", "e", 1.0)
    assert (failed["result"], failed["reason"], failed["user"], failed["time"]) == ("failed", "the command exited 2", "root", 1.0)


@pytest.mark.parametrize("fail_on, codes, fails", [
    ("any", [0, 0], False), ("any", [0, 1], True), ("all", [0, 1], False), ("all", [1, 1], True),
    ("none", [1, 1], False),
])
def test_fail_on(fail_on: str, codes: t.List[int], fails: bool) -> None:
    r = request(fail_on=fail_on)
    results = [se.outcome(c, r, code, "", "", 0.0) for c, code in zip(CONTAINERS, codes)]
    if fails:
        with pytest.raises(ModuleFailure) as err:
            se.summarise(r, results, 1.0, "local")
        assert err.value.details()["failed_hostnames"] == [c["hostname"] for c, code in zip(CONTAINERS, codes) if code]
        assert "fail_on=%s" % fail_on in str(err.value)
    else:
        out = se.summarise(r, results, 1.0, "local")
        assert out["changed"] is True and out["failed_hostnames"] == [c["hostname"] for c, code in zip(CONTAINERS, codes) if code]


def test_nothing_ran_is_not_a_change() -> None:
    r = request(fail_on="none")
    _run, idle = se.select(CONTAINERS, request(hostnames=["sub2"]))
    assert se.summarise(r, idle, 0.0, "nomad")["changed"] is False
