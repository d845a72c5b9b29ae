# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session network in a rendered job: every group's ``cni { args }`` admits exactly that group of that job.

Pure: a job is rendered and signed, a group's ``CNI.Args`` are taken as Nomad's client would pass them
(``${NOMAD_META_*}`` interpolated, then ``CNI_ARGS`` built with ``nomad_cni_args``: the job's args, then Nomad's
own identity keys) and checked with the plugin's admission (``_session_network.admit``). The attack tests on real
namespaces are in the local runtime's tests.
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import PlanError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import (
    UNSIGNED_MAC,
    JobNetwork,
    args_version_of_job,
    preferred_slot,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import dumps, register_request, render_job
from ansible_collections.backendai.cluster.plugins.module_utils._network._session_network import (
    VNI_BASE,
    AdmissionError,
    admit,
    derive_agent_key,
    signing_key,
    decode_agents,
    encode_agents,
    generate_key,
    nomad_cni_args,
    parse_cni_args,
    parse_key,
    slot_network,
)
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.cluster_cases import agents_list, client_args, make_plan

KEY = parse_key(generate_key())
OTHER_KEY = parse_key(generate_key())
UNDERLAY = {"a1": "192.168.50.11", "a2": "192.168.50.12"}


def multi_node_job(namespace: str = "team-a", slot: int = 7, key: t.Optional[bytes] = KEY, name: str = "train-42",
                   underlay: t.Optional[t.Mapping[str, str]] = None, version: str = "2") -> t.Dict[str, t.Any]:
    plan = make_plan(agents_list(("a1", 2000, 4096, 0), ("a2", 2000, 4096, 0)), name=name, cluster_size=4,
                     cluster_mode="multi-node", resources={"cpu": 1000, "memory": 2048})
    return render_job(plan, namespace=namespace, network=JobNetwork(slot=slot, underlay=underlay or UNDERLAY, key=key,
                                                                    args_version=version))


def key_of(job: t.Mapping[str, t.Any], group: str, cluster_key: bytes = KEY) -> bytes:
    """The MAC key the plugin of the agent ``group`` is pinned to checks with."""
    pinned = [g for g in job["TaskGroups"] if g["Name"] == group][0]["Constraints"][0]
    assert pinned["LTarget"] == "${node.unique.name}"
    return signing_key(cluster_key, pinned["RTarget"])


def cni_args_of(job: t.Mapping[str, t.Any], group: str, namespace: str, job_id: str, nomad_group: str = "") -> t.Dict[str, str]:
    """CNI_ARGS as the plugin receives them when ``group``'s args run as allocation of job_id/nomad_group."""
    text = nomad_cni_args(client_args(job, group), "global", namespace, job_id, nomad_group or group,
                          "0b7e8a52-93a3-4d6c-9f43-3a8d50c1b0e1")
    return parse_cni_args(text)


def test_every_group_is_admitted_as_itself() -> None:
    job = multi_node_job()
    vni, subnet = slot_network(7)
    for group in job["TaskGroups"]:
        args = group["Networks"][0]["CNI"]["Args"]
        # written out in every group: Nomad passes cni args to the plugin as the job has them (not interpolated)
        assert decode_agents(args["BAI_AGENTS"]) == ("192.168.50.11", "192.168.50.12")
        admitted = admit(key_of(job, group["Name"]), cni_args_of(job, group["Name"], "team-a", "train-42"))
        assert (admitted.namespace, admitted.job_id, admitted.group) == ("team-a", "train-42", group["Name"])
        assert admitted.params.vni == vni == VNI_BASE + 7 and admitted.params.subnet == subnet
        assert admitted.params.agents == ("192.168.50.11", "192.168.50.12")
        assert admitted.params.session_id == job["Meta"]["BACKENDAI_SESSION_ID"]
    assert "BAI_AGENTS" not in job["Meta"]


def test_every_arg_survives_libcni_load_args() -> None:
    """The reference plugins (bridge, host-local, portmap) read CNI_ARGS with libcni's ``types.LoadArgs``: it splits
    on ``;``, then each pair on ``=``, and fails the plugin on a pair that does not split in exactly two
    (containernetworking/cni ``pkg/types/args.go``). Base64 padding or a ``;`` in any arg would break the chain."""
    job = multi_node_job()
    for group in job["TaskGroups"]:
        text = nomad_cni_args(client_args(job, group["Name"]), "global", "team-a", "train-42", group["Name"], "a-1")
        pairs = [pair.split("=") for pair in text.split(";")]
        assert all(len(kv) == 2 for kv in pairs), [kv for kv in pairs if len(kv) != 2]


@pytest.mark.parametrize("namespace,job_id,group", [
    ("team-b", "train-42", "sub1"),       # the same job ID in another namespace
    ("team-a", "evil", "sub1"),           # another job presenting a copy of train-42's args
    ("team-a", "train-42", "sub2"),       # another group of the same job
])
def test_a_copy_of_the_args_in_another_job_namespace_or_group_is_refused(namespace: str, job_id: str, group: str) -> None:
    job = multi_node_job()
    with pytest.raises(AdmissionError, match="MAC does not match"):
        admit(key_of(job, "sub1"), cni_args_of(job, "sub1", namespace, job_id, group))


def test_each_group_is_signed_for_its_own_agent_only() -> None:
    """main1 and sub1 run on a1, sub2 and sub3 on a2: a group's args verify with its agent's key, not the other's,
    and not with the cluster key, which no agent holds."""
    job = multi_node_job()
    pinned = {g["Name"]: g["Constraints"][0]["RTarget"] for g in job["TaskGroups"]}
    assert pinned == {"main1": "a1", "sub1": "a1", "sub2": "a2", "sub3": "a2"}
    for group, agent in pinned.items():
        args = cni_args_of(job, group, "team-a", "train-42")
        assert admit(signing_key(KEY, agent), args).group == group
        for wrong in (signing_key(KEY, "a2" if agent == "a1" else "a1"), KEY, derive_agent_key(KEY, agent)):
            with pytest.raises(AdmissionError, match="MAC does not match"):
                admit(wrong, args)


def test_the_job_cannot_override_nomads_identity_keys() -> None:
    job = multi_node_job()
    group = job["TaskGroups"][1]
    # a forged job adds the victim's identity to its own args: Nomad's keys come after and win
    group["Networks"][0]["CNI"]["Args"].update(NOMAD_NAMESPACE="team-a", NOMAD_JOB_ID="train-42", NOMAD_GROUP_NAME="sub1")
    with pytest.raises(AdmissionError, match="MAC does not match"):
        admit(key_of(job, "sub1"), cni_args_of(job, "sub1", "team-x", "evil", "sub1"))


@pytest.mark.parametrize("key,value", [
    ("BAI_VNI", str(VNI_BASE + 8)), ("BAI_NET", "10.200.0.0/24"),
    ("BAI_AGENTS", encode_agents(["192.168.50.11", "192.168.50.99"])),
    ("BAI_AGENTS", "192.168.50.11,192.168.50.12"),  # the same agents, written as version 1
    ("BAI_MTU", "1400"), ("BAI_SID", "00000000-0000-4000-8000-000000000000"), ("BAI_V", "1"),
])
def test_every_edited_parameter_is_refused(key: str, value: str) -> None:
    job = multi_node_job()
    args = cni_args_of(job, "main1", "team-a", "train-42")
    args[key] = value
    with pytest.raises(AdmissionError):
        admit(key_of(job, "main1"), args)


def test_another_clusters_key_and_an_unsigned_render_are_refused() -> None:
    with pytest.raises(AdmissionError, match="MAC does not match"):
        admit(signing_key(OTHER_KEY, "a1"), cni_args_of(multi_node_job(), "main1", "team-a", "train-42"))
    unsigned = multi_node_job(key=None)
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_MAC"] for g in unsigned["TaskGroups"]} == {UNSIGNED_MAC}
    with pytest.raises(AdmissionError, match="MAC does not match"):
        admit(key_of(unsigned, "main1"), cni_args_of(unsigned, "main1", "team-a", "train-42"))


def test_a_job_can_be_rendered_in_the_version_a_running_session_carries() -> None:
    old, new = multi_node_job(version="1"), multi_node_job()
    assert (args_version_of_job(old), args_version_of_job(new), args_version_of_job(None)) == ("1", "2", None)
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_AGENTS"] for g in old["TaskGroups"]} == {"192.168.50.11,192.168.50.12"}
    for job in (old, new):
        assert admit(key_of(job, "sub1"), cni_args_of(job, "sub1", "team-a", "train-42")).params.agents == ("192.168.50.11", "192.168.50.12")
    old["TaskGroups"][0]["Networks"][0]["CNI"]["Args"]["BAI_V"] = "2"  # groups that disagree: no version to keep
    assert args_version_of_job(old) is None
    with pytest.raises(PlanError, match="BAI_V must be one of 1, 2, 3, 4, got '9'"):
        multi_node_job(version="9")


def test_a_new_multi_node_job_carries_every_agents_wireguard_key_under_the_mac() -> None:
    """Version 3: BAI_ENC, BAI_WG (each agent's public key, derived from its agent key) and BAI_TUN are signed; an agent
    finds its own key and its peers' (key, tunnel address, underlay address) in them, with no other list."""
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
    from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import wireguard_public_key
    job = multi_node_job(version="3")
    adm = admit(key_of(job, "sub1"), cni_args_of(job, "sub1", "team-a", "train-42"))
    p = adm.params
    assert p.encryption == "wireguard" and p.mtu == 1500 - 80 - 70
    assert p.wg_keys == tuple(wireguard_public_key(net.wireguard_private_key(net.derive_agent_key(KEY, a)))
                              for a in ("a1", "a2"))
    lay = net.layout(p, "192.168.50.12")
    assert lay.wg_key == net.wg_key_text(p.wg_keys[1]) and lay.tunnel.startswith(net.tunnel_prefix(KEY)[:4])
    assert lay.wg_peers == ((net.wg_key_text(p.wg_keys[0]), p.tunnel_addresses()[0], "192.168.50.11"),)
    for edit in ({"BAI_ENC": "none"}, {"BAI_WG": client_args(multi_node_job(version="3", key=b"k" * 32), "sub1")["BAI_WG"]}):
        args = dict(cni_args_of(job, "sub1", "team-a", "train-42"), **edit)
        with pytest.raises(AdmissionError, match="MAC does not match"):  # no stripping nor swapping keys
            admit(key_of(job, "sub1"), args)
    unsigned = client_args(multi_node_job(version="3", key=None), "sub1")
    assert unsigned["BAI_TUN"] == "fd0000000000" and unsigned["BAI_MAC"] == UNSIGNED_MAC
    opted_out = make_plan(agents_list(("a1", 2000, 4096, 0), ("a2", 2000, 4096, 0)), cluster_size=4, name="train-42",
                          cluster_mode="multi-node", resources={"cpu": 1000, "memory": 2048},
                          network={"underlay_encryption": "none"})
    args = client_args(render_job(opted_out, namespace="team-a", network=JobNetwork(slot=7, underlay=UNDERLAY, key=KEY)),
                       "sub1")
    assert args["BAI_ENC"] == "none" and "BAI_WG" not in args and args["BAI_MTU"] == "1450"


def test_placeholder_addresses_are_never_signed() -> None:
    job = multi_node_job(underlay={"a1": "192.168.50.11"})  # a2's address unknown
    assert {decode_agents(g["Networks"][0]["CNI"]["Args"]["BAI_AGENTS"]) for g in job["TaskGroups"]} == {
        ("192.168.50.11", "198.18.0.2")}
    assert {g["Networks"][0]["CNI"]["Args"]["BAI_MAC"] for g in job["TaskGroups"]} == {UNSIGNED_MAC}


def test_the_default_namespace_is_signed_as_nomad_names_it() -> None:
    job = multi_node_job(namespace="")
    assert admit(key_of(job, "sub2"), cni_args_of(job, "sub2", "default", "train-42")).namespace == "default"


def test_render_only_uses_the_preferred_slot_and_stays_deterministic() -> None:
    plan = make_plan(cluster_size=2)
    one, two = render_job(plan), render_job(plan)
    assert one == two
    slot = preferred_slot("default", plan.spec.name)
    assert one["TaskGroups"][0]["Networks"][0]["CNI"]["Args"]["BAI_VNI"] == str(VNI_BASE + slot)


def test_bad_underlay_addresses_are_a_plan_error() -> None:
    with pytest.raises(PlanError, match="session network cannot be laid out: BAI_AGENTS must be IPv4"):
        multi_node_job(underlay={"a1": "not-an-ip", "a2": "192.168.50.12"})


def test_the_key_is_nowhere_in_the_job_nor_in_a_repr() -> None:
    text = dumps(register_request(multi_node_job()))
    assert KEY.hex() not in text and KEY.hex()[:16] not in text
    assert "key=" not in repr(JobNetwork(key=KEY)) and KEY.hex() not in repr(JobNetwork(key=KEY))


def test_block_sizes_follow_the_largest_agent_share() -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import block_network, slots_needed

    assert slots_needed(1, 253) == 1 and slots_needed(1, 254) == 2  # a /24 has 254 hosts: the bridge + 253
    assert slots_needed(127, 1) == 1 and slots_needed(128, 1) == 2  # each agent's block: bridge + containers
    assert slots_needed(205, 5) == 8  # the benchmark's 1,024 containers over 205 agents: a /21
    assert block_network(8, 8) == (VNI_BASE + 8, "10.200.8.0/21")
    with pytest.raises(ValueError, match="multiple of 2"):
        block_network(4, 8)
    with pytest.raises(PlanError, match="cannot hold"):
        slots_needed(10, 100000)
