# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module's ``main()`` in-process with Ansible's testing helper and return its JSON result.

The module talks to the in-test API doubles through python-nomad/hvac exactly as it would under
``ansible-playbook``; only the transport of the module arguments and the result differs.
"""

from __future__ import annotations

import json
import typing as t

import pytest
from ansible.module_utils.testing import patch_module_args

NOMAD_TOKEN = "nomad-acl-token-6c0f2b1e-5d3a-4c9e"
VAULT_TOKEN = "vault-root-token"
ENV_VARS = ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION", "NOMAD_CACERT", "NOMAD_CLIENT_CERT",
            "NOMAD_CLIENT_KEY", "NOMAD_SKIP_VERIFY", "VAULT_ADDR", "VAULT_TOKEN", "VAULT_NAMESPACE", "VAULT_CACERT")


def spec(name: str = "s1", size: int = 2, **extra: t.Any) -> t.Dict[str, t.Any]:
    out: t.Dict[str, t.Any] = {"name": name, "image": "python:3.11-slim", "cluster_size": size,
                               "resources": {"cpu": 1000, "memory": 1024}}
    out.update(extra)
    return out


class ModuleRun:
    """Call ``module.main()`` with ``args``; ``capsys`` captures what ``exit_json``/``fail_json`` print."""

    def __init__(self, capsys: pytest.CaptureFixture) -> None:
        self.capsys = capsys
        self.outputs: t.List[str] = []

    def __call__(self, module: t.Any, args: t.Mapping[str, t.Any], check: bool = False,
                 diff: bool = False) -> t.Dict[str, t.Any]:
        full = dict(args)
        if check:
            full["_ansible_check_mode"] = True
        if diff:
            full["_ansible_diff"] = True
        self.capsys.readouterr()
        with patch_module_args(full):
            with pytest.raises(SystemExit):
                module.main()
        captured = self.capsys.readouterr()
        self.outputs.append(captured.out + captured.err)
        return json.loads(captured.out)


ADMISSION_LOCK = "/v1/var/backendai-cluster/admission"


def writes(double: t.Any, admission: bool = False) -> t.List[t.Tuple[str, str]]:
    """(method, path) of every recorded request that is not a GET (without the admission lock's
    acquire/release/delete unless ``admission``)."""
    return [(r.method, r.path) for r in double.requests
            if r.method != "GET" and (admission or r.path != ADMISSION_LOCK)]


def private_key_lines(private_key: str) -> t.List[str]:
    """The base64 body lines of a PEM key (what must never leak)."""
    return [line for line in private_key.strip().splitlines() if line and not line.startswith("-----")]


@pytest.fixture(autouse=True)
def clean_nomad_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NOMAD_*/VAULT_* variable of the caller's shell leaks into a module under test."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def run(capsys: pytest.CaptureFixture) -> "ModuleRun":
    return ModuleRun(capsys)
