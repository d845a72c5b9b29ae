# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The session keypair and the IDs derived from it."""

from __future__ import annotations

import uuid

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._session.keys import (
    derive_kernel_id,
    derive_session_id,
    generate_keypair,
)


def test_ed25519_keypair() -> None:
    kp = generate_keypair()
    assert kp.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n") and kp.private_key.endswith("\n")
    assert kp.public_key.startswith("ssh-ed25519 ") and kp.public_key.endswith(" backendai-cluster")
    assert "PRIVATE" not in repr(kp) and kp.private_key not in repr(kp)


def test_rsa_keypair_and_bounds() -> None:
    kp = generate_keypair("rsa", 2048)
    assert kp.public_key.startswith("ssh-rsa ")
    with pytest.raises(ValueError):
        generate_keypair("rsa", 1024)
    with pytest.raises(ValueError):
        generate_keypair("dsa")


def test_keys_are_fresh() -> None:
    assert generate_keypair().public_key != generate_keypair().public_key


def test_session_and_kernel_ids() -> None:
    pub = generate_keypair().public_key
    sid = derive_session_id("s", pub)
    assert uuid.UUID(sid) and derive_session_id("s", pub) == sid
    assert derive_session_id("s", pub.replace("backendai-cluster", "other comment")) == sid  # comment ignored
    assert derive_session_id("t", pub) != sid
    assert derive_kernel_id(sid, "main1", True) == sid
    assert derive_kernel_id(sid, "sub1", False) != derive_kernel_id(sid, "sub2", False) != sid
