# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Both backends implement the one interface the modules call, and share the state=absent name rule."""

from __future__ import annotations

import inspect

import pytest

from ansible_collections.backendai.cluster.plugins.module_utils._errors import ModuleFailure
from ansible_collections.backendai.cluster.plugins.module_utils._local.local_backend import LocalBackend
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.nomad_backend import NomadBackend
from ansible_collections.backendai.cluster.plugins.module_utils._session.protocol import SessionBackend, absent_name


@pytest.mark.parametrize("backend", [LocalBackend, NomadBackend])
@pytest.mark.parametrize("method", ["present", "absent", "info"])
def test_both_backends_take_the_interface_arguments(backend: type, method: str) -> None:
    wanted = inspect.signature(getattr(SessionBackend, method)).parameters
    given = inspect.signature(getattr(backend, method)).parameters
    assert [(p.name, p.default) for p in given.values()] == [(p.name, p.default) for p in wanted.values()]


def test_absent_name() -> None:
    assert absent_name("s1", None) == "s1" and absent_name(None, {"name": "s1"}) == "s1"
    assert absent_name("s1", {"name": "s1", "image": "x"}) == "s1"
    with pytest.raises(ModuleFailure, match="name 's1' and spec.name 's2' differ"):
        absent_name("s1", {"name": "s2"})
    with pytest.raises(ModuleFailure, match="needs the session name"):
        absent_name(None, {"image": "x"})
