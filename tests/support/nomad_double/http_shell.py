# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HTTP shell shared by the API doubles: a threaded ``http.server`` on 127.0.0.1 (random port, optional TLS
with the test PKI, optionally requiring a client certificate), request parsing, fault injection and request
recording. It knows no Nomad or Vault behaviour: a double subclasses :class:`HTTPDouble` and answers
:meth:`HTTPDouble._route`.

Concurrency: one thread per connection (``ThreadingMixIn``) and a listen backlog of
:data:`LISTEN_BACKLOG` (``socketserver``'s default of 5 reset connections beyond a few dozen concurrent
clients), so hundreds of clients may connect at once; a handler may block (the Nomad layer's blocking
queries) without holding up the others.

What it does not model: HTTP keep-alive (one request per connection, so no idle thread outlives a test),
HTTP/2, chunked request bodies (``Content-Length`` only).
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import socketserver
import ssl
import struct
import threading
import time
import typing as t
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from .pki import TestPKI, make_test_pki

#: The listen backlog: connections the kernel queues before the accept loop takes them.
LISTEN_BACKLOG = 1024
#: Credential headers: never recorded (``RecordedRequest.token_present`` says whether one came).
TOKEN_HEADERS = ("x-nomad-token", "x-vault-token", "authorization")


class BadRequest(Exception):
    """Answer with ``status`` and a plain-text body (how Nomad's CodedError reaches the client)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message



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
    #: time.monotonic() when the request arrived and when its answer was ready (benchmarks: hold times)
    started: float = 0.0
    finished: float = 0.0
    #: bytes of the answer's body (benchmarks: bytes read per create)
    response_bytes: int = 0

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
    request is handled normally after ``delay`` (a slow server). ``reset``: like ``drop`` but the
    connection is reset (TCP RST: the client sees "Connection reset by peer"); with ``handled`` the
    request is handled first and only its answer is lost (a write that took effect, its response gone).
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
    reset: bool = False
    handled: bool = False

    query: t.Optional[str] = None

    def matches(self, method: str, path: str, query: t.Mapping[str, t.Any]) -> bool:
        return ((self.method in ("*", method)) and re.search(self.path, path) is not None
                and (self.query is None or self.query in query))


Response = t.Tuple[int, t.Dict[str, str], bytes]


def json_response(status: int, body: t.Any, headers: t.Optional[t.Dict[str, str]] = None) -> Response:
    out = {"Content-Type": "application/json"}
    out.update(headers or {})
    return status, out, json.dumps(body).encode("utf-8")


def text_response(status: int, text: str, headers: t.Optional[t.Dict[str, str]] = None) -> Response:
    out = {"Content-Type": "text/plain; charset=utf-8"}
    out.update(headers or {})
    return status, out, text.encode("utf-8")


class _LiveThreads:
    """The request threads still running, each removed as it ends; :meth:`join` waits for them. (socketserver's own
    list reaps every ended thread at each new connection: with a hundred blocked reads, a hundred checks a request.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: t.Set[threading.Thread] = set()

    def append(self, thread: threading.Thread) -> None:  # (socketserver's name: before the thread starts)
        with self._lock:
            self._live.add(thread)

    def discard(self, thread: threading.Thread) -> None:
        with self._lock:
            self._live.discard(thread)

    def join(self) -> None:
        with self._lock:
            threads, self._live = list(self._live), set()
        for thread in threads:
            thread.join()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = False  # server_close() joins every request thread: nothing is left behind
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    ssl_context: t.Optional[ssl.SSLContext] = None

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._threads = _LiveThreads()  # (process_request keeps it: setdefault)

    def get_request(self) -> t.Tuple[socket.socket, t.Any]:
        sock, addr = self.socket.accept()
        if self.ssl_context is not None:
            # The handshake happens in the request thread (see _Handler.setup), not in the accept loop.
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: t.Any, client_address: t.Any) -> None:  # quiet: TLS failures, dropped clients
        pass

    def process_request_thread(self, request: t.Any, client_address: t.Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:  # one thread per connection (HTTP/1.0): its whole CPU time is the double's
            double = getattr(self.RequestHandlerClass, "double", None)
            if double is not None:
                with double._lock:
                    double.cpu_seconds += time.thread_time()
            self._threads.discard(threading.current_thread())


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
        if answer is None or answer[0] < 0:  # dropped connection (status -1: reset it)
            self.close_connection = True
            if answer is not None:  # linger 0 and close now (no FIN from shutdown_request): the peer gets a RST
                self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.request.close()
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
        #: CPU seconds of the request threads, each from its start to its end (``time.thread_time``: parsing, the
        #: model, the answer's JSON and socket; a blocking query's wait costs none; the accept loop is not counted):
        #: in a benchmark that runs the double in its own process, the double's share of the process's CPU
        self.cpu_seconds = 0.0
        #: per request thread: seconds it spent blocked (a blocking query), not counted in busy_seconds
        self._blocked = threading.local()
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
               content_type: str = "text/plain; charset=utf-8", query: t.Optional[str] = None) -> Fault:
        fault = Fault(method.upper() if method != "*" else "*", path, status, body, content_type, times, delay, drop,
                      query=query)
        with self._lock:
            self._faults.append(fault)
        return fault

    def fail_next(self, method: str, path: str, status: int = 500, body: str = "injected failure",
                  times: t.Optional[int] = 1) -> Fault:
        return self.inject(method, path, status=status, body=body, times=times)

    def deny_next(self, method: str, path: str, times: t.Optional[int] = 1) -> Fault:
        return self.inject(method, path, status=403, body="Permission denied", times=times)

    def reset_next(self, method: str, path: str, times: t.Optional[int] = 1, handled: bool = False,
                   query: t.Optional[str] = None) -> Fault:
        """Reset the connection of the next matching requests (TCP RST); ``handled``: after handling the request
        (its effect stays, its answer is lost). ``query``: only requests carrying this query parameter."""
        fault = self.inject(method, path, drop=True, times=times, query=query)
        fault.reset, fault.handled = True, handled
        return fault

    def timeout_next(self, method: str, path: str, seconds: float, times: t.Optional[int] = 1) -> Fault:
        """The next matching requests get no answer for ``seconds`` (then the connection is closed)."""
        return self.inject(method, path, delay=seconds, drop=True, times=times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str, query: t.Mapping[str, t.Any]) -> t.Optional[Fault]:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path, query):
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
                                 req.body, any(req.headers.get(h) for h in TOKEN_HEADERS), started=time.monotonic())
        with self._lock:
            self._recorded.append(record)
        for hook in list(getattr(self, "before_request", ())):
            hook(req)
        fault = self._take_fault(req.method, req.path, req.query)
        if fault is not None:
            record.fault = True
            if fault.delay:
                self._stop.wait(fault.delay)
            if fault.drop and not fault.handled:
                return (-1, {}, b"") if fault.reset else None
            if fault.status is not None:
                record.status = fault.status
                return fault.status, {"Content-Type": fault.content_type}, fault.body.encode("utf-8")
        started = time.perf_counter()
        try:
            answer = self._route(req)
        except BadRequest as err:
            answer = self._error(err.status, err.message)
        except Exception as err:  # a bug in the double: make it visible to the test
            answer = text_response(500, "%s internal error: %r" % (self.name, err))
        with self._lock:
            self.busy_seconds += time.perf_counter() - started - getattr(self._blocked, "seconds", 0.0)
        self._blocked.seconds = 0.0
        record.status, record.finished, record.response_bytes = answer[0], time.monotonic(), len(answer[2])
        if fault is not None and fault.handled:  # handled, then the answer is lost
            return (-1, {}, b"") if fault.reset else None
        return answer

    def _error(self, status: int, message: str) -> Response:
        return text_response(status, message)


