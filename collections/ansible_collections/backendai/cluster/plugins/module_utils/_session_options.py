# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``session`` module's own options and its local-backend step, shared by the module and its action plugin.

``plugins/modules/session.py`` builds its ``ClusterModule`` from :data:`OPTIONS`, :data:`SHARED` and
:data:`REQUIRED_IF`; ``plugins/action/session.py`` validates a task's arguments against the same spec and,
when the session runs on the controller itself (local backend, ``connection: local``), calls
:func:`run_local` in Ansible's worker process instead of shipping the module. Both therefore take the
same options and run the same code; only where it runs differs.

Deliberately light: it loads the local backend but no HTTP client and no ``AnsibleModule``.
"""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils import _backend_local
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError

#: The module's own options (the shared option groups in :data:`SHARED` are merged in by ``_module_base``).
OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    backend=dict(type="str", choices=["nomad", "local"]),
    spec=dict(type="dict", aliases=["session"]),
    name=dict(type="str"),
    agents=dict(type="list", elements="dict"),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=300),
    wait_for_resources=dict(type="int", default=0),
    keep_logs=dict(type="bool", default=False),
)
#: The shared option groups (``_module_base``: nomad, vault, local, network).
SHARED = ("nomad", "vault", "local", "network")
REQUIRED_IF = [("state", "present", ["spec"]), ("state", "absent", ["name", "spec"], True)]


def uses_local_backend(params: t.Mapping[str, t.Any]) -> bool:
    """The backend of validated ``params``: ``backend``, else local unless a Nomad address is given."""
    return (params.get("backend") or ("nomad" if params.get("nomad_addr") else "local")) == "local"


def session_name(params: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """The session's name from ``name`` or ``spec.name`` (which must agree when both are given)."""
    spec = params["spec"] or {}
    name = spec.get("name") if isinstance(spec, dict) else None
    if params["name"] and name and params["name"] != name:
        raise BackendAIClusterError("name %r and spec.name %r differ" % (params["name"], name))
    return params["name"] or name


def run_local(params: t.Mapping[str, t.Any], check_mode: bool) -> t.Dict[str, t.Any]:
    """What the module does for the local backend, given its validated ``params``."""
    if params["state"] == "present":
        return _backend_local.local_present(params["spec"], params["state_dir"], check_mode=check_mode,
                                            wait=params["wait"], timeout=float(params["wait_timeout"]),
                                            agents=params["agents"])
    name = session_name(params)
    if not name:
        raise BackendAIClusterError("state=absent needs the session name (name, or spec with a name)")
    return _backend_local.local_absent(name, params["state_dir"], check_mode=check_mode, keep_logs=params["keep_logs"])
