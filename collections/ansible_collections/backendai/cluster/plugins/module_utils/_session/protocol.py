# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The interface both backends implement (``_nomad.nomad_backend.NomadBackend``, ``_local.local_backend.LocalBackend``).

The ``session`` and ``session_info`` modules get one of them from ``_ansible.backends`` (the one
place a backend is chosen) and call only these four methods:

* ``present(spec_raw, agents, check_mode, diff, wait, wait_timeout, wait_for_resources) -> dict``
  with ``changed``, ``created``, ``session`` (the session view), ``plan`` (``_session.summaries.plan_summary``)
  and, when something changes, ``diff``;
* ``absent(name, spec_raw, check_mode, diff, keep_logs) -> dict`` with ``changed`` and ``session``;
* ``stop(name, spec_raw, check_mode, diff) -> dict`` with ``changed`` and ``session`` (its state ``STOPPED``:
  the containers are gone, the keys, session ID and names are kept; ``present`` starts it again);
* ``info(name, log_lines) -> list`` of session views.

A session view is ``{name, backend, session_id, state, mode, network_mode, containers: [{hostname,
role, idx, agent, address, status, exit_code, restarts, log_tail}], main1: {address, ssh_port,
ssh_command}, progress}`` (``_session.summaries.wait_progress``) plus details of the backend; nothing
secret is ever in it. An option one backend has no use for is accepted and ignored (``keep_logs``
and ``diff`` on Nomad's purge, ``wait_for_resources`` on the local machine).
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure


class SessionBackend(t.Protocol):
    """What ``session`` and ``session_info`` call (see the module docstring)."""

    def present(self, spec_raw: t.Any, agents: t.Optional[t.List[t.Dict[str, t.Any]]] = None, check_mode: bool = False,
                diff: bool = False, wait: bool = True, wait_timeout: float = 300.0,
                wait_for_resources: float = 0.0) -> t.Dict[str, t.Any]:
        raise NotImplementedError

    def absent(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
               diff: bool = False, keep_logs: bool = False) -> t.Dict[str, t.Any]:
        raise NotImplementedError

    def stop(self, name: t.Optional[str] = None, spec_raw: t.Any = None, check_mode: bool = False,
             diff: bool = False) -> t.Dict[str, t.Any]:
        raise NotImplementedError

    def info(self, name: t.Optional[str] = None, log_lines: int = 0) -> t.List[t.Dict[str, t.Any]]:
        raise NotImplementedError


def absent_name(name: t.Optional[str], spec_raw: t.Any) -> str:
    """The session ``state=absent`` removes: ``name``, or the spec's name; both given must agree."""
    spec_name = spec_raw.get("name") if isinstance(spec_raw, dict) else None
    if name and spec_name and name != spec_name:
        raise ModuleFailure("name %r and spec.name %r differ" % (name, spec_name))
    if not (name or spec_name):
        raise ModuleFailure("state=absent needs the session name (name, or spec with a name)")
    return str(name or spec_name)
