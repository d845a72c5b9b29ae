# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each doc fragment documents exactly the options of its argument spec in ``_common_args``."""

from __future__ import annotations

import importlib
import re
import typing as t

import pytest
import yaml

from ansible_collections.backendai.cluster.plugins.module_utils._ansible import args as ca
from ansible_collections.backendai.cluster.plugins.module_utils import _defaults as defaults

INVERTED = dict(ca.NOMAD_INVERTED_ENV)
#: Fragment name -> the argument spec it documents.
FRAGMENTS = {
    "nomad_connection": ca.nomad_connection_argument_spec(),
    "vault_connection": ca.vault_connection_argument_spec(),
    "local_runtime": ca.local_runtime_argument_spec(),
    "session_network": ca.session_network_argument_spec(),
}


def env_of(option: t.Mapping[str, t.Any]) -> t.List[str]:
    """The environment variables an option falls back to (empty if none)."""
    fallback = option.get("fallback")
    if not fallback:
        return []
    return list(fallback[1]) if len(fallback) > 1 else []


def fragment_options(name: str, variant: str = "DOCUMENTATION") -> t.Dict[str, t.Any]:
    module = importlib.import_module("ansible_collections.backendai.cluster.plugins.doc_fragments.%s" % name)
    text = getattr(module.ModuleDocFragment, variant)
    return yaml.safe_load(text)["options"]


def description(option: t.Mapping[str, t.Any]) -> str:
    text = option.get("description") or ""
    return " ".join(text) if isinstance(text, list) else text


def env_documented(option: t.Mapping[str, t.Any]) -> t.Set[str]:
    return set(re.findall(r"E\(([A-Z_]+)(?:=[^)]*)?\)", description(option)))


@pytest.mark.parametrize("fragment", sorted(FRAGMENTS))
def test_fragment_matches_argument_spec(fragment: str) -> None:
    spec = FRAGMENTS[fragment]
    docs = fragment_options(fragment)
    assert sorted(docs) == sorted(spec), "options differ"
    for name, arg in spec.items():
        doc = docs[name]
        assert doc.get("type", "str") == arg.get("type", "str"), name
        assert doc.get("default") == arg.get("default"), name
        assert sorted(doc.get("aliases") or []) == sorted(arg.get("aliases") or []), name
        assert doc.get("choices") == arg.get("choices"), name
        assert doc.get("elements") == arg.get("elements"), name
        assert bool(doc.get("required")) == bool(arg.get("required")), name
        assert env_documented(doc) == set(env_of(arg)), "%s: environment variables documented vs. fallback" % name
        if arg.get("no_log"):
            assert "never logged" in description(doc), name


def test_plugin_variant_has_env_entries_for_the_fallbacks() -> None:
    spec = FRAGMENTS["nomad_connection"]
    docs = fragment_options("nomad_connection")
    plugin = fragment_options("nomad_connection", "PLUGINS")
    assert sorted(plugin) == sorted(spec)
    for name, arg in spec.items():
        doc = plugin[name]
        for key in ("type", "default", "aliases", "choices", "elements"):
            assert doc.get(key) == docs[name].get(key), (name, key)
        env = [e["name"] for e in doc.get("env") or []]
        if name in INVERTED:  # not a plain env fallback: the plugin inverts it itself
            assert env == [] and env_documented(doc) == {INVERTED[name]}
        else:
            assert env == env_of(arg) and env_documented(doc) == set(env), name


def test_fallbacks_match_the_clients_environment_tables() -> None:
    nomad = {name: env_of(arg) for name, arg in ca.nomad_connection_argument_spec().items() if env_of(arg)}
    assert nomad == dict({k: [v] for k, v in defaults.NOMAD_ENV.items()}, validate_certs=["NOMAD_SKIP_VERIFY"])
    vault = {name: env_of(arg) for name, arg in ca.vault_connection_argument_spec().items()}
    assert vault == {k: [v] for k, v in defaults.VAULT_ENV.items()}


def test_secrets_are_no_log_and_paths_are_not() -> None:
    spec = dict(ca.nomad_connection_argument_spec(), **ca.vault_connection_argument_spec())
    assert {name for name, arg in spec.items() if arg.get("no_log")} == {"token", "vault_token"}
    assert spec["client_key"]["no_log"] is False  # a path: keeping it visible is on purpose


def test_skip_verify_fallback_inverts(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.module_utils.errors import AnsibleFallbackNotFound

    monkeypatch.delenv("NOMAD_SKIP_VERIFY", raising=False)
    with pytest.raises(AnsibleFallbackNotFound):
        ca.skip_verify_fallback("NOMAD_SKIP_VERIFY")
    monkeypatch.setenv("NOMAD_SKIP_VERIFY", "1")
    assert ca.skip_verify_fallback("NOMAD_SKIP_VERIFY") is False
    monkeypatch.setenv("NOMAD_SKIP_VERIFY", "false")
    assert ca.skip_verify_fallback("NOMAD_SKIP_VERIFY") is True
