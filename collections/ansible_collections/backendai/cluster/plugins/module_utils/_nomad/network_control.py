# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The control side of the session network for the ``nomad`` backend: the cluster key, the slot
claims and the agents' underlay addresses, put together into a signed job.

The nomad backend places a session, then (before it writes anything) reads the key and the
agents' addresses here (:meth:`NetworkControl.job_network`), claims a slot, and renders the job once,
signed for that slot (``_nomad.render.render_session``). The key is read from ``network_key_file`` and registered with
``hide`` at once, so it is masked should it ever reach a result or a log.
"""

from __future__ import annotations

import dataclasses

import os
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_NETWORK_KEY_FILE
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import JobNetwork, underlay_network
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import DEFAULT_CLAIMS_NAMESPACE, NetworkClaims
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import underlay_addresses
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import NetworkError, read_key
from ansible_collections.backendai.cluster.plugins.module_utils._session.plan import SessionPlan


class NetworkControl:
    """The key file and the claims namespace of one cluster (the modules' ``network_*`` options)."""

    def __init__(self, key_file: t.Optional[str] = None, claims_namespace: t.Optional[str] = None,
                 hide: t.Callable[..., None] = lambda *secrets: None) -> None:
        self.key_file = os.path.expanduser(key_file or DEFAULT_NETWORK_KEY_FILE)  # the default starts with ~
        self.claims_namespace = claims_namespace or DEFAULT_CLAIMS_NAMESPACE
        self._hide = hide
        self._key: t.Optional[bytes] = None

    def __repr__(self) -> str:
        return "NetworkControl(key_file=%r, claims_namespace=%r)" % (self.key_file, self.claims_namespace)

    def key(self) -> bytes:
        if self._key is None:
            try:
                key = read_key(self.key_file)
            except NetworkError as err:
                raise BackendAIClusterError("%s. The overlay_agent role creates the cluster network key on the control "
                                            "node at %s and copies it to every agent; set network_key_file (or "
                                            "BACKENDAI_NETWORK_KEY_FILE) if it is elsewhere" % (err, os.path.expanduser(DEFAULT_NETWORK_KEY_FILE))) from None
            self._hide(key.hex())
            self._key = key
        return self._key

    def claims(self, nomad: NomadClient) -> NetworkClaims:
        return NetworkClaims(nomad.in_namespace(self.claims_namespace))

    def job_network(self, nomad: NomadClient, plan: SessionPlan, agents: t.Optional[t.Sequence[t.Mapping[str, t.Any]]],
                    nodes: t.Optional[t.Sequence[t.Mapping[str, t.Any]]] = None,
                    node: t.Optional[t.Callable[[str], t.Optional[t.Dict[str, t.Any]]]] = None) -> JobNetwork:
        """The key and the plan's agents' underlay addresses (read now), for the session's preferred slot (the
        caller puts the claimed one in).

        ``nodes``: the node list (``GET /v1/nodes``) read earlier, outside the admission lock (issue 24: the lock is
        held only for what needs it); it is read again if an agent of the plan is not in it (a node that joined).
        ``node``: reads one full node (its meta), in place of ``GET /v1/node/:id`` (``_nomad.capacity.NodeCatalogue``)."""
        key = self.key()
        used = plan.agents_used
        if nodes is not None and not set(used) <= {n.get("Name") for n in nodes}:
            nodes = None  # a node that joined since: read the list again
        try:
            found = underlay_addresses(nomad, used, agents, nodes=nodes, node=node)
        except ValueError as err:
            raise BackendAIClusterError(str(err)) from None
        return dataclasses.replace(underlay_network(found, key), table_namespace=self.claims_namespace)
