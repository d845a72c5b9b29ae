# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The session network's options; paired one-to-one with ``_ansible.args.session_network_argument_spec``."""

    DOCUMENTATION = r"""
options:
  network_key_file:
    description:
      - The cluster network key on this control node - the file the role C(backendai.cluster.overlay_agent)
        creates here once (mode 0600); it never leaves the control node, each agent holds only a key derived from it
        for the agent's Nomad node name (HKDF-SHA256). Every group of a Nomad session carries its network parameters
        with an HMAC made with the key of the agent the group is pinned to, over the job's namespace, job ID and group
        name, which that agent's CNI plugin checks, against the allocation as the local Nomad agent reports it, before
        it lets an allocation join the session's network.
      - The key itself never appears in a result, diff, job, variable or log; only this path is shown.
      - If not set, the value of the E(BACKENDAI_NETWORK_KEY_FILE) environment variable is used.
    type: path
    default: ~/.config/backendai-cluster/network.key
  network_claims_namespace:
    description:
      - The Nomad namespace holding the cluster-wide claims of session network slots (one VNI and one subnet each),
        the variables C(backendai-cluster/network/slots/<n>), and of the sessions' agent tables,
        C(backendai-cluster/network/agents/<n>/...). Every control node of a cluster must use the same one; the token
        needs variable read, write and list rights there (the agents' CNI plugin, read on the agent tables).
      - If not set, the value of the E(BACKENDAI_NETWORK_CLAIMS_NAMESPACE) environment variable is used.
    type: str
    default: default
"""
