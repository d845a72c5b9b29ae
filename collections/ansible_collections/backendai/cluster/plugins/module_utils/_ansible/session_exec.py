# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``session_exec`` module does: its options, and one run (the module itself is its documentation).

The request is checked (``_session.session_exec.parse_request``), the session's containers read from the chosen
backend (``_ansible.backends``), the selection made; in check mode nothing runs and the selection is returned.
Otherwise the backend runs the command (``_local.session_exec``: ``runc exec``, else ``podman exec``; ``_nomad.session_exec``: ssh to
main1, then the session network) and ``_session.session_exec.summarise`` decides, by ``fail_on``, whether the task
fails. Each backend is imported only when chosen.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._ansible.backends import backend_name, session_backend
from ansible_collections.backendai.cluster.plugins.module_utils._ansible.module import LOCAL, NETWORK, NOMAD, VAULT, ClusterModule
from ansible_collections.backendai.cluster.plugins.module_utils._session import session_exec as plan

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "name": {"type": "str", "required": True},
    "command": {"type": "str"},
    "argv": {"type": "list", "elements": "str"},
    "hostnames": {"type": "list", "elements": "str", "default": []},
    "roles": {"type": "list", "elements": "str", "default": [], "choices": list(plan.ROLES)},
    "user": {"type": "str", "default": "session", "choices": list(plan.USERS)},
    "fail_on": {"type": "str", "default": "any", "choices": list(plan.FAIL_ON)},
    "command_timeout": {"type": "float", "default": 0},
    "backend": {"type": "str", "choices": ["nomad", "local"]},
}


def run(module: ClusterModule) -> t.Dict[str, t.Any]:
    p = module.params
    request = plan.parse_request(p)
    backend = backend_name(module)
    if backend == LOCAL:
        from ansible_collections.backendai.cluster.plugins.module_utils._local.session_exec import LocalExec

        runner: t.Any = LocalExec(p["state_dir"])
        containers = runner.containers(request.name)
    else:
        from ansible_collections.backendai.cluster.plugins.module_utils._nomad.session_exec import NomadExec
        from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import refuse_all_namespaces

        refuse_all_namespaces(p["namespace"], "backendai.cluster.session_exec")
        runner = NomadExec(module.nomad(), module.vault, module.hide,
                           lambda name: session_backend(module).info(name=name))
        containers = runner.containers(request)
    targets, idle = plan.select(containers, request)
    if module.check_mode:
        return {"changed": bool(targets), "session": request.name, "backend": backend, "failed_hostnames": [],
                "containers": [plan.outcome(c, request, None, "", "", 0.0, plan.SKIPPED, "check mode: not run")
                               for c in targets] + idle, "time": 0.0}
    start = time.monotonic()
    results = {r["hostname"]: r for r in (runner.run(request, targets) if targets else []) + idle}
    ordered = [results[c["hostname"]] for c in containers if c["hostname"] in results]
    return plan.summarise(request, ordered, time.monotonic() - start, backend)


def run_module() -> None:
    """The module's ``main()``."""
    ClusterModule(argument_spec=ARGUMENT_SPEC, shared=(NOMAD, VAULT, LOCAL, NETWORK),
                  mutually_exclusive=[("command", "argv")], required_one_of=[("command", "argv")]).run(run)
