# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A strict in-test double of Vault's KV v2 HTTP API (it is not Vault).

Implements what the collection uses: ``GET/POST/PUT/DELETE /v1/<mount>/data/<path>`` (with
``options.cas`` check-and-set), ``GET/DELETE /v1/<mount>/metadata/<path>``, ``GET /v1/sys/health``;
``X-Vault-Token`` (403 ``permission denied``), ``X-Vault-Namespace`` (secrets stored per namespace);
Vault's JSON error shape ``{"errors": [...]}``. Faults and recordings come from :class:`HTTPDouble`.
"""

from __future__ import annotations

import copy
import datetime
import json
import typing as t
import uuid

from .http_shell import BadRequest, HTTPDouble, Request, Response, json_response
from .pki import TestPKI

CAS_MISMATCH = "check-and-set parameter did not match the current version"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class VaultKVDouble(HTTPDouble):
    """Vault KV v2 API double. ``mounts``: the KV v2 mount paths that exist."""

    name = "Vault API double"

    def __init__(self, token: t.Optional[str] = None, mounts: t.Iterable[str] = ("secret",),
                 tls: t.Union[bool, TestPKI, None] = False) -> None:
        super().__init__(tls=tls)
        self.token = token
        self.mounts = set(mounts)
        # (namespace, mount, path) -> {"versions": {n: {...}}, "current": n, "created_time": ..., "updated_time": ...}
        self._kv: t.Dict[t.Tuple[str, str, str], t.Dict[str, t.Any]] = {}

    # Test-side access ---------------------------------------------------------------------------
    def stored_secret(self, mount: str, path: str, namespace: str = "") -> t.Optional[t.Dict[str, t.Any]]:
        with self._lock:
            entry = self._kv.get((namespace, mount, path.strip("/")))
            if not entry or not entry["current"]:
                return None
            version = entry["versions"][entry["current"]]
            return None if version["deletion_time"] else copy.deepcopy(version["data"])

    # Plumbing -----------------------------------------------------------------------------------
    def _error(self, status: int, message: str) -> Response:
        return json_response(status, {"errors": [message] if message else []})

    def _envelope(self, data: t.Any) -> t.Dict[str, t.Any]:
        return {"request_id": str(uuid.uuid4()), "lease_id": "", "renewable": False, "lease_duration": 0, "data": data,
                "wrap_info": None, "warnings": None, "auth": None, "mount_type": "kv"}

    @staticmethod
    def _version_meta(version: int, entry: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        v = entry["versions"][version]
        return {"created_time": v["created_time"], "custom_metadata": None, "deletion_time": v["deletion_time"],
                "destroyed": v["destroyed"], "version": version}

    def _route(self, req: Request) -> Response:
        token = req.headers.get("x-vault-token")
        if self.token is not None and token != self.token:
            return self._error(403, "permission denied")
        if not req.path.startswith("/v1/"):
            return self._error(404, "")
        rest = req.path[len("/v1/"):].strip("/")
        if rest == "sys/health":
            return json_response(200, {"initialized": True, "sealed": False, "standby": False, "version": "1.17.0"})
        mount, _, tail = rest.partition("/")
        kind, _, path = tail.partition("/")
        if mount not in self.mounts or kind not in ("data", "metadata"):
            return self._error(404, 'no handler for route "%s". route entry not found.' % rest)
        if not path:
            return self._error(405, "1 error occurred:\n\t* unsupported operation\n\n")
        key = (req.headers.get("x-vault-namespace", "").strip("/"), mount, path)
        with self._lock:
            if kind == "data":
                if req.method == "GET":
                    return self._read(key)
                if req.method in ("POST", "PUT"):
                    return self._write(req, key)
                if req.method == "DELETE":
                    entry = self._kv.get(key)
                    if entry and entry["current"]:
                        entry["versions"][entry["current"]]["deletion_time"] = _now()
                    return 204, {}, b""
            else:
                if req.method == "GET":
                    return self._metadata(key)
                if req.method == "DELETE":
                    self._kv.pop(key, None)
                    return 204, {}, b""
        return self._error(405, "1 error occurred:\n\t* unsupported operation\n\n")

    def _read(self, key: t.Tuple[str, str, str]) -> Response:
        entry = self._kv.get(key)
        if not entry or not entry["current"]:
            return self._error(404, "")
        version = entry["versions"][entry["current"]]
        meta = self._version_meta(entry["current"], entry)
        if version["deletion_time"] or version["destroyed"]:
            # Vault: 404 with the metadata of the deleted version
            return json_response(404, self._envelope({"data": None, "metadata": meta}))
        return json_response(200, self._envelope({"data": copy.deepcopy(version["data"]), "metadata": meta}))

    def _write(self, req: Request, key: t.Tuple[str, str, str]) -> Response:
        try:
            body = json.loads(req.body or b"null")
        except ValueError:
            raise BadRequest(400, "failed to parse JSON input") from None
        if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
            return self._error(400, "no data provided")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            return self._error(400, "invalid options")
        entry = self._kv.get(key)
        current = entry["current"] if entry else 0
        if "cas" in options and options["cas"] is not None:
            try:
                cas = int(options["cas"])
            except (TypeError, ValueError):
                return self._error(400, "invalid cas value")
            if cas != current:
                return self._error(400, CAS_MISMATCH)
        now = _now()
        if entry is None:
            entry = {"versions": {}, "current": 0, "created_time": now, "updated_time": now}
            self._kv[key] = entry
        entry["current"] = current + 1
        entry["updated_time"] = now
        entry["versions"][entry["current"]] = {"data": copy.deepcopy(body["data"]), "created_time": now,
                                               "deletion_time": "", "destroyed": False}
        return json_response(200, self._envelope(self._version_meta(entry["current"], entry)))

    def _metadata(self, key: t.Tuple[str, str, str]) -> Response:
        entry = self._kv.get(key)
        if not entry:
            return self._error(404, "")
        return json_response(200, self._envelope({
            "cas_required": False, "created_time": entry["created_time"], "current_version": entry["current"],
            "custom_metadata": None, "delete_version_after": "0s", "max_versions": 0, "oldest_version": 1 if entry["current"] else 0,
            "updated_time": entry["updated_time"],
            "versions": {str(n): {"created_time": v["created_time"], "deletion_time": v["deletion_time"], "destroyed": v["destroyed"]}
                         for n, v in entry["versions"].items()},
        }))


VaultDouble = VaultKVDouble
