# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``local`` backend: a real cluster session on this one machine (see ``_local_runtime``).

Interface shared with the Nomad backend (``_backend_nomad``); the ``session`` and ``session_info``
modules only dispatch to these functions:

* ``local_present(spec_raw, state_root, check_mode=False, wait=True, timeout=60.0) -> dict``
  with ``changed``, ``session`` (the session view, see below), ``plan`` (``plan_summary``) and,
  when the spec changed, ``diff`` ({before, after} of the secret-free spec).
* ``local_absent(name, state_root, check_mode=False, keep_logs=False) -> dict`` with ``changed``.
* ``local_info(state_root, name=None, log_lines=0) -> list`` of session views.

A session view: ``{name, backend: "local", session_id, state, mode, network_mode, containers:
[{hostname, role, idx, agent, address, status, exit_code, restarts, log_tail}], main1: {address,
ssh_port, ssh_command}}`` with ``state`` one of PENDING, SCHEDULED, RUNNING, DEGRADED, TERMINATED,
ERROR. Nothing secret is ever in it.
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError

DEFAULT_STATE_ROOT = "~/.local/state/backendai-cluster/sessions"


def _not_yet() -> t.NoReturn:
    raise BackendAIClusterError("backend local is not available yet (it comes with the local runtime)")


def local_present(spec_raw: t.Mapping[str, t.Any], state_root: str, check_mode: bool = False, wait: bool = True,
                  timeout: float = 60.0) -> t.Dict[str, t.Any]:
    _not_yet()


def local_absent(name: str, state_root: str, check_mode: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
    _not_yet()


def local_info(state_root: str, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
    _not_yet()
