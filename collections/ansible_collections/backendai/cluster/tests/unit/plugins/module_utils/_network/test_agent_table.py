# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Args version 4: the session's agent table (once per session, as Nomad variables) and the digest of it under
every group's MAC. The plugin's run in real namespaces is tests/local_runtime/test_session_network_table.py."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import block_network, session_slots, slots_needed

KEY = bytes(range(32))
SID = "3614fdf3-0e04-4b5c-9a5e-1d2b3c4d5e6f"


def agents(count: int):
    return [net.ip4_text(0x0A000000 + i + 1) for i in range(count)]


def wg(count: int):
    return tuple(hashlib.sha256(b"k%d" % i).digest() for i in range(count))


def session(count: int, encryption: str = "wireguard", namespace: str = "infra") -> net.NetworkParams:
    """A session over ``count`` agents in the block of slots it needs, starting at slot 0 (VNI 0x10000)."""
    vni, subnet = block_network(0, slots_needed(count, 1))
    return net.check_params(net.NetworkParams(
        SID, vni, subnet, tuple(agents(count)), 1350, encryption, wg(count) if encryption == "wireguard" else (),
        "fd0102030405" if encryption == "wireguard" else "", namespace))


def admitted(p: net.NetworkParams, group: str = "main1", key: bytes = KEY) -> net.Admission:
    args = net.signed_args(key, "default", "train", group, p.args("4"))
    return net.admit(key, net.parse_cni_args(net.nomad_cni_args(args, "global", "default", "train", group, "a")))


def items_of(p: net.NetworkParams):
    return [items for _path, items in net.table_items(p)]


def test_a_groups_args_are_the_same_size_whatever_the_sessions_size() -> None:
    sizes = {n: len(";".join("%s=%s" % kv for kv in net.signed_args(KEY, "default", "train", "main1",
                                                                    session(n).args("4")).items()))
             for n in (2, 1024, 10000)}
    # only BAI_N's digits and BAI_NET's prefix length differ: 2 x 2 characters
    assert max(sizes.values()) - min(sizes.values()) <= 4 and max(sizes.values()) < 320, sizes


def test_the_mac_covers_the_table_digest_its_count_and_namespace() -> None:
    p = session(3)
    args = p.args("4")
    msg = "backendai-session-network\nNOMAD_NAMESPACE=default\nNOMAD_JOB_ID=train\nNOMAD_GROUP_NAME=main1\n"
    msg += "".join("%s=%s\n" % (k, args[k]) for k in net.PARAM_KEYS if k in args)
    msg += "".join("%s=%s\n" % (k, args[k]) for k in net.V3_KEYS if k in args)
    msg += "".join("%s=%s\n" % (k, args[k]) for k in net.V4_KEYS)
    assert net.signed_args(KEY, "default", "train", "main1", args)[net.MAC_KEY] == hmac.new(
        KEY, msg.encode(), hashlib.sha256).hexdigest()
    for key, value in ((net.TABLE_KEY, net.table_digest(session(4))), (net.COUNT_KEY, "4"), (net.TABLE_NS_KEY, "x")):
        forged = dict(net.signed_args(KEY, "default", "train", "main1", args), **{key: value})
        with pytest.raises(net.AdmissionError, match="MAC does not match"):
            net.admit(KEY, net.parse_cni_args(net.nomad_cni_args(forged, "global", "default", "train", "main1", "a")))


def test_an_admission_has_its_tables_place_and_no_agents_until_resolved() -> None:
    p = session(3)
    adm = admitted(p)
    assert adm.params.agents == () and adm.table.namespace == "infra" and adm.table.count == 3
    assert adm.table.paths == ("backendai-cluster/network/agents/0/%s/0" % net.table_digest(p),)
    assert net.resolve_table(adm, items_of(p)).params == p


def test_a_table_other_than_the_signed_one_is_refused() -> None:
    p = session(3)
    adm = admitted(p)
    for other in (p._replace(agents=p.agents[:2] + ("10.9.9.9",)), p._replace(wg_keys=wg(4)[1:]),
                  p._replace(agents=p.agents[:2], wg_keys=p.wg_keys[:2])):
        with pytest.raises(net.AdmissionError, match="is not the one its job signed"):
            net.resolve_table(adm, [items for _path, items in net.table_items(other)])
    with pytest.raises(net.AdmissionError, match="is missing"):
        net.resolve_table(adm, [None])
    with pytest.raises(net.AdmissionError, match="malformed"):
        net.resolve_table(adm, [{"agents": "!!", "wg": ""}])


def test_ten_thousand_agents_fit_nomads_variables_and_no_cni_args_limit() -> None:
    p = session(10000)
    chunks = net.table_items(p)
    assert len(chunks) == 10 and [path.rsplit("/", 1)[1] for path, _items in chunks] == [str(k) for k in range(10)]
    # each under Nomad's 64 KiB of items (maxVariableSize: keys and values)
    assert max(sum(len(k) + len(v) for k, v in items.items()) for _path, items in chunks) <= 65536
    assert all(len(path) <= 128 for path, _items in chunks)  # Nomad's variable path limit
    adm = admitted(p)
    assert net.resolve_table(adm, [items for _path, items in chunks]).params.agents == p.agents
    plain = session(10000, "none")
    assert "wg" not in net.table_items(plain)[0][1] and net.resolve_table(admitted(plain), items_of(plain)).params == plain
    with pytest.raises(net.NetworkError, match="version 4 carries them in the agent table"):
        p.args("3")


def test_a_session_that_cannot_be_expressed_says_why_when_planned() -> None:
    assert session_slots(["a%d" % i for i in range(10000)]) == 128
    with pytest.raises(PlanError, match="cannot hold 300000 agents with up to 1 containers each"):
        slots_needed(300000, 1)
