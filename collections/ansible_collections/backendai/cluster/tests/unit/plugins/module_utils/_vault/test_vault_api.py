# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_vault_api fed by recorded Vault KV v2 exchanges (tests/unit/fixtures/vault/*.json), without any server."""

from __future__ import annotations

import json
import typing as t

import pytest

requests = pytest.importorskip("requests")
pytest.importorskip("hvac")

from ansible_collections.backendai.cluster.plugins.module_utils._vault import client as va  # noqa: E402
from ansible_collections.backendai.cluster.tests.unit.plugins.module_utils.recorded_http import RecordedHTTP, load  # noqa: E402

TOKEN = "hvs.unit-test-vault-token"
NOT_FOUND = {"status": 404, "headers": {"Content-Type": "application/json"}, "body": {"errors": []}}


def fixture(name: str) -> t.Dict[str, t.Any]:
    return load("vault", name)


@pytest.fixture
def adapter() -> RecordedHTTP:
    return RecordedHTTP("vault", NOT_FOUND)


def make_client(adapter: RecordedHTTP, **options: t.Any) -> va.VaultClient:
    session = adapter.session()
    params = {"vault_addr": "https://vault.test:8200", "vault_token": TOKEN}
    params.update(options)
    return va.VaultClient(va.VaultConnection.from_params(params), session=session)


def test_write_read_delete(adapter: RecordedHTTP) -> None:
    adapter.add("kv2_write")
    adapter.add("kv2_read")
    adapter.add("kv2_delete_metadata")
    client = make_client(adapter, vault_namespace="team-a", vault_ca_cert="/etc/vault/ca.pem", timeout=4)
    meta = client.write_secret("secret", "backendai/web", {"ssh_private_key": "k"})
    request, kwargs = adapter.sent[-1]
    assert meta["version"] == 1
    assert json.loads(request.body) == {"options": {"cas": 0}, "data": {"ssh_private_key": "k"}}
    assert request.headers["X-Vault-Token"] == TOKEN and request.headers["X-Vault-Namespace"] == "team-a"
    assert kwargs["verify"] == "/etc/vault/ca.pem" and kwargs["timeout"] == 4
    secret = client.read_secret("secret", "/backendai/web/")
    assert secret["data"] == {"ssh_private_key": "FIXTURE-PRIVATE-KEY"} and secret["metadata"]["version"] == 1
    client.delete_secret("secret", "backendai/web")
    assert adapter.sent[-1][0].method == "DELETE" and adapter.sent[-1][0].url.endswith("/v1/secret/metadata/backendai/web")
    client.write_secret("secret", "backendai/web", {"k": "v"}, cas=None)
    assert "cas" not in json.loads(adapter.sent[-1][0].body)["options"]


def test_tls_settings(adapter: RecordedHTTP) -> None:
    adapter.add("kv2_read")
    make_client(adapter).read_secret("secret", "backendai/web")
    assert adapter.sent[-1][1]["verify"] is True
    # hvac turns verify=False into the session's True unless the session itself is set: it is
    make_client(adapter, validate_certs=False).read_secret("secret", "backendai/web")
    assert adapter.sent[-1][1]["verify"] is False


def test_not_found_is_none(adapter: RecordedHTTP) -> None:
    adapter.add("kv2_read_not_found")
    assert make_client(adapter).read_secret("secret", "backendai/web") is None


@pytest.mark.parametrize("name, call, cls, status, text", [
    ("kv2_write_cas_mismatch", "write", va.VaultCASConflict, 400, "check-and-set parameter did not match"),
    ("kv2_permission_denied", "read", va.VaultError, 403, "permission denied"),
])
def test_errors(adapter: RecordedHTTP, name: str, call: str, cls: t.Any, status: int, text: str) -> None:
    adapter.add(name)
    client = make_client(adapter)
    with pytest.raises(cls) as err:
        if call == "write":
            client.write_secret("secret", "backendai/web", {"k": "v"})
        else:
            client.read_secret("secret", "backendai/web")
    assert err.value.status == status and text in str(err.value) and "HTTP %d" % status in str(err.value)
    assert TOKEN not in str(err.value) and err.value.__context__ is None


def test_unknown_mount_is_an_error_not_absent(adapter: RecordedHTTP) -> None:
    adapter.add("kv2_no_route")
    with pytest.raises(va.VaultError) as err:
        make_client(adapter).read_secret("kv", "backendai/web")
    assert err.value.status == 404 and "no handler for route" in str(err.value)


@pytest.mark.parametrize("exc, fragment", [
    (requests.exceptions.ReadTimeout("read timed out"), "timeout"),
    (requests.exceptions.SSLError("certificate verify failed"), "TLS error"),
    (requests.exceptions.ConnectionError("refused"), "cannot talk"),
])
def test_transport_errors(adapter: RecordedHTTP, exc: BaseException, fragment: str) -> None:
    adapter.routes[("GET", "/v1/secret/data/x")] = exc
    with pytest.raises(va.VaultError) as err:
        make_client(adapter).read_secret("secret", "x")
    assert err.value.status is None and fragment in str(err.value)


def test_connection_options(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = va.VaultConnection.from_params({"vault_addr": "https://v:8200", "vault_token": TOKEN, "validate_certs": "no"})
    assert conn.verify is False and TOKEN not in repr(conn)
    ca = va.VaultConnection.from_params({"vault_addr": "https://v:8200", "vault_token": TOKEN, "vault_namespace": "ns",
                                         "vault_ca_cert": "/ca"})
    assert (ca.vault_namespace, ca.verify) == ("ns", "/ca")
    with pytest.raises(ValueError):
        va.VaultConnection(vault_addr="vault:8200")
    monkeypatch.setenv("VAULT_TOKEN", "from-env")  # hvac would pick it up when the token is None
    adapter = RecordedHTTP("vault", NOT_FOUND)
    adapter.add("kv2_read")
    make_client(adapter, vault_token=None).read_secret("secret", "backendai/web")
    assert "X-Vault-Token" not in adapter.sent[-1][0].headers
