# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How to reach one Nomad cluster (:class:`NomadConnection`), and the errors of talking to it.

:class:`NomadConnection` holds the connection options, from ``module.params`` (whose NOMAD_*
fallbacks are the argument spec's, ``_ansible.args``) or an inventory's options. TLS is verified unless
``validate_certs`` is off; a token never appears in a ``repr``. The client is ``_nomad.api``.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlsplit

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.backendai.cluster.plugins.module_utils._defaults import DEFAULT_NOMAD_ADDR, DEFAULT_TIMEOUT
from ansible_collections.backendai.cluster.plugins.module_utils._errors import BackendAIClusterError

DEFAULT_PORT = 4646


class NomadError(BackendAIClusterError):
    """A Nomad API call failed. ``status`` is the HTTP status (None: no HTTP answer, e.g. timeout/TLS)."""

    def __init__(self, message: str, status: t.Optional[int] = None, body: str = "",
                 method: str = "", path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body
        self.method = method
        self.path = path

    def __str__(self) -> str:
        return self.message

    def details(self) -> t.Dict[str, t.Any]:
        return {"http_status": self.status} if self.status is not None else {}


class NomadTimeout(NomadError):
    """The request did not complete within the client timeout (``status`` is None)."""


class NomadUnreachable(NomadError):
    """No HTTP answer: the connection was refused, reset or closed before the answer (``status`` is None)."""


class CASConflict(NomadError):
    """A check-and-set variable write/delete lost: ``current`` is the variable Nomad holds now.

    ``current`` may contain the variable's ``Items`` (when the token can read them); it is kept out
    of the message and the ``repr``.
    """

    def __init__(self, message: str, current: t.Optional[t.Dict[str, t.Any]], method: str = "",
                 path: str = "", index: int = 0) -> None:
        super().__init__(message, 409, "", method, path)
        self.current = current or {}
        #: the answer's ``X-Nomad-Index`` (a lost lock-acquire: the raft index of the attempt), 0 if none
        self.index = index

    @property
    def modify_index(self) -> int:
        return int(self.current.get("ModifyIndex") or 0)


def _as_bool(value: t.Any, default: bool) -> bool:
    if value is None or value == "":
        return default
    return boolean(value, strict=False)


@dataclass(frozen=True)
class NomadConnection:
    """Connection options for one Nomad cluster (region, namespace) as an API client sees them."""

    nomad_addr: str = DEFAULT_NOMAD_ADDR
    token: t.Optional[str] = field(default=None, repr=False)
    namespace: t.Optional[str] = None
    region: t.Optional[str] = None
    ca_cert: t.Optional[str] = None
    client_cert: t.Optional[str] = None
    client_key: t.Optional[str] = None
    validate_certs: bool = True
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        _parse_addr(self.nomad_addr)  # fail early on a malformed address
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key must be given together")
        if not self.timeout or float(self.timeout) <= 0:
            raise ValueError("timeout must be a positive number of seconds")

    def __repr__(self) -> str:
        return ("NomadConnection(nomad_addr=%r, token=%s, namespace=%r, region=%r, ca_cert=%r, client_cert=%r, "
                "client_key=%r, validate_certs=%r, timeout=%r)" % (
                    self.nomad_addr, "<hidden>" if self.token else None, self.namespace, self.region,
                    self.ca_cert, self.client_cert, self.client_key, self.validate_certs, self.timeout))

    @classmethod
    def from_params(cls, params: t.Mapping[str, t.Any]) -> "NomadConnection":
        """From a plain dict of option values (``module.params``); unknown keys and None values are ignored."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in params.items() if k in names and v is not None and v != ""}
        if "validate_certs" in values:
            values["validate_certs"] = _as_bool(values["validate_certs"], True)
        if "timeout" in values:
            values["timeout"] = float(values["timeout"])
        return cls(**values)

    # Derived settings -------------------------------------------------------------------------
    @property
    def scheme(self) -> str:
        return _parse_addr(self.nomad_addr)[0]

    @property
    def host(self) -> str:
        return _parse_addr(self.nomad_addr)[1]

    @property
    def port(self) -> int:
        return _parse_addr(self.nomad_addr)[2]

    @property
    def secure(self) -> bool:
        return self.scheme == "https"

    @property
    def base_url(self) -> str:
        scheme, host, port, prefix = _parse_addr(self.nomad_addr)
        netloc = "[%s]" % host if ":" in host else host
        return "%s://%s:%d%s" % (scheme, netloc, port, prefix)

    @property
    def verify(self) -> t.Union[bool, str]:
        """What ``requests`` gets as ``verify``: False only when validate_certs is off."""
        if not self.validate_certs:
            return False
        return self.ca_cert or True

    @property
    def cert(self) -> t.Optional[t.Tuple[str, str]]:
        if self.client_cert and self.client_key:
            return (self.client_cert, self.client_key)
        return None

    def with_options(self, **changes: t.Any) -> "NomadConnection":
        return replace(self, **changes)


def _parse_addr(addr: str) -> t.Tuple[str, str, int, str]:
    """``scheme://host:port[/prefix]`` -> (scheme, host, port, prefix). No scheme means http."""
    text = (addr or "").strip()
    if not text:
        raise ValueError("nomad_addr is empty")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError("nomad_addr must start with http:// or https:// (got %r)" % addr)
    if not parts.hostname:
        raise ValueError("nomad_addr has no host (got %r)" % addr)
    if parts.username or parts.password:
        raise ValueError("nomad_addr must not contain credentials; use the token option")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError("nomad_addr has an invalid port (got %r)" % addr) from None
    return scheme, parts.hostname, port, parts.path.rstrip("/")
