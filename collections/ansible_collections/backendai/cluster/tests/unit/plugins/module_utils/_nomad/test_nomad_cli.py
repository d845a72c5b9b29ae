# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad CLI path: claim files equal to what _network_claims writes, slot choice and its errors, the commands."""

from __future__ import annotations

import json

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import cli
from ansible_collections.backendai.cluster.plugins.module_utils._errors import InputError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_network import preferred_slot
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.claims import Claim

SID = "0b6f3c1e-8a52-5d1e-9c2a-3f4e5d6c7b8a"


def test_one_claim_file_per_slot_of_the_block_with_the_claims_items() -> None:
    claim = Claim(6, "team-a", "big", SID, 2)
    files = cli.claim_files(claim, "infra", "json")
    assert [name for name, _text in files] == ["big.slot-6.var.json", "big.slot-7.var.json"]
    for (_name, text), slot in zip(files, (6, 7)):
        assert json.loads(text) == {"Path": "backendai-cluster/network/slots/%d" % slot, "Namespace": "infra",
                                    "Items": {"namespace": "team-a", "job": "big", "session_id": SID, "first": "6",
                                              "slots": "2"}}


def test_a_claim_in_hcl_is_laid_out_as_nomad_fmt_leaves_it() -> None:
    (_name, text), = cli.claim_files(Claim(5, "default", "s1", SID), "default")
    assert text == ('path      = "backendai-cluster/network/slots/5"\nnamespace = "default"\n\nitems {\n'
                    '  namespace  = "default"\n  job        = "s1"\n  session_id = "%s"\n  first      = "5"\n'
                    '  slots      = "1"\n}\n' % SID)


@pytest.mark.parametrize("name, ours", [("s1.slot-5.var.hcl", True), ("s1.slot-12.var.json", True),
                                        ("s1.var.hcl", False), ("s10.slot-5.var.hcl", False),
                                        ("s1.slot-x.var.hcl", False), ("s1.slot-5.var.hcl.bak", False)])
def test_claim_files_of_a_session_are_told_apart(name: str, ours: bool) -> None:
    assert cli.is_claim_file("s1", name) is ours


def test_the_slot_is_the_preferred_one_or_the_given_one() -> None:
    assert cli.choose_slot(None, "default", "s1", 1) == preferred_slot("default", "s1")
    assert cli.choose_slot(None, "default", "s1", 4) == preferred_slot("default", "s1") // 4 * 4
    assert cli.choose_slot(0, "default", "s1", 1) == 0 and cli.choose_slot(2047, "default", "s1", 1) == 2047
    assert cli.choose_slot(2044, "default", "s1", 4) == 2044


@pytest.mark.parametrize("slot, slots, message", [
    (2048, 1, "network_slot: must be an integer from 0 to 2047 (one of the cluster's 2048 session network slots) "
              "(got 2048)"),
    (-1, 1, "network_slot: must be an integer from 0 to 2047"),
    (3, 2, "network_slot: must be a multiple of 2 from 0 to 2046: this session needs an aligned block of 2 slots of "
           "the cluster's 2048 (got 3)"),
    (2048, 4, "network_slot: must be a multiple of 4 from 0 to 2044"),
])
def test_a_bad_slot_is_refused_naming_the_field_and_the_range(slot: int, slots: int, message: str) -> None:
    with pytest.raises(InputError) as err:
        cli.choose_slot(slot, "default", "s1", slots)
    assert str(err.value.problems[0]).startswith(message)


def test_the_commands_claim_first_name_every_namespace_and_quote_paths() -> None:
    assert cli.run_commands(["/o/s1.slot-5.var.hcl"], "infra", "/o/s1.var.hcl", "team-a", "/o/s1.nomad.hcl") == [
        "nomad var put -namespace=infra -check-index=0 @/o/s1.slot-5.var.hcl",
        "nomad var put -namespace=team-a @/o/s1.var.hcl",
        "nomad job run /o/s1.nomad.hcl"]
    assert cli.run_commands([], "default", "/my out/s1.var.json", "", "/my out/s1.json") == [
        "nomad var put '@/my out/s1.var.json'", "nomad job run -json '/my out/s1.json'"]
    assert cli.teardown_commands("s1", "team-a", "nomad/jobs/s1", "infra", [6, 7]) == [
        "nomad job stop -namespace=team-a -purge s1",
        "nomad var purge -namespace=infra backendai-cluster/network/slots/6",
        "nomad var purge -namespace=infra backendai-cluster/network/slots/7",
        "nomad var purge -namespace=team-a nomad/jobs/s1"]
