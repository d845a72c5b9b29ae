# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A strict in-test double of Nomad's documented HTTP API (it is not Nomad: no scheduler, no raft).

:class:`NomadAPIDouble` is the HTTP side: it runs the shell of ``http_shell.py`` (``http.server`` on
127.0.0.1, random port, optional TLS with the test PKI) and answers the endpoints this collection uses,
with Nomad's routes, query parameters, status codes, error texts and headers, as read from Nomad's
``command/agent/*_endpoint.go`` (``job_endpoint.go``, ``alloc_endpoint.go``, ``eval_endpoint.go``,
``node_endpoint.go``, ``variable_endpoint.go``, ``fs_endpoint.go``) and ``command/agent/http.go``. What the
endpoints do is the Nomad model's (``model/``: jobs, scheduler, allocations, evaluations, nodes, variables
and locks, ACL), which knows nothing of HTTP.

Request handling here:

* every job register/plan body and every variable body is validated against
  ``tests/support/nomad_api_schema/nomad/job-api.schema.json`` (``schema.py``): an unknown or mis-cased key, a wrong type, gives
  ``400`` with a plain-text error (Nomad itself would silently drop such keys: the double is stricter on
  purpose). Then the handler's checks (``Job must be specified``, ``Job ID hasn't been provided``, ``Job ID
  does not match name`` -> 400), then the model's ``Job.Validate`` subset (500 and a multierror text);
* namespace (query parameter > request body > job's ``Namespace`` > ``default``; ``*`` only for lists),
  region (``No path to region``), the ACL token (``X-Nomad-Token`` or ``Authorization: Bearer``);
* ``X-Nomad-Index``/``X-Nomad-KnownLeader``/``X-Nomad-LastContact`` on reads, ``X-Nomad-NextToken`` on
  every page of ``GET /v1/allocations`` but the last (``per_page``/``next_token``, ordered by CreateIndex
  then ID, ``CreateIndexAndIDTokenizer``), the ``filter`` expression and boolean options (``query.py``; the
  double evaluates ``filter`` on the allocation stub it returns, Nomad on the full Allocation before it
  builds the stub, ``nomad/state/paginator/paginator.go``: a filter on a field only the stub or only the
  Allocation has behaves differently here);
* variable locks: ``PUT /v1/var/:path?lock-acquire|lock-renew|lock-release`` (Nomad 1.7+).

Blocking queries (``index``/``wait``, ``X-Nomad-Index``) on the variable endpoints, the only ones of Nomad's
variable API that block: ``GET /v1/var/:path`` (``Variables.Read``: the variable's ModifyIndex, or the
variables table's index on a 404) and ``GET /v1/vars`` (``Variables.List``: the table's index), both through
``blockingRPC`` (``nomad/variables_endpoint.go``, ``nomad/rpc.go``; ``parseWait`` in ``command/agent/http.go``
answers ``Invalid wait time`` / ``Invalid index``). Variable writes and lock operations are raft applies that
never block. See ``model/variables.py`` for the wake-ups. ``GET /v1/evaluation/:id`` blocks too (``Eval.GetEval``
through ``blockingRPC``, ``nomad/eval_endpoint.go``: the evaluation's ModifyIndex), until it is processed
(``model/evals.py``).

What it does not model: blocking queries on every other endpoint (``index``/``wait`` are ignored there:
those reads answer at once), ``stale`` reads, gzip, the event stream, ``follow=true`` log streaming, and every endpoint the collection
does not call (a 404 ``404 page not found``, as Nomad's mux answers an unknown path). See
:class:`~nomad_double.http_shell.HTTPDouble` for faults and recordings, ``fixtures.py`` for the pytest
fixtures, ``model/`` for what each part of Nomad's behaviour leaves out.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import time
import typing as t

from .http_shell import BadRequest, Fault, HTTPDouble, RecordedRequest, Request, Response, json_response, text_response
from .model import CodedError, Conflict, NomadModel
from .model.variables import go_duration
from .pki import TestPKI, make_test_pki
from .query import go_parse_bool, parse_filter, token_key
from .schema import SCHEMA_PATH, SchemaChecker

__all__ = ["SCHEMA_PATH", "Fault", "HTTPDouble", "NomadAPIDouble", "RecordedRequest", "SchemaChecker", "TestPKI",
           "make_test_pki"]

_LOCK_OPS = ("lock-acquire", "lock-renew", "lock-release")


#: stands for an allocation's embedded job while the rest of it is encoded (``_allocation`` splices the job in)
_JOB_SLOT = "__nomad_double_embedded_job__"
_JOB_SLOT_JSON = json.dumps(_JOB_SLOT).encode("utf-8")

class NomadAPIDouble(HTTPDouble):
    """The Nomad API double (see the module docstring). Configure nodes with :meth:`add_node`; the model's
    state is :attr:`model` (tests may read it directly, under ``model.lock``)."""

    name = "Nomad API double"

    def __init__(self, token: t.Optional[str] = None, region: str = "global", datacenter: str = "dc1",
                 namespaces: t.Optional[t.Iterable[str]] = None, alloc_start_delay: t.Optional[float] = 0.0,
                 tls: t.Union[bool, TestPKI, None] = False, require_client_cert: bool = False,
                 schema_path: str = SCHEMA_PATH, eval_delay: float = 0.0) -> None:
        super().__init__(tls=tls, require_client_cert=require_client_cert)
        self.model = NomadModel(token=token, region=region, datacenter=datacenter, namespaces=namespaces,
                                alloc_start_delay=alloc_start_delay, eval_delay=eval_delay, tls=bool(self.pki))
        self.schema = SchemaChecker.load(schema_path)
        #: (allocation ID, path in its allocation directory) -> text: what ``/v1/client/fs/cat`` serves
        self.alloc_files: t.Dict[t.Tuple[str, str], str] = {}
        #: allocation ID -> the directory on this machine that is its allocation directory (``alloc/...`` paths are
        #: read there by ``/v1/client/fs/cat``): for tasks a test runs for real (``engine_client.py``)
        self.alloc_dirs: t.Dict[str, str] = {}
        #: callables run with each request before it is handled (outside the model's lock): test hooks
        self.before_request: t.List[t.Callable[[Request], None]] = []

    # Test-side configuration and reads (the model's) ------------------------------------------
    @property
    def token(self) -> t.Optional[str]:
        return self.model.token

    @property
    def region(self) -> str:
        return self.model.region

    @property
    def alloc_start_delay(self) -> t.Optional[float]:
        return self.model.alloc_start_delay

    @alloc_start_delay.setter
    def alloc_start_delay(self, value: t.Optional[float]) -> None:
        self.model.alloc_start_delay = value

    @property
    def eval_delay(self) -> float:
        return self.model.eval_delay

    @eval_delay.setter
    def eval_delay(self, value: float) -> None:
        self.model.eval_delay = value

    def add_node(self, name: str, **kwargs: t.Any) -> t.Dict[str, t.Any]:
        """Add a client node: see :meth:`model.nodes.NodesModel.add_node` for the options."""
        return self.model.add_node(name, **kwargs)

    def node_id(self, name: str) -> str:
        return self.model.node_id(name)

    def set_alloc_status(self, alloc_id: str, client_status: str, **kwargs: t.Any) -> None:
        """Freeze an allocation in ``client_status`` (pending/running/complete/failed/lost)."""
        self.model.set_alloc_status(alloc_id, client_status, **kwargs)

    def new_incarnation_keeping_allocations(self, job_id: str, namespace: str = "default") -> None:
        """The job ID's record gets a new CreateIndex while its allocations stay as they are: what a purge and a
        registration of the same ID leave until the scheduler has stopped the earlier job's allocations (Nomad's
        ``Job.Deregister`` with purge deletes the job at once; its allocations are stopped later, by the evaluation it
        makes). The allocations then belong to a job of an older CreateIndex (``AllocsByJob``)."""
        with self.model.lock:
            self.model.jobs[(namespace, job_id)]["CreateIndex"] = self.model.next_index()

    def set_node_status(self, name: str, status: str) -> None:
        """A node's status changes; going ``down``, its live allocations become lost."""
        self.model.set_node_status(name, status)

    def lock_of(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        return self.model.lock_of(path, namespace)

    def append_log(self, alloc_id: str, task: str, text: str, stream: str = "stdout") -> None:
        self.model.append_log(alloc_id, task, text, stream)

    def allocations_of(self, job_id: str, namespace: str = "default") -> t.List[t.Dict[str, t.Any]]:
        return self.model.allocations_of(job_id, namespace)

    def write_alloc_file(self, alloc_id: str, path: str, text: str) -> None:
        """A file in the allocation's directory, as its task wrote it (``alloc/...`` is the shared ``alloc`` dir)."""
        self.alloc_files[(alloc_id, path.lstrip("/"))] = text

    def garbage_collect(self, now: t.Optional[int] = None, force: bool = False) -> t.Dict[str, t.List[str]]:
        """The servers' garbage collection at ``now`` (ns; ``model/gc.py``), and each collected allocation's client
        removing its directory (``client.removeAlloc``): its files are served no more."""
        gone = self.model.garbage_collect(now, force)
        for alloc_id in gone["allocs"]:
            self.alloc_dirs.pop(alloc_id, None)
            for key in [k for k in self.alloc_files if k[0] == alloc_id]:
                del self.alloc_files[key]
        return gone

    def stored_job(self, job_id: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        return self.model.stored_job(job_id, namespace)

    def stored_variable(self, path: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        return self.model.stored_variable(path, namespace)

    # Request plumbing -------------------------------------------------------------------------
    def _token_of(self, req: Request) -> t.Optional[str]:
        token = req.headers.get("x-nomad-token")
        auth = req.headers.get("authorization", "")
        if not token and auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        return token or None

    def _meta_headers(self) -> t.Dict[str, str]:
        return {"X-Nomad-Index": str(self.model.index), "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}

    def _ok(self, body: t.Any, status: int = 200) -> Response:
        return json_response(status, body, self._meta_headers())

    def _namespace(self, req: Request, body_namespace: t.Optional[str] = None, allow_wildcard: bool = False) -> str:
        ns = req.q("namespace") or body_namespace or "default"
        if ns == "*" and not allow_wildcard:
            raise BadRequest(400, 'can not target wildcard ("*") namespace')
        self.model.check_namespace(ns)
        return ns

    def _read_json(self, req: Request) -> t.Any:
        if not req.body:
            raise BadRequest(400, "EOF")
        try:
            return json.loads(req.body)
        except ValueError as err:
            raise BadRequest(400, "invalid character in request body: %s" % err) from None

    def _route(self, req: Request) -> Response:
        if not req.path.startswith("/v1/"):
            return text_response(404, "404 page not found\n")
        try:
            self.model.authorize(self._token_of(req))
            self.model.check_region(req.q("region"))
            with self.model.lock:
                answer = self._endpoint(req, req.path[len("/v1/"):])
        except CodedError as err:
            return text_response(err.status, err.message)
        except Conflict as err:
            return json_response(409, err.body, {"X-Nomad-Index": str(err.index)})
        return answer if answer is not None else text_response(404, "404 page not found\n")

    def _endpoint(self, req: Request, rest: str) -> t.Optional[Response]:
        if rest == "jobs":
            if req.method == "GET":
                return self._list_jobs(req)
            if req.method in ("PUT", "POST"):
                return self._register(req, "")
            return text_response(405, "Invalid method")
        prefixes: t.Tuple[t.Tuple[str, t.Callable[[Request, str], Response]], ...] = (
            ("job/", self._job_specific), ("allocation/", self._allocation), ("client/fs/logs/", self._logs),
            ("client/fs/cat/", self._cat),
            ("evaluation/", self._evaluation), ("node/", self._node_specific), ("var/", self._var))
        for prefix, handler in prefixes:
            if rest.startswith(prefix):
                return handler(req, rest[len(prefix):])
        if rest == "allocations":
            return self._list_allocations(req)
        if rest == "nodes":
            return self._list_nodes(req)
        if rest == "vars":
            return self._list_vars(req)
        if rest == "status/leader":
            return self._ok("127.0.0.1:4647")
        if rest == "regions":
            return self._ok([self.model.region])
        return None

    # Jobs (command/agent/job_endpoint.go) -----------------------------------------------------
    def _job_specific(self, req: Request, rest: str) -> Response:
        for suffix, handler in (("/allocations", self._job_allocations), ("/plan", self._plan), ("/summary", self._summary)):
            if rest.endswith(suffix):
                return handler(req, rest[: -len(suffix)])
        job_id = rest
        if req.method == "GET":
            return self._ok(self.model.job(self._namespace(req), job_id))
        if req.method in ("PUT", "POST"):
            return self._register(req, job_id)
        if req.method == "DELETE":
            return self._deregister(req, job_id)
        return text_response(405, "Invalid method")

    def _decode_job_request(self, req: Request, job_id_in_url: str, kind: str) -> t.Tuple[t.Dict[str, t.Any], t.Dict[str, t.Any]]:
        """(request body, the admitted job with Nomad's defaults)."""
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
        region = req.q("region") or body.get("Region") or job.get("Region") or self.model.region
        return body, self.model.admit_job(job, namespace, region)

    def _register(self, req: Request, job_id_in_url: str) -> Response:
        body, spec = self._decode_job_request(req, job_id_in_url, "register")
        return self._ok(self.model.register(spec, bool(body.get("EnforceIndex")), body.get("JobModifyIndex") or 0))

    def _deregister(self, req: Request, job_id: str) -> Response:
        ns = self._namespace(req)
        purge = bool(go_parse_bool("purge", req.q("purge")))
        go_parse_bool("global", req.q("global"))
        return self._ok(self.model.deregister(ns, job_id, purge))

    def _summary(self, req: Request, job_id: str) -> Response:
        return self._ok(self.model.summary(self._namespace(req), job_id))

    def _list_jobs(self, req: Request) -> Response:
        ns = self._namespace(req, allow_wildcard=True)
        meta = bool(go_parse_bool("meta", req.q("meta")))
        return self._ok(self.model.job_stubs(ns, req.q("prefix") or "", meta))

    def _plan(self, req: Request, job_id: str) -> Response:
        if req.method not in ("PUT", "POST"):
            return text_response(405, "Invalid method")
        body, spec = self._decode_job_request(req, job_id, "plan")
        return self._ok(self.model.plan(spec, bool(body.get("Diff"))))

    def _job_allocations(self, req: Request, job_id: str) -> Response:
        """``GET /v1/job/:id/allocations`` (``command/agent/job_endpoint.go`` ``jobAllocations`` -> ``nomad/
        job_endpoint.go`` ``Job.Allocations``; ``api/jobs.go`` ``Jobs.Allocations``): the job's allocation stubs in the
        request's namespace; with ``all`` true also those of an earlier job that had the same ID (``nomad/state/
        state_store.go`` ``AllocsByJob``: without it, allocations whose job's CreateIndex is not the current job's
        are skipped). Not modelled: ACL policies (Nomad needs ``read-job``; any valid token passes here), blocking
        queries."""
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ns = self._namespace(req)
        return self._ok(self.model.job_allocations(ns, job_id, bool(go_parse_bool("all", req.q("all")))))

    # Allocations, logs, evaluations (alloc_endpoint.go, fs_endpoint.go, eval_endpoint.go) ----
    def _allocation(self, req: Request, alloc_id: str) -> Response:
        """``GET /v1/allocation/:id`` (``command/agent/alloc_endpoint.go`` -> ``nomad/alloc_endpoint.go``
        ``Alloc.GetAlloc``; ``api/allocations.go`` ``Allocations.Info``): by ID alone, in any namespace. Not modelled:
        ACL policies (any valid token reads every allocation; Nomad answers 404 to a token without ``read-job`` in
        the allocation's namespace), ``SignedIdentities`` sanitising, blocking queries."""
        if req.method != "GET":
            return text_response(405, "Invalid method")
        full = self.model.allocation(alloc_id)
        job = full.get("Job")
        if not isinstance(job, dict):
            return self._ok(full)
        # Every allocation of a job embeds the same job (the model hands out one view per version and status):
        # its JSON is made once and spliced in, so that a session's view, which reads each of its allocations,
        # does not encode a 300-group job 300 times (15.6 of the 42 s of the aligned-block test).
        status, headers, data = self._ok(dict(full, Job=_JOB_SLOT))
        return status, headers, data.replace(_JOB_SLOT_JSON, self._job_json(job), 1)

    def _job_json(self, job: t.Dict[str, t.Any]) -> bytes:
        cache = self.__dict__.setdefault("_job_json_cache", {})
        hit = cache.get(id(job))
        if hit is None or hit[0] is not job:  # (the job is kept with its JSON, so its id is not reused meanwhile)
            if len(cache) > 64:
                cache.clear()
            hit = cache[id(job)] = (job, json.dumps(job).encode("utf-8"))
        return hit[1]

    def _list_allocations(self, req: Request) -> Response:
        """``GET /v1/allocations`` (``command/agent/alloc_endpoint.go`` ``AllocsRequest`` -> ``nomad/alloc_endpoint.go``
        ``Alloc.List``; ``api/allocations.go`` ``Allocations.List``): list stubs (``Allocation.Stub``,
        ``AllocListStub`` in ``nomad/structs/alloc.go``: no embedded Job, TaskStates unless ``task_states=false``,
        ``AllocatedResources`` only with ``resources=true``). ``prefix`` selects by ID prefix (``AllocsByIDPrefix``,
        paged by ID there: here by CreateIndex and ID as without it), in the namespace or with ``*`` in all.
        Not modelled: ACL policies (Nomad keeps only allocations of namespaces the token may ``read-job``,
        ``allowedNSes``), ``reverse`` ordering, blocking queries."""
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
        stubs = self.model.alloc_stubs(ns, task_states is not False, resources, req.q("prefix") or "")
        if token:
            stubs = stubs[bisect.bisect_left([key for key, _ in stubs], token_key(token)):]
        out: t.List[t.Dict[str, t.Any]] = []
        next_token = ""
        for key, stub in stubs:
            if not matcher(stub):
                continue
            if per_page and len(out) == per_page:
                next_token = "%d.%s" % key
                break
            out.append(stub)
        return self._page(out, next_token, self._meta_headers())

    def _logs(self, req: Request, alloc_id: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        tasks = self.model.alloc_tasks(alloc_id)
        task = req.q("task") or ""
        if not task:
            return text_response(400, "must include task name")
        if task not in tasks:
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
        plain = bool(go_parse_bool("plain", req.q("plain")))
        frame = self.model.log_frame(alloc_id, task, stream, origin, offset, plain)
        if plain:
            return 200, {"Content-Type": "text/plain; charset=utf-8"}, frame
        return json_response(200, frame)

    def _cat(self, req: Request, alloc_id: str) -> Response:
        """``GET /v1/client/fs/cat/:alloc_id?path=`` (command/agent/fs_endpoint.go ``FileCatRequest``): the file's
        bytes as text; no path: "must provide a file name"; an unknown allocation: 404; a missing file: the error of
        the client's ``Stat``, a 500 (errors that are not CodedErrors are); a file of an allocation a test runs for real
(``alloc_dirs``) is read from its directory, and not at all while its node is down ("No path to node", a 500:
``structs.ErrNoNodeConn``, as the server finds no connection to forward the read to). Not modelled: ACL's read-fs (the double
        checks only the token), directories, forwarding to the allocation's client."""
        if req.method != "GET":
            return text_response(405, "Invalid method")
        path = (req.q("path") or "").lstrip("/")
        if not path:
            return text_response(500, "must provide a file name")
        self.model.alloc_tasks(alloc_id)  # 404 for an unknown allocation
        text = self.alloc_files.get((alloc_id, path))
        if alloc_id in self.alloc_dirs and self.model.node_down_of(alloc_id):
            # the server forwards the read to the allocation's client, which is gone (structs.ErrNoNodeConn)
            return text_response(500, "No path to node")
        if text is None and alloc_id in self.alloc_dirs and path.startswith("alloc/") and ".." not in path.split("/"):
            try:
                with open(os.path.join(self.alloc_dirs[alloc_id], path[len("alloc/"):]), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                text = None
        if text is None:
            return text_response(500, "stat %s: no such file or directory" % path)
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, text.encode("utf-8")

    def _evaluation(self, req: Request, eval_id: str) -> Response:
        """``GET /v1/evaluation/:id``, a blocking query (``Eval.GetEval`` through ``blockingRPC``,
        ``nomad/eval_endpoint.go``): with ``index``, the answer waits until the evaluation's ModifyIndex is above it
        (here: until it is processed, ``model/evals.py``) or ``wait`` passed."""
        if req.method != "GET":
            return text_response(405, "Invalid method")
        index, wait = self._blocking_options(req)
        started = time.perf_counter()
        ev = self.model.evaluation(eval_id)
        deadline = time.monotonic() + wait + random.uniform(0, wait / 16)
        while index > 0 and ev["ModifyIndex"] <= index and not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            due = self.model.eval_processed_in(eval_id)  # 0: processed, nothing changes it any more: ``wait``
            self.model.wake_condition().wait(min(remaining, due) if due > 0 else remaining)  # the lock is released meanwhile
            ev = self.model.evaluation(eval_id)
        self._blocked.seconds = time.perf_counter() - started
        return json_response(200, ev, dict(self._meta_headers(), **{"X-Nomad-Index": str(ev["ModifyIndex"])}))

    # Nodes (node_endpoint.go) -------------------------------------------------------------------
    def _list_nodes(self, req: Request) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        resources = bool(go_parse_bool("resources", req.q("resources")))
        with_os = bool(go_parse_bool("os", req.q("os")))
        try:
            per_page = int(req.q("per_page") or 0)
        except ValueError:
            return text_response(400, "Expect a number for `per_page` query string parameter")
        matcher = parse_filter(req.q("filter") or "")  # on the whole node, as Nomad's paginator does
        # IDTokenizer: the next page starts at the token's ID
        stubs, following = self.model.node_stubs(req.q("prefix") or "", resources, with_os, matcher,
                                                 start=req.q("next_token") or "", limit=max(0, per_page))
        # Node.List answers the nodes table's index (state.Index("nodes")): here the last node change, as nodes are
        # never removed from the model
        return self._page(stubs, following, dict(self._meta_headers(), **{"X-Nomad-Index": str(max(
            [n["ModifyIndex"] for n in self.model.nodes.values()] or [1]))}))

    @staticmethod
    def _page(items: t.List[t.Dict[str, t.Any]], next_token: str, headers: t.Dict[str, str]) -> Response:
        """A page of a paginated list: ``X-Nomad-NextToken`` names where the next page starts (none on the last)."""
        if next_token:
            headers["X-Nomad-NextToken"] = next_token
        return json_response(200, items, headers)

    def _node_specific(self, req: Request, rest: str) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        if rest.endswith("/allocations"):
            return self._ok(self.model.node_allocations(rest[: -len("/allocations")]))
        return self._ok(self.model.node(rest))

    # Variables (variable_endpoint.go) -----------------------------------------------------------
    def _blocking(self, req: Request, read: t.Callable[[], t.Tuple[t.Any, int]]) -> t.Tuple[t.Any, t.Dict[str, str]]:
        """A read through ``blockingRPC`` (``index``, ``wait``): its answer and Nomad's query meta headers."""
        index, wait = self._blocking_options(req)
        started = time.perf_counter()
        answer, at = self.model.wait_for_variables(index, wait, read, self._stop.is_set)
        self._blocked.seconds = time.perf_counter() - started
        return answer, dict(self._meta_headers(), **{"X-Nomad-Index": str(max(1, at))})

    @staticmethod
    def _blocking_options(req: Request) -> t.Tuple[int, float]:
        """A blocking query's ``index`` and ``wait`` (``parseWait`` in ``command/agent/http.go``; capped at 300 s
        as ``blockingRPC`` does)."""
        wait = 0.0
        if req.q("wait"):
            try:
                wait = go_duration(req.q("wait"))
            except ValueError:
                raise BadRequest(400, "Invalid wait time") from None
        try:
            index = int(req.q("index") or 0)
            if index < 0:
                raise ValueError
        except ValueError:
            raise BadRequest(400, "Invalid index") from None
        return index, (wait if 0 < wait <= 300.0 else 300.0)

    def stop(self) -> None:
        self._stop.set()
        self.model.wake_blocked_reads()  # blocked reads answer now, so that their threads end
        super().stop()

    def _list_vars(self, req: Request) -> Response:
        if req.method != "GET":
            return text_response(405, "Invalid method")
        ns = self._namespace(req, allow_wildcard=True)
        prefix = req.q("prefix") or ""
        listed, headers = self._blocking(req, lambda: (self.model.list_variables(ns, prefix), self.model.variables_index))
        return json_response(200, listed, headers)

    def _read_var(self, req: Request, path: str) -> Response:
        ns = self._namespace(req)

        def read() -> t.Tuple[t.Optional[t.Dict[str, t.Any]], int]:
            var = self.model.variables.get((ns, path))
            self.model.expire_lock(var)
            return (var, var["ModifyIndex"]) if var else (None, self.model.variables_index)

        # (the answer is copied once, when it is given: a blocked read looks again at every variable write)
        var, headers = self._blocking(req, read)
        if var is None:
            return text_response(404, "variable not found", headers)
        return json_response(200, self.model.var_public(var), headers)

    @staticmethod
    def _var_response(var: t.Mapping[str, t.Any]) -> Response:
        return json_response(200, var, {"X-Nomad-Index": str(var["ModifyIndex"])})

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
            return self._read_var(req, path)
        if req.method in ("PUT", "POST"):
            ops = [op for op in _LOCK_OPS if op in req.query]
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
            lock_id = (body.get("Lock") or {}).get("ID")
            return self._var_response(self.model.put_variable(ns, path, body["Items"], cas, lock_id))
        if req.method == "DELETE":
            index = self.model.delete_variable(self._namespace(req), path, cas, None)
            return 204, {"X-Nomad-Index": str(index)}, b""
        return text_response(400, "Invalid method")

    def _lock_op(self, req: Request, op: str, path: str, body: t.Any) -> Response:
        if not isinstance(body, dict):
            return text_response(400, "missing lock information")
        ns = body.get("Namespace") or self._namespace(req)
        lock = body.get("Lock") or {}
        if op == "lock-acquire":
            return self._var_response(self.model.lock_acquire(ns, path, body.get("Items") or {}, lock))
        if op == "lock-renew":
            return self._ok(self.model.lock_renew(ns, path, lock))
        if not lock.get("ID"):
            return text_response(400, "missing lock information")
        if body.get("Items") is not None:  # canonicalizeAndValidate: a release does not update the variable
            return text_response(400, "lock release operation doesn't take variable items")
        return self._var_response(self.model.lock_release(ns, path, lock))


# Backwards-friendly short name used by the fixtures.
NomadDouble = NomadAPIDouble
