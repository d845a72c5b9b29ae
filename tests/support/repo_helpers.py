# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths and helpers shared by the repository-level tests (playbooks, examples, backends)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

#: tests/support: this folder, the helpers every test imports (pytest.ini puts it on the import path)
SUPPORT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(SUPPORT))
EXAMPLES = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster", "examples")
#: the repository's copy of the Nomad job API schema and its linter (tests/support/nomad_api_schema/README.md)
NOMAD_API_SCHEMA_DIR = os.path.join(SUPPORT, "nomad_api_schema")
NOMAD_JOB_LINT = os.path.join(NOMAD_API_SCHEMA_DIR, "tools", "nomad-job-lint")
VENV_BIN = os.path.dirname(sys.executable)


def run_playbook(playbook: str, *extra: str, env: t.Optional[t.Dict[str, str]] = None,
                 check: bool = False, prefix: t.Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run ``ansible-playbook backendai.cluster.<playbook>`` from the repository top, as a user would, with JSON
    results on stdout (the collection's playbook, found through ansible.cfg's collections path); ``prefix`` runs it
    through a command (``nsenter --net=... --``)."""
    if os.path.isabs(playbook):  # a test's own playbook file
        target = playbook
    else:
        target = "backendai.cluster." + (playbook[:-len(".yml")] if playbook.endswith(".yml") else playbook)
    cmd = list(prefix) + [os.path.join(VENV_BIN, "ansible-playbook"), target] + list(extra)
    if check:
        cmd.append("--check")
    full_env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="results_json", ANSIBLE_NOCOLOR="1",
                    ANSIBLE_CALLBACK_PLUGINS=os.path.join(SUPPORT, "callback_plugins"),
                    PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)


def play_stats(proc: subprocess.CompletedProcess) -> t.Dict[str, t.Any]:
    """The per-host stats (ok/changed/failures) of a json-callback run."""
    return json.loads(proc.stdout)["stats"]["localhost"]


def task_results(proc: subprocess.CompletedProcess) -> t.Dict[str, t.Dict[str, t.Any]]:
    """Task name → localhost result of a json-callback run."""
    out = {}
    for play in json.loads(proc.stdout)["plays"]:
        for task in play["tasks"]:
            out[task["task"]["name"]] = task["hosts"].get("localhost", {})
    return out


def lint_job_files(*paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, NOMAD_JOB_LINT] + list(paths), capture_output=True, text=True)


def read_var_spec(path: str) -> t.Dict[str, t.Any]:
    """A Nomad variable specification file as ``nomad var put @FILE`` reads it (command/var_put.go: HCL or JSON by
    the extension): ``{path, namespace, items}``, heredoc items unwrapped."""
    import re

    import hcl2

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        body = json.loads(text)
        return {"path": body["Path"], "namespace": body.get("Namespace", ""), "items": body["Items"]}
    parsed = hcl2.loads(text)
    items = {}
    for key, value in parsed["items"][0].items():
        if key.startswith("__"):  # python-hcl2's block marker
            continue
        heredoc = re.fullmatch(r'"<<([A-Za-z0-9_]+)\n(.*\n)\1"', value, re.S)
        items[key] = heredoc.group(2) if heredoc else value.strip('"')
    return {"path": parsed["path"].strip('"'), "namespace": parsed.get("namespace", '""').strip('"'), "items": items}


def group_key(job: t.Mapping[str, t.Any], group: str, cluster_key: bytes) -> bytes:
    """The MAC key the plugin of the agent ``group`` is pinned to (its ``${node.unique.name}`` constraint) checks
    with: ``_session_network.signing_key(cluster_key, agent)``."""
    from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import signing_key

    for g in job["TaskGroups"]:
        if g["Name"] == group:
            agents = [c["RTarget"] for c in g.get("Constraints") or [] if c.get("LTarget") == "${node.unique.name}"]
            assert len(agents) == 1, g.get("Constraints")
            return signing_key(cluster_key, agents[0])
    raise KeyError(group)


def with_table(double: t.Any, adm: t.Any) -> t.Any:
    """A version 4 admission with the agents of its table as the double stores it (what the plugin reads with
    ``GET /v1/var/...``, checked by ``_session_network.resolve_table``); other versions as they are."""
    from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import resolve_table

    if adm.table is None:
        return adm
    store = double.model.variables
    return resolve_table(adm, [(store.get((adm.table.namespace, path)) or {}).get("Items") for path in adm.table.paths])


def admitted_groups(job: t.Mapping[str, t.Any], key: bytes, namespace: str = "default",
                    region: str = "global", double: t.Any = None) -> t.List[t.Any]:
    """Every group of ``job`` admitted by the CNI plugin's own check (``_session_network.admit``) on the agent it is
    pinned to (``key``: the cluster key), with CNI_ARGS built as Nomad's client builds them for an allocation of that
    group in ``namespace``; raises AdmissionError if not. With ``double``, version 4 admissions get their agent
    table from it (:func:`with_table`)."""
    from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import client_args
    from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import admit, nomad_cni_args, parse_cni_args

    out = []
    for group in job["TaskGroups"]:
        args = nomad_cni_args(client_args(job, group["Name"]), region, namespace, job["ID"], group["Name"], "alloc-1")
        adm = admit(group_key(job, group["Name"], key), parse_cni_args(args))
        out.append(with_table(double, adm) if double is not None else adm)
    return out
