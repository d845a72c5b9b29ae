# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The documented spec (doc fragment session_spec) and the validator's SCHEMA cannot drift apart."""

from __future__ import annotations

import copy
import typing as t

import pytest
import yaml

from ansible_collections.backendai.cluster.plugins.doc_fragments.session_spec import ModuleDocFragment
from ansible_collections.backendai.cluster.plugins.module_utils._session import schema as spec_schema
from ansible_collections.backendai.cluster.plugins.module_utils._session import spec as _spec
from ansible_collections.backendai.cluster.plugins.module_utils._errors import SpecError

STRUCTURE = ("type", "elements", "default", "choices", "required")


def documented() -> t.Dict[str, t.Any]:
    return yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]["spec"]["suboptions"]


def drift(doc: t.Mapping[str, t.Any], schema: t.Mapping[str, t.Any], path: str = "spec") -> t.List[str]:
    """Every difference of keys, types, defaults, choices and required flags, and every missing description."""
    out = []
    for key in sorted(set(doc) | set(schema)):
        where = "%s.%s" % (path, key)
        if key not in schema:
            out.append("%s: documented, not in the validator's SCHEMA" % where)
            continue
        if key not in doc:
            out.append("%s: in SCHEMA, not documented" % where)
            continue
        d, s = doc[key], schema[key]
        if not d.get("description"):
            out.append("%s: no description" % where)
        for attr in STRUCTURE:
            if d.get(attr) != s.get(attr):
                out.append("%s.%s: documented %r, SCHEMA %r" % (where, attr, d.get(attr), s.get(attr)))
        if "suboptions" in d or "suboptions" in s:
            out.extend(drift(d.get("suboptions", {}), s.get("suboptions", {}), where))
    return out


def test_documentation_equals_the_schema() -> None:
    assert drift(documented(), spec_schema.SCHEMA) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s.pop("mpi"), "spec.mpi: documented, not in the validator's SCHEMA"),
    (lambda s: s.__setitem__("colour", {"type": "str"}), "spec.colour: in SCHEMA, not documented"),
    (lambda s: s["ssh"]["suboptions"]["port"].__setitem__("default", 22),
     "spec.ssh.port.default: documented 2200, SCHEMA 22"),
    (lambda s: s["driver"]["choices"].append("exec"), "spec.driver.choices"),
    (lambda s: s["roles"]["suboptions"]["resources"]["suboptions"].pop("gpu"),
     "spec.roles.resources.gpu: documented, not in"),
])
def test_a_drift_is_reported(mutate: t.Callable[[t.Dict[str, t.Any]], t.Any], expected: str) -> None:
    schema = copy.deepcopy(spec_schema.SCHEMA)
    mutate(schema)
    assert any(line.startswith(expected) for line in drift(documented(), schema)), drift(documented(), schema)


def test_the_validator_takes_keys_and_defaults_from_the_schema() -> None:
    spec = _spec.parse_spec({"name": "s", "image": "i", "ssh": {"key_type": "rsa"}, "secrets": {"backend": "vault"},
                             "roles": [{"name": "main"}]})
    top = spec_schema.SCHEMA
    assert spec.driver == top["driver"]["default"] and spec.cluster_mode == top["cluster_mode"]["default"]
    assert spec.cluster_size == 1 and spec.master_port == top["master_port"]["default"]
    res = top["resources"]["suboptions"]
    assert (spec.resources.cpu, spec.resources.memory, spec.resources.gpu) == (
        res["cpu"]["default"], res["memory"]["default"], res["gpu"]["default"])
    ssh = top["ssh"]["suboptions"]
    assert (spec.ssh.key_bits, spec.ssh.port) == (ssh["key_bits"]["default"], ssh["port"]["default"])
    assert spec.secrets.mount == top["secrets"]["suboptions"]["mount"]["default"]
    assert spec.network_mode == top["network"]["suboptions"]["mode"]["default"]
    assert spec.strategy == top["placement"]["suboptions"]["strategy"]["default"]
    assert spec.mpi_slots == top["mpi"]["suboptions"]["slots"]["default"]
    assert spec.roles[0].replicas == top["roles"]["suboptions"]["replicas"]["default"]
    with pytest.raises(SpecError) as err:
        _spec.parse_spec({"name": "s", "image": "i", "colour": 1, "ssh": {"bits": 1}})
    text = str(err.value)
    assert "session.colour: unknown key; allowed keys: %s" % ", ".join(top) in text
    assert "session.ssh.bits: unknown key; allowed keys: %s" % ", ".join(top["ssh"]["suboptions"]) in text


def test_a_required_port_is_reported_with_the_other_problems() -> None:
    with pytest.raises(SpecError) as err:
        _spec.parse_spec({"name": "x y", "image": "i", "ports": [{"label": "web"}]})
    assert "session.ports[0].port: is required" in str(err.value) and "session.name" in str(err.value)
