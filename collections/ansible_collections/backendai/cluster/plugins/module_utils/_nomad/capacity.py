# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Live capacity read in proportion to what changed: the node catalogue kept on the control node.

``_nomad.nodes.live_agents`` reads the whole node list with resources (``GET /v1/nodes?resources=true``,
about 0.8 MB per 1,000 nodes) and the live allocations on every create. The allocations change with
every session; the node list does not: its totals, reservations, status, drain and eligibility move
only when a node registers or changes, and each such change moves the nodes table's index, which
every node list answers as ``X-Nomad-Index`` (``Node.List`` in ``nomad/node_endpoint.go``:
``state.Index("nodes")``; a heartbeat that changes nothing commits nothing, ``Node.UpdateStatus``).

:class:`NodeCatalogue` keeps the last node list of a cluster in a file (mode 0600, one per address
and region) with that index. A create asks Nomad for one node (``?per_page=1``: its answer carries
the index) and reads the whole list again only when the index moved; the live allocations are read
every time, as before. Several creates on one control node (Ansible forks, a CI sweep) share it.

Off unless a cache directory is given (``BACKENDAI_NODE_CACHE_DIR``, read by the modules): the file
holds node names, addresses and resources (no secret), written atomically; a file that cannot be read
is read again from Nomad.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import (
    PLUGIN_FILTER,
    UNDERLAY_META_FILTER,
    live_agents,
)

#: Environment variable naming the directory of the node catalogue files (unset: no catalogue).
NODE_CACHE_ENV = "BACKENDAI_NODE_CACHE_DIR"


class NodeCatalogue:
    """The node list with resources of each cluster, in ``directory``, valid while Nomad's nodes index stays."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(os.path.expanduser(directory))
        #: the list :meth:`nodes` gave last (this process), for reads that need no fresh check (node addresses)
        self.last: t.Optional[t.List[t.Dict[str, t.Any]]] = None
        #: file -> (Nomad's nodes index, the file's (mtime_ns, size), its list) as this process read or wrote it
        #: last: creates in one process (threads, a long-lived caller) parse the 0.8 MB file once per index
        self._parsed: t.Dict[str, t.Tuple[int, t.Tuple[int, int], t.List[t.Dict[str, t.Any]]]] = {}
        #: the nodes index :attr:`last` was read at, and the full nodes (``GET /v1/node/:id``) read at that index
        self._last_index = 0
        self._details: t.Dict[t.Tuple[str, int, str], t.Optional[t.Dict[str, t.Any]]] = {}
        #: (file, nodes index) -> the IDs of the nodes that carry underlay meta (:meth:`node` reads only those)
        self._with_meta: t.Dict[t.Tuple[str, int], t.FrozenSet[str]] = {}

    def known(self, client: NomadClient) -> t.List[t.Dict[str, t.Any]]:
        """The list read last by this process, else :meth:`nodes` (for node addresses: no index check needed)."""
        return self.last if self.last is not None else self.nodes(client)

    def _file(self, client: NomadClient) -> str:
        conn = client.connection
        key = hashlib.sha256(("%s\n%s" % (conn.base_url, conn.region or "")).encode("utf-8")).hexdigest()[:32]
        return os.path.join(self.directory, "nodes-%s.json" % key)

    def nodes(self, client: NomadClient) -> t.List[t.Dict[str, t.Any]]:
        """The node stubs with resources: from the file if Nomad's nodes index is the one it was read at."""
        path = self._file(client)
        index = client.nodes_index()
        try:
            stamp = _stamp(path)
            parsed = self._parsed.get(path)
            if index and parsed is not None and parsed[:2] == (index, stamp):
                self.last, self._last_index = parsed[2], index
                return self.last
            with open(path, encoding="utf-8") as f:
                kept = json.load(f)
            if index and kept.get("index") == index and isinstance(kept.get("nodes"), list):
                self.last, self._last_index = t.cast(t.List[t.Dict[str, t.Any]], kept["nodes"]), index
                self._parsed[path] = (index, stamp, self.last)
                return self.last
        except (OSError, ValueError, AttributeError):
            pass
        stubs, index = client.list_nodes_at(resources=True, filter_expr=PLUGIN_FILTER)
        self._write(path, {"index": index, "nodes": stubs})
        try:
            self._parsed[path] = (index, _stamp(path), stubs)
        except OSError:
            pass
        self.last, self._last_index = stubs, index
        return stubs

    def node(self, client: NomadClient, node_id: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/node/:id`` (a node's meta: the session network's underlay address), kept in this process for the
        nodes index :attr:`last` was read at: a change of a node's meta is a node update, which moves that index.

        A node without the session network's meta (``backendai.underlay_ip``/``_mtu``: most nodes; one filtered
        listing per nodes index, :data:`UNDERLAY_META_FILTER`, names those that have it) is not read: it is answered
        as ``{"ID": node_id, "Meta": {}}`` (its address is the list stub's)."""
        key = (self._file(client), self._last_index, node_id)
        if self._last_index and node_id not in self._meta_nodes(client):
            return {"ID": node_id, "Meta": {}}
        if not self._last_index or key not in self._details:
            detail = client.node(node_id)
            if not self._last_index:
                return detail
            self._details[key] = detail
        return self._details[key]

    def _meta_nodes(self, client: NomadClient) -> t.FrozenSet[str]:
        """IDs of the nodes with underlay meta at the nodes index :attr:`last` was read at (one listing per index)."""
        key = (self._file(client), self._last_index)
        if key not in self._with_meta:
            stubs, _index = client.list_nodes_at(filter_expr=UNDERLAY_META_FILTER)
            self._with_meta[key] = frozenset(str(s.get("ID")) for s in stubs)
        return self._with_meta[key]

    def _write(self, path: str, content: t.Mapping[str, t.Any]) -> None:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".nodes-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(json.dumps(content))  # (json.dump streams through the pure-Python encoder: 10x slower)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # no catalogue this time: the next create reads the list again


def _stamp(path: str) -> t.Tuple[int, int]:
    """The file's (mtime_ns, size): another writer (a create in another process) changes it."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def catalogue_from_env() -> t.Optional[NodeCatalogue]:
    directory = os.environ.get(NODE_CACHE_ENV)
    return NodeCatalogue(directory) if directory else None


def live_capacity(client: NomadClient, catalogue: t.Optional[NodeCatalogue], exclude_job: t.Optional[str] = None,
                  namespace: str = "default") -> t.List[t.Dict[str, t.Any]]:
    """``live_agents``, its node list from ``catalogue`` when there is one."""
    return live_agents(client, exclude_job=exclude_job, namespace=namespace,
                       nodes=catalogue.nodes(client) if catalogue is not None else None)
