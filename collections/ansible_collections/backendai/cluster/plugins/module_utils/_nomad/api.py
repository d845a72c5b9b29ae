# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one Nomad HTTP API client of this collection (modules, inventory and lookup plugins share it).

:class:`NomadClient` (connection options: ``_nomad.connection``) wraps python-nomad and turns
every failure into one :class:`NomadError` carrying the HTTP status and Nomad's error text.

What python-nomad 2.1.0 gets wrong, and how this module works around it:

* ``nomad.Nomad()`` silently reads NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION,
  NOMAD_CLIENT_CERT/KEY from the process environment, overriding or filling in what the caller
  passed. This module instantiates python-nomad's endpoint classes itself with explicit settings,
  so only the options given here are used (the Ansible argument spec applies the env fallbacks).
* It defaults to ``verify=False`` and ignores NOMAD_CACERT: here TLS is verified by default
  (``ca_cert`` if given, else the default CA bundle); only ``validate_certs=false`` disables it.
* It does not add ``?namespace=`` to the ``/v1/var`` and ``/v1/vars`` endpoints (its namespace
  table names them ``variable``/``variables``): the namespace is passed explicitly there.
* It raises a bare ``BaseNomadException`` wrapping ``requests.Timeout`` on read timeouts (its
  ``TimeoutNomadException`` is only used for streams), and its endpoint objects' ``repr`` shows
  the ACL token. Timeouts are recognised here; the endpoint objects are never exposed.
* It does not URL-quote path parameters: job IDs, allocation and node IDs are quoted here.
* Its ``User-Agent`` handling crashes when no token is set; the user agent is set on the session.

No secret (ACL token, variable items) ever appears in an exception message or a ``repr``.

Transient failures are retried where that is safe: every read (GET, and the plan endpoint, a dry run)
and the variable lock operations (an acquire carries a lock ID made here, so that Nomad grants the
same holder again: ``isLocked`` in ``nomad/state/state_store_variables.go`` compares IDs and
``VariableLock.Canonicalize`` keeps a given one; a lost acquire answer is retried, never waited out
for the lock's TTL). Transient means no HTTP answer (refused, reset, closed: :class:`NomadUnreachable`;
a timeout) or 502/503/504 or Nomad's leaderless 500 (``No cluster leader``). At most
:data:`ATTEMPTS` tries, :data:`RETRY_DELAY` × 4^n apart; the error then says how many were made.
Other writes (register, variable writes) are not retried: they are not idempotent.
"""

from __future__ import annotations

import os
import time
import typing as t
import uuid
from urllib.parse import quote


from ansible_collections.backendai.cluster.plugins.module_utils._nomad.connection import (
    CASConflict,
    NomadConnection,
    NomadError,
    NomadTimeout,
    NomadUnreachable,
)

try:
    import requests
    HAS_REQUESTS = True
    REQUESTS_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised by missing_required_lib in the modules
    requests = None  # type: ignore[assignment]
    HAS_REQUESTS = False
    REQUESTS_IMPORT_ERROR = _exc

try:
    import nomad.api as nomad_api
    import nomad.api.exceptions as nomad_exceptions
    from nomad.api.client import stream_logs as _NomadStreamLogs
    HAS_PYTHON_NOMAD = True
    PYTHON_NOMAD_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised by missing_required_lib in the modules
    nomad_api = None  # type: ignore[assignment]
    nomad_exceptions = None  # type: ignore[assignment]
    _NomadStreamLogs = None  # type: ignore[assignment,misc]
    HAS_PYTHON_NOMAD = False
    PYTHON_NOMAD_IMPORT_ERROR = _exc

USER_AGENT = "backendai.cluster (python-nomad)"
#: Longest part of an error body that goes into an error message.
MAX_ERROR_BODY = 2000
#: How many bytes of a log :meth:`NomadClient.read_logs` fetches from the end by default.
DEFAULT_LOG_BYTES = 64 * 1024
#: Nomad's filter expression for allocations that hold resources on their node: not terminal in the
#: sense of ``Allocation.TerminalStatus``. Nomad evaluates ``filter`` (go-bexpr) on the full
#: ``structs.Allocation`` *before* it builds the ``AllocListStub`` it returns (``Paginator.next`` in
#: ``nomad/state/paginator/paginator.go`` runs ``bexpr.Evaluate(raw)`` on the table's object, then
#: ``stubFn``): write a filter against Allocation's fields, not the stub's.
LIVE_ALLOCATIONS_FILTER = ('DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed" '
                           'and ClientStatus != "lost"')
#: Page size of the allocation list (Nomad's ``per_page``).
DEFAULT_PAGE_SIZE = 1000
#: Tries of a retried call (a read, a lock operation) before its transient failure is reported.
ATTEMPTS = 3
#: Seconds before the first retry (then × 4).
RETRY_DELAY = 0.1
#: HTTP answers worth another try: a proxy or Nomad without a leader (``structs.ErrNoLeader``).
TRANSIENT_STATUS = (502, 503, 504)
NO_LEADER = "No cluster leader"
#: Nomad's longest blocking query (``structs.MaxBlockingRPCQueryTime``); it adds up to 1/16 of jitter.
MAX_BLOCKING_WAIT = 300.0


def _quote_id(value: str) -> str:
    if not value:
        raise ValueError("an ID is required")
    return quote(str(value), safe="")


def _quote_path(value: str) -> str:
    if not value:
        raise ValueError("a variable path is required")
    return quote(str(value).strip("/"), safe="/~")


def _json_or_text(response: t.Any) -> t.Any:
    try:
        return response.json()
    except ValueError:
        return None


class NomadClient:
    """Nomad HTTP API calls the collection needs, each mapped to :class:`NomadError` on failure."""

    def __init__(self, connection: NomadConnection, session: t.Optional[t.Any] = None,
                 sleep: t.Callable[[float], None] = time.sleep) -> None:
        if not HAS_PYTHON_NOMAD or not HAS_REQUESTS:
            raise NomadError("the python-nomad Python library is required (pip install python-nomad)")
        self.connection = connection
        self._sleep = sleep
        #: transient failures retried so far (each one also a warning-worthy event for a caller that reports them)
        self.retried: t.List[str] = []
        self._own_session = session is None
        self._session = session if session is not None else requests.Session()
        if str(self._session.headers.get("User-Agent", "")).startswith("python-requests"):
            self._session.headers["User-Agent"] = USER_AGENT
        verify = connection.verify
        if self._own_session:
            verify = _environment_once(self._session, connection.base_url, verify)
        settings = {
            "address": connection.base_url,
            "uri": "%s://%s" % (connection.scheme, connection.host),
            "port": connection.port,
            "user_agent": None,
            "namespace": connection.namespace or None,
            "token": connection.token or None,
            "timeout": connection.timeout,
            "version": "v1",
            "verify": verify,
            "cert": connection.cert or (),
            "region": connection.region or None,
            "session": self._session,
        }
        self._jobs = nomad_api.Jobs(**settings)
        self._job = nomad_api.Job(**settings)
        self._allocation = nomad_api.Allocation(**settings)
        self._nodes = nomad_api.Nodes(**settings)
        self._node = nomad_api.Node(**settings)
        self._variable = nomad_api.Variable(**settings)
        self._variables = nomad_api.Variables(**settings)
        self._allocations = nomad_api.Allocations(**settings)
        self._evaluation = nomad_api.Evaluation(**settings)
        self._logs = _NomadStreamLogs(**settings)
        self._cat = nomad_api.client.cat(**settings)

    def __repr__(self) -> str:
        return "NomadClient(%r)" % (self.connection,)

    def in_namespace(self, namespace: str) -> "NomadClient":
        """A client of the same cluster for another namespace (sharing this one's HTTP session and retry record)."""
        other = NomadClient(self.connection.with_options(namespace=namespace), session=self._session, sleep=self._sleep)
        other.retried = self.retried
        return other

    def close(self) -> None:
        if self._own_session:
            self._session.close()

    def __enter__(self) -> "NomadClient":
        return self

    def __exit__(self, *exc_info: t.Any) -> None:
        self.close()

    # Error mapping ----------------------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        token = self.connection.token
        if token and len(token) >= 4 and text:
            text = text.replace(token, "<redacted>")
        return text

    def _error_from(self, exc: BaseException, what: str) -> NomadError:
        payload = getattr(exc, "nomad_resp", exc)
        if HAS_REQUESTS and isinstance(payload, requests.Response):
            method = payload.request.method if payload.request is not None else ""
            path = payload.request.path_url if payload.request is not None else ""
            body = self._scrub((payload.text or "").strip())
            status = payload.status_code
            if status == 409 and nomad_exceptions is not None and isinstance(exc, nomad_exceptions.VariableConflict):
                current = _json_or_text(payload)
                index = current.get("ModifyIndex") if isinstance(current, dict) else None
                return CASConflict("%s: check-and-set conflict (HTTP 409 on %s %s): the variable's current "
                                   "ModifyIndex is %s" % (what, method, path, index), current if isinstance(current, dict) else None,
                                   method, path, index=_header_index(payload))
            shown = body if len(body) <= MAX_ERROR_BODY else body[:MAX_ERROR_BODY] + "..."
            message = "%s: HTTP %d %s on %s %s: %s" % (
                what, status, payload.reason or "", method, path, shown or "(empty body)")
            return NomadError(message, status, body, method, path)
        # No HTTP answer: connection refused, TLS failure, timeout.
        is_stream_timeout = nomad_exceptions is not None and isinstance(payload, nomad_exceptions.TimeoutNomadException)
        if is_stream_timeout or (HAS_REQUESTS and isinstance(payload, requests.Timeout)):
            return NomadTimeout("%s: no answer from %s within %ss (timeout)" % (
                what, self.connection.base_url, self.connection.timeout))
        if HAS_REQUESTS and isinstance(payload, requests.exceptions.SSLError):
            return NomadError("%s: TLS error talking to %s: %s (set ca_cert to the CA that signed Nomad's "
                              "certificate, or validate_certs=false to skip verification)" % (
                                  what, self.connection.base_url, self._scrub(_short(payload))))
        if HAS_REQUESTS and isinstance(payload, requests.ConnectionError):
            return NomadUnreachable("%s: cannot connect to %s: %s"
                                    % (what, self.connection.base_url, self._scrub(_short(payload))))
        return NomadError("%s: %s" % (what, self._scrub(_short(payload))))

    def _call(self, what: str, fn: t.Callable[[], t.Any], retry: bool = False) -> t.Any:
        """``fn()``, its failure mapped to :class:`NomadError`; with ``retry``, transient failures are tried again."""
        attempts = ATTEMPTS if retry else 1
        attempt = 0
        while True:
            attempt += 1
            # The mapped error is raised outside the except block so that it carries no __context__
            # (python-nomad's exception holds the response, whose request holds the token header).
            error: t.Optional[NomadError] = None
            try:
                return fn()
            except Exception as exc:  # python-nomad raises BaseNomadException and requests exceptions
                if not _is_transport_error(exc):
                    raise
                error = self._error_from(exc, what)
            if not is_transient(error):
                raise error
            if attempt == attempts:
                if attempts > 1:
                    error.message += " (gave up after %d attempts)" % attempts
                raise error
            self.retried.append(str(error))
            self._sleep(RETRY_DELAY * 4 ** (attempt - 1))

    def _read(self, what: str, fn: t.Callable[[], t.Any]) -> t.Any:
        """A read: :meth:`_call` with retries."""
        return self._call(what, fn, retry=True)

    def _call_or_none(self, what: str, fn: t.Callable[[], t.Any]) -> t.Any:
        """A read where a 404 means "absent" and gives None."""
        try:
            return self._read(what, fn)
        except NomadError as err:
            if err.status == 404:
                return None
            raise

    # Jobs -------------------------------------------------------------------------------------
    def get_job(self, job_id: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/job/:id``: the job as Nomad holds it (canonicalized), or None if absent."""
        return self._call_or_none("reading job %r" % job_id, lambda: self._job.get_job(_quote_id(job_id)))

    def register_job(self, register_body: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """``PUT /v1/jobs`` with a JobRegisterRequest (``{"Job": {...}, ...}``): EvalID, JobModifyIndex, ..."""
        if not isinstance(register_body, t.Mapping) or not isinstance(register_body.get("Job"), t.Mapping):
            raise ValueError("register_job needs a JobRegisterRequest body: {'Job': {...}}")
        job_id = register_body["Job"].get("ID")
        return self._call("registering job %r" % job_id, lambda: self._jobs.register_job(dict(register_body)))

    def plan_job(self, job: t.Mapping[str, t.Any], diff: bool = True) -> t.Dict[str, t.Any]:
        """``POST /v1/job/:id/plan`` (dry run): Diff (``Type`` None/Added/Edited/Deleted), Annotations, FailedTGAllocs."""
        if "Job" in job and "TaskGroups" not in job:  # a register body was passed
            job = job["Job"]
        job_id = job.get("ID")
        if not job_id:
            raise ValueError("the job has no ID")
        return self._read("planning job %r" % job_id,
                          lambda: self._job.plan_job(_quote_id(job_id), {"Job": dict(job)}, diff=bool(diff)))

    def deregister_job(self, job_id: str, purge: bool = True) -> t.Dict[str, t.Any]:
        """``DELETE /v1/job/:id?purge=``: stops (and purges) the job. Nomad answers 200 for an absent job."""
        return self._read("deregistering job %r" % job_id,
                          lambda: self._job.deregister_job(_quote_id(job_id), purge=bool(purge)))

    def list_jobs(self, prefix: t.Optional[str] = None, meta: bool = False) -> t.List[t.Dict[str, t.Any]]:
        """``GET /v1/jobs``: job stubs (with ``Meta`` when ``meta``), optionally filtered by ID prefix."""
        return self._read("listing jobs", lambda: self._jobs.get_jobs(prefix=prefix or None, meta=True if meta else None))

    def job_allocations(self, job_id: str, all_versions: bool = False) -> t.List[t.Dict[str, t.Any]]:
        """``GET /v1/job/:id/allocations``: allocation stubs (ClientStatus, TaskStates, NodeName, ...)."""
        return self._read("listing allocations of job %r" % job_id,
                          lambda: self._job.get_allocations(_quote_id(job_id), all_=True if all_versions else None))

    def allocation(self, alloc_id: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/allocation/:id``, or None if absent."""
        return self._call_or_none("reading allocation %r" % alloc_id,
                                  lambda: self._allocation.get_allocation(_quote_id(alloc_id)))

    def read_logs(self, alloc_id: str, task: str, type: str = "stdout", lines: int = 100,
                  max_bytes: int = DEFAULT_LOG_BYTES) -> str:
        """The last ``lines`` lines of a task's stdout/stderr (``/v1/client/fs/logs``, origin=end, plain)."""
        if type not in ("stdout", "stderr"):
            raise ValueError("type must be stdout or stderr")
        if lines < 0 or max_bytes <= 0:
            raise ValueError("lines must be >= 0 and max_bytes > 0")
        text = self._read("reading %s of task %r in allocation %r" % (type, task, alloc_id),
                          lambda: self._logs.stream(_quote_id(alloc_id), task, type, follow=False,
                                                    offset=int(max_bytes), origin="end", plain=True))
        return tail_lines(text or "", lines)

    def read_alloc_file(self, alloc_id: str, path: str) -> t.Optional[str]:
        """``GET /v1/client/fs/cat/:alloc_id?path=PATH``: a file of the allocation directory (the token needs the
        namespace's ``read-fs``: command/agent/fs_endpoint.go ``FsRequest``), or None when it cannot be read (no such
        allocation or file: Nomad answers 404 or 500; no permission; a client that does not answer). Not retried."""
        try:
            return self._call("reading %s of allocation %r" % (path, alloc_id),
                              lambda: self._cat.read_file(_quote_id(alloc_id), path))
        except NomadError:
            return None

    # Nodes ------------------------------------------------------------------------------------
    def list_nodes(self, prefix: t.Optional[str] = None, resources: bool = False,
                   filter_expr: str = "") -> t.List[t.Dict[str, t.Any]]:
        """``GET /v1/nodes``: node stubs (``NodeResources``/``ReservedResources`` only with ``resources``); with
        ``filter_expr``, only the nodes that Nomad's filter (go-bexpr over the whole node, not the stub:
        ``nomad/state/paginator``) lets through."""
        return self._read("listing nodes", lambda: self._nodes.get_nodes(prefix=prefix or None,
                                                                         resources=True if resources else None,
                                                                         filter_=filter_expr or None))

    def list_nodes_at(self, resources: bool = False, filter_expr: str = "") -> t.Tuple[t.List[t.Dict[str, t.Any]], int]:
        """``GET /v1/nodes``: (node stubs, the nodes table's ``X-Nomad-Index``), filtered as :meth:`list_nodes`."""
        params = {"resources": "true" if resources else None, "filter": filter_expr or None}
        response = self._read("listing nodes", lambda: self._nodes.request(method="get", params=dict(params)))
        return list(response.json() or []), _header_index(response)

    def nodes_index(self) -> int:
        """The nodes table's index, from a one-node page (``GET /v1/nodes?per_page=1``; ``Node.List`` answers
        ``state.Index("nodes")`` whatever the page, ``nomad/node_endpoint.go``)."""
        response = self._read("reading the nodes index",
                              lambda: self._nodes.request(method="get", params={"per_page": 1}))
        return _header_index(response)

    def node(self, node_id: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/node/:id``: the full node (NodeResources, ReservedResources, Drivers, Attributes, ...)."""
        return self._call_or_none("reading node %r" % node_id, lambda: self._node.get_node(_quote_id(node_id)))

    def node_allocations(self, node_id: str) -> t.List[t.Dict[str, t.Any]]:
        """``GET /v1/node/:id/allocations``: full allocations (with AllocatedResources) placed on the node."""
        return self._read("listing allocations of node %r" % node_id,
                          lambda: self._node.get_allocations(_quote_id(node_id)))

    def live_allocations(self, per_page: int = DEFAULT_PAGE_SIZE) -> t.List[t.Dict[str, t.Any]]:
        """Every allocation that holds resources, in every namespace, with its ``AllocatedResources``.

        ``GET /v1/allocations?namespace=*&resources=true&task_states=false&filter=...`` with Nomad's
        server-side filter for non-terminal allocations (:data:`LIVE_ALLOCATIONS_FILTER`), paged
        with ``per_page`` / ``next_token`` (Nomad's ``X-Nomad-NextToken`` header): one request per
        ``per_page`` live allocations, whatever the number of nodes.
        """
        out: t.List[t.Dict[str, t.Any]] = []
        token: t.Optional[str] = None
        while True:
            params = {"namespace": "*", "resources": "true", "task_states": "false", "filter": LIVE_ALLOCATIONS_FILTER,
                      "per_page": int(per_page), "next_token": token}
            response = self._read("listing live allocations",
                                  lambda: self._allocations.request(method="get", params=dict(params)))
            out.extend(response.json() or [])
            token = response.headers.get("X-Nomad-NextToken") or None
            if not token:
                return out

    def _blocking(self, index: int, wait: float) -> t.Tuple[t.Dict[str, t.Any], float]:
        """A blocking query's ``index``/``wait`` parameters and the HTTP timeout that outlasts its wait (Nomad adds
        up to 1/16 of jitter to ``wait``, at most :data:`MAX_BLOCKING_WAIT`)."""
        wait = min(max(wait, 0.001), MAX_BLOCKING_WAIT)
        timeout = max(float(self.connection.timeout or 0), wait * 17 / 16 + 5)
        return {"index": int(index), "wait": "%dms" % int(wait * 1000)}, timeout

    # Evaluations ------------------------------------------------------------------------------
    def evaluation(self, eval_id: str, index: int = 0, wait: float = 0.0) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/evaluation/:id``: Status, FailedTGAllocs, BlockedEval, QueuedAllocations ..., or None.

        With ``index``, a blocking query: Nomad answers once the evaluation's ModifyIndex is above ``index`` (a
        worker processed it: ``Eval.Update`` is a raft write) or after ``wait`` seconds (``Eval.GetEval`` runs
        through ``blockingRPC``, ``nomad/eval_endpoint.go``)."""
        if index <= 0:
            return self._call_or_none("reading evaluation %r" % eval_id,
                                      lambda: self._evaluation.request(_quote_id(eval_id), method="get").json())
        params, timeout = self._blocking(index, wait)
        return self._call_or_none("waiting on evaluation %r" % eval_id, lambda: self._evaluation.request(
            _quote_id(eval_id), method="get", params=dict(params), timeout=timeout).json())

    # Variable locks ---------------------------------------------------------------------------
    def _lock_operation(self, operation: str, path: str, body: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        """A lock operation, retried on transient failures (each is safe to repeat: the lock ID names the holder)."""
        params = {operation: "", "namespace": self.connection.namespace or None}
        result = self._call("%s on variable %r" % (operation, path),
                            lambda: self._variable.request(_quote_path(path), method="put", params=dict(params),
                                                           json=dict(body)).json(), retry=True)
        return result if isinstance(result, dict) else {}

    def acquire_lock(self, path: str, ttl: float, lock_delay: float, items: t.Mapping[str, str],
                     lock_id: t.Optional[str] = None) -> t.Dict[str, t.Any]:
        """``PUT /v1/var/:path?lock-acquire`` (Nomad 1.7+): the variable with ``Lock.ID``.

        The request carries ``lock_id`` (a new UUID when not given): Nomad keeps a given ID
        (``VariableLock.Canonicalize``) and grants the holder of that ID again (``isLocked``), so an acquire
        whose answer was lost is retried here and gets the lock it already took. Raises :class:`CASConflict`
        (HTTP 409, ``index`` the attempt's raft index) while another holder has the lock.
        """
        body = {"Path": path.strip("/"), "Items": dict(items),
                "Lock": {"ID": lock_id or str(uuid.uuid4()), "TTL": "%gs" % float(ttl), "LockDelay": "%gs" % float(lock_delay)}}
        return self._lock_operation("lock-acquire", path, body)

    def wait_variable(self, path: str, index: int, wait: float) -> t.Tuple[t.Optional[t.Dict[str, t.Any]], int]:
        """A blocking read, ``GET /v1/var/:path?index=&wait=``: (the variable or None, its ``X-Nomad-Index``).

        Nomad answers once the variable's ModifyIndex (absent: the variables table's index) is above ``index``,
        or after ``wait`` seconds (at most 300, plus up to 1/16 of jitter) with what it has (``Variables.Read``
        through ``blockingRPC``, ``nomad/variables_endpoint.go`` and ``nomad/rpc.go``). ``index`` 0: at once.
        """
        params, timeout = self._blocking(index, wait)
        params["namespace"] = self.connection.namespace or None

        def read() -> t.Tuple[t.Optional[t.Dict[str, t.Any]], int]:
            try:
                response = self._variable.request(_quote_path(path), method="get", params=dict(params), timeout=timeout)
            except nomad_exceptions.URLNotFoundNomadException as exc:
                return None, _header_index(getattr(exc, "nomad_resp", None))
            return response.json(), _header_index(response)

        return t.cast(t.Tuple[t.Optional[t.Dict[str, t.Any]], int], self._read("waiting on variable %r" % path, read))

    def renew_lock(self, path: str, lock_id: str) -> t.Dict[str, t.Any]:
        """``PUT /v1/var/:path?lock-renew``: restart the lock's TTL (409 if the lock was lost)."""
        return self._lock_operation("lock-renew", path, {"Path": path.strip("/"), "Lock": {"ID": lock_id}})

    def release_lock(self, path: str, lock_id: str) -> t.Dict[str, t.Any]:
        """``PUT /v1/var/:path?lock-release``: give the lock up (409 if another holder has it now)."""
        return self._lock_operation("lock-release", path, {"Path": path.strip("/"), "Lock": {"ID": lock_id}})

    # Variables --------------------------------------------------------------------------------
    def get_variable(self, path: str) -> t.Optional[t.Dict[str, t.Any]]:
        """``GET /v1/var/:path``: the variable with its Items (secret!), or None if absent."""
        return self._call_or_none("reading variable %r" % path,
                                  lambda: self._variable.get_variable(_quote_path(path), namespace=self.connection.namespace))

    def put_variable(self, path: str, items: t.Mapping[str, str], cas: t.Optional[int] = None) -> t.Dict[str, t.Any]:
        """``PUT /v1/var/:path[?cas=N]``; ``cas=0`` creates only if absent. Returns the metadata (no Items).

        Raises :class:`CASConflict` (with the current variable) when the check-and-set fails.
        """
        if not items or not all(isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
            raise ValueError("variable items must be a non-empty mapping of strings to strings")
        body = {"Path": path.strip("/"), "Items": dict(items)}
        result = self._call("writing variable %r" % path,
                            lambda: self._variable.create_variable(_quote_path(path), body, namespace=self.connection.namespace,
                                                                   cas=None if cas is None else int(cas)))
        return _variable_metadata(result)

    def delete_variable(self, path: str, cas: t.Optional[int] = None) -> None:
        """``DELETE /v1/var/:path[?cas=N]`` (absent is fine). Raises :class:`CASConflict` on a lost check-and-set.

        Retried without ``cas`` only (a repeated plain delete finds nothing: fine; a repeated check-and-set
        delete would report the first one's success as a conflict)."""
        self._call("deleting variable %r" % path,
                   lambda: self._variable.delete_variable(_quote_path(path), namespace=self.connection.namespace,
                                                          cas=None if cas is None else int(cas)), retry=cas is None)

    def list_variables_at(self, prefix: str) -> t.Tuple[t.List[t.Dict[str, t.Any]], int]:
        """``GET /v1/vars?prefix=``: (variable metadata, the variables table's ``X-Nomad-Index``)."""
        params = {"prefix": prefix, "namespace": self.connection.namespace or None}
        response = self._read("listing variables", lambda: self._variables.request(method="get", params=dict(params)))
        return list(response.json() or []), _header_index(response)

    def list_variables(self, prefix: str = "") -> t.List[t.Dict[str, t.Any]]:
        """``GET /v1/vars?prefix=``: variable metadata (never Items)."""
        return self._read("listing variables", lambda: self._variables.get_variables(prefix=prefix,
                                                                                     namespace=self.connection.namespace))


def is_transient(error: NomadError) -> bool:
    """Worth another try: no answer (refused, reset, timeout), a proxy's 502/503/504, or Nomad without a leader."""
    if isinstance(error, (NomadUnreachable, NomadTimeout)):
        return True
    return error.status in TRANSIENT_STATUS or (error.status == 500 and NO_LEADER in (error.body or ""))


def _environment_once(session: t.Any, url: str, verify: t.Union[bool, str]) -> t.Union[bool, str]:
    """Read what ``requests`` takes from the environment once for this client, not on every request: with
    ``trust_env`` it scans the whole environment for proxy variables twice per request and looks for a ``.netrc``
    (``Session.merge_environment_settings``, ``Session.prepare_request``), a tenth of the client's CPU per request
    when creates run many requests. The same settings result: the proxies for ``url`` (every request of a client
    goes to one host, so ``no_proxy`` gives one answer), the ``.netrc`` credentials for it, and for ``verify=True``
    ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE``. Returns the ``verify`` to pass."""
    session.proxies.update(requests.utils.get_environ_proxies(url, no_proxy=session.proxies.get("no_proxy")))
    if session.auth is None:
        session.auth = requests.utils.get_netrc_auth(url)
    session.trust_env = False
    if verify is True:
        return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    return verify


def _header_index(response: t.Any) -> int:
    try:
        return int(response.headers.get("X-Nomad-Index") or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


def _is_transport_error(exc: BaseException) -> bool:
    if nomad_exceptions is not None and isinstance(exc, (nomad_exceptions.BaseNomadException,
                                                         nomad_exceptions.TimeoutNomadException)):
        return True
    return HAS_REQUESTS and isinstance(exc, requests.RequestException)


def _short(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _variable_metadata(variable: t.Any) -> t.Dict[str, t.Any]:
    if not isinstance(variable, dict):
        return {}
    return {k: v for k, v in variable.items() if k != "Items"}


def tail_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (a trailing newline does not count as an empty line)."""
    if lines == 0 or not text:
        return ""
    parts = text.splitlines(keepends=True)
    return "".join(parts[-lines:])
