# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nomad_nodes
short_description: Nomad client nodes as hosts, with their free capacity
version_added: 0.1.0
description:
  - Adds every Nomad client node as a host named by the node name, with host variables for its free CPU, memory and
    devices, datacenter, node pool, class, drivers, CNI networks, host volumes, status, eligibility and address.
  - Free capacity is what the node has minus its reservation minus its live allocations, exactly as the
    M(backendai.cluster.session) module computes it for placement.
  - Each host gets C(backendai_agent), the agent mapping placement takes, so the
    O(backendai.cluster.session#module:agents) list the module would read itself can be built from C(hostvars)
    (see the examples).
  - The group named by O(agents_group) (default C(agents)) holds the nodes new allocations can go to - ready,
    eligible, not draining, in the C(default) node pool.
  - The configuration file name must end in C(nomad_nodes.yml) or C(nomad_nodes.yaml).
author:
  - backendai.cluster contributors (@backendai-cluster)
extends_documentation_fragment:
  - backendai.cluster.nomad_connection.plugins
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
requirements:
  - python-nomad
options:
  plugin:
    description: The name of this plugin; it must be C(backendai.cluster.nomad_nodes).
    type: str
    required: true
    choices: [backendai.cluster.nomad_nodes]
  agents_group:
    description:
      - Group of the nodes new allocations can go to (ready, eligible, not draining, C(default) node pool).
      - An empty string adds no such group.
    type: str
    default: agents
  datacenters:
    description: Only nodes of these datacenters (default - every datacenter).
    type: list
    elements: str
    default: []
  node_pools:
    description: Only nodes of these node pools (default - every pool).
    type: list
    elements: str
    default: []
  node_details:
    description:
      - Read each node's full record (one request per node) for C(nomad_cni_plugins), C(nomad_host_networks) and
        C(nomad_meta), which the node list does not carry.
      - With V(false) the inventory costs a constant number of requests whatever the cluster size (the node list with
        resources, and every live allocation in pages); those three variables are then empty.
      - Capacity (C(nomad_free), C(backendai_agent)) is read in bulk either way.
    type: bool
    default: true
"""

EXAMPLES = r"""
# inventories/nomad/nomad_nodes.yml
plugin: backendai.cluster.nomad_nodes
nomad_addr: https://nomad.example.com:4646   # or NOMAD_ADDR
ca_cert: /etc/nomad.d/ca.pem                 # or NOMAD_CACERT; the token comes from NOMAD_TOKEN
keyed_groups:
  - key: nomad_datacenter
    prefix: dc
  - key: nomad_node_pool
    prefix: pool
groups:
  gpu_agents: nomad_free.gpu > 0
compose:
  ansible_host: nomad_address
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/backendai-cluster-inventory
cache_timeout: 60

# In a playbook, the session module's agents from this inventory:
#   agents: "{{ groups['agents'] | map('extract', hostvars, 'backendai_agent') | list }}"
"""

import hashlib
import os
import typing as t

from ansible.errors import AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import (
    SCHEDULABLE_POOLS,
    agent_from_summary,
    allocations_by_node,
    free_gpus,
    is_schedulable,
    summarize_node,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import HAS_PYTHON_NOMAD, NomadClient
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.connection import NomadConnection, NomadError

CONNECTION_OPTIONS = ("nomad_addr", "token", "namespace", "region", "ca_cert", "client_cert", "client_key",
                      "validate_certs", "timeout")


def host_vars(summary: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The host variables of one node summary (prefixed ``nomad_``, plus ``backendai_agent``)."""
    free = dict(summary.get("free") or {})
    free["gpu"] = free_gpus(summary)
    return {
        "nomad_node_id": summary.get("id"),
        "nomad_node_name": summary.get("name"),
        "nomad_address": summary.get("address"),
        "nomad_datacenter": summary.get("datacenter"),
        "nomad_node_pool": summary.get("node_pool"),
        "nomad_node_class": summary.get("node_class"),
        "nomad_status": summary.get("status"),
        "nomad_eligible": summary.get("eligible"),
        "nomad_drain": summary.get("drain"),
        "nomad_schedulable": is_schedulable(summary),
        "nomad_drivers": summary.get("drivers"),
        "nomad_cni_plugins": summary.get("cni_plugins"),
        "nomad_cni_networks": summary.get("cni_networks"),
        "nomad_bridge": summary.get("bridge"),
        "nomad_host_networks": summary.get("host_networks"),
        "nomad_host_volumes": summary.get("host_volumes"),
        "nomad_meta": summary.get("meta"),
        "nomad_free": free,
        "nomad_total": summary.get("total"),
        "nomad_reserved": summary.get("reserved"),
        "nomad_allocated": summary.get("allocated"),
        "nomad_allocations": summary.get("allocations"),
        "backendai_agent": agent_from_summary(summary),
    }


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "backendai.cluster.nomad_nodes"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith(("nomad_nodes.yml", "nomad_nodes.yaml"))

    def _connection(self) -> NomadConnection:
        params = {name: self.get_option(name) for name in CONNECTION_OPTIONS}
        value, origin = self.get_option_and_origin("validate_certs")
        if origin == "default" and os.environ.get("NOMAD_SKIP_VERIFY"):
            value = not boolean(os.environ["NOMAD_SKIP_VERIFY"], strict=False)
        params["validate_certs"] = value
        try:
            return NomadConnection.from_params(params)
        except ValueError as exc:
            raise AnsibleError("backendai.cluster.nomad_nodes: invalid connection options: %s" % exc) from None

    def _fetch(self) -> t.List[t.Dict[str, t.Any]]:
        """Node summaries (plain data, cacheable)."""
        if not HAS_PYTHON_NOMAD:
            raise AnsibleError("backendai.cluster.nomad_nodes needs the python-nomad Python library (pip install python-nomad)")
        datacenters = set(self.get_option("datacenters") or [])
        pools = set(self.get_option("node_pools") or [])
        summaries = []
        error: t.Optional[NomadError] = None
        try:
            with NomadClient(self._connection()) as client:
                # every node's live allocations in a few paged requests (not one request per node)
                by_node = allocations_by_node(client)
                details = self.get_option("node_details")
                for stub in client.list_nodes(resources=not details):
                    if datacenters and stub.get("Datacenter") not in datacenters:
                        continue
                    if pools and stub.get("NodePool", "default") not in pools:
                        continue
                    # the full node: attributes (CNI plugins, address), meta, host networks
                    node = client.node(stub["ID"]) if details else stub
                    if node is None:  # gone since the listing
                        continue
                    summaries.append(summarize_node(node, by_node.get(node["ID"], [])))
        except NomadError as exc:
            error = exc
        if error is not None:
            raise AnsibleError("backendai.cluster.nomad_nodes: %s" % error)
        return sorted(summaries, key=lambda s: s.get("name") or "")

    def _populate(self, summaries: t.List[t.Dict[str, t.Any]]) -> None:
        strict = self.get_option("strict")
        agents_group = self.get_option("agents_group")
        if agents_group:
            self.inventory.add_group(agents_group)
        for summary in summaries:
            name = summary.get("name")
            if not name:
                continue
            host = self.inventory.add_host(name)
            hostvars = host_vars(summary)
            for key, value in hostvars.items():
                self.inventory.set_variable(host, key, value)
            if agents_group and is_schedulable(summary) and summary.get("node_pool") in SCHEDULABLE_POOLS:
                self.inventory.add_child(agents_group, host)
            self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host, strict=strict)

    def parse(self, inventory: t.Any, loader: t.Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        # one cache entry per cluster (and token): the same file may point at another cluster through NOMAD_ADDR
        where = "\n".join(str(self.get_option(name) or "") for name in ("nomad_addr", "namespace", "region", "token"))
        cache_key = "%s_%s" % (self.get_cache_key(path), hashlib.sha256(where.encode("utf-8")).hexdigest()[:12])
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        summaries = None
        if use_cache:
            try:
                summaries = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if summaries is None:
            summaries = self._fetch()
        if update_cache:
            self._cache[cache_key] = summaries
        self._populate(summaries)
