# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a Nomad session's lifecycle as errors name them, their timing defaults, and the
control flow the parts of :class:`_nomad.backend.NomadBackend` share."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError, ModuleFailure

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import NodeCatalogue
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network import NetworkControl

DEFAULT_POLL_INTERVAL = 2.0
#: How long a create follows its evaluation (under the admission lock) for Nomad's placement verdict.
DEFAULT_EVAL_TIMEOUT = 10.0
STEP_SECRET = "write keypair secret"
STEP_CLAIM = "claim network slot"
STEP_REGISTER = "register job"
STEP_WAIT = "wait for containers"
#: Group Meta key raised to give a broken container a new allocation (see ``_mark_repairs``).
REPAIR_META = "backendai_repair"
#: The namespace that means every namespace (Nomad's wildcard); only for reading sessions.
ALL_NAMESPACES = "*"


def refuse_all_namespaces(namespace: t.Optional[str], module: str) -> None:
    """A session is created, changed or rendered in one namespace: ``*`` is for reading only."""
    if namespace == ALL_NAMESPACES:
        raise ModuleFailure("namespace: '*' (every namespace) is only for backendai.cluster.session_info; %s needs the "
                            "session's own namespace (a name, or omit it for 'default')" % module)


class WaitFailed(BackendAIClusterError):
    """The containers did not all reach running (a container failed, or the time ran out)."""


class CheckModePending(Exception):
    def __init__(self, summary: t.Dict[str, t.Any]) -> None:
        super().__init__("pending")
        self.summary = summary


def last_event(alloc: t.Mapping[str, t.Any]) -> str:
    for state in (alloc.get("TaskStates") or {}).values():
        events = (state or {}).get("Events") or []
        if events:
            return str(events[-1].get("DisplayMessage") or events[-1].get("Type") or "")
    return ""


class BackendState:
    """What :class:`_nomad.backend.NomadBackend` holds and its parts (watch, update, removal) read."""

    nomad: NomadClient
    network: NetworkControl
    node_catalogue: t.Optional[NodeCatalogue]
    namespace: str
    region: str
    poll_interval: float
    eval_timeout: float
    _clock: t.Callable[[], float]
    _sleep: t.Callable[[float], None]
    _warn: t.Callable[[str], None]
