# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``backendai.cluster.agent_network_key``: an agent's own key, derived on the control node.

``{{ cluster_key_hex | backendai.cluster.agent_network_key(agent_name) }}`` is the hex text of
``_session_network.derive_agent_key(cluster_key, agent_name)`` (HKDF-SHA256, RFC 5869): what the
``overlay_agent`` role installs on an agent instead of the cluster key. Filters run on the
controller, so the cluster key never leaves it. The value is a secret: use it only in ``no_log`` tasks.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    NetworkError,
    derive_agent_key,
    parse_key,
)

DOCUMENTATION = r"""
name: agent_network_key
short_description: An agent's own session network key, derived from the cluster key
description:
  - HKDF-SHA256 (RFC 5869) of the cluster network key with the agent's name (its Nomad node name), as hex text.
  - The agent's CNI plugin checks the session network parameters of the groups pinned to it with this key; it never
    holds the cluster key, and a key derived for one agent admits nothing on another.
positional: agent_name
options:
  _input:
    description: The cluster network key, as hex text (the content of the control node's key file).
    type: str
    required: true
  agent_name:
    description: The agent's Nomad node name (what the session jobs' C(${node.unique.name}) constraint names).
    type: str
    required: true
"""

RETURN = r"""
_value:
  description: The agent's key, 64 hex digits.
  type: str
"""


def agent_network_key(cluster_key_hex: t.Any, agent_name: t.Any) -> str:
    try:
        return derive_agent_key(parse_key(str(cluster_key_hex), "the cluster network key"), str(agent_name or "")).hex()
    except NetworkError as err:
        raise AnsibleFilterError(str(err)) from None


class FilterModule:
    def filters(self) -> t.Dict[str, t.Any]:
        return {"agent_network_key": agent_network_key}
