# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recorded HTTP exchanges (tests/unit/fixtures/<service>/*.json) played back through ``requests``.

Each fixture is ``{"request": {"method", "path"}, "response": {"status", "headers", "body"}}``. A
:class:`RecordedHTTP` transport adapter answers (method, path) from the fixtures added to it (or
raises the exception set with :meth:`RecordedHTTP.fail`), answers anything else with the service's
404, and records every request with the ``send()`` keyword arguments (verify, cert, timeout), so the
API wrappers are tested without any server, also under ``ansible-test units``.
"""

from __future__ import annotations

import json
import os
import typing as t
from urllib.parse import parse_qs, urlsplit

import requests

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "fixtures")
REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
           500: "Internal Server Error"}


def load(service: str, name: str) -> t.Dict[str, t.Any]:
    with open(os.path.join(FIXTURES, service, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


class RecordedHTTP(requests.adapters.BaseAdapter):
    """Answers (method, path) from the fixtures of ``service``; ``not_found`` answers the rest."""

    def __init__(self, service: str, not_found: t.Mapping[str, t.Any]) -> None:
        super().__init__()
        self.service = service
        self.not_found = dict(not_found)
        self.routes: t.Dict[t.Tuple[str, str], t.Any] = {}
        self.sent: t.List[t.Tuple[t.Any, t.Dict[str, t.Any]]] = []

    def add(self, name: str, method: t.Optional[str] = None, path: t.Optional[str] = None) -> t.Dict[str, t.Any]:
        doc = load(self.service, name)
        self.routes[(method or doc["request"]["method"], path or doc["request"]["path"])] = doc["response"]
        return doc["response"]

    def fail(self, method: str, path: str, exc: BaseException) -> None:
        self.routes[(method, path)] = exc

    def send(self, request: t.Any, **kwargs: t.Any) -> t.Any:
        self.sent.append((request, kwargs))
        answer = self.routes.get((request.method, urlsplit(request.url).path), self.not_found)
        if isinstance(answer, BaseException):
            raise answer
        resp = requests.Response()
        resp.status_code = answer["status"]
        resp.reason = REASONS.get(answer["status"], "")
        resp.headers.update(answer.get("headers") or {})
        body = answer.get("body")
        resp._content = b"" if body in (None, "") else (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
        resp.url, resp.request, resp.encoding = request.url, request, "utf-8"
        return resp

    def close(self) -> None:
        pass

    @property
    def last(self) -> t.Any:
        return self.sent[-1][0]

    @property
    def last_query(self) -> t.Dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.last.url).query).items()}

    def session(self) -> requests.Session:
        """A ``requests`` session that sends everything here (and reads no proxy or netrc settings)."""
        session = requests.Session()
        session.trust_env = False
        session.mount("http://", self)
        session.mount("https://", self)
        return session
