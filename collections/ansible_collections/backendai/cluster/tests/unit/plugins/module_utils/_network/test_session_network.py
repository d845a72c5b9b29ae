# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network's parameters, their MAC and CNI_ARGS, and a session's layout on an agent."""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import os
import subprocess
import sys

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net

KEY = bytes(range(32))
SID = "3614fdf3-0e04-4b5c-9a5e-1d2b3c4d5e6f"


def params(**change):
    p = net.make_params(SID, 5, ["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    return p._replace(**change)


def cni_args(args, job="train", namespace="default", group="main1"):
    return net.parse_cni_args(net.nomad_cni_args(args, "global", namespace, job, group, "alloc-1"))


def test_the_mac_is_hmac_sha256_of_the_group_identity_and_every_parameter():
    """The MAC's message, written out here: a change of what it covers (or of the MAC function) shows."""
    args = params().args()
    msg = "backendai-session-network\nNOMAD_NAMESPACE=default\nNOMAD_JOB_ID=train\nNOMAD_GROUP_NAME=main1\n"
    msg += "".join("%s=%s\n" % (k, args[k]) for k in net.PARAM_KEYS) + "".join(
        "%s=%s\n" % (k, args[k]) for k in net.V3_KEYS if k in args)
    want = hmac.new(KEY, msg.encode(), hashlib.sha256).hexdigest()
    assert net.signed_args(KEY, "default", "train", "main1", args)[net.MAC_KEY] == want


# RFC 5869 appendix A, test cases 1 to 3 (SHA-256): (IKM, salt, info, L, OKM)
RFC5869 = [
    ("0b" * 22, "000102030405060708090a0b0c", "f0f1f2f3f4f5f6f7f8f9", 42,
     "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"),
    (bytes(range(0x00, 0x50)).hex(), bytes(range(0x60, 0xb0)).hex(), bytes(range(0xb0, 0x100)).hex(), 82,
     "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8"
     "367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"),
    ("0b" * 22, "", "", 42, "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"),
]


@pytest.mark.parametrize("ikm,salt,info,length,okm", RFC5869)
def test_hkdf_is_rfc5869_hkdf_sha256(ikm, salt, info, length, okm):
    assert net.hkdf_sha256(bytes.fromhex(ikm), bytes.fromhex(info), length, bytes.fromhex(salt)).hex() == okm


def test_agent_keys_differ_per_agent_and_are_not_the_cluster_key():
    keys = {name: net.derive_agent_key(KEY, name) for name in ("n1", "n2", "n1\x01", "N1")}
    assert len(set(keys.values())) == 4 and KEY not in keys.values() and all(len(k) == 32 for k in keys.values())
    assert net.derive_agent_key(KEY, "n1") == keys["n1"]  # deterministic: the control node derives it again
    assert net.signing_key(KEY, "n1") == net.network_mac_key(keys["n1"])
    assert net.signing_key(KEY, "n1") not in (keys["n1"], KEY)
    # the label is part of the derivation: another label (a WireGuard keypair, say) gives another key
    assert net.derive_agent_key(KEY, "n1", b"backendai-cluster wireguard v1") != keys["n1"]
    for bad in ("", "a\0b", "a\nb", None):
        with pytest.raises(net.NetworkError, match="agent name"):
            net.derive_agent_key(KEY, bad)


def test_admission_with_nomads_identity_ignores_the_identity_in_the_args():
    """The plugin's look-up gives (namespace, job, group) from the Nomad API; CNI_ARGS' NOMAD_* do not count: a job
    ``evil;x`` (whose NOMAD_JOB_ID Nomad skips) naming itself ``train`` in its args is checked as ``evil;x``."""
    args = net.job_args(KEY, "default", "train", "main1", params())
    forged = cni_args(args, job="train")  # what CNI_ARGS say
    assert net.admit(KEY, forged).job_id == "train"
    with pytest.raises(net.AdmissionError, match="MAC does not match"):
        net.admit(KEY, forged, ("default", "evil;x", "main1"))
    assert net.admit(KEY, dict(forged, NOMAD_JOB_ID="other"), ("default", "train", "main1")).job_id == "train"


def test_slots_give_unique_vni_and_subnet():
    seen = {net.slot_network(s) for s in range(net.slot_count())}
    assert len(seen) == net.slot_count() == 2048
    assert len({vni for vni, _subnet in seen}) == len({subnet for _vni, subnet in seen}) == 2048
    assert net.slot_network(0) == (net.VNI_BASE, "10.200.0.0/24")
    with pytest.raises(net.NetworkError, match="slot must be an integer from 0 to 2047"):
        net.slot_network(2048)


def test_the_right_job_and_group_are_admitted():
    p = params()
    adm = net.admit(KEY, cni_args(net.job_args(KEY, "default", "train", "main1", p)))
    assert (adm.namespace, adm.job_id, adm.group, adm.alloc_id, adm.params) == ("default", "train", "main1", "alloc-1", p)


@pytest.mark.parametrize("where", [{"job": "other"}, {"namespace": "prod"}, {"group": "sub1"}])
def test_a_copy_in_another_job_namespace_or_group_is_refused(where):
    args = net.job_args(KEY, "default", "train", "main1", params())
    with pytest.raises(net.AdmissionError, match="MAC does not match"):
        net.admit(KEY, cni_args(args, **where))


def test_a_job_cannot_claim_another_identity_in_its_own_args():
    args = dict(net.job_args(KEY, "default", "train", "main1", params()), NOMAD_JOB_ID="train", NOMAD_NAMESPACE="default")
    got = cni_args(args, job="evil")  # Nomad's client adds its keys after the job's: they win
    assert got["NOMAD_JOB_ID"] == "evil"
    with pytest.raises(net.AdmissionError, match="MAC does not match"):
        net.admit(KEY, got)


@pytest.mark.parametrize("key,value", [("BAI_VNI", "65542"), ("BAI_NET", "10.200.9.0/24"), ("BAI_MTU", "1400"),
                                       ("BAI_AGENTS", net.encode_agents(["10.0.0.1", "10.0.0.2", "10.0.0.9"])), ("BAI_SID", SID.replace("3", "4"))])
def test_every_parameter_is_covered_by_the_mac(key, value):
    args = dict(net.job_args(KEY, "default", "train", "main1", params()), **{key: value})
    with pytest.raises(net.AdmissionError, match="MAC does not match"):
        net.admit(KEY, cni_args(args))


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6, 64, 1000])
def test_agents_are_packed_four_bytes_each_and_read_back(count):
    agents = [net.ip4_text(0x0A000000 + 7919 * i) for i in range(count - 1)] + ["255.255.255.255"]
    text = net.encode_agents(agents)
    assert net.decode_agents(text) == tuple(agents)
    assert len(text) == -(-4 * count * 4 // 3) and net._B64URL.issuperset(text)  # base64url, no padding


@pytest.mark.parametrize("text,why", [
    ("CgAAAQ==", "packed in base64url"),   # padding: "=" breaks libcni's LoadArgs
    ("CgAA+Q", "packed in base64url"),     # the standard alphabet
    ("CgAAAQo", "packed in base64url"),    # 5 bytes: not whole addresses
    ("CgAAAR", "one base64url form"),      # unused low bits set: another text for 10.0.0.1
    ("10.0.0.1,10.0.0.2", "packed in base64url"),  # version 1's form under version 2
])
def test_agents_in_another_form_are_refused(text, why):
    with pytest.raises(net.NetworkError, match=why):
        net.decode_agents(text)


def version_1_args(namespace, job, group, p):
    """What a job rendered before version 2 carries (agents as dotted quads joined by ","), signed as it was."""
    return net.signed_args(KEY, namespace, job, group, dict(p.args("2"), BAI_V="1", BAI_AGENTS=",".join(p.agents)))


def test_version_1_args_of_a_running_session_are_still_admitted():
    """A container of a session created before the upgrade restarts after the role installed this plugin."""
    p = params()
    adm = net.admit(KEY, cni_args(version_1_args("default", "train", "main1", p)))
    assert adm.params == p
    with pytest.raises(net.AdmissionError, match="MAC does not match"):  # the version is under the MAC too
        net.admit(KEY, cni_args(dict(version_1_args("default", "train", "main1", p), BAI_V="2")))
    with pytest.raises(net.AdmissionError, match="BAI_V '9' is not a version this plugin knows"):
        net.admit(KEY, cni_args(dict(net.job_args(KEY, "default", "train", "main1", p), BAI_V="9")))


def big_params(count):
    return net.NetworkParams(SID, net.VNI_BASE, "10.0.0.0/8", tuple(net.ip4_text(0xC0000000 + i) for i in range(count)), 1450)


def test_no_more_agents_than_cni_args_can_carry():
    """CNI_ARGS is one environment string of the plugin's process; past MAX_ARG_STRLEN exec fails with E2BIG."""
    most = net.max_agents()
    args = net.job_args(KEY, "n" * 128, "j" * 64, "sub" + "9" * 60, net.check_params(big_params(most)))
    text = net.nomad_cni_args(args, "r" * 128, "n" * 128, "j" * 64, "sub" + "9" * 60, SID)
    assert len("CNI_ARGS=" + text) + 1 <= net.MAX_ARG_STRLEN
    with pytest.raises(net.NetworkError, match="%d agents do not fit CNI_ARGS in args version 3 \\(at most %d\\): "
                       "version 4 carries them in the agent table" % (most + 1, most)):
        net.check_params(big_params(most + 1)).args("3")
    assert net.check_params(big_params(most + 1)).args("4")["BAI_N"] == str(most + 1)  # version 4: no such limit


def test_max_arg_strlen_is_this_kernels_limit():
    """The limit the agent count is held to is the kernel's: one byte more and exec refuses."""
    true = "/bin/true"
    fits = "x" * (net.MAX_ARG_STRLEN - len("CNI_ARGS=") - 1)
    subprocess.run([true], env={"CNI_ARGS": fits}, check=True)
    with pytest.raises(OSError) as err:
        subprocess.run([true], env={"CNI_ARGS": fits + "x"}, check=True)
    assert err.value.errno == errno.E2BIG


def test_another_key_is_refused_and_missing_parts_are_named():
    args = net.job_args(KEY, "default", "train", "main1", params())
    with pytest.raises(net.AdmissionError, match="MAC does not match"):
        net.admit(bytes(32), cni_args(args))
    with pytest.raises(net.AdmissionError, match="lack the session network parameters BAI_V, BAI_SID"):
        net.admit(KEY, cni_args({}))
    old_client = net.parse_cni_args("IgnoreUnknown=true;" + ";".join("%s=%s" % kv for kv in args.items()))
    with pytest.raises(net.AdmissionError, match="lack NOMAD_NAMESPACE, NOMAD_JOB_ID, NOMAD_GROUP_NAME: Nomad 1.10"):
        net.admit(KEY, old_client)


def test_nomad_cni_args_skips_values_with_a_semicolon_as_nomad_does():
    text = net.nomad_cni_args({"A": "1"}, "global", "default", "job;x", "g", "a")
    assert "NOMAD_JOB_ID" not in net.parse_cni_args(text) and text.startswith("IgnoreUnknown=true;A=1;")


def test_layout_splits_the_subnet_into_disjoint_agent_blocks():
    p = params()
    lays = [net.layout(p, ip) for ip in p.agents]
    assert [lay.index for lay in lays] == [0, 1, 2]
    assert len({(lay.bridge, lay.vxlan) for lay in lays}) == 1 and len(lays[0].bridge) <= 15
    assert lays[0].gateway == "10.200.5.1" and lays[0].range_start == "10.200.5.2"
    assert lays[1].peers == ("10.0.0.1", "10.0.0.3")
    ends = [(lay.range_start, lay.range_end) for lay in lays]
    assert all(a[1] < b[0] for a, b in zip(ends, ends[1:]))
    with pytest.raises(net.AdmissionError, match="not one of the session's agents"):
        net.layout(p, "10.0.0.4")


def test_agent_blocks_are_disjoint_and_fill_the_subnet_in_order():
    for subnet, count in (("10.200.5.0/24", 3), ("10.200.0.0/17", 10000), ("10.200.0.0/24", 1)):
        blocks = [net.agent_block(subnet, count, i) for i in range(count)]
        nw = ipaddress.IPv4Network(subnet)
        spans = [(int(ipaddress.IPv4Address(g)), int(ipaddress.IPv4Address(e))) for g, _s, e in blocks]
        assert spans[0][0] == int(nw.network_address) + 1 and spans[-1][1] < int(nw.broadcast_address)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        assert all(int(ipaddress.IPv4Address(s)) == g + 1 for (g, _e), (_g, s, _x) in zip(spans, blocks))
    with pytest.raises(net.NetworkError, match="too small"):
        net.agent_block("10.200.0.0/24", 200, 0)


@pytest.mark.parametrize("change,message", [
    ({"session_id": "nope"}, "BAI_SID must be a UUID"),
    ({"vni": 5}, "BAI_VNI must be from"),
    ({"subnet": "8.8.8.0/24"}, "private IPv4 network"),
    ({"agents": ("10.0.0.1", "10.0.0.1")}, "lists an address twice"),
    ({"agents": ()}, "at least one agent"),
    ({"mtu": 100}, "BAI_MTU must be from"),
])
def test_bad_parameters_are_named(change, message):
    with pytest.raises(net.NetworkError, match=message):
        net.check_params(params(**change))


def test_records_behave_as_named_tuples():
    p = params()
    fields = ("session_id", "vni", "subnet", "agents", "mtu", "encryption", "wg_keys", "tunnel_prefix",
              "table_namespace")
    assert p.session_id == p[0] == SID and p._fields == fields
    assert p._replace(mtu=1400).mtu == 1400 and p._replace(mtu=1400)[:4] == p[:4]
    assert repr(p).startswith("NetworkParams(session_id='%s', vni=" % SID)
    assert p == net.NetworkParams(*p) and hash(p) == hash(tuple(p))
    with pytest.raises(TypeError, match="takes 9 values"):
        net.NetworkParams(SID, 1)
    assert net.NetworkParams(*p[:5]) == p and p.encryption == "none"  # the fields added last have defaults
    with pytest.raises(TypeError, match="has no field color"):
        p._replace(color="red")


@pytest.mark.parametrize("sid", [SID.upper(), SID + "0", SID[:-1], SID.replace("-", ""), SID + "\n", "g" + SID[1:],
                                 "-".join(["3614fdf3", "0e04", "4b5c9a5e", "1d2b3c4d5e6f"])])
def test_session_ids_other_than_a_lowercase_uuid_are_refused(sid):
    if sid == SID.upper():  # check_params lower-cases
        assert net.check_params(params(session_id=sid)).session_id == SID
        return
    with pytest.raises(net.NetworkError, match="BAI_SID must be a UUID"):
        net.check_params(params(session_id=sid))


@pytest.mark.parametrize("text", ["ab" * 31, "ab" * 32 + "a", "AB" * 32, "ab" * 31 + "zz", "ab " * 32])
def test_malformed_keys_are_refused(tmp_path, text):
    bad = tmp_path / "key"
    bad.write_text(text)
    with pytest.raises(net.NetworkError, match="hex digits"):
        net.read_key(str(bad))


def test_keys_are_checked_and_never_echoed(tmp_path):
    bad = tmp_path / "key"
    bad.write_text("not-a-key-but-a-secret")
    with pytest.raises(net.NetworkError) as e:
        net.read_key(str(bad))
    assert "not-a-key-but-a-secret" not in str(e.value)
    good = tmp_path / "good"
    good.write_text(net.generate_key() + "\n")
    assert len(net.read_key(str(good))) == 32


def test_the_default_key_path_is_read_from_the_home_directory(tmp_path, monkeypatch):
    """Issue 20: ``~/.config/backendai-cluster/network.key`` (the default) is expanded for every caller, not only
    where Ansible's ``path`` options expand it (the CLI, scripts and benchmarks pass it as written)."""
    from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_NETWORK_KEY_FILE
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.network_control import NetworkControl

    monkeypatch.setenv("HOME", str(tmp_path))
    key_file = tmp_path / ".config" / "backendai-cluster" / "network.key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text(net.generate_key() + "\n")
    assert DEFAULT_NETWORK_KEY_FILE.startswith("~/")
    assert net.read_key(DEFAULT_NETWORK_KEY_FILE) == net.read_key(str(key_file))
    control = NetworkControl()
    assert control.key_file == str(key_file) and len(control.key()) == 32
    key_file.unlink()
    with pytest.raises(Exception) as err:
        NetworkControl().key()
    assert str(key_file) in str(err.value) and "~" not in str(err.value)


def test_the_plugin_modules_import_nothing_slow():
    """The plugin starts for every container: typing, dataclasses, subprocess, json, re or collections at import
    would cost more than its ADD (benchmarks/cni_add.py); so would http.client (~30 ms with email and socket) for
    the allocation look-up (``_cni_nomad`` speaks HTTP over ``_socket``). (OpenSSL, through the stdlib ``hmac``,
    is the one slow import kept: ~3 ms, see docs/benchmarks.md.)"""
    here = os.path.dirname(net.__file__)
    code = ("import sys; sys.path.insert(0, %r); import _cni_plugin; bad = {'typing', 'dataclasses', 'subprocess', "
            "'uuid', 'contextlib', 'ipaddress', 'json', 're', 'collections', 'socket', 'ssl', 'http', "
            "'email', 'urllib'} & set(sys.modules); print(sorted(bad))" % here)
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("text", ["10.0.0.1", "0.0.0.0", "255.255.255.255", "192.168.1.10"])
def test_ip4_agrees_with_ipaddress(text):
    assert net.ip4(text) == int(ipaddress.IPv4Address(text)) and net.ip4_text(net.ip4(text)) == text


@pytest.mark.parametrize("text", ["10.0.0", "10.0.0.256", "a.b.c.d", "10.0.0.01", "1.2.3.4.5", "", "\u0661.1.1.1",
                                  "+1.2.3.4", " 1.2.3.4", "1.2.3.4 ", "1_0.2.3.4", "-0.2.3.4", "1..3.4", "10.0.0.1\n",
                                  # what inet_aton (ip4's fast path) takes but is not a dotted quad in its one form
                                  "1", "127.1", "10.1.2", "0x7f.0.0.1", "017.0.0.1", "10.0.0.1\0", "1.2.3.4\t"])
def test_ip4_refuses_what_ipaddress_refuses(text):
    with pytest.raises(ValueError):
        ipaddress.IPv4Address(text)
    with pytest.raises(net.NetworkError):
        net.ip4(text)


@pytest.mark.parametrize("a,b", [("10.200.0.0/24", "10.200.0.0/16"), ("10.200.1.0/24", "10.200.2.0/24"),
                                 ("10.0.0.0/8", "172.16.0.0/12"), ("0.0.0.0/0", "192.168.1.0/24"),
                                 ("10.200.5.128/25", "10.200.5.0/25")])
def test_net4_and_overlaps_agree_with_ipaddress(a, b):
    na, nb = ipaddress.IPv4Network(a), ipaddress.IPv4Network(b)
    assert net.net4(a) == (int(na.network_address), na.prefixlen) and net.net4_text(net.net4(a)) == a
    assert net.overlaps(net.net4(a), net.net4(b)) is na.overlaps(nb)
    assert net._private(net.net4(a)) is (na.is_private and na.prefixlen >= 8 and not na.is_loopback
                                         and na.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
                                         or na.subnet_of(ipaddress.IPv4Network("172.16.0.0/12"))
                                         or na.subnet_of(ipaddress.IPv4Network("192.168.0.0/16")))
    with pytest.raises(net.NetworkError, match="host bits"):
        net.net4("10.200.5.1/24")


def test_keys_derived_together_are_the_keys_derived_one_by_one():
    """A render derives every agent's keys with one HKDF extract of the cluster key and one of each agent key: the
    same keys as each derivation on its own (what an agent and the plugin do)."""
    cluster = bytes(range(32))
    names = ["node-%d" % i for i in range(5)] + ["ünïcode"]
    together = net.derive_agent_keys(cluster, names)
    assert together == {n: net.derive_agent_key(cluster, n) for n in names}
    for key in together.values():
        assert net.agent_secrets(key) == (net.network_mac_key(key), net.wireguard_private_key(key))
    with pytest.raises(net.NetworkError):
        net.derive_agent_keys(cluster, ["bad\nname"])


def test_a_group_signer_signs_as_signed_args_and_the_plugin_admits_it():
    p = params()
    args = p.args()
    signer = net.GroupSigner("team-a", "train", args)
    for group in ("main1", "sub1", "grüppe"):
        key = net.signing_key(KEY, "agent-x")
        assert signer.sign(key, group) == net.signed_args(key, "team-a", "train", group, args)
