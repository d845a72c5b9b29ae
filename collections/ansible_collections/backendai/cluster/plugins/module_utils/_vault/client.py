# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one Vault client of this collection: KV v2 read/write/delete through hvac.

Mirrors :mod:`_nomad.api`: :class:`VaultConnection` holds the options (``module.params``, with the
argument spec's VAULT_* fallbacks), :class:`VaultClient` maps every failure to one
:class:`VaultError` with the HTTP status and Vault's ``errors`` text, never the token.

What hvac 2.4.0 does that this module works around:

* ``hvac.Client()`` reads VAULT_ADDR, VAULT_TOKEN (and ``~/.vault-token``), VAULT_CACERT,
  VAULT_CAPATH and VAULT_CLIENT_CERT/KEY behind the caller's back when an argument is None;
  here every argument is passed explicitly (env fallbacks belong to the Ansible argument spec).
* When given a ``requests.Session``, its adapter replaces ``verify=False`` by the session's
  default ``verify=True`` (hvac issue 991 "fix"); the session is configured before it is passed.
* Its exceptions carry no HTTP status (only a class per status); the status is recorded from the
  response with a session hook. Transport errors (``requests`` exceptions) are not wrapped by
  hvac; they are mapped here.
* ``read_secret_version`` warns unless ``raise_on_deleted_version`` is given; it is given.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field, fields

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_TIMEOUT, DEFAULT_VAULT_ADDR
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError

try:
    import requests
    HAS_REQUESTS = True
except ImportError:  # pragma: no cover
    requests = None  # type: ignore[assignment]
    HAS_REQUESTS = False

try:
    import hvac
    import hvac.exceptions as hvac_exceptions
    HAS_HVAC = True
    HVAC_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised by missing_required_lib in the modules
    hvac = None  # type: ignore[assignment]
    hvac_exceptions = None  # type: ignore[assignment]
    HAS_HVAC = False
    HVAC_IMPORT_ERROR = _exc

MAX_ERROR_BODY = 2000
#: Vault's error text when a KV v2 check-and-set fails (HTTP 400).
CAS_MISMATCH_TEXT = "check-and-set parameter did not match the current version"


class VaultError(BackendAIClusterError):
    """A Vault API call failed. ``status`` is the HTTP status (None: no HTTP answer)."""

    def __init__(self, message: str, status: t.Optional[int] = None, errors: t.Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = list(errors)

    def __str__(self) -> str:
        return self.message

    def details(self) -> t.Dict[str, t.Any]:
        return {"http_status": self.status} if self.status is not None else {}


class VaultCASConflict(VaultError):
    """A KV v2 check-and-set write lost (the key exists, or has another version)."""


@dataclass(frozen=True)
class VaultConnection:
    vault_addr: str = DEFAULT_VAULT_ADDR
    vault_token: t.Optional[str] = field(default=None, repr=False)
    vault_namespace: t.Optional[str] = None
    vault_ca_cert: t.Optional[str] = None
    validate_certs: bool = True
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if not self.vault_addr or not self.vault_addr.startswith(("http://", "https://")):
            raise ValueError("vault_addr must start with http:// or https:// (got %r)" % self.vault_addr)
        if not self.timeout or float(self.timeout) <= 0:
            raise ValueError("timeout must be a positive number of seconds")

    def __repr__(self) -> str:
        return "VaultConnection(vault_addr=%r, vault_token=%s, vault_namespace=%r, vault_ca_cert=%r, validate_certs=%r, timeout=%r)" % (
            self.vault_addr, "<hidden>" if self.vault_token else None, self.vault_namespace, self.vault_ca_cert,
            self.validate_certs, self.timeout)

    @classmethod
    def from_params(cls, params: t.Mapping[str, t.Any]) -> "VaultConnection":
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in params.items() if k in names and v is not None and v != ""}
        if "validate_certs" in values:
            values["validate_certs"] = boolean(values["validate_certs"], strict=False)
        if "timeout" in values:
            values["timeout"] = float(values["timeout"])
        return cls(**values)

    @property
    def verify(self) -> t.Union[bool, str]:
        if not self.validate_certs:
            return False
        return self.vault_ca_cert or True


def _clean(path: str) -> str:
    path = (path or "").strip("/")
    if not path:
        raise ValueError("a secret path is required")
    return path


class VaultClient:
    """KV v2 secrets through hvac, with :class:`VaultError` on failure."""

    def __init__(self, connection: VaultConnection, session: t.Optional[t.Any] = None) -> None:
        if not HAS_HVAC or not HAS_REQUESTS:
            raise VaultError("the hvac Python library is required (pip install hvac)")
        self.connection = connection
        self._own_session = session is None
        self._session = session if session is not None else requests.Session()
        # hvac's adapter takes verify/cert from a given session (and turns verify=False into True
        # otherwise): set them on the session itself.
        self._session.verify = connection.verify
        self._session.cert = None
        self._last_status: t.Optional[int] = None
        self._session.hooks.setdefault("response", []).append(self._record_status)
        # cert=() (not None): with None, hvac falls back to VAULT_CLIENT_CERT/KEY from the environment.
        self._client = hvac.Client(url=connection.vault_addr, token=connection.vault_token or "",
                                   cert=(), verify=connection.verify, timeout=connection.timeout,
                                   namespace=connection.vault_namespace or None, session=self._session)

    def __repr__(self) -> str:
        return "VaultClient(%r)" % (self.connection,)

    def close(self) -> None:
        if self._own_session:
            self._session.close()

    def __enter__(self) -> "VaultClient":
        return self

    def __exit__(self, *exc_info: t.Any) -> None:
        self.close()

    def _record_status(self, response: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
        self._last_status = response.status_code
        return response

    def _scrub(self, text: str) -> str:
        token = self.connection.vault_token
        if token and len(token) >= 4 and text:
            text = text.replace(token, "<redacted>")
        return text

    def _error_from(self, exc: BaseException, what: str) -> VaultError:
        if hvac_exceptions is not None and isinstance(exc, hvac_exceptions.VaultError):
            status = self._last_status
            errors = [self._scrub(str(e)) for e in (exc.errors or [])]
            text = "; ".join(errors) if errors else self._scrub((exc.text or "").strip())
            if len(text) > MAX_ERROR_BODY:
                text = text[:MAX_ERROR_BODY] + "..."
            method = (exc.method or "").upper()
            url = exc.url or ""
            path = url[len(self.connection.vault_addr.rstrip("/")):] if url.startswith(self.connection.vault_addr.rstrip("/")) else url
            message = "%s: HTTP %s on %s %s: %s" % (
                what, status if status is not None else "error", method, path, text or "(no error text)")
            cls = VaultCASConflict if status == 400 and CAS_MISMATCH_TEXT in text else VaultError
            return cls(message, status, errors)
        if HAS_REQUESTS and isinstance(exc, requests.Timeout):
            return VaultError("%s: no answer from %s within %ss (timeout)" % (
                what, self.connection.vault_addr, self.connection.timeout))
        if HAS_REQUESTS and isinstance(exc, requests.exceptions.SSLError):
            return VaultError("%s: TLS error talking to %s: %s (set vault_ca_cert, or validate_certs=false)" % (
                what, self.connection.vault_addr, self._scrub(str(exc))[:500]))
        return VaultError("%s: cannot talk to %s: %s" % (what, self.connection.vault_addr, self._scrub(str(exc))[:500]))

    def _call(self, what: str, fn: t.Callable[[], t.Any]) -> t.Any:
        error: t.Optional[VaultError] = None
        self._last_status = None
        try:
            return fn()
        except Exception as exc:
            is_hvac = hvac_exceptions is not None and isinstance(exc, hvac_exceptions.VaultError)
            if not is_hvac and not (HAS_REQUESTS and isinstance(exc, requests.RequestException)):
                raise
            error = self._error_from(exc, what)
        raise error  # outside the except block: no __context__ holding the request

    def write_secret(self, mount: str, path: str, data: t.Mapping[str, t.Any], cas: t.Optional[int] = 0) -> t.Dict[str, t.Any]:
        """``POST /v1/<mount>/data/<path>``; ``cas=0`` writes only if absent, ``None`` always writes.

        Returns the version metadata (``version``, ``created_time``...). Raises
        :class:`VaultCASConflict` when the check-and-set fails.
        """
        if not data:
            raise ValueError("secret data must be a non-empty mapping")
        path = _clean(path)
        result = self._call("writing Vault secret %s/%s" % (mount, path),
                            lambda: self._client.secrets.kv.v2.create_or_update_secret(
                                path=path, secret=dict(data), cas=cas, mount_point=mount))
        return dict((result or {}).get("data") or {}) if isinstance(result, dict) else {}

    def read_secret(self, mount: str, path: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/<mount>/data/<path>``: ``{"data": {...}, "metadata": {...}}``, or None if absent/deleted."""
        path = _clean(path)
        try:
            result = self._call("reading Vault secret %s/%s" % (mount, path),
                                lambda: self._client.secrets.kv.v2.read_secret_version(
                                    path=path, mount_point=mount, raise_on_deleted_version=True))
        except VaultError as err:
            # absent (or latest version deleted): 404 with no error text; an unknown mount is a
            # 404 "no handler for route" and stays an error
            if err.status == 404 and not err.errors:
                return None
            raise
        return dict(result.get("data") or {}) if isinstance(result, dict) else None

    def delete_secret(self, mount: str, path: str) -> None:
        """``DELETE /v1/<mount>/metadata/<path>``: the key's metadata and every version (absent is fine)."""
        path = _clean(path)
        self._call("deleting Vault secret %s/%s" % (mount, path),
                   lambda: self._client.secrets.kv.v2.delete_metadata_and_all_versions(path=path, mount_point=mount))
