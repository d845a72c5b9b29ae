# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest fixtures starting the API doubles; import them into a test module or a conftest::

    from nomad_double.fixtures import nomad_double, nomad_double_factory, vault_double  # noqa: F401

Every double is stopped at teardown, and the fixture fails the test if a server thread or a
request thread of the double is left running.
"""

from __future__ import annotations

import threading
import typing as t

import pytest

from .pki import TestPKI, make_test_pki
from .server import NomadAPIDouble
from .vault import VaultKVDouble


def _double_threads() -> t.List[threading.Thread]:
    return [th for th in threading.enumerate() if th.name.startswith(("Nomad API double", "Vault API double"))]


class _Factory:
    def __init__(self, cls: t.Any, pki: TestPKI) -> None:
        self._cls = cls
        self._pki = pki
        self.started: t.List[t.Any] = []

    def __call__(self, tls: bool = False, **kwargs: t.Any) -> t.Any:
        """Start a double; ``tls=True`` serves HTTPS with the session's test PKI (``double.pki``)."""
        double = self._cls(tls=self._pki if tls else False, **kwargs)
        double.start()
        self.started.append(double)
        return double

    def stop_all(self) -> None:
        for double in self.started:
            double.stop()
        leftover = [d for d in self.started if d.running]
        assert not leftover, "API double threads still running: %r" % leftover


@pytest.fixture(scope="session")
def test_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPKI:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (PEM file paths)."""
    return make_test_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def nomad_double_factory(test_pki: TestPKI) -> t.Iterator[_Factory]:
    before = set(_double_threads())
    factory = _Factory(NomadAPIDouble, test_pki)
    yield factory
    factory.stop_all()
    assert set(_double_threads()) <= before, "a Nomad API double thread outlived its test"


@pytest.fixture
def nomad_double(nomad_double_factory: _Factory) -> NomadAPIDouble:
    """A plain-HTTP Nomad API double, no ACL, no nodes (add them with ``add_node``)."""
    return nomad_double_factory()


@pytest.fixture
def vault_double_factory(test_pki: TestPKI) -> t.Iterator[_Factory]:
    factory = _Factory(VaultKVDouble, test_pki)
    yield factory
    factory.stop_all()


@pytest.fixture
def vault_double(vault_double_factory: _Factory) -> VaultKVDouble:
    """A plain-HTTP Vault KV v2 API double with a ``secret/`` mount and token ``vault-root-token``."""
    return vault_double_factory(token="vault-root-token")
