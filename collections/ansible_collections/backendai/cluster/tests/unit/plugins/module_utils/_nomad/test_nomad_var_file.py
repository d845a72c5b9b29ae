# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The keypair as a Nomad variable spec file: what `nomad var put` reads, and read back for the next render."""

from __future__ import annotations

import json

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import var_file

PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAbase64EOT\nEOTline\n-----END OPENSSH PRIVATE KEY-----\n"
PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVzZXI backendai-cluster"


def test_hcl_has_path_namespace_and_items_and_reads_back() -> None:
    text = var_file.render("nomad/jobs/s1", "research", PRIVATE, PUBLIC)
    assert text.startswith('path      = "nomad/jobs/s1"\nnamespace = "research"\n\nitems {\n')
    # the key contains "EOT" at a line start: the heredoc uses a delimiter that occurs nowhere in it
    assert "  ssh_private_key = <<EOT1\n" + PRIVATE + "EOT1\n" in text
    assert '  ssh_public_key  = "%s"\n}\n' % PUBLIC in text
    assert var_file.read_keypair(text) == ("nomad/jobs/s1", PRIVATE, PUBLIC)


def test_json_is_the_api_variable_object() -> None:
    text = var_file.render("nomad/jobs/s1", "", PRIVATE, PUBLIC, fmt="json")
    assert json.loads(text) == {"Path": "nomad/jobs/s1", "Items": {"ssh_private_key": PRIVATE, "ssh_public_key": PUBLIC}}
    assert var_file.read_keypair(text, "json") == ("nomad/jobs/s1", PRIVATE, PUBLIC)


@pytest.mark.parametrize("text, fmt", [("", "hcl"), ("path = \"x\"\n", "hcl"), ("{", "json"), ("{}", "json")])
def test_anything_else_is_not_a_keypair(text: str, fmt: str) -> None:
    assert var_file.read_keypair(text, fmt) is None


def test_any_items_in_their_order_multi_line_ones_as_heredocs() -> None:
    text = var_file.render_items("a/b", "", {"one": "1", "longer_key": "x\ny\n"})
    assert text == 'path = "a/b"\n\nitems {\n  one        = "1"\n  longer_key = <<EOT\nx\ny\nEOT\n}\n'
