# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network plugin reads and writes JSON through CPython's C scanner and encoder (``_json``) rather
than the json package (which imports re, enum and more at every start): the two must agree on everything the
plugin handles."""

from __future__ import annotations

import json

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as plugin
from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

CONFLIST = net.static_conflist("10.0.0.1", "/etc/backendai-cluster/agent.key", "/run/backendai-cluster/cni",
                               egress=True, uplinks=["eth0"], underlay_mtu=9000, portmap=True, agent_name="n1",
                               nomad_token_file="/etc/backendai-cluster/nomad.token")
RESULT = {"cniVersion": "1.0.0", "interfaces": [{"name": "bai-1", "mac": "02:00:00:00:00:01"},
                                                {"name": "eth0", "mac": "0a:58:0a:c8:05:02", "sandbox": "/run/netns/x"}],
          "ips": [{"interface": 1, "address": "10.200.5.2/24", "gateway": "10.200.5.1"}],
          "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}
SHAPES = [CONFLIST, CONFLIST["plugins"][1], RESULT, {"code": 101, "msg": "admission refused: \u00e9\u4e2d\n\"x\"",
                                                     "details": "\\ \t \u0001"},
          [], {}, [1, -2, 3.5, 1e300, True, False, None, "", [[]], {"a": {"b": [None]}}], "just a string", 0]


@pytest.fixture(params=["_json", "json"])
def codec(request, monkeypatch):
    """CPython's C scanner and encoder, and the json package the plugin falls back to without them."""
    if request.param == "json":
        monkeypatch.setattr(plugin, "_c_make_scanner", None)
        monkeypatch.setattr(plugin, "_c_make_encoder", None)
    return request.param


@pytest.mark.parametrize("value", SHAPES)
def test_dumps_and_loads_agree_with_the_json_package(codec, value):
    text = plugin.json_dumps(value)
    assert text == json.dumps(value)
    assert plugin.json_loads(text) == json.loads(text) == value
    pretty = json.dumps(value, indent=2, sort_keys=True) + "\n"  # how the runtime writes the conflist
    assert plugin.json_loads("  \n" + pretty) == value and plugin.json_loads(pretty.encode()) == value


@pytest.mark.parametrize("text", ["", "  ", "{", "[1,]", "{} {}", "{} x", "NaN", "[Infinity]", "{'a': 1}", "\"\x01\"",
                                  b"\xff"])
def test_what_is_not_one_json_value_is_a_value_error(codec, text):
    with pytest.raises(ValueError):
        plugin.json_loads(text)


def test_what_json_cannot_hold_is_a_type_error(codec):
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        plugin.json_dumps({"a": {1, 2}})
