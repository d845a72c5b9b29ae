# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backendai.cluster.nomad_nodes inventory plugin through ansible-inventory against the Nomad API double."""

from __future__ import annotations

import json
import os
import subprocess
import typing as t

import pytest
import yaml

from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nodes import live_agents
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadConnection
from ansible_collections.backendai.cluster.plugins.inventory import nomad_nodes
from module_helpers import ENV_VARS, NOMAD_TOKEN
from nomad_double.fixtures import nomad_double_factory, test_pki  # noqa: F401 - pytest fixtures
from nomad_double.server import NomadAPIDouble
from repo_helpers import REPO, VENV_BIN

pytestmark = pytest.mark.slow  # ansible-inventory runs (not in scripts/run-tests --quick)

#: The plugin's own example (its EXAMPLES), without where Nomad is (the tests give NOMAD_ADDR and NOMAD_TOKEN) and its
#: cache (the cache test adds one of its own).
CONFIG = yaml.safe_dump({k: v for k, v in yaml.safe_load(nomad_nodes.EXAMPLES).items()
                         if k not in ("nomad_addr", "ca_cert") and not k.startswith("cache")}, sort_keys=False)


@pytest.fixture
def nomad(nomad_double_factory: t.Any) -> NomadAPIDouble:
    double = nomad_double_factory(token=NOMAD_TOKEN)
    double.add_node("n1", runtime_bundle=False, cpu=4000, memory=8192, cni_networks=["backendai-s1"])
    double.add_node("n2", runtime_bundle=False, datacenter="dc2", cpu=8000, memory=16384, reserved_cpu=1000,
                    devices=[{"vendor": "nvidia", "type": "gpu", "name": "A100", "count": 2}],
                    host_volumes={"backendai-srv-data-0a1b2c3d": ("/srv/data", True)})
    double.add_node("n3", status="down")
    double.add_node("n4", eligibility="ineligible", node_pool="batch", node_class="big")
    return double


def unwrap(value: t.Any) -> t.Any:
    """ansible-inventory marks strings that must never be templated (they came from Nomad) as unsafe."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def inventory(double: NomadAPIDouble, tmp_path: t.Any, config: str = CONFIG, name: str = "test.nomad_nodes.yml",
              extra_env: t.Optional[t.Dict[str, str]] = None, *args: str) -> t.Tuple[t.Dict[str, t.Any], str]:
    path = os.path.join(str(tmp_path), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(config)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    for var in ENV_VARS:
        env.pop(var, None)
    env.update(NOMAD_ADDR=double.url, NOMAD_TOKEN=NOMAD_TOKEN)
    env.update(extra_env or {})
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-inventory"), "-i", path, "--list"] + list(args), cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return unwrap(json.loads(proc.stdout)), proc.stderr


def test_nodes_become_hosts_with_capacity_vars_and_groups(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    inv, stderr = inventory(nomad, tmp_path)
    hostvars = inv["_meta"]["hostvars"]
    assert sorted(hostvars) == ["n1", "n2", "n3", "n4"]
    n2 = hostvars["n2"]
    assert n2["nomad_datacenter"] == "dc2" and n2["nomad_node_pool"] == "default" and n2["nomad_status"] == "ready"
    assert n2["nomad_free"]["cpu"] == 7000 and n2["nomad_free"]["memory"] == 16384 and n2["nomad_free"]["gpu"] == 2
    assert n2["nomad_free"]["devices"] == {"nvidia/gpu/A100": 2} and n2["nomad_drivers"] == ["docker"]
    assert n2["backendai_agent"] == {"name": "n2", "cpu": 7000, "memory": 16384, "gpu": 2, "datacenter": "dc2",
                                     "drivers": ["docker"], "node_pool": "default",
                                     "host_volumes": {"backendai-srv-data-0a1b2c3d": {"read_only": True}}}
    assert n2["nomad_host_volumes"] == {"backendai-srv-data-0a1b2c3d": {"path": "/srv/data", "read_only": True}}
    assert hostvars["n1"]["nomad_host_volumes"] == {} and hostvars["n1"]["backendai_agent"]["host_volumes"] == {}
    assert n2["ansible_host"] == n2["nomad_address"] and n2["nomad_address"].startswith("10.0.0.")
    assert hostvars["n1"]["nomad_cni_networks"] == ["backendai-s1"] and "bridge" in hostvars["n1"]["nomad_cni_plugins"]
    assert hostvars["n4"]["nomad_eligible"] is False and hostvars["n4"]["nomad_node_class"] == "big"
    assert sorted(inv["agents"]["hosts"]) == ["n1", "n2"]  # ready + eligible + default pool
    assert sorted(inv["dc_dc1"]["hosts"]) == ["n1", "n3", "n4"] and inv["dc_dc2"]["hosts"] == ["n2"]
    assert inv["pool_batch"]["hosts"] == ["n4"] and inv["gpu_agents"]["hosts"] == ["n2"]
    assert NOMAD_TOKEN not in json.dumps(inv) + stderr


def test_agents_from_hostvars_equal_what_the_session_module_reads(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    inv, _ = inventory(nomad, tmp_path)
    from_hostvars = [inv["_meta"]["hostvars"][h]["backendai_agent"] for h in sorted(inv["agents"]["hosts"])]
    with NomadClient(NomadConnection(nomad_addr=nomad.url, token=NOMAD_TOKEN)) as client:
        assert from_hostvars == live_agents(client)


def test_cache(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    cache_dir = os.path.join(str(tmp_path), "cache")
    config = CONFIG + "cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: %s\ncache_timeout: 600\n" % cache_dir
    first, _ = inventory(nomad, tmp_path, config)
    assert os.listdir(cache_dir)
    nomad.add_node("n5")
    nomad.clear_requests()
    cached, _ = inventory(nomad, tmp_path, config)
    assert sorted(cached["_meta"]["hostvars"]) == sorted(first["_meta"]["hostvars"]) and nomad.requests == []
    fresh, _ = inventory(nomad, tmp_path, config, "test.nomad_nodes.yml", None, "--flush-cache")
    assert "n5" in fresh["_meta"]["hostvars"] and "n5" in fresh["agents"]["hosts"]


def test_filters_and_file_name(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    inv, _ = inventory(nomad, tmp_path, CONFIG + "datacenters: [dc2]\n")
    assert sorted(inv["_meta"]["hostvars"]) == ["n2"]
    inv, stderr = inventory(nomad, tmp_path, CONFIG, "nodes.yml")
    assert inv["_meta"]["hostvars"] == {}  # not a nomad_nodes.yml file: the plugin does not take it


def test_tls_verified_by_default_and_nomad_skip_verify(nomad_double_factory: t.Any, tmp_path: t.Any) -> None:
    double = nomad_double_factory(tls=True, token=NOMAD_TOKEN)
    double.add_node("n1")
    path = os.path.join(str(tmp_path), "tls.nomad_nodes.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("plugin: backendai.cluster.nomad_nodes\n")
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(NOMAD_ADDR=double.url, NOMAD_TOKEN=NOMAD_TOKEN, ANSIBLE_INVENTORY_UNPARSED_FAILED="1")
    cmd = [os.path.join(VENV_BIN, "ansible-inventory"), "-i", path, "--list"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "TLS error" in proc.stderr
    for extra in ({"NOMAD_CACERT": double.pki.ca_cert}, {"NOMAD_SKIP_VERIFY": "1"}):
        proc = subprocess.run(cmd, cwd=REPO, env=dict(env, **extra), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "n1" in json.loads(proc.stdout)["_meta"]["hostvars"], proc.stderr


def test_requests_do_not_grow_with_the_nodes(nomad: NomadAPIDouble, tmp_path: t.Any) -> None:
    """Allocations are read in bulk (never per node); with node_details: false the whole inventory is."""
    inventory(nomad, tmp_path)
    per_node = [r.path for r in nomad.requests if r.path.startswith("/v1/node/")]
    assert not [p for p in per_node if p.endswith("/allocations")], per_node
    assert len(nomad.find("GET", "^/v1/allocations$")) == 1
    nomad.clear_requests()
    inv, _ = inventory(nomad, tmp_path, CONFIG + "node_details: false\n")
    assert sorted(r.path for r in nomad.requests) == ["/v1/allocations", "/v1/nodes"]
    n2 = inv["_meta"]["hostvars"]["n2"]
    assert n2["nomad_free"]["cpu"] == 7000 and n2["nomad_free"]["gpu"] == 2 and n2["nomad_address"].startswith("10.0.0.")
    assert inv["_meta"]["hostvars"]["n1"]["nomad_cni_networks"] == ["backendai-s1"]
    assert sorted(inv["agents"]["hosts"]) == ["n1", "n2"]
