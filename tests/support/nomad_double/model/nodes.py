# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Client nodes: what tests configure (:meth:`NodesModel.add_node`, in the shape of Nomad's ``api.Node``,
``api/nodes.go``), status changes, and the node list/read views of ``command/agent/node_endpoint.go``
(``Node.Stub`` fields with the ``resources`` and ``os`` query options of ``nomad/structs/node.go``).

A node going ``down`` makes its live allocations ``lost`` with the description ``nomad/node_endpoint.go``
uses ("alloc is lost since its node is down").

Fingerprinted attributes follow the client's fingerprinters: ``nomad.version`` (client/fingerprint/nomad.go;
the stub's ``Version``) and ``plugins.cni.version.<file>`` for each CNI plugin (client/fingerprint/plugins_cni.go,
Nomad 1.5+: every executable of ``cni_path`` that prints a semantic version when run with no arguments). A
default node is an agent the overlay_agent role prepared: Nomad 1.10.0 with the ``backendai`` plugin and the
``backendai`` CNI network (``cni_plugins``, ``cni_networks``, ``nomad_version`` change that). Names need not be
unique, as in Nomad (node IDs are; here derived from the name and how many nodes of that name exist).

Host volumes: ``host_volumes`` gives the node's static ``client { host_volume }`` declarations (Nomad's
``HostVolumes``, structs.ClientHostVolumeConfig: Name, Path, ReadOnly, and ID empty as for a static volume);
a node declares the session runtime bundle's volume (what the collection's overlay_agent role declares on every
agent; ``runtime_bundle=False``: an agent the role has not prepared) and no other unless told. The node list stub carries them, as ``nomad/structs`` ``Node.Stub`` does since
Nomad 0.11.0.

What it does not model: heartbeats and the TTL that marks a node down by itself, drain strategies (``Drain``
only filters), node events, running the fingerprinters (the attributes are what the test gave), CSI, and
dynamic host volumes (Nomad 1.10: ``ID`` set, created through the API).
"""

from __future__ import annotations

import time
import typing as t
import uuid

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import RUNTIME_DIR, RUNTIME_VOLUME

from .state import CodedError, ModelState, rfc3339, json_copy


class NodesModel(ModelState):
    def add_node(self, name: str, datacenter: t.Optional[str] = None, node_pool: str = "default", node_class: str = "",
                 cpu: int = 4000, memory: int = 8192, disk: int = 50000, cores: t.Optional[int] = None,
                 reserved_cpu: int = 0, reserved_memory: int = 0, reserved_disk: int = 0,
                 drivers: t.Iterable[str] = ("docker",),
                 cni_plugins: t.Iterable[str] = ("backendai", "bridge", "host-local", "loopback", "portmap"),
                 nomad_version: str = "1.10.0",
                 cni_networks: t.Iterable[str] = ("backendai",), bridge: bool = True,
                 devices: t.Iterable[t.Mapping[str, t.Any]] = (), host_networks: t.Optional[t.Mapping[str, str]] = None,
                 attributes: t.Optional[t.Mapping[str, str]] = None, meta: t.Optional[t.Mapping[str, str]] = None,
                 status: str = "ready", eligibility: str = "eligible", drain: bool = False,
                 address: t.Optional[str] = None,
                 host_volumes: t.Optional[t.Mapping[str, t.Tuple[str, bool]]] = None,
                 runtime_bundle: bool = True) -> t.Dict[str, t.Any]:
        """Add a client node (Nomad's ``api.Node`` shape). ``devices``: ``{"vendor", "type", "name", "count"}``;
        ``host_volumes``: name -> (path, read-only), the node's static host volumes, besides the runtime bundle's
        (``runtime_bundle``)."""
        volumes = dict(host_volumes or {})
        if runtime_bundle:
            volumes.setdefault(RUNTIME_VOLUME, (RUNTIME_DIR, True))
        with self.lock:
            twins = sum(1 for n in self.nodes.values() if n["Name"] == name)
            node_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "nomad-double-node/" + name + ("/%d" % twins if twins else "")))
            address = address or "10.0.0.%d" % (len(self.nodes) + 10)
            drivers = list(drivers)
            attrs = {
                "unique.hostname": name, "unique.network.ip-address": address, "kernel.name": "linux",
                "os.name": "ubuntu", "arch": "amd64", "nomad.version": nomad_version, "cpu.numcores": str(cores or max(1, cpu // 1000)),
                "cpu.totalcompute": str(cpu), "memory.totalbytes": str(memory * 1024 * 1024),
            }
            for plugin in cni_plugins:
                attrs["plugins.cni.version.%s" % plugin] = "v1.5.1"
            for drv in drivers:
                attrs["driver.%s" % drv] = "1"
            attrs.update(attributes or {})
            networks: t.List[t.Dict[str, t.Any]] = [{"Mode": "host", "Device": "eth0", "CIDR": address + "/32", "IP": address,
                                                      "MBits": 1000, "DNS": None, "ReservedPorts": None, "DynamicPorts": None}]
            if bridge:
                networks.append({"Mode": "bridge"})
            networks.extend({"Mode": "cni/%s" % n} for n in cni_networks)
            node_devices = []
            for i, dev in enumerate(devices):
                node_devices.append({
                    "Vendor": dev.get("vendor", "nvidia"), "Type": dev.get("type", "gpu"), "Name": dev.get("name", "device"),
                    "Attributes": dict(dev.get("attributes", {})),
                    "Instances": [{"ID": "GPU-%s-%d-%d" % (name, i, j), "Healthy": True, "HealthDescription": "", "Locality": None}
                                  for j in range(int(dev.get("count", 1)))],
                })
            index = self.next_index()
            node = {
                "ID": node_id, "SecretID": "", "Name": name, "Datacenter": datacenter or self.datacenter,
                "NodePool": node_pool, "NodeClass": node_class, "ComputedClass": "v1:%d" % (abs(hash(node_class)) % 10**12),
                "HTTPAddr": "%s:4646" % address, "TLSEnabled": self.tls, "Attributes": attrs,
                "NodeResources": {
                    "Cpu": {"CpuShares": cpu, "TotalCpuCores": cores or max(1, cpu // 1000), "ReservableCpuCores": None},
                    "Memory": {"MemoryMB": memory}, "Disk": {"DiskMB": disk}, "Networks": networks,
                    "NodeNetworks": None, "Devices": node_devices or None, "MinDynamicPort": 20000, "MaxDynamicPort": 32000,
                },
                "ReservedResources": {"Cpu": {"CpuShares": reserved_cpu}, "Memory": {"MemoryMB": reserved_memory},
                                      "Disk": {"DiskMB": reserved_disk}, "Networks": {"ReservedHostPorts": ""}},
                "Resources": None, "Reserved": None, "Links": {}, "Meta": dict(meta or {}),
                "Drivers": {d: {"Attributes": {"driver.%s" % d: "true"}, "Detected": True, "Healthy": True,
                                "HealthDescription": "Healthy", "UpdateTime": rfc3339(time.time_ns())} for d in drivers},
                "HostVolumes": {k: {"Name": k, "Path": path, "ReadOnly": bool(ro), "ID": ""}
                                for k, (path, ro) in volumes.items()},  # {} when none (client/client.go)
                "HostNetworks": {k: {"Name": k, "CIDR": v, "Interface": "", "ReservedPorts": ""}
                                                     for k, v in (host_networks or {}).items()},
                "CSIControllerPlugins": None, "CSINodePlugins": None, "Status": status, "StatusDescription": "",
                "StatusUpdatedAt": int(time.time()), "SchedulingEligibility": eligibility, "Drain": drain,
                "DrainStrategy": None, "LastDrain": None, "Events": [], "CreateIndex": index, "ModifyIndex": index,
            }
            self.nodes[node_id] = node
            return json_copy(node)

    def node_id(self, name: str) -> str:
        with self.lock:
            for node in self.nodes.values():
                if node["Name"] == name:
                    return node["ID"]
        raise KeyError(name)

    def set_node_status(self, name: str, status: str) -> None:
        """A node's status changes (``down``, ``ready``, ...). Going down, each live allocation on it
        becomes lost: ``ClientStatus`` lost, ``DesiredStatus`` stop, with Nomad's description."""
        with self.lock:
            node = self.nodes[self.node_id(name)]
            index = self.next_index()
            node.update({"Status": status, "ModifyIndex": index, "StatusUpdatedAt": int(time.time())})
            if status != "down":
                return
            for alloc in self.allocs.values():
                if alloc["NodeID"] == node["ID"] and self.live(alloc):
                    alloc["override"] = {"ClientStatus": "lost", "State": "dead", "Failed": True, "Restarts": 0,
                                         "Description": ""}
                    alloc["DesiredStatus"] = "stop"
                    alloc["DesiredDescription"] = "alloc is lost since its node is down"
                    alloc["ModifyIndex"] = index

    def node_stub(self, node: t.Mapping[str, t.Any], resources: bool, with_os: bool) -> t.Dict[str, t.Any]:
        stub = {
            "Address": node["Attributes"].get("unique.network.ip-address", ""), "ID": node["ID"],
            "Attributes": {"os.name": node["Attributes"].get("os.name", "")} if with_os else None,
            "Datacenter": node["Datacenter"], "Name": node["Name"], "NodeClass": node["NodeClass"],
            "NodePool": node["NodePool"], "Version": node["Attributes"].get("nomad.version", ""), "Drain": node["Drain"],
            "SchedulingEligibility": node["SchedulingEligibility"], "Status": node["Status"],
            "StatusDescription": node["StatusDescription"], "Drivers": json_copy(node["Drivers"]),
            "HostVolumes": json_copy(node["HostVolumes"]), "NodeResources": None, "ReservedResources": None, "LastDrain": None,
            "CreateIndex": node["CreateIndex"], "ModifyIndex": node["ModifyIndex"],
        }
        if resources:
            stub["NodeResources"] = json_copy(node["NodeResources"])
            stub["ReservedResources"] = json_copy(node["ReservedResources"])
        return stub


    def node_stubs(self, prefix: str, resources: bool, with_os: bool,
                   matcher: t.Callable[[t.Mapping[str, t.Any]], bool] = lambda node: True, start: str = "",
                   limit: int = 0) -> t.Tuple[t.List[t.Dict[str, t.Any]], str]:
        """(the stubs of the matching nodes by ID from ID ``start``, at most ``limit`` of them when given; the ID the
        next page starts at, or ""). Only the page's stubs are built, as Nomad's paginator does."""
        nodes = sorted((n for n in self.nodes.values() if n["ID"].startswith(prefix) and n["ID"] >= start and matcher(n)),
                       key=lambda n: n["ID"])
        following = nodes[limit]["ID"] if limit and len(nodes) > limit else ""
        return [self.node_stub(n, resources, with_os) for n in (nodes[:limit] if limit else nodes)], following

    def node(self, node_id: str) -> t.Dict[str, t.Any]:
        node = self.nodes.get(node_id)
        if node is None:
            raise CodedError(404, "node not found")
        return json_copy(node)

    def node_allocations(self, node_id: str) -> t.List[t.Dict[str, t.Any]]:
        node = self.nodes.get(node_id)
        if node is None:
            return []
        allocs = sorted((a for a in self.allocs.values() if a["NodeID"] == node["ID"]), key=lambda a: a["CreateIndex"])
        return [self.alloc_full(a) for a in allocs]

