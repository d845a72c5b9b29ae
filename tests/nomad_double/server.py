# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A strict in-test double of Nomad's documented HTTP API (it is not Nomad: no scheduler, no raft).

The :class:`NomadAPIDouble` runs an ``http.server`` on 127.0.0.1 (random port, optional TLS) in a
thread and answers the endpoints this collection uses, with Nomad's status codes, error texts and
JSON shapes (as read from Nomad's ``command/agent/*_endpoint.go`` and ``api`` structs):

* every job register/plan body and every variable body is validated against
  ``../shared/nomad/job-api.schema.json``: an unknown or mis-cased key, a wrong type, gives
  ``400`` with a plain-text error (Nomad itself would silently drop such keys: the double is
  stricter on purpose). Then the HTTP handler's checks (``Job must be specified``, ``Job ID
  hasn't been provided``, ``Job ID does not match name`` -> 400) and a subset of ``Job.Validate``
  (duplicate group/task names, ``Count`` < 0, missing tasks/driver, job type, priority), which
  Nomad answers with ``500`` and a multierror text, as Nomad does;
* a toy scheduler places each group's allocations on the configured nodes, honouring
  datacenters, node pool, constraints (``${node.unique.name}``, ``${attr.*}``, ``${meta.*}``...; the
  ``version``/``semver`` operands only for comma-separated ``=``/``!=``/``<``/``<=``/``>``/``>=`` terms on
  dotted numbers, not ``~>``), drivers, network mode (``bridge`` / ``cni/<name>``: a node has
  ``cni/backendai``, the network the overlay_agent role installs, unless ``cni_networks`` says
  otherwise) and cpu/memory/device capacity;
  allocations go ``pending`` -> ``running`` after ``alloc_start_delay`` seconds (None: stay pending);
* ACL (one token), namespaces (jobs and variables stored per namespace), region checks,
  variables with check-and-set, client logs, fault injection and request recording;
* variable locks (``PUT /v1/var/:path?lock-acquire|lock-renew|lock-release``, Nomad 1.7+), after
  ``command/agent/variable_endpoint.go``, ``nomad/state/state_store_variables.go`` (``VarLockAcquire``,
  ``VarLockRelease``, ``isLocked``) and ``nomad/structs/variables.go`` (TTL 10 s to 24 h, default TTL
  and lock delay 15 s): a held lock answers 409 with the variable's metadata only; the lock is lost
  ``TTL`` after its last renewal and cannot be taken again for ``LockDelay`` more; writing or
  deleting a locked variable without its lock ID is a 409 too;
* evaluations: every register creates one (``GET /v1/evaluation/:id``, ``nomad/structs/eval.go``
  shapes), ``pending`` for ``eval_delay`` seconds, then ``complete`` with ``FailedTGAllocs`` (the
  toy scheduler's AllocMetric per group it could not place) and, if any, a ``BlockedEval``
  (status ``blocked``), as ``scheduler/generic_sched.go`` does;
* ``GET /v1/allocations`` (``command/agent/alloc_endpoint.go``, ``nomad/alloc_endpoint.go``):
  ``namespace`` (``*`` = all), ``resources``/``task_states`` field selection
  (``Allocation.Stub``), ``filter`` (a go-bexpr subset: ``==``, ``!=``, ``and``, ``or``,
  ``not``, parentheses over top-level string fields; anything else is a 400), and paging with
  ``per_page``/``next_token`` ordered by CreateIndex then ID (``CreateIndexAndIDTokenizer``),
  ``X-Nomad-NextToken`` on every page but the last;
* node status changes (:meth:`NomadAPIDouble.set_node_status`): a node going ``down`` makes its
  live allocations ``lost`` ("alloc is lost since its node is down", as ``nomad/node_endpoint.go``
  marks them).

What it does not model: the raft log and blocking queries (``index``/``wait`` are ignored); a
blocked evaluation is never unblocked (capacity freed later does not place the queued
allocations: a new register does); lost allocations are not replaced (the jobs this collection
renders are pinned to a node and never rescheduled); lock ``LockDelay`` applies only after a TTL
expiry (not after a release), as in Nomad; ACL policies beyond one management token; preemption.

See :class:`HTTPDouble` for faults and recordings, ``fixtures.py`` for the pytest fixtures.
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime
import fnmatch
import http.server
import ipaddress
import itertools
import json
import os
import re
import socket
import socketserver
import ssl
import tempfile
import threading
import time
import typing as t
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.normpath(os.path.join(REPO, os.pardir, "shared", "nomad", "job-api.schema.json"))
SCHEMA_KINDS = {"job": "Job", "register": "JobRegisterRequest", "plan": "JobPlanRequest", "variable": "Variable"}
TOKEN_HEADERS = ("x-nomad-token", "x-vault-token", "authorization")
ZERO_TIME = "0001-01-01T00:00:00Z"
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VAR_PATH = re.compile(r"^[a-zA-Z0-9-_~/]{1,128}$")


# Small helpers ---------------------------------------------------------------------------------

class BadRequest(Exception):
    """Answer with ``status`` and a plain-text body (how Nomad's CodedError reaches the client)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def go_parse_bool(name: str, value: t.Optional[str]) -> t.Optional[bool]:
    """Go's strconv.ParseBool, as Nomad parses boolean query parameters."""
    if value is None or value == "":
        return None
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise BadRequest(400, 'Failed to parse value of "%s" (%s) as a bool: strconv.ParseBool: parsing "%s": invalid syntax'
                     % (name, value, value))


_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_VERSION_TERM = re.compile(r"^\s*(=|!=|<=|>=|<|>)?\s*(\S+)\s*$")


def version_matches(version: str, constraint: str, strict: bool = True) -> bool:
    """Nomad's ``version``/``semver`` constraint operands (``scheduler/feasible/feasible.go``: checkVersionMatch with
    hashicorp/go-version constraints): every comma-separated term must hold; a pre-release sorts before its release.
    Not modelled: ``~>``, and the looser pre-release matching of ``version`` (both are treated like ``semver``)."""
    m = _VERSION.match(version.strip())
    if not m:
        return False

    def key(match: t.Match[str]) -> t.Tuple[t.Tuple[int, ...], int, str]:
        nums = tuple(int(x) for x in match.group(1).split("."))
        nums = nums + (0,) * (3 - len(nums))
        return nums, 0 if match.group(2) else 1, match.group(2) or ""

    have = key(m)
    for term in constraint.split(","):
        tm = _VERSION_TERM.match(term)
        want = _VERSION.match(tm.group(2)) if tm else None
        if not tm or not want:
            return False
        op, other = tm.group(1) or "=", key(want)
        ok = {"=": have == other, "!=": have != other, "<": have < other, "<=": have <= other,
              ">": have > other, ">=": have >= other}[op]
        if not ok:
            return False
    return True


def multierror(errors: t.Sequence[str]) -> str:
    """hashicorp/go-multierror's text, as Nomad returns validation failures."""
    head = "1 error occurred:" if len(errors) == 1 else "%d errors occurred:" % len(errors)
    return head + "".join("\n\t* " + e for e in errors) + "\n\n"


def rfc3339(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    stamp = datetime.datetime.fromtimestamp(secs, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return "%s.%09dZ" % (stamp, rem)


def _json_path(parts: t.Sequence[t.Any]) -> str:
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += "[%d]" % p
        elif _IDENT.match(str(p)):
            out += "." + str(p)
        else:
            out += "[%s]" % json.dumps(p)
    return out


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")


def _go_duration(value: t.Any) -> float:
    """Seconds of a Go duration: a string (``"15s"``, ``"1m30s"``) or integer nanoseconds."""
    if value in (None, "", 0):
        return 0.0
    if isinstance(value, (int, float)):
        return float(value) / 1e9
    text = str(value)
    parts = _DURATION.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError('time: invalid duration "%s"' % text)
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _go_duration_text(seconds: float) -> str:
    return ("%gs" % seconds) if seconds < 60 else ("%dm%gs" % divmod(seconds, 60)).replace("m0s", "m")


def _token_key(token: str) -> t.Tuple[int, str]:
    index, _, ident = token.partition(".")
    try:
        return int(index), ident
    except ValueError:
        raise BadRequest(400, "failed to read next_token %r" % token) from None


_FILTER_TOKEN = re.compile(r'\s*(?:(\()|(\))|(==|!=)|("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_.]*))')


def parse_filter(text: str) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
    """A go-bexpr subset: ``Field == "v"``, ``!=``, ``and``, ``or``, ``not``, parentheses."""
    if not text.strip():
        return lambda item: True
    tokens: t.List[t.Tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _FILTER_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise BadRequest(400, "failed to read filter expression: unsupported syntax at %r" % text[pos:pos + 20])
        pos = m.end()
        lp, rp, op, string, ident = m.groups()
        if lp:
            tokens.append(("(", lp))
        elif rp:
            tokens.append((")", rp))
        elif op:
            tokens.append(("op", op))
        elif string:
            tokens.append(("str", json.loads(string)))
        elif ident in ("and", "or", "not"):
            tokens.append((ident, ident))
        else:
            tokens.append(("id", ident))
    at = [0]

    def peek() -> t.Optional[str]:
        return tokens[at[0]][0] if at[0] < len(tokens) else None

    def take(kind: str) -> str:
        if peek() != kind:
            raise BadRequest(400, "failed to read filter expression %r: expected %s" % (text, kind))
        at[0] += 1
        return tokens[at[0] - 1][1]

    def primary() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        if peek() == "not":
            take("not")
            inner = primary()
            return lambda item: not inner(item)
        if peek() == "(":
            take("(")
            inner = disjunction()
            take(")")
            return inner
        field = take("id")
        op = take("op")
        value = take("str")
        if op == "==":
            return lambda item: str(item.get(field)) == value
        return lambda item: str(item.get(field)) != value

    def conjunction() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        parts = [primary()]
        while peek() == "and":
            take("and")
            parts.append(primary())
        return lambda item: all(p(item) for p in parts)

    def disjunction() -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        parts = [conjunction()]
        while peek() == "or":
            take("or")
            parts.append(conjunction())
        return lambda item: any(p(item) for p in parts)

    result = disjunction()
    if at[0] != len(tokens):
        raise BadRequest(400, "failed to read filter expression %r: unexpected %r" % (text, tokens[at[0]][1]))
    return result


class SchemaChecker:
    """The shared JSON schema (``job-api.schema.json``) for one kind of request body."""

    _cache: t.Dict[str, "SchemaChecker"] = {}

    def __init__(self, path: str = SCHEMA_PATH) -> None:
        import jsonschema  # test dependency

        if not os.path.isfile(path):
            raise FileNotFoundError("%s is missing: clone the repo with ../shared beside it" % path)
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
        self._validators = {}
        for kind, ref in SCHEMA_KINDS.items():
            root = dict(schema)
            root["$ref"] = "#/$defs/" + ref
            self._validators[kind] = jsonschema.Draft202012Validator(root)

    @classmethod
    def load(cls, path: str = SCHEMA_PATH) -> "SchemaChecker":
        if path not in cls._cache:
            cls._cache[path] = cls(path)
        return cls._cache[path]

    def problems(self, kind: str, doc: t.Any) -> t.List[str]:
        out = []
        for err in sorted(self._validators[kind].iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
            path = list(err.absolute_path)
            if err.validator == "additionalProperties" and err.validator_value is False:
                known = list(err.schema.get("properties", {}))
                for key in err.instance:
                    if key in known:
                        continue
                    same = [k for k in known if k.lower() == str(key).lower()]
                    hint = ("non-canonical key (Nomad's spelling is %r)" % same[0]) if same else \
                        "unknown key (Nomad would silently ignore it)"
                    out.append("%s: %s" % (_json_path(path + [key]), hint))
            else:
                out.append("%s: %s" % (_json_path(path), err.message))
        return out

    def check(self, kind: str, doc: t.Any) -> None:
        problems = self.problems(kind, doc)
        if problems:
            raise BadRequest(400, "Request body is not a valid %s (checked by the Nomad API double against "
                                  "job-api.schema.json):\n%s" % (SCHEMA_KINDS[kind], "\n".join(problems)))


# TLS material ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TestPKI:
    """A throw-away CA, a server certificate for 127.0.0.1/localhost and a client certificate (PEM files)."""

    __test__ = False  # not a pytest test class
    directory: str
    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_test_pki(directory: t.Optional[str] = None) -> TestPKI:
    """Generate the PKI with ``cryptography`` (EC P-256, valid for one day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = directory or tempfile.mkdtemp(prefix="nomad-double-pki-")
    now = datetime.datetime.now(datetime.timezone.utc)

    def _name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def _write(name: str, data: bytes) -> str:
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)
        return path

    def _key_pem(key: t.Any) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("Nomad API double test CA")).issuer_name(_name("Nomad API double test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def _leaf(cn: str, usage: t.Any, san: t.Optional[x509.SubjectAlternativeName]) -> t.Tuple[t.Any, t.Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server_key, server = _leaf("server.global.nomad", ExtendedKeyUsageOID.SERVER_AUTH, san)
    client_key, client = _leaf("client.global.nomad", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    pem = serialization.Encoding.PEM
    return TestPKI(
        directory=directory,
        ca_cert=_write("ca.pem", ca.public_bytes(pem)),
        server_cert=_write("server.pem", server.public_bytes(pem)),
        server_key=_write("server-key.pem", _key_pem(server_key)),
        client_cert=_write("client.pem", client.public_bytes(pem)),
        client_key=_write("client-key.pem", _key_pem(client_key)),
    )


# Requests, recordings, faults ------------------------------------------------------------------

@dataclass
class Request:
    method: str
    path: str
    query: t.Dict[str, t.List[str]]
    headers: t.Dict[str, str]  # lower-case names, tokens included (never recorded)
    body: bytes

    def q(self, name: str, default: t.Optional[str] = None) -> t.Optional[str]:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass
class RecordedRequest:
    """What the double saw, minus credentials: token headers are dropped (``token_present`` says if one came)."""

    method: str
    path: str
    query: t.Dict[str, t.List[str]]
    headers: t.Dict[str, str]
    body: bytes
    token_present: bool
    status: t.Optional[int] = None
    fault: bool = False

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def json(self) -> t.Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    def q(self, name: str) -> t.Optional[str]:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class Fault:
    """Answer the next ``times`` requests matching METHOD + path regex differently (``times=None``: forever).

    ``status`` set: answer it with ``body`` (after ``delay``). ``drop``: close the connection without
    answering (after ``delay``) -- a timeout when ``delay`` exceeds the client timeout. Neither: the
    request is handled normally after ``delay`` (a slow server).
    """

    method: str
    path: str
    status: t.Optional[int] = None
    body: str = ""
    content_type: str = "text/plain; charset=utf-8"
    times: t.Optional[int] = 1
    delay: float = 0.0
    drop: bool = False
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and re.search(self.path, path) is not None


Response = t.Tuple[int, t.Dict[str, str], bytes]


def json_response(status: int, body: t.Any, headers: t.Optional[t.Dict[str, str]] = None) -> Response:
    out = {"Content-Type": "application/json"}
    out.update(headers or {})
    return status, out, json.dumps(body).encode("utf-8")


def text_response(status: int, text: str, headers: t.Optional[t.Dict[str, str]] = None) -> Response:
    out = {"Content-Type": "text/plain; charset=utf-8"}
    out.update(headers or {})
    return status, out, text.encode("utf-8")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = False  # server_close() joins every request thread: nothing is left behind
    block_on_close = True
    allow_reuse_address = True
    ssl_context: t.Optional[ssl.SSLContext] = None

    def get_request(self) -> t.Tuple[socket.socket, t.Any]:
        sock, addr = self.socket.accept()
        if self.ssl_context is not None:
            # The handshake happens in the request thread (see _Handler.setup), not in the accept loop.
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: t.Any, client_address: t.Any) -> None:  # quiet: TLS failures, dropped clients
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive thread at shutdown
    server_version = "NomadAPIDouble/1.0"
    sys_version = ""
    timeout = 15
    double: "HTTPDouble"

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: t.Any) -> None:  # noqa: A002 - http.server's signature
        pass

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        req = Request(self.command, unquote(parts.path), parse_qs(parts.query, keep_blank_values=True),
                      {k.lower(): v for k, v in self.headers.items()}, body)
        answer = self.double._serve(req)
        if answer is None:  # dropped connection
            self.close_connection = True
            return
        status, headers, payload = answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD" and payload:
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _dispatch


class HTTPDouble:
    """Server lifecycle, TLS, fault injection and request recording shared by the API doubles."""

    name = "API double"

    def __init__(self, tls: t.Union[bool, TestPKI, None] = False, require_client_cert: bool = False) -> None:
        self.pki: t.Optional[TestPKI] = None
        if tls:
            self.pki = tls if isinstance(tls, TestPKI) else make_test_pki()
        self.require_client_cert = require_client_cert
        self._lock = threading.RLock()
        self._faults: t.List[Fault] = []
        self._recorded: t.List[RecordedRequest] = []
        #: seconds spent handling requests (for benchmarks: the double's own share of a measured time)
        self.busy_seconds = 0.0
        self._stop = threading.Event()
        self._server: t.Optional[_Server] = None
        self._thread: t.Optional[threading.Thread] = None

    # Lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "HTTPDouble":
        handler = type("Handler", (_Handler,), {"double": self})
        server = _Server(("127.0.0.1", 0), handler)
        if self.pki is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(self.pki.server_cert, self.pki.server_key)
            if self.require_client_cert:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(self.pki.ca_cert)
            server.ssl_context = ctx
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="%s %s" % (self.name, self.url), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes requests sleeping in a delay fault
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # joins the request threads
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def __enter__(self) -> "HTTPDouble":
        return self.start()

    def __exit__(self, *exc_info: t.Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the double is not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return "%s://127.0.0.1:%d" % ("https" if self.pki else "http", self.port)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # Faults -------------------------------------------------------------------------------------
    def inject(self, method: str = "*", path: str = ".*", status: t.Optional[int] = None, body: str = "",
               times: t.Optional[int] = 1, delay: float = 0.0, drop: bool = False,
               content_type: str = "text/plain; charset=utf-8") -> Fault:
        fault = Fault(method.upper() if method != "*" else "*", path, status, body, content_type, times, delay, drop)
        with self._lock:
            self._faults.append(fault)
        return fault

    def fail_next(self, method: str, path: str, status: int = 500, body: str = "injected failure",
                  times: t.Optional[int] = 1) -> Fault:
        return self.inject(method, path, status=status, body=body, times=times)

    def deny_next(self, method: str, path: str, times: t.Optional[int] = 1) -> Fault:
        return self.inject(method, path, status=403, body="Permission denied", times=times)

    def timeout_next(self, method: str, path: str, seconds: float, times: t.Optional[int] = 1) -> Fault:
        """The next matching requests get no answer for ``seconds`` (then the connection is closed)."""
        return self.inject(method, path, delay=seconds, drop=True, times=times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> t.Optional[Fault]:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    # Recordings ---------------------------------------------------------------------------------
    @property
    def requests(self) -> t.List[RecordedRequest]:
        with self._lock:
            return list(self._recorded)

    def find(self, method: str = "*", path: str = ".*") -> t.List[RecordedRequest]:
        return [r for r in self.requests if method in ("*", r.method) and re.search(path, r.path)]

    def clear_requests(self) -> None:
        with self._lock:
            self._recorded.clear()

    def requests_containing(self, secret: str) -> t.List[RecordedRequest]:
        """Recorded requests whose path, query, headers or body contain ``secret``."""
        out = []
        for r in self.requests:
            hay = "\n".join([r.path, json.dumps(r.query), json.dumps(r.headers), r.text])
            if secret and secret in hay:
                out.append(r)
        return out

    # Request flow -------------------------------------------------------------------------------
    def _token_of(self, req: Request) -> t.Optional[str]:
        raise NotImplementedError

    def _route(self, req: Request) -> Response:
        raise NotImplementedError

    def _serve(self, req: Request) -> t.Optional[Response]:
        record = RecordedRequest(req.method, req.path, req.query,
                                 {k: v for k, v in req.headers.items() if k not in TOKEN_HEADERS},
                                 req.body, any(req.headers.get(h) for h in TOKEN_HEADERS))
        with self._lock:
            self._recorded.append(record)
        for hook in list(getattr(self, "before_request", ())):
            hook(req)
        fault = self._take_fault(req.method, req.path)
        if fault is not None:
            record.fault = True
            if fault.delay:
                self._stop.wait(fault.delay)
            if fault.drop:
                return None
            if fault.status is not None:
                record.status = fault.status
                return fault.status, {"Content-Type": fault.content_type}, fault.body.encode("utf-8")
        started = time.perf_counter()
        try:
            answer = self._route(req)
        except BadRequest as err:
            answer = self._error(err.status, err.message)
        except Exception as err:  # a bug in the double: make it visible to the test
            answer = text_response(500, "Nomad API double internal error: %r" % (err,))
        with self._lock:
            self.busy_seconds += time.perf_counter() - started
        record.status = answer[0]
        return answer

    def _error(self, status: int, message: str) -> Response:
        return text_response(status, message)


# The Nomad API double --------------------------------------------------------------------------

SERVER_JOB_FIELDS = ("Status", "StatusDescription", "Stable", "Version", "CreateIndex", "ModifyIndex", "JobModifyIndex",
                     "SubmitTime", "NomadTokenID", "VersionTag", "ConsulToken", "VaultToken")
JOB_TYPES = ("service", "batch", "system", "sysbatch")
IN_PLACE_GROUP_KEYS = {"Count", "Services", "RestartPolicy", "ReschedulePolicy", "Update", "Migrate", "Spreads",
                       "Affinities", "Scaling", "ShutdownDelay", "StopAfterClientDisconnect", "MaxClientDisconnect",
                       "Disconnect", "PreventRescheduleOnLost"}
DEFAULT_TASK_CPU = 100
DEFAULT_TASK_MEMORY = 300
DEFAULT_DISK_MB = 300
#: A scheduled allocation: (node, [allocated device {"Vendor", "Type", "Name", "DeviceIDs"}]).
Placement = t.Tuple[t.Dict[str, t.Any], t.List[t.Dict[str, t.Any]]]


def _go(value: t.Any) -> str:
    """A value as Nomad's diff shows it (Go formatting)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_scalar(value: t.Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _field_diff(name: str, old: t.Any, new: t.Any, old_absent: bool, new_absent: bool) -> t.Optional[t.Dict[str, t.Any]]:
    if not old_absent and not new_absent and old == new:
        return None
    if old_absent and (new is None or new == ""):
        return None
    if new_absent and (old is None or old == ""):
        return None
    kind = "Added" if old_absent else "Deleted" if new_absent else "Edited"
    return {"Type": kind, "Name": name, "Old": "" if old_absent else _go(old), "New": "" if new_absent else _go(new),
            "Annotations": None}


def _object_diff(name: str, old: t.Any, new: t.Any) -> t.Optional[t.Dict[str, t.Any]]:
    """Nomad's ObjectDiff shape for a nested struct, map or list (flattened, set semantics for scalar lists)."""
    old_absent, new_absent = old is None, new is None
    fields_: t.List[t.Dict[str, t.Any]] = []
    objects: t.List[t.Dict[str, t.Any]] = []
    if isinstance(old if not old_absent else new, list):
        olds, news = old or [], new or []
        if all(_is_scalar(v) for v in itertools.chain(olds, news)):
            for value in sorted({_go(v) for v in olds} | {_go(v) for v in news}):
                in_old = value in {_go(v) for v in olds}
                in_new = value in {_go(v) for v in news}
                if in_old != in_new:
                    fields_.append(_field_diff(name, value, value, not in_old, not in_new))  # type: ignore[arg-type]
        else:
            for i in range(max(len(olds), len(news))):
                sub = _object_diff(name, olds[i] if i < len(olds) else None, news[i] if i < len(news) else None)
                if sub:
                    objects.append(sub)
    else:
        sub_fields, sub_objects = _struct_diff(old, new)
        fields_, objects = sub_fields, sub_objects
    if not fields_ and not objects:
        return None
    kind = "Added" if old_absent else "Deleted" if new_absent else "Edited"
    return {"Type": kind, "Name": name, "Fields": fields_ or None, "Objects": objects or None}


def _struct_diff(old: t.Optional[t.Mapping[str, t.Any]], new: t.Optional[t.Mapping[str, t.Any]],
                 skip: t.Iterable[str] = ()) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.List[t.Dict[str, t.Any]]]:
    old_absent, new_absent = old is None, new is None
    old, new = old or {}, new or {}
    fields_: t.List[t.Dict[str, t.Any]] = []
    objects: t.List[t.Dict[str, t.Any]] = []
    for key in sorted(set(old) | set(new)):
        if key in skip:
            continue
        o, n = old.get(key), new.get(key)
        if _is_scalar(o) and _is_scalar(n):
            fd = _field_diff(key, o, n, old_absent or key not in old, new_absent or key not in new)
            if fd:
                fields_.append(fd)
        elif isinstance(o or n, dict) and all(_is_scalar(v) for v in itertools.chain((o or {}).values(), (n or {}).values())):
            # string maps (Meta, Env, Config scalars) are fields named "Key[sub]", as Nomad shows them
            for sub in sorted(set(o or {}) | set(n or {})):
                fd = _field_diff("%s[%s]" % (key, sub), (o or {}).get(sub), (n or {}).get(sub),
                                 sub not in (o or {}), sub not in (n or {}))
                if fd:
                    fields_.append(fd)
        else:
            od = _object_diff(key, o, n)
            if od:
                objects.append(od)
    return fields_, objects


class NomadAPIDouble(HTTPDouble):
    """The Nomad API double (see the module docstring). Configure nodes with :meth:`add_node`."""

    name = "Nomad API double"

    def __init__(self, token: t.Optional[str] = None, region: str = "global", datacenter: str = "dc1",
                 namespaces: t.Optional[t.Iterable[str]] = None, alloc_start_delay: t.Optional[float] = 0.0,
                 tls: t.Union[bool, TestPKI, None] = False, require_client_cert: bool = False,
                 schema_path: str = SCHEMA_PATH, eval_delay: float = 0.0) -> None:
        super().__init__(tls=tls, require_client_cert=require_client_cert)
        self.token = token
        self.region = region
        self.datacenter = datacenter
        self.namespaces = set(namespaces) if namespaces is not None else None  # None: any namespace exists
        self.alloc_start_delay = alloc_start_delay
        self.schema = SchemaChecker.load(schema_path)
        self._index = 10
        self._jobs: t.Dict[t.Tuple[str, str], t.Dict[str, t.Any]] = {}
        self._allocs: t.Dict[str, t.Dict[str, t.Any]] = {}
        self._nodes: t.Dict[str, t.Dict[str, t.Any]] = {}
        self._vars: t.Dict[t.Tuple[str, str], t.Dict[str, t.Any]] = {}
        self._logs: t.Dict[t.Tuple[str, str, str], bytearray] = {}
        self._evals: t.Dict[str, t.Dict[str, t.Any]] = {}
        self.eval_delay = eval_delay
        #: callables run with each request before it is handled (outside the double's lock): test hooks
        self.before_request: t.List[t.Callable[[Request], None]] = []

    # Test-side configuration ------------------------------------------------------------------
    def add_node(self, name: str, datacenter: t.Optional[str] = None, node_pool: str = "default", node_class: str = "",
                 cpu: int = 4000, memory: int = 8192, disk: int = 50000, cores: t.Optional[int] = None,
                 reserved_cpu: int = 0, reserved_memory: int = 0, reserved_disk: int = 0,
                 drivers: t.Iterable[str] = ("docker",), cni_plugins: t.Iterable[str] = ("bridge", "host-local", "loopback"),
                 cni_networks: t.Iterable[str] = ("backendai",), bridge: bool = True,
                 devices: t.Iterable[t.Mapping[str, t.Any]] = (), host_networks: t.Optional[t.Mapping[str, str]] = None,
                 attributes: t.Optional[t.Mapping[str, str]] = None, meta: t.Optional[t.Mapping[str, str]] = None,
                 status: str = "ready", eligibility: str = "eligible", drain: bool = False,
                 address: t.Optional[str] = None) -> t.Dict[str, t.Any]:
        """Add a client node (Nomad's ``api.Node`` shape). ``devices``: ``{"vendor", "type", "name", "count"}``."""
        with self._lock:
            node_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "nomad-double-node/" + name))
            address = address or "10.0.0.%d" % (len(self._nodes) + 10)
            drivers = list(drivers)
            attrs = {
                "unique.hostname": name, "unique.network.ip-address": address, "kernel.name": "linux",
                "os.name": "ubuntu", "arch": "amd64", "nomad.version": "1.10.0", "cpu.numcores": str(cores or max(1, cpu // 1000)),
                "cpu.totalcompute": str(cpu), "memory.totalbytes": str(memory * 1024 * 1024),
            }
            for plugin in cni_plugins:
                attrs["plugins.cni.version.%s" % plugin] = "v1.5.1"
            for drv in drivers:
                attrs["driver.%s" % drv] = "1"
            attrs.update(attributes or {})
            networks: t.List[t.Dict[str, t.Any]] = [{"Mode": "host", "Device": "eth0", "CIDR": address + "/32", "IP": address,
                                                      "MBits": 1000, "DNS": None, "ReservedPorts": None, "DynamicPorts": None}]
            if bridge:
                networks.append({"Mode": "bridge"})
            networks.extend({"Mode": "cni/%s" % n} for n in cni_networks)
            node_devices = []
            for i, dev in enumerate(devices):
                node_devices.append({
                    "Vendor": dev.get("vendor", "nvidia"), "Type": dev.get("type", "gpu"), "Name": dev.get("name", "device"),
                    "Attributes": dict(dev.get("attributes", {})),
                    "Instances": [{"ID": "GPU-%s-%d-%d" % (name, i, j), "Healthy": True, "HealthDescription": "", "Locality": None}
                                  for j in range(int(dev.get("count", 1)))],
                })
            index = self._next_index()
            node = {
                "ID": node_id, "SecretID": "", "Name": name, "Datacenter": datacenter or self.datacenter,
                "NodePool": node_pool, "NodeClass": node_class, "ComputedClass": "v1:%d" % (abs(hash(node_class)) % 10**12),
                "HTTPAddr": "%s:4646" % address, "TLSEnabled": bool(self.pki), "Attributes": attrs,
                "NodeResources": {
                    "Cpu": {"CpuShares": cpu, "TotalCpuCores": cores or max(1, cpu // 1000), "ReservableCpuCores": None},
                    "Memory": {"MemoryMB": memory}, "Disk": {"DiskMB": disk}, "Networks": networks,
                    "NodeNetworks": None, "Devices": node_devices or None, "MinDynamicPort": 20000, "MaxDynamicPort": 32000,
                },
                "ReservedResources": {"Cpu": {"CpuShares": reserved_cpu}, "Memory": {"MemoryMB": reserved_memory},
                                      "Disk": {"DiskMB": reserved_disk}, "Networks": {"ReservedHostPorts": ""}},
                "Resources": None, "Reserved": None, "Links": {}, "Meta": dict(meta or {}),
                "Drivers": {d: {"Attributes": {"driver.%s" % d: "true"}, "Detected": True, "Healthy": True,
                                "HealthDescription": "Healthy", "UpdateTime": rfc3339(time.time_ns())} for d in drivers},
                "HostVolumes": {}, "HostNetworks": {k: {"Name": k, "CIDR": v, "Interface": "", "ReservedPorts": ""}
                                                     for k, v in (host_networks or {}).items()},
                "CSIControllerPlugins": None, "CSINodePlugins": None, "Status": status, "StatusDescription": "",
                "StatusUpdatedAt": int(time.time()), "SchedulingEligibility": eligibility, "Drain": drain,
                "DrainStrategy": None, "LastDrain": None, "Events": [], "CreateIndex": index, "ModifyIndex": index,
            }
            self._nodes[node_id] = node
            return copy.deepcopy(node)

    def node_id(self, name: str) -> str:
        with self._lock:
            for node in self._nodes.values():
                if node["Name"] == name:
                    return node["ID"]
        raise KeyError(name)

    def set_alloc_status(self, alloc_id: str, client_status: str, task_state: t.Optional[str] = None,
                         failed: t.Optional[bool] = None, restarts: int = 0, description: str = "") -> None:
        """Freeze an allocation in ``client_status`` (pending/running/complete/failed/lost)."""
        with self._lock:
            alloc = self._allocs[alloc_id]
            alloc["override"] = {"ClientStatus": client_status, "State": task_state, "Failed": failed,
                                 "Restarts": restarts, "Description": description}
            alloc["ModifyIndex"] = self._next_index()

    def set_node_status(self, name: str, status: str) -> None:
        """A node's status changes (``down``, ``ready``, ...). Going down, each live allocation on it
        becomes lost: ``ClientStatus`` lost, ``DesiredStatus`` stop, with Nomad's description."""
        with self._lock:
            node = self._nodes[self.node_id(name)]
            index = self._next_index()
            node.update({"Status": status, "ModifyIndex": index, "StatusUpdatedAt": int(time.time())})
            if status != "down":
                return
            for alloc in self._allocs.values():
                if alloc["NodeID"] == node["ID"] and self._live(alloc):
                    alloc["override"] = {"ClientStatus": "lost", "State": "dead", "Failed": True, "Restarts": 0,
                                         "Description": ""}
                    alloc["DesiredStatus"] = "stop"
                    alloc["DesiredDescription"] = "alloc is lost since its node is down"
                    alloc["ModifyIndex"] = index

    def lock_of(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        """The lock a variable holds now (after TTL expiry: None), for tests."""
        with self._lock:
            var = self._vars.get((namespace, path))
            self._expire_lock(var)
            return copy.deepcopy(var.get("Lock")) if var and var.get("Lock") else None

    def append_log(self, alloc_id: str, task: str, text: str, stream: str = "stdout") -> None:
        with self._lock:
            self._logs.setdefault((alloc_id, task, stream), bytearray()).extend(text.encode("utf-8"))

    def allocations_of(self, job_id: str, namespace: str = "default") -> t.List[t.Dict[str, t.Any]]:
        with self._lock:
            return [self._alloc_full(a) for a in self._allocs.values() if a["Namespace"] == namespace and a["JobID"] == job_id]

    def stored_job(self, job_id: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        with self._lock:
            rec = self._jobs.get((namespace, job_id))
            return copy.deepcopy(rec["job"]) if rec else None

    def stored_variable(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        with self._lock:
            var = self._vars.get((namespace, path))
            return self._var_public(var) if var else None

    # Plumbing ---------------------------------------------------------------------------------
    def _next_index(self) -> int:
        with self._lock:
            self._index += 1
            return self._index

    def _token_of(self, req: Request) -> t.Optional[str]:
        token = req.headers.get("x-nomad-token")
        auth = req.headers.get("authorization", "")
        if not token and auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        return token or None

    def _meta_headers(self) -> t.Dict[str, str]:
        return {"X-Nomad-Index": str(self._index), "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}

    def _ok(self, body: t.Any, status: int = 200) -> Response:
        return json_response(status, body, self._meta_headers())

    def _namespace(self, req: Request, body_namespace: t.Optional[str] = None, allow_wildcard: bool = False) -> str:
        ns = req.q("namespace") or body_namespace or "default"
        if ns == "*" and not allow_wildcard:
            raise BadRequest(400, 'can not target wildcard ("*") namespace')
        if ns != "*" and self.namespaces is not None and ns not in self.namespaces and ns != "default":
            raise BadRequest(400, 'namespace "%s" not found' % ns)
        return ns

    def _route(self, req: Request) -> Response:
        path = req.path
        if not path.startswith("/v1/"):
            return text_response(404, "404 page not found\n")
        token = self._token_of(req)
        if self.token is not None and token != self.token:
            return text_response(403, "Permission denied" if token is None else "ACL token not found")
        region = req.q("region")
        if region and region != self.region:
            return text_response(500, "No path to region")
        rest = path[len("/v1/"):]
        with self._lock:
            if rest == "jobs":
                if req.method == "GET":
                    return self._list_jobs(req)
                if req.method in ("PUT", "POST"):
                    return self._register(req, "")
                return text_response(405, "Invalid method")
            if rest.startswith("job/"):
                return self._job_specific(req, rest[len("job/"):])
            if rest.startswith("allocation/"):
                return self._allocation(req, rest[len("allocation/"):])
            if rest.startswith("client/fs/logs/"):
                return self._logs_endpoint(req, rest[len("client/fs/logs/"):])
            if rest == "allocations":
                return self._list_allocations(req)
            if rest.startswith("evaluation/"):
                return self._evaluation(req, rest[len("evaluation/"):])
            if rest == "nodes":
                return self._list_nodes(req)
            if rest.startswith("node/"):
                return self._node_specific(req, rest[len("node/"):])
            if rest == "vars":
                return self._list_vars(req)
            if rest.startswith("var/"):
                return self._var(req, rest[len("var/"):])
            if rest == "status/leader":
                return self._ok("127.0.0.1:4647")
            if rest == "regions":
                return self._ok([self.region])
        return text_response(404, "404 page not found\n")

    def _read_json(self, req: Request) -> t.Any:
        if not req.body:
            raise BadRequest(400, "EOF")
        try:
            return json.loads(req.body)
        except ValueError as err:
            raise BadRequest(400, "invalid character in request body: %s" % err) from None

    # Jobs -------------------------------------------------------------------------------------
    def _job_specific(self, req: Request, rest: str) -> Response:
        for suffix, handler in (("/allocations", self._job_allocations), ("/plan", self._plan), ("/summary", self._summary)):
            if rest.endswith(suffix):
                return handler(req, rest[: -len(suffix)])
        job_id = rest
        if req.method == "GET":
            rec = self._jobs.get((self._namespace(req), job_id))
            if rec is None:
                return text_response(404, "job not found")
            return self._ok(self._job_view(rec))
        if req.method in ("PUT", "POST"):
            return self._register(req, job_id)
        if req.method == "DELETE":
            return self._deregister(req, job_id)
        return text_response(405, "Invalid method")

    def _validate_job(self, job: t.Mapping[str, t.Any]) -> t.Tuple[t.List[str], t.List[str]]:
        """A subset of Nomad's Job.Validate: (errors, warnings)."""
        errors: t.List[str] = []
        job_id = job.get("ID") or ""
        if " " in job_id:
            errors.append("Job ID contains a space")
        if "\x00" in job_id:
            errors.append("Job ID contains a null character")
        jtype = job.get("Type") or "service"
        if jtype not in JOB_TYPES:
            errors.append('Invalid job type: "%s"' % jtype)
        priority = job.get("Priority")
        if priority is not None and not 1 <= priority <= 100:
            errors.append("Job priority must be between [1, 100]")
        groups = job.get("TaskGroups") or []
        if not groups:
            errors.append("Missing job task groups")
        seen: t.Dict[str, int] = {}
        for idx, group in enumerate(groups):
            name = group.get("Name") or ""
            if not name:
                errors.append("Job task group %d missing name" % (idx + 1))
            elif name in seen:
                errors.append("Job task group %d redefines '%s' from group %d" % (idx + 1, name, seen[name] + 1))
            else:
                seen[name] = idx
            group_errors = []
            count = group.get("Count")
            if count is not None and count < 0:
                group_errors.append("Task group count can't be negative")
            tasks = group.get("Tasks") or []
            if not tasks:
                group_errors.append("Missing tasks for task group")
            task_seen: t.Dict[str, int] = {}
            for tidx, task in enumerate(tasks):
                tname = task.get("Name") or ""
                if not tname:
                    group_errors.append("Task %d missing name" % (tidx + 1))
                elif tname in task_seen:
                    group_errors.append("Task %d redefines '%s' from task %d" % (tidx + 1, tname, task_seen[tname] + 1))
                else:
                    task_seen[tname] = tidx
                task_errors = []
                if not task.get("Driver"):
                    task_errors.append("Missing task driver")
                res = task.get("Resources") or {}
                if res.get("CPU") is not None and res["CPU"] < 1 and not res.get("Cores"):
                    task_errors.append("minimum CPU value is 1; got %d" % res["CPU"])
                if res.get("MemoryMB") is not None and res["MemoryMB"] < 10:
                    task_errors.append("minimum MemoryMB value is 10; got %d" % res["MemoryMB"])
                if task_errors:
                    group_errors.append("Task %s validation failed: %s" % (tname or tidx + 1, multierror(task_errors)))
            if group_errors:
                errors.append("Task group %s validation failed: %s" % (name or idx + 1, multierror(group_errors)))
        return errors, []

    def _decode_job_request(self, req: Request, job_id_in_url: str, kind: str) -> t.Tuple[t.Dict[str, t.Any], t.Dict[str, t.Any], str]:
        body = self._read_json(req)
        self.schema.check(kind, body)
        if not isinstance(body, dict) or body.get("Job") is None:
            raise BadRequest(400, "Job must be specified")
        job = body["Job"]
        if job.get("ID") is None:
            raise BadRequest(400, "Job ID hasn't been provided" if kind == "register" else "Job must have a valid ID")
        if job_id_in_url and job["ID"] != job_id_in_url:
            raise BadRequest(400, "Job ID does not match name" if kind == "register" else "Job ID does not match")
        # Nomad: query param > request body > job's Namespace > "default"
        namespace = req.q("namespace") or body.get("Namespace") or job.get("Namespace") or "default"
        if self.namespaces is not None and namespace not in self.namespaces and namespace != "default":
            raise BadRequest(500, 'job "%s" is in nonexistent namespace "%s"' % (job["ID"], namespace))
        region = req.q("region") or body.get("Region") or job.get("Region") or self.region
        if region != self.region:
            raise BadRequest(500, "No path to region")
        errors, _ = self._validate_job(job)
        if errors:
            raise BadRequest(500, multierror(errors))
        return body, self._spec(job, namespace), namespace

    def _spec(self, job: t.Mapping[str, t.Any], namespace: str) -> t.Dict[str, t.Any]:
        """The job as submitted, without server fields, with Nomad's top-level defaults."""
        spec = {k: copy.deepcopy(v) for k, v in job.items() if k not in SERVER_JOB_FIELDS}
        spec["Namespace"] = namespace
        spec["Region"] = self.region
        spec.setdefault("Name", spec["ID"])
        if not spec.get("Type"):
            spec["Type"] = "service"
        spec.setdefault("Priority", 50)
        if not spec.get("Datacenters"):
            spec["Datacenters"] = ["*"]
        if not spec.get("NodePool"):
            spec["NodePool"] = "default"
        spec.setdefault("AllAtOnce", False)
        spec.setdefault("Stop", False)
        for group in spec.get("TaskGroups") or []:
            if group.get("Count") is None:
                group["Count"] = 1
        return spec

    def _job_view(self, rec: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        job = copy.deepcopy(rec["job"])
        job.update({"Status": self._job_status(rec), "StatusDescription": "", "Stable": False, "Version": rec["Version"],
                    "CreateIndex": rec["CreateIndex"], "ModifyIndex": rec["ModifyIndex"],
                    "JobModifyIndex": rec["JobModifyIndex"], "SubmitTime": rec["SubmitTime"]})
        return job

    def _job_allocs(self, namespace: str, job_id: str) -> t.List[t.Dict[str, t.Any]]:
        return [a for a in self._allocs.values() if a["Namespace"] == namespace and a["JobID"] == job_id]

    def _job_status(self, rec: t.Mapping[str, t.Any]) -> str:
        allocs = self._job_allocs(rec["job"]["Namespace"], rec["job"]["ID"])
        if any(self._client_status(a) in ("pending", "running") for a in allocs):
            return "running"
        if rec["job"].get("Stop") or allocs:
            return "dead"
        return "pending"

    def _summary_of(self, rec: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        job = rec["job"]
        summary: t.Dict[str, t.Dict[str, int]] = {}
        for group in job.get("TaskGroups") or []:
            summary[group["Name"]] = {"Queued": rec["Queued"].get(group["Name"], 0), "Complete": 0, "Failed": 0,
                                      "Running": 0, "Starting": 0, "Lost": 0, "Unknown": 0}
        for alloc in self._job_allocs(job["Namespace"], job["ID"]):
            counts = summary.setdefault(alloc["TaskGroup"], {"Queued": 0, "Complete": 0, "Failed": 0, "Running": 0,
                                                             "Starting": 0, "Lost": 0, "Unknown": 0})
            key = {"pending": "Starting", "running": "Running", "complete": "Complete", "failed": "Failed",
                   "lost": "Lost"}.get(self._client_status(alloc), "Unknown")
            counts[key] += 1
        return {"JobID": job["ID"], "Namespace": job["Namespace"], "Summary": summary,
                "Children": {"Pending": 0, "Running": 0, "Dead": 0}, "CreateIndex": rec["CreateIndex"],
                "ModifyIndex": rec["ModifyIndex"]}

    def _summary(self, req: Request, job_id: str) -> Response:
        rec = self._jobs.get((self._namespace(req), job_id))
        if rec is None:
            return text_response(404, "job not found")
        return self._ok(self._summary_of(rec))

    def _list_jobs(self, req: Request) -> Response:
        ns = self._namespace(req, allow_wildcard=True)
        prefix = req.q("prefix") or ""
        meta = go_parse_bool("meta", req.q("meta"))
        out = []
        for (job_ns, job_id), rec in sorted(self._jobs.items()):
            if (ns != "*" and job_ns != ns) or not job_id.startswith(prefix):
                continue
            job = rec["job"]
            stub = {
                "ID": job["ID"], "ParentID": job.get("ParentID", ""), "Name": job["Name"], "Namespace": job_ns,
                "Datacenters": job["Datacenters"], "NodePool": job["NodePool"], "Multiregion": None, "Type": job["Type"],
                "Priority": job["Priority"], "Periodic": bool(job.get("Periodic")), "ParameterizedJob": bool(job.get("ParameterizedJob")),
                "Stop": bool(job.get("Stop")), "Status": self._job_status(rec), "StatusDescription": "",
                "JobSummary": self._summary_of(rec), "CreateIndex": rec["CreateIndex"], "ModifyIndex": rec["ModifyIndex"],
                "JobModifyIndex": rec["JobModifyIndex"], "SubmitTime": rec["SubmitTime"],
            }
            if meta:
                stub["Meta"] = copy.deepcopy(job.get("Meta"))
            out.append(stub)
        return self._ok(out)

    def _changes(self, old: t.Optional[t.Mapping[str, t.Any]], new: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
        """Per group: "create" | "destroy" | "ignore" | "in-place" | "destructive"."""
        out: t.Dict[str, str] = {}
        old_groups = {g["Name"]: g for g in (old or {}).get("TaskGroups") or []}
        new_groups = {g["Name"]: g for g in new.get("TaskGroups") or []}
        meta_changed = old is not None and (old.get("Meta") or {}) != (new.get("Meta") or {})
        # Nomad: once the spec changed (new JobModifyIndex), no existing allocation is "ignored":
        # unchanged groups get an in-place update (to the new job version).
        spec_changed = old is not None and old != new
        for name, group in new_groups.items():
            before = old_groups.get(name)
            if before is None or (old or {}).get("Stop"):
                out[name] = "create"
                continue
            differing = {k for k in set(before) | set(group) if before.get(k) != group.get(k)}
            if meta_changed or differing - IN_PLACE_GROUP_KEYS:
                out[name] = "destructive"
            elif differing or spec_changed:
                out[name] = "in-place"
            else:
                out[name] = "ignore"
        for name in old_groups:
            if name not in new_groups:
                out[name] = "destroy"
        return out

    def _register(self, req: Request, job_id_in_url: str) -> Response:
        body, spec, ns = self._decode_job_request(req, job_id_in_url, "register")
        key = (ns, spec["ID"])
        rec = self._jobs.get(key)
        if body.get("EnforceIndex"):
            jmi = body.get("JobModifyIndex") or 0
            if rec is not None and jmi == 0:
                raise BadRequest(500, "Enforcing job modify index 0: job already exists")
            if rec is not None and jmi != rec["JobModifyIndex"]:
                raise BadRequest(500, "Enforcing job modify index %d: job exists with conflicting job modify index: %d"
                                 % (jmi, rec["JobModifyIndex"]))
            if rec is None and jmi != 0:
                raise BadRequest(500, "Enforcing job modify index %d: job does not exist" % jmi)
        eval_id = str(uuid.uuid4())
        now = time.time_ns()
        changed = rec is None or rec["job"] != spec
        if changed:
            index = self._next_index()
            changes = self._changes(rec["job"] if rec else None, spec)
            if rec is None:
                rec = {"CreateIndex": index, "Version": 0, "Queued": {}}
                self._jobs[key] = rec
            else:
                rec["Version"] += 1
            rec.update({"job": spec, "ModifyIndex": index, "JobModifyIndex": index, "SubmitTime": now})
            failed = self._reconcile(rec, changes, eval_id)
        else:
            failed = {}
        eval_index = self._next_index()
        self._create_eval(eval_id, rec, failed, eval_index)
        return self._ok({"EvalID": eval_id, "EvalCreateIndex": eval_index, "JobModifyIndex": rec["JobModifyIndex"],
                         "Warnings": "", "Index": eval_index, "LastContact": 0, "KnownLeader": False})

    def _deregister(self, req: Request, job_id: str) -> Response:
        ns = self._namespace(req)
        purge = bool(go_parse_bool("purge", req.q("purge")))
        go_parse_bool("global", req.q("global"))
        rec = self._jobs.get((ns, job_id))
        if rec is None:  # Nomad: deregistering an absent job is not an error
            return self._ok({"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "VolumeEvalID": "",
                             "VolumeEvalIndex": 0, "Index": 0, "LastContact": 0, "KnownLeader": False})
        index = self._next_index()
        for alloc in self._job_allocs(ns, job_id):
            if purge:
                self._allocs.pop(alloc["ID"], None)
            elif alloc["DesiredStatus"] == "run":
                alloc["DesiredStatus"] = "stop"
                alloc["DesiredDescription"] = "alloc is being stopped because the job was stopped"
                alloc["ModifyIndex"] = index
        if purge:
            del self._jobs[(ns, job_id)]
        else:
            rec["job"]["Stop"] = True
            rec.update({"ModifyIndex": index, "JobModifyIndex": index, "Version": rec["Version"] + 1})
        return self._ok({"EvalID": str(uuid.uuid4()), "EvalCreateIndex": index, "JobModifyIndex": index, "VolumeEvalID": "",
                         "VolumeEvalIndex": 0, "Index": index, "LastContact": 0, "KnownLeader": False})

    # Scheduling ---------------------------------------------------------------------------------
    def _node_value(self, node: t.Mapping[str, t.Any], target: str) -> t.Optional[str]:
        m = re.fullmatch(r"\$\{([^}]+)\}", target or "")
        if not m:
            return target
        name = m.group(1)
        plain = {"node.unique.name": node["Name"], "node.unique.id": node["ID"], "node.datacenter": node["Datacenter"],
                 "node.class": node["NodeClass"], "node.pool": node["NodePool"], "node.region": self.region}
        if name in plain:
            return plain[name]
        if name.startswith("attr."):
            return node["Attributes"].get(name[5:])
        if name.startswith("meta."):
            return node["Meta"].get(name[5:])
        return None

    def _constraint_ok(self, node: t.Mapping[str, t.Any], c: t.Mapping[str, t.Any]) -> bool:
        left = self._node_value(node, c.get("LTarget", ""))
        right = self._node_value(node, c.get("RTarget", ""))
        op = c.get("Operand") or "="
        if op in ("=", "==", "is"):
            return left is not None and left == right
        if op in ("!=", "not"):
            return left != right
        if op == "regexp":
            return left is not None and re.search(right or "", left) is not None
        if op == "is_set":
            return left is not None
        if op == "is_not_set":
            return left is None
        if op in ("set_contains", "set_contains_all"):
            have = {s.strip() for s in (left or "").split(",")}
            return all(s.strip() in have for s in (right or "").split(","))
        if op == "set_contains_any":
            have = {s.strip() for s in (left or "").split(",")}
            return any(s.strip() in have for s in (right or "").split(","))
        if op == "distinct_hosts":
            return True
        if op in ("version", "semver"):
            return left is not None and right is not None and version_matches(left, right, strict=op == "semver")
        return False

    @staticmethod
    def _group_demand(group: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        cpu = memory = 0
        devices: t.List[t.Tuple[str, int]] = []
        for task in group.get("Tasks") or []:
            res = task.get("Resources") or {}
            cpu += res.get("CPU") if res.get("CPU") is not None else DEFAULT_TASK_CPU
            memory += res.get("MemoryMB") if res.get("MemoryMB") is not None else DEFAULT_TASK_MEMORY
            for dev in res.get("Devices") or []:
                devices.append((dev.get("Name") or "", int(dev.get("Count") if dev.get("Count") is not None else 1)))
        disk = ((group.get("EphemeralDisk") or {}).get("SizeMB")) or DEFAULT_DISK_MB
        return {"cpu": cpu, "memory": memory, "disk": disk, "devices": devices}

    @staticmethod
    def _device_matches(request: str, dev: t.Mapping[str, t.Any]) -> bool:
        parts = request.split("/")
        if len(parts) == 1:
            return parts[0] == dev["Type"]
        if len(parts) == 2:
            return parts[0] == dev["Vendor"] and parts[1] == dev["Type"]
        return parts[0] == dev["Vendor"] and parts[1] == dev["Type"] and parts[2] == dev["Name"]

    def _node_free(self, node: t.Mapping[str, t.Any], ignore: t.Set[str]) -> t.Dict[str, t.Any]:
        res, reserved = node["NodeResources"], node["ReservedResources"]
        free = {"cpu": res["Cpu"]["CpuShares"] - reserved["Cpu"]["CpuShares"],
                "memory": res["Memory"]["MemoryMB"] - reserved["Memory"]["MemoryMB"],
                "disk": res["Disk"]["DiskMB"] - reserved["Disk"]["DiskMB"], "device_ids": {}}
        used_ids: t.Set[str] = set()
        for alloc in self._allocs.values():
            if alloc["NodeID"] != node["ID"] or alloc["ID"] in ignore or not self._live(alloc):
                continue
            free["cpu"] -= alloc["Demand"]["cpu"]
            free["memory"] -= alloc["Demand"]["memory"]
            free["disk"] -= alloc["Demand"]["disk"]
            used_ids.update(alloc["DeviceIDs"])
        for dev in res.get("Devices") or []:
            free["device_ids"][(dev["Vendor"], dev["Type"], dev["Name"])] = [
                i["ID"] for i in dev["Instances"] if i["Healthy"] and i["ID"] not in used_ids]
        return free

    def _schedule(self, job: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any], count: int, ignore: t.Set[str],
                  extra_used: t.Optional[t.Dict[str, t.Dict[str, t.Any]]] = None
                  ) -> t.Tuple[t.List[Placement], t.Optional[t.Dict[str, t.Any]]]:
        """Place ``count`` allocations: ([(node, devices)], metric or None). ``extra_used`` accumulates across calls."""
        extra_used = extra_used if extra_used is not None else {}
        demand = self._group_demand(group)
        nodes = sorted(self._nodes.values(), key=lambda n: n["Name"])
        metric: t.Dict[str, t.Any] = {"NodesEvaluated": 0, "NodesFiltered": 0, "NodesInPool": 0, "NodesAvailable": {},
                                      "ClassFiltered": None, "ConstraintFiltered": None, "NodesExhausted": 0,
                                      "ClassExhausted": None, "DimensionExhausted": None, "QuotaExhausted": None,
                                      "ResourcesExhausted": None, "Scores": None, "ScoreMetaData": None,
                                      "AllocationTime": 1000, "CoalescedFailures": 0}
        constraints = list(job.get("Constraints") or []) + list(group.get("Constraints") or [])
        for task in group.get("Tasks") or []:
            constraints.extend(task.get("Constraints") or [])
        mode = ((group.get("Networks") or [{}])[0] or {}).get("Mode") or "host"
        feasible = []
        for node in nodes:
            pool = job.get("NodePool") or "default"
            if node["Status"] != "ready" or node["SchedulingEligibility"] != "eligible" or node["Drain"]:
                continue
            if pool != "all" and node["NodePool"] != pool:
                continue
            if not any(fnmatch.fnmatchcase(node["Datacenter"], dc) for dc in job.get("Datacenters") or ["*"]):
                continue
            metric["NodesInPool"] += 1
            metric["NodesEvaluated"] += 1
            metric["NodesAvailable"][node["Datacenter"]] = metric["NodesAvailable"].get(node["Datacenter"], 0) + 1
            reason = None
            for c in constraints:
                if not self._constraint_ok(node, c):
                    reason = "%s %s %s" % (c.get("LTarget", ""), c.get("Operand") or "=", c.get("RTarget", ""))
                    break
            if reason is None:
                for task in group.get("Tasks") or []:
                    info = node["Drivers"].get(task.get("Driver") or "")
                    if not info or not info.get("Detected") or not info.get("Healthy"):
                        reason = "missing drivers"
                        break
            if reason is None and mode != "host":
                modes = {n.get("Mode") for n in node["NodeResources"]["Networks"]}
                if mode not in modes:
                    reason = "missing network"
            if reason is not None:
                metric["NodesFiltered"] += 1
                metric["ConstraintFiltered"] = metric["ConstraintFiltered"] or {}
                metric["ConstraintFiltered"][reason] = metric["ConstraintFiltered"].get(reason, 0) + 1
                continue
            feasible.append(node)
        placements: t.List[Placement] = []
        exhausted: t.Dict[str, int] = {}
        for _ in range(count):
            placed = None
            for node in feasible:
                free = self._node_free(node, ignore)
                used = extra_used.setdefault(node["ID"], {"cpu": 0, "memory": 0, "disk": 0, "device_ids": set()})
                short = None
                for dim in ("cpu", "memory", "disk"):
                    if free[dim] - used[dim] < demand[dim]:
                        short = dim
                        break
                picked: t.List[t.Dict[str, t.Any]] = []
                if short is None:
                    for name, wanted in demand["devices"]:
                        got = None
                        for (vendor, dtype, dname), ids in free["device_ids"].items():
                            dev = {"Vendor": vendor, "Type": dtype, "Name": dname}
                            avail = [i for i in ids if i not in used["device_ids"] and
                                     all(i not in p["DeviceIDs"] for p in picked)]
                            if self._device_matches(name, dev) and len(avail) >= wanted:
                                got = dict(dev, DeviceIDs=avail[:wanted])
                                break
                        if got is None:
                            short = "devices: no devices match request"
                            break
                        picked.append(got)
                if short is not None:
                    exhausted[short] = exhausted.get(short, 0) + 1
                    continue
                used["cpu"] += demand["cpu"]
                used["memory"] += demand["memory"]
                used["disk"] += demand["disk"]
                for p in picked:
                    used["device_ids"].update(p["DeviceIDs"])
                placed = (node, picked)
                break
            if placed is None:
                failures = count - len(placements)
                metric["NodesExhausted"] = sum(exhausted.values())
                metric["DimensionExhausted"] = exhausted or None
                metric["CoalescedFailures"] = failures - 1
                return placements, metric
            placements.append(placed)
        return placements, None

    def _reconcile(self, rec: t.Dict[str, t.Any], changes: t.Mapping[str, str], eval_id: str) -> t.Dict[str, t.Any]:
        """Apply a new job version to the allocations (what the scheduler and clients would do)."""
        job = rec["job"]
        ns = job["Namespace"]
        groups = {g["Name"]: g for g in job.get("TaskGroups") or []}
        index = rec["ModifyIndex"]
        failed: t.Dict[str, t.Any] = {}
        for name, change in changes.items():
            current = [a for a in self._job_allocs(ns, job["ID"]) if a["TaskGroup"] == name and a["DesiredStatus"] == "run"]
            if change == "destroy" or change == "destructive":
                for alloc in current:
                    alloc["DesiredStatus"] = "stop"
                    alloc["DesiredDescription"] = "alloc is being updated due to job update" if change == "destructive" \
                        else "alloc not needed due to job update"
                    alloc["ModifyIndex"] = index
                current = []
            if change == "destroy":
                rec["Queued"].pop(name, None)
                continue
            group = groups[name]
            want = int(group.get("Count", 1))
            for alloc in current[want:]:
                alloc["DesiredStatus"] = "stop"
                alloc["DesiredDescription"] = "alloc not needed due to job update"
                alloc["ModifyIndex"] = index
            for alloc in current[:want]:
                alloc["JobVersion"] = rec["Version"]
                alloc["Job"] = job
                alloc["ModifyIndex"] = index
            missing = want - len(current[:want])
            ignore = {a["ID"] for a in current[want:]}
            # (no usage carried over between groups: the allocations made for earlier groups already count)
            placements, metric = self._schedule(job, group, missing, ignore)
            rec["Queued"][name] = missing - len(placements)
            if metric is not None:
                failed[name] = metric
            used_indexes = {a["Index"] for a in current[:want]}
            free_indexes = (i for i in itertools.count() if i not in used_indexes)
            for (node, devices), alloc_index in zip(placements, free_indexes):
                self._create_alloc(rec, group, alloc_index, node, devices, eval_id, index)
        return failed

    def _create_alloc(self, rec: t.Mapping[str, t.Any], group: t.Mapping[str, t.Any], alloc_index: int,
                      node: t.Mapping[str, t.Any], devices: t.List[t.Dict[str, t.Any]], eval_id: str, index: int) -> None:
        job = rec["job"]
        alloc_id = str(uuid.uuid4())
        now = time.time_ns()
        ports = []
        taken = {p["Value"] for a in self._allocs.values() if a["NodeID"] == node["ID"] and self._live(a) for p in a["Ports"]}
        next_port = (p for p in itertools.count(node["NodeResources"]["MinDynamicPort"]) if p not in taken)
        ip = node["Attributes"].get("unique.network.ip-address", "")
        for net in group.get("Networks") or []:
            for port in net.get("DynamicPorts") or []:
                ports.append({"Label": port["Label"], "Value": next(next_port), "To": port.get("To", 0), "HostIP": ip})
            for port in net.get("ReservedPorts") or []:
                ports.append({"Label": port["Label"], "Value": port["Value"], "To": port.get("To", 0), "HostIP": ip})
        self._allocs[alloc_id] = {
            "ID": alloc_id, "Namespace": job["Namespace"], "EvalID": eval_id,
            "Name": "%s.%s[%d]" % (job["ID"], group["Name"], alloc_index), "Index": alloc_index,
            "NodeID": node["ID"], "NodeName": node["Name"], "JobID": job["ID"], "Job": job, "JobVersion": rec["Version"],
            "TaskGroup": group["Name"], "Tasks": [task["Name"] for task in group.get("Tasks") or []],
            "TaskResources": {task["Name"]: task.get("Resources") or {} for task in group.get("Tasks") or []},
            "Demand": self._group_demand(group), "Devices": devices,
            "DeviceIDs": [i for d in devices for i in d["DeviceIDs"]], "Ports": ports, "NetworkMode":
                ((group.get("Networks") or [{}])[0] or {}).get("Mode") or "host",
            "DesiredStatus": "run", "DesiredDescription": "", "override": None, "created": time.monotonic(),
            "CreateTime": now, "ModifyTime": now, "CreateIndex": index, "ModifyIndex": index,
        }

    def _live(self, alloc: t.Mapping[str, t.Any]) -> bool:
        return alloc["DesiredStatus"] == "run" and self._client_status(alloc) in ("pending", "running")

    def _client_status(self, alloc: t.Mapping[str, t.Any]) -> str:
        if alloc["override"]:
            return alloc["override"]["ClientStatus"]
        if alloc["DesiredStatus"] != "run":
            return "complete"
        if self.alloc_start_delay is None:
            return "pending"
        return "running" if time.monotonic() - alloc["created"] >= self.alloc_start_delay else "pending"

    def _task_states(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        status = self._client_status(alloc)
        override = alloc["override"] or {}
        created = rfc3339(alloc["CreateTime"])
        state = override.get("State") or {"pending": "pending", "running": "running"}.get(status, "dead")
        failed = override.get("Failed")
        if failed is None:
            failed = status in ("failed", "lost")
        events = [{"Type": "Received", "Time": alloc["CreateTime"], "DisplayMessage": "Task received by client",
                   "Details": {}, "FailsTask": False}]
        if state != "pending":
            events.append({"Type": "Started", "Time": alloc["CreateTime"], "DisplayMessage": "Task started by client",
                           "Details": {}, "FailsTask": False})
        if state == "dead" and status != "lost":  # a lost task's end is not seen by any client
            events.append({"Type": "Terminated" if failed else "Killed", "Time": alloc["CreateTime"],
                           "DisplayMessage": "Exit Code: %d" % (1 if failed else 0), "Details": {}, "FailsTask": bool(failed)})
        return {task: {"State": state, "Failed": bool(failed), "Restarts": int(override.get("Restarts") or 0),
                       "LastRestart": ZERO_TIME, "StartedAt": created if state != "pending" else ZERO_TIME,
                       "FinishedAt": created if state == "dead" else ZERO_TIME, "Events": events, "TaskHandle": None}
                for task in alloc["Tasks"]}

    def _alloc_stub(self, alloc: t.Mapping[str, t.Any], task_states: bool = True) -> t.Dict[str, t.Any]:
        override = alloc["override"] or {}
        return {
            "ID": alloc["ID"], "EvalID": alloc["EvalID"], "Name": alloc["Name"], "Namespace": alloc["Namespace"],
            "NodeID": alloc["NodeID"], "NodeName": alloc["NodeName"], "JobID": alloc["JobID"], "JobType": alloc["Job"]["Type"],
            "JobVersion": alloc["JobVersion"], "TaskGroup": alloc["TaskGroup"], "AllocatedResources": None,
            "DesiredStatus": alloc["DesiredStatus"], "DesiredDescription": alloc["DesiredDescription"],
            "ClientStatus": self._client_status(alloc), "ClientDescription": override.get("Description", ""),
            "DesiredTransition": {"Migrate": None, "Reschedule": None, "ForceReschedule": None, "NoShutdownDelay": None},
            "TaskStates": self._task_states(alloc) if task_states else None, "DeploymentStatus": None, "FollowupEvalID": "", "NextAllocation": "",
            "RescheduleTracker": None, "PreemptedAllocations": None, "PreemptedByAllocation": "",
            "CreateIndex": alloc["CreateIndex"], "ModifyIndex": alloc["ModifyIndex"],
            "CreateTime": alloc["CreateTime"], "ModifyTime": alloc["ModifyTime"],
        }

    def _alloc_full(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        full = self._alloc_stub(alloc)
        full.pop("JobType")
        full.update({
            "Job": self._job_view(self._jobs[(alloc["Namespace"], alloc["JobID"])]) if (alloc["Namespace"], alloc["JobID"]) in self._jobs
            else copy.deepcopy(alloc["Job"]),
            "Resources": {"CPU": alloc["Demand"]["cpu"], "MemoryMB": alloc["Demand"]["memory"], "DiskMB": alloc["Demand"]["disk"]},
            "AllocatedResources": self._allocated_resources(alloc),
            "Metrics": {"NodesEvaluated": 1, "NodesFiltered": 0, "AllocationTime": 1000, "CoalescedFailures": 0},
            "DeploymentID": "", "AllocModifyIndex": alloc["ModifyIndex"], "NetworkStatus": None,
        })
        return full

    def _allocated_resources(self, alloc: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        tasks = {}
        devices_left = list(alloc["Devices"])
        for name, res in alloc["TaskResources"].items():
            task_devices = []
            for req in res.get("Devices") or []:
                for dev in list(devices_left):
                    if self._device_matches(req.get("Name") or "", dev):
                        task_devices.append(copy.deepcopy(dev))
                        devices_left.remove(dev)
                        break
            tasks[name] = {
                "Cpu": {"CpuShares": res.get("CPU") if res.get("CPU") is not None else DEFAULT_TASK_CPU, "ReservedCores": None},
                "Memory": {"MemoryMB": res.get("MemoryMB") if res.get("MemoryMB") is not None else DEFAULT_TASK_MEMORY,
                           "MemoryMaxMB": res.get("MemoryMaxMB") or 0},
                "Networks": None, "Devices": task_devices or None,
            }
        ip = next((p["HostIP"] for p in alloc["Ports"]), "")
        shared_net = {"Mode": alloc["NetworkMode"], "IP": ip,
                      "DynamicPorts": [{"Label": p["Label"], "Value": p["Value"], "To": p["To"], "HostNetwork": "default"}
                                       for p in alloc["Ports"]] or None}
        return {"Tasks": tasks, "TaskLifecycles": {name: None for name in tasks},
                "Shared": {"Networks": [shared_net], "DiskMB": alloc["Demand"]["disk"], "Ports": copy.deepcopy(alloc["Ports"]) or None}}

    def _job_allocations(self, req: Request, job_id: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ns = self._namespace(req)
        go_parse_bool("all", req.q("all"))
        allocs = sorted(self._job_allocs(ns, job_id), key=lambda a: (a["CreateIndex"], a["Name"]))
        return self._ok([self._alloc_stub(a) for a in allocs])

    def _allocation(self, req: Request, alloc_id: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        alloc = self._allocs.get(alloc_id)  # Nomad looks allocations up by ID alone (ACL: the alloc's namespace)
        if alloc is None:
            return text_response(404, "alloc not found")
        return self._ok(self._alloc_full(alloc))

    def _logs_endpoint(self, req: Request, alloc_id: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        alloc = self._allocs.get(alloc_id)
        if alloc is None:
            return text_response(404, 'Unknown allocation "%s"' % alloc_id)
        task = req.q("task") or ""
        if not task:
            return text_response(400, "must include task name")
        if task not in alloc["Tasks"]:
            return text_response(400, 'unknown task name "%s"' % task)
        stream = req.q("type") or ""
        if stream not in ("stdout", "stderr"):
            return text_response(400, "must include a valid log type (stdout or stderr)")
        origin = req.q("origin") or "start"
        if origin not in ("start", "end"):
            return text_response(400, 'Unknown origin "%s"' % origin)
        try:
            offset = int(req.q("offset") or 0)
        except ValueError:
            return text_response(400, 'Failed to parse offset "%s"' % req.q("offset"))
        go_parse_bool("follow", req.q("follow"))
        plain = go_parse_bool("plain", req.q("plain"))
        data = bytes(self._logs.get((alloc_id, task, stream), b""))
        start = max(0, len(data) - offset) if origin == "end" else min(len(data), max(0, offset))
        chunk = data[start:]
        if plain:
            return 200, {"Content-Type": "text/plain; charset=utf-8"}, chunk
        frame = {"File": "alloc/logs/%s.%s.0" % (task, stream), "Offset": len(data), "Data": base64.b64encode(chunk).decode("ascii")}
        return json_response(200, frame if chunk else {})

    # Plan ---------------------------------------------------------------------------------------
    def _plan(self, req: Request, job_id: str) -> Response:
        if req.method not in ("PUT", "POST"):
            return text_response(405, "Invalid method")
        body, spec, ns = self._decode_job_request(req, job_id, "plan")
        rec = self._jobs.get((ns, spec["ID"]))
        old = rec["job"] if rec else None
        changes = self._changes(old, spec)
        ignore = {a["ID"] for a in self._job_allocs(ns, spec["ID"])}
        extra: t.Dict[str, t.Dict[str, t.Any]] = {}
        desired: t.Dict[str, t.Dict[str, int]] = {}
        failed: t.Dict[str, t.Any] = {}
        groups = {g["Name"]: g for g in spec.get("TaskGroups") or []}
        for name, change in changes.items():
            d = {"Ignore": 0, "Place": 0, "Migrate": 0, "Stop": 0, "InPlaceUpdate": 0, "DestructiveUpdate": 0,
                 "Canary": 0, "Preemptions": 0}
            old_count = len([a for a in self._job_allocs(ns, spec["ID"]) if a["TaskGroup"] == name and a["DesiredStatus"] == "run"])
            if change == "destroy":
                d["Stop"] = old_count
            else:
                want = int(groups[name].get("Count", 1))
                keep = min(old_count, want) if change != "create" else 0
                key = {"ignore": "Ignore", "in-place": "InPlaceUpdate", "destructive": "DestructiveUpdate"}.get(change)
                if key:
                    d[key] = keep
                d["Stop"] = max(0, old_count - want) if change != "create" else 0
                d["Place"] = want - keep
                to_place = want if change in ("create", "destructive") else want - keep
                placements, metric = self._schedule(spec, groups[name], to_place, ignore, extra)
                if metric is not None:
                    failed[name] = metric
            desired[name] = d
        response = {
            "Index": self._index, "JobModifyIndex": rec["JobModifyIndex"] if rec else 0, "CreatedEvals": None,
            "Diff": self._job_diff(old, spec, changes, desired) if body.get("Diff") else None,
            "Annotations": {"DesiredTGUpdates": desired, "PreemptedAllocs": None},
            "FailedTGAllocs": failed or None, "NextPeriodicLaunch": ZERO_TIME, "Warnings": "",
        }
        return self._ok(response)

    def _job_diff(self, old: t.Optional[t.Mapping[str, t.Any]], new: t.Mapping[str, t.Any], changes: t.Mapping[str, str],
                  desired: t.Mapping[str, t.Mapping[str, int]]) -> t.Dict[str, t.Any]:
        fields_, objects = _struct_diff(old, new, skip=("TaskGroups",))
        old_groups = {g["Name"]: g for g in (old or {}).get("TaskGroups") or []}
        new_groups = {g["Name"]: g for g in new.get("TaskGroups") or []}
        tg_diffs = []
        for name in list(new_groups) + [n for n in old_groups if n not in new_groups]:
            before, after = old_groups.get(name), new_groups.get(name)
            g_fields, g_objects = _struct_diff(before, after, skip=("Tasks",))
            before_tasks = {tk["Name"]: tk for tk in (before or {}).get("Tasks") or []}
            after_tasks = {tk["Name"]: tk for tk in (after or {}).get("Tasks") or []}
            task_diffs = []
            for tname in list(after_tasks) + [n for n in before_tasks if n not in after_tasks]:
                tb, ta = before_tasks.get(tname), after_tasks.get(tname)
                t_fields, t_objects = _struct_diff(tb, ta)
                t_type = "Added" if tb is None else "Deleted" if ta is None else "Edited" if (t_fields or t_objects) else "None"
                annotations = None
                if t_type == "Edited":
                    annotations = ["forces create/destroy update" if changes.get(name) == "destructive" else "forces in-place update"]
                task_diffs.append({"Type": t_type, "Name": tname, "Fields": t_fields or None, "Objects": t_objects or None,
                                   "Annotations": annotations})
            g_type = "Added" if before is None else "Deleted" if after is None else \
                "Edited" if (g_fields or g_objects or any(td["Type"] != "None" for td in task_diffs)) else "None"
            d = desired.get(name, {})
            updates = {label: d.get(key, 0) for key, label in (
                ("Ignore", "ignore"), ("Place", "create"), ("Stop", "destroy"), ("InPlaceUpdate", "in-place update"),
                ("DestructiveUpdate", "create/destroy update"), ("Migrate", "migrate"), ("Canary", "canary"))
                       if d.get(key, 0)}
            tg_diffs.append({"Type": g_type, "Name": name, "Fields": g_fields or None, "Objects": g_objects or None,
                             "Tasks": task_diffs or None, "Updates": updates or None})
        if old is None:
            j_type = "Added"
        elif fields_ or objects or any(tg["Type"] != "None" for tg in tg_diffs):
            j_type = "Edited"
        else:
            j_type = "None"
        return {"Type": j_type, "ID": new["ID"], "Fields": fields_ or None, "Objects": objects or None,
                "TaskGroups": tg_diffs or None}

    # Evaluations --------------------------------------------------------------------------------
    def _create_eval(self, eval_id: str, rec: t.Mapping[str, t.Any], failed: t.Mapping[str, t.Any], index: int) -> None:
        job = rec["job"]
        base = {"Namespace": job["Namespace"], "Priority": job.get("Priority", 50), "Type": job.get("Type", "service"),
                "TriggeredBy": "job-register", "JobID": job["ID"], "JobModifyIndex": rec["JobModifyIndex"],
                "NodeID": "", "NodeModifyIndex": 0, "DeploymentID": "", "Wait": 0, "WaitUntil": ZERO_TIME,
                "NextEval": "", "PreviousEval": "", "ClassEligibility": None, "EscapedComputedClass": False,
                "AnnotatePlan": False, "QueuedAllocations": dict(rec.get("Queued") or {}), "LeaderACL": "",
                "SnapshotIndex": index, "CreateIndex": index, "ModifyIndex": index,
                "CreateTime": time.time_ns(), "ModifyTime": time.time_ns()}
        blocked = ""
        if failed:
            blocked = str(uuid.uuid4())
            self._evals[blocked] = dict(base, ID=blocked, Status="blocked", StatusDescription="created to place remaining allocations",
                                        PreviousEval=eval_id, FailedTGAllocs=None, BlockedEval="",
                                        ClassEligibility={}, created=time.monotonic())
        self._evals[eval_id] = dict(base, ID=eval_id, Status="complete", StatusDescription="",
                                    FailedTGAllocs=copy.deepcopy(dict(failed)) or None, BlockedEval=blocked,
                                    created=time.monotonic())

    def _evaluation(self, req: Request, rest: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ev = self._evals.get(rest)
        if ev is None:
            return text_response(404, "eval not found")
        out = {k: copy.deepcopy(v) for k, v in ev.items() if k != "created"}
        if out["Status"] == "complete" and time.monotonic() - ev["created"] < self.eval_delay:
            # not processed by a scheduler worker yet
            out.update(Status="pending", FailedTGAllocs=None, BlockedEval="", QueuedAllocations=None)
        return self._ok(out)

    # Allocation list ----------------------------------------------------------------------------
    def _list_allocations(self, req: Request) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ns = self._namespace(req, allow_wildcard=True)
        resources = bool(go_parse_bool("resources", req.q("resources")))
        task_states = go_parse_bool("task_states", req.q("task_states"))
        go_parse_bool("reverse", req.q("reverse"))
        matcher = parse_filter(req.q("filter") or "")
        try:
            per_page = int(req.q("per_page") or 0)
        except ValueError:
            return text_response(400, 'failed to parse value of "per_page"')
        token = req.q("next_token") or ""
        allocs = sorted((a for a in self._allocs.values() if ns == "*" or a["Namespace"] == ns),
                        key=lambda a: (a["CreateIndex"], a["ID"]))
        out: t.List[t.Dict[str, t.Any]] = []
        next_token = ""
        if token:
            start = _token_key(token)
            allocs = allocs[bisect.bisect_left([(a["CreateIndex"], a["ID"]) for a in allocs], start):]
        for alloc in allocs:
            key = "%d.%s" % (alloc["CreateIndex"], alloc["ID"])
            stub = self._alloc_stub(alloc, task_states=task_states is not False)
            if resources:
                stub["AllocatedResources"] = self._allocated_resources(alloc)
            if not matcher(stub):
                continue
            if per_page and len(out) == per_page:
                next_token = key
                break
            out.append(stub)
        headers = self._meta_headers()
        if next_token:
            headers["X-Nomad-NextToken"] = next_token
        return json_response(200, out, headers)

    # Nodes --------------------------------------------------------------------------------------
    def _node_stub(self, node: t.Mapping[str, t.Any], resources: bool, with_os: bool) -> t.Dict[str, t.Any]:
        stub = {
            "Address": node["Attributes"].get("unique.network.ip-address", ""), "ID": node["ID"],
            "Attributes": {"os.name": node["Attributes"].get("os.name", "")} if with_os else None,
            "Datacenter": node["Datacenter"], "Name": node["Name"], "NodeClass": node["NodeClass"],
            "NodePool": node["NodePool"], "Version": node["Attributes"].get("nomad.version", ""), "Drain": node["Drain"],
            "SchedulingEligibility": node["SchedulingEligibility"], "Status": node["Status"],
            "StatusDescription": node["StatusDescription"], "Drivers": copy.deepcopy(node["Drivers"]),
            "HostVolumes": {}, "NodeResources": None, "ReservedResources": None, "LastDrain": None,
            "CreateIndex": node["CreateIndex"], "ModifyIndex": node["ModifyIndex"],
        }
        if resources:
            stub["NodeResources"] = copy.deepcopy(node["NodeResources"])
            stub["ReservedResources"] = copy.deepcopy(node["ReservedResources"])
        return stub

    def _list_nodes(self, req: Request) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        prefix = req.q("prefix") or ""
        resources = bool(go_parse_bool("resources", req.q("resources")))
        with_os = bool(go_parse_bool("os", req.q("os")))
        nodes = sorted((n for n in self._nodes.values() if n["ID"].startswith(prefix)), key=lambda n: n["ID"])
        return self._ok([self._node_stub(n, resources, with_os) for n in nodes])

    def _node_specific(self, req: Request, rest: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        if rest.endswith("/allocations"):
            node = self._nodes.get(rest[: -len("/allocations")])
            if node is None:
                return self._ok([])
            allocs = sorted((a for a in self._allocs.values() if a["NodeID"] == node["ID"]), key=lambda a: a["CreateIndex"])
            return self._ok([self._alloc_full(a) for a in allocs])
        node = self._nodes.get(rest)
        if node is None:
            return text_response(404, "node not found")
        return self._ok(copy.deepcopy(node))

    # Variables ----------------------------------------------------------------------------------
    def _list_vars(self, req: Request) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ns = self._namespace(req, allow_wildcard=True)
        prefix = req.q("prefix") or ""
        out = [self._var_meta(v) for (vns, path), v in sorted(self._vars.items())
               if (ns == "*" or vns == ns) and path.startswith(prefix)]
        return self._ok(out)

    @staticmethod
    def _var_meta(var: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        return {k: var[k] for k in ("Namespace", "Path", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime")}

    def _var(self, req: Request, path: str) -> Response:
        if not path:
            return text_response(400, "missing variable path")
        cas_text = req.q("cas")
        cas = None
        if cas_text is not None and cas_text != "":
            try:
                cas = int(cas_text)
                if cas < 0:
                    raise ValueError
            except ValueError:
                return text_response(400, 'can not parse cas: strconv.ParseUint: parsing "%s": invalid syntax' % cas_text)
        if req.method == "GET":
            var = self._vars.get((self._namespace(req), path))
            if var is None:
                return text_response(404, "variable not found")
            self._expire_lock(var)
            return json_response(200, self._var_public(var), {"X-Nomad-Index": str(var["ModifyIndex"])})
        if req.method in ("PUT", "POST"):
            ops = [op for op in ("lock-acquire", "lock-renew", "lock-release") if op in req.query]
            if len(ops) > 1:
                return text_response(400, "multiple lock operations")
            if ops and cas_text:
                return text_response(400, "CAS can't be used with lock operations")
            body = self._read_json(req)
            self.schema.check("variable", body)
            if ops:
                return self._lock_op(req, ops[0], path, body)
            if not isinstance(body, dict) or not body.get("Items"):
                return text_response(400, "variable missing required Items object")
            ns = body.get("Namespace") or self._namespace(req)  # Nomad: the body's Namespace wins
            if not _VAR_PATH.match(path):
                return text_response(500, 'invalid path "%s"' % path)
            parts = path.split("/")
            if parts[0] == "nomad" and (len(parts) == 1 or parts[1] not in ("jobs", "job-templates")):
                return text_response(500, '"nomad" is a reserved top-level directory path, but you may write variables '
                                          'to "nomad/jobs", "nomad/job-templates", or below')
            current = self._vars.get((ns, path))
            if cas is not None and (current["ModifyIndex"] if current else 0) != cas:
                return self._var_conflict(ns, path, current)
            if self._locked_against(current, body):
                return self._var_conflict(ns, path, None)
            index = self._next_index()
            now = time.time_ns()
            var = {"Namespace": ns, "Path": path, "CreateIndex": current["CreateIndex"] if current else index,
                   "ModifyIndex": index, "CreateTime": current["CreateTime"] if current else now, "ModifyTime": now,
                   "Items": dict(body["Items"])}
            if current is not None and current.get("Lock"):
                var.update(Lock=current["Lock"], **{k: v for k, v in current.items() if k.startswith("lock_")})
            self._vars[(ns, path)] = var
            return json_response(200, self._var_public(var), {"X-Nomad-Index": str(index)})
        if req.method == "DELETE":
            ns = self._namespace(req)
            current = self._vars.get((ns, path))
            if cas is not None and (current["ModifyIndex"] if current else 0) != cas:
                return self._var_conflict(ns, path, current)
            if self._locked_against(current, None):
                return self._var_conflict(ns, path, None)
            self._vars.pop((ns, path), None)
            return 204, {"X-Nomad-Index": str(self._next_index())}, b""
        return text_response(400, "Invalid method")

    def _expire_lock(self, var: t.Optional[t.Dict[str, t.Any]]) -> None:
        """A lock not renewed within its TTL is lost (Nomad's TTL timer); the lock delay then starts."""
        lock = (var or {}).get("Lock")
        if var is not None and lock and time.monotonic() >= var["lock_expires"]:
            var["Lock"] = None
            var["lock_free_at"] = var["lock_expires"] + var["lock_delay"]

    def _locked_against(self, var: t.Optional[t.Dict[str, t.Any]], body: t.Any) -> bool:
        """``isLocked``: the variable holds a lock and the request does not carry its ID."""
        self._expire_lock(var)
        lock = (var or {}).get("Lock")
        given = ((body or {}).get("Lock") or {}).get("ID") if isinstance(body, dict) else None
        return bool(lock) and given != lock["ID"]

    def _lock_op(self, req: Request, op: str, path: str, body: t.Any) -> Response:
        if not isinstance(body, dict):
            return text_response(400, "missing lock information")
        ns = body.get("Namespace") or self._namespace(req)
        current = self._vars.get((ns, path))
        self._expire_lock(current)
        lock = body.get("Lock") or {}
        now = time.monotonic()
        if op == "lock-acquire":
            try:
                ttl = _go_duration(lock.get("TTL")) or 15.0
                delay = _go_duration(lock.get("LockDelay")) or 15.0
            except ValueError as err:
                return text_response(400, str(err))
            if not 10.0 <= ttl <= 86400.0:
                return text_response(400, "TTL must be between 10 seconds and 24 hours")
            if self._locked_against(current, body) or (current is not None and now < current.get("lock_free_at", 0.0)):
                return self._var_conflict(ns, path, None)
            index = self._next_index()
            wall = time.time_ns()
            var = {"Namespace": ns, "Path": path, "CreateIndex": current["CreateIndex"] if current else index,
                   "ModifyIndex": index, "CreateTime": current["CreateTime"] if current else wall, "ModifyTime": wall,
                   "Items": dict(body.get("Items") or {}),
                   "Lock": {"ID": str(uuid.uuid4()), "TTL": _go_duration_text(ttl), "LockDelay": _go_duration_text(delay)},
                   "lock_expires": now + ttl, "lock_delay": delay, "lock_ttl": ttl}
            self._vars[(ns, path)] = var
            return json_response(200, self._var_public(var), {"X-Nomad-Index": str(index)})
        if current is None:
            return text_response(404, "variable not found")
        if not current.get("Lock"):
            return text_response(409, "variable doesn't hold a lock")
        if not lock.get("ID"):
            return text_response(400, "missing lock information")
        if lock["ID"] != current["Lock"]["ID"]:
            return self._var_conflict(ns, path, None)
        if op == "lock-renew":
            current["lock_expires"] = now + current["lock_ttl"]
            return self._ok(self._var_meta(current))
        current["Lock"] = None
        current["ModifyIndex"] = self._next_index()
        return json_response(200, self._var_public(current), {"X-Nomad-Index": str(current["ModifyIndex"])})

    @staticmethod
    def _var_public(var: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        return {k: copy.deepcopy(v) for k, v in var.items() if not k.startswith("lock_")}

    def _var_conflict(self, ns: str, path: str, current: t.Optional[t.Mapping[str, t.Any]]) -> Response:
        """409 with the current variable (Items included: the double's token can read), as Nomad answers."""
        if current is None:  # zero-value conflict: the variable does not exist
            body: t.Dict[str, t.Any] = {"Namespace": ns, "Path": path, "CreateIndex": 0, "ModifyIndex": 0,
                                        "CreateTime": 0, "ModifyTime": 0, "Items": None}
            return json_response(409, body, {"X-Nomad-Index": "0"})
        return json_response(409, self._var_public(current), {"X-Nomad-Index": str(current["ModifyIndex"])})


# Backwards-friendly short name used by the fixtures.
NomadDouble = NomadAPIDouble
