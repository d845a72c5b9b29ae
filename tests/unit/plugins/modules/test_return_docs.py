# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RETURN documents exactly what the modules return: real results of both backends (the nomad backend
against the Nomad API double, the local backend with a real session on this machine) are compared
with each module's RETURN, key by key and type by type, in both directions."""

from __future__ import annotations

import os
import shutil
import typing as t
import uuid

import pytest
import yaml

import local_session_dict  # the example image (scripts/setup builds it)

from ansible_collections.backendai.cluster.plugins.modules import session as session_module
from ansible_collections.backendai.cluster.plugins.modules import session_info, session_render
from module_helpers import NOMAD_TOKEN, ModuleRun, spec
from module_helpers import clean_nomad_env, run  # noqa: F401 - pytest fixtures
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from test_session_info_nomad import conn, nomad  # noqa: F401 - a one-node double and its connection options

#: Keys Ansible itself adds to every result (not the module's to document).
COMMON = {"changed", "failed", "msg", "invocation", "diff", "warnings", "deprecations", "exception"}
TYPES = {"str": str, "int": int, "bool": bool, "dict": dict, "list": list, "float": float}


#: (module, key) -> (module, key) whose RETURN documents its shape. RETURN can come neither from a doc fragment
#: (ansible-core merges fragments into DOCUMENTATION only) nor from an import (ansible-doc reads it with ``ast``, as a
#: literal), so a shape two modules return is documented in one of them and the other names it with RV().
SHARED = {(session_info, "sessions"): (session_module, "session"), (session_module, "plan"): (session_render, "plan")}


def own_returns(module: t.Any) -> t.Dict[str, t.Any]:
    return yaml.safe_load(module.RETURN)


def returns(module: t.Any) -> t.Dict[str, t.Any]:
    """The module's RETURN, each shared shape read from the module that documents it."""
    doc = own_returns(module)
    for (user, key), (owner, owner_key) in SHARED.items():
        if user is module:
            doc[key]["contains"] = own_returns(owner)[owner_key]["contains"]
    return doc


def compare(value: t.Any, doc: t.Mapping[str, t.Any], path: str, seen: t.Set[str]) -> t.List[str]:
    """Differences between one returned mapping and its documentation; ``seen`` collects documented paths met."""
    out = []
    for key, item in value.items():
        where = "%s.%s" % (path, key) if path else key
        if not path and key in COMMON:
            continue
        if key not in doc:
            out.append("%s: returned but not documented" % where)
            continue
        seen.add(where)
        entry = doc[key]
        if item is None:
            continue
        want = TYPES[entry["type"]]
        if not isinstance(item, want) or (want is int and isinstance(item, bool)):
            out.append("%s: documented %s, returned %s" % (where, entry["type"], type(item).__name__))
            continue
        contains = entry.get("contains")
        if contains and isinstance(item, dict):
            out.extend(compare(item, contains, where, seen))
        elif contains and isinstance(item, list):
            for element in item:
                if isinstance(element, dict):
                    out.extend(compare(element, contains, where, seen))
    return out


def documented_paths(doc: t.Mapping[str, t.Any], path: str = "") -> t.Iterator[t.Tuple[str, t.Mapping[str, t.Any]]]:
    for key, entry in doc.items():
        where = "%s.%s" % (path, key) if path else key
        yield where, entry
        yield from documented_paths(entry.get("contains") or {}, where)


class Results:
    """Every result of one module, checked against its RETURN, then the documented keys never met."""

    def __init__(self, module: t.Any) -> None:
        self.doc = returns(module)
        self.seen: t.Set[str] = set()
        self.problems: t.List[str] = []

    def add(self, result: t.Dict[str, t.Any], label: str) -> t.Dict[str, t.Any]:
        assert not result.get("failed"), result.get("msg")
        self.problems.extend("%s: %s" % (label, p) for p in compare(result, self.doc, "", self.seen))
        return result

    def never_returned(self, other_backend: str = "", allowed: t.Iterable[str] = ()) -> t.List[str]:
        """Documented keys no result had, except failure-only ones and those documented as the other backend's."""
        skip = set(allowed)
        out = []
        for path, entry in documented_paths(self.doc):
            returned = str(entry.get("returned", ""))
            if path in self.seen or path in skip or "fail" in returned:
                continue
            if other_backend and "%s backend" % other_backend in returned:
                continue
            out.append(path)
        return sorted(out)


def test_compare_reports_undocumented_keys_and_wrong_types() -> None:
    doc = {"session": {"type": "dict", "contains": {"name": {"type": "str"}, "containers": {
        "type": "list", "elements": "dict", "contains": {"hostname": {"type": "str"}}}}}}
    got = compare({"session": {"name": 1, "extra": True, "containers": [{"hostname": "main1", "idx": 1}]},
                   "changed": True}, doc, "", set())
    assert got == ["session.name: documented str, returned int", "session.extra: returned but not documented",
                   "session.containers.idx: returned but not documented"]


# --- nomad backend (against the Nomad API double) ---------------------------------------------------

def test_nomad_backend_results_match_return(nomad: NomadAPIDouble, run: ModuleRun, tmp_path: t.Any) -> None:
    sessions, infos, renders = Results(session_module), Results(session_info), Results(session_render)
    s = spec(size=2, ports=[{"label": "jupyter", "port": 8888}])
    sessions.add(run(session_module, conn(nomad, spec=dict(s, name="other")), check=True, diff=True), "check new")
    sessions.add(run(session_module, conn(nomad, spec=s)), "create")
    sessions.add(run(session_module, conn(nomad, spec=s), diff=True), "unchanged")
    sessions.add(run(session_module, conn(nomad, spec=dict(s, env={"A": "1"})), diff=True), "update")
    infos.add(run(session_info, conn(nomad, name="s1", log_lines=2), check=True), "one")
    infos.add(run(session_info, conn(nomad, namespace="*"), check=True), "all namespaces")
    renders.add(run(session_render, conn(nomad, spec=s, output_dir=str(tmp_path), write_secret=True)), "render")
    renders.add(run(session_render, {"spec": s, "agents": [{"name": "a", "cpu": 8000, "memory": 8192}]}), "unsigned")
    renders.add(run(session_render, {"spec": s, "agents": [{"name": "a", "cpu": 100, "memory": 100}],
                                     "fail_on_pending": False}), "pending")
    sessions.add(run(session_module, conn(nomad, name="s1", state="absent"), diff=True), "absent")
    problems = sessions.problems + infos.problems + renders.problems
    assert not problems, "\n" + "\n".join(sorted(set(p.split(": ", 1)[1] for p in problems)))
    assert sessions.never_returned("local", allowed=["session.containers.log_tail"]) == []
    assert infos.never_returned("local", allowed=["sessions.secret"]) == []
    assert renders.never_returned() == []


# --- local backend (a real session on this machine) ---------------------------------------------------

def _local_reason() -> t.Optional[str]:
    if os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge") or not shutil.which("podman"):
        return "the local backend needs root, the CNI plugins and podman (scripts/setup)"
    return None


@pytest.mark.machine
@pytest.mark.skipif(_local_reason() is not None, reason=str(_local_reason()))
def test_local_backend_results_match_return(run: ModuleRun, tmp_path: t.Any) -> None:
    sessions, infos = Results(session_module), Results(session_info)
    state = str(tmp_path / "state")
    name = "ret-" + uuid.uuid4().hex[:8]
    s = {"name": name, "image": local_session_dict.DEFAULT_IMAGE, "cluster_size": 2, "resources": {"cpu": 1000, "memory": 64},
         "command": ["sh", "-c", "echo hi"]}
    base = {"backend": "local", "state_dir": state}
    try:
        sessions.add(run(session_module, dict(base, spec=s), check=True), "check new")
        sessions.add(run(session_module, dict(base, spec=s)), "create")
        sessions.add(run(session_module, dict(base, spec=s)), "unchanged")
        infos.add(run(session_info, dict(base, name=name, log_lines=2), check=True), "one")
    finally:
        sessions.add(run(session_module, dict(base, name=name, state="absent")), "absent")
    problems = sessions.problems + infos.problems
    assert not problems, "\n" + "\n".join(sorted(set(p.split(": ", 1)[1] for p in problems)))
    # (a session with a failure policy returns these: tests/local_runtime/test_failure_policy.py checks them)
    assert sessions.never_returned("nomad", allowed=FAILURE_POLICY_KEYS) == []
    assert infos.never_returned("nomad", allowed=FAILURE_POLICY_KEYS) == []


#: What the local backend returns only for a session with a failure policy.
FAILURE_POLICY_KEYS = ["session.failure", "session.failure.policy", "session.failure.state", "session.failure.restarts",
                       "session.failure.first_failure", "session.containers.last_failure"]


@pytest.mark.parametrize("user, key", sorted(SHARED, key=lambda k: (k[0].__name__, k[1])))
def test_a_shared_shape_is_documented_once_and_named_where_it_is(user: t.Any, key: str) -> None:
    """The session view (session, session_info) and the plan (session_render, session) are documented key by key
    in one module; the other has no copy to drift and points to it (the results above are checked against it)."""
    owner, owner_key = SHARED[(user, key)]
    entry = own_returns(user)[key]
    assert "contains" not in entry, "%s documents %s again: name %s's instead" % (user.__name__, key, owner.__name__)
    link = "RV(backendai.cluster.%s#module:%s)" % (owner.__name__.rsplit(".", 1)[-1], owner_key)
    assert link in " ".join(entry["description"]), "%s.%s must name %s" % (user.__name__, key, link)
    assert own_returns(owner)[owner_key]["contains"]
