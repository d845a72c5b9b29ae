# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Nomad model's state and the error forms it answers with (no HTTP here: the shell in ``server.py``
turns :class:`CodedError` and :class:`Conflict` into responses).

State: one Raft-like index (``X-Nomad-Index``) bumped by every write, jobs and variables per namespace,
allocations, nodes, evaluations and task logs, all behind one lock. ACL: one management token, or none
(``nomad/acl_endpoint.go`` resolves a token; the double knows only "no token" -> ``Permission denied`` and
"another token" -> ``ACL token not found``, the texts of ``nomad/structs/errors.go``).

What it does not model: the raft log itself (no snapshots, no index per table: one counter), ACL policies
and capabilities, Sentinel, quotas.
"""

from __future__ import annotations

import datetime
import json
import threading
import typing as t

ZERO_TIME = "0001-01-01T00:00:00Z"


def json_copy(value: t.Any) -> t.Any:
    """A deep copy of JSON data (what the model hands out, to be serialised outside its lock): a round trip through
    the C JSON codec, several times faster than ``copy.deepcopy`` on jobs and nodes."""
    return json.loads(json.dumps(value))


class CodedError(Exception):
    """Nomad's ``structs.CodedError``: the HTTP agent answers ``status`` with ``message`` as plain text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Conflict(Exception):
    """A variable write lost a check-and-set or a lock (``nomad/variables_endpoint.go``): the endpoint answers
    409 with ``body`` (the current variable, or its zero value) and ``X-Nomad-Index: index``."""

    def __init__(self, body: t.Dict[str, t.Any], index: int) -> None:
        super().__init__("variable conflict")
        self.body = body
        self.index = index


def multierror(errors: t.Sequence[str]) -> str:
    """hashicorp/go-multierror's text, as Nomad returns validation failures."""
    head = "1 error occurred:" if len(errors) == 1 else "%d errors occurred:" % len(errors)
    return head + "".join("\n\t* " + e for e in errors) + "\n\n"


def rfc3339(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    stamp = datetime.datetime.fromtimestamp(secs, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return "%s.%09dZ" % (stamp, rem)


class ModelState:
    """What every part of the model reads and writes."""

    def __init__(self, token: t.Optional[str] = None, region: str = "global", datacenter: str = "dc1",
                 namespaces: t.Optional[t.Iterable[str]] = None, alloc_start_delay: t.Optional[float] = 0.0,
                 eval_delay: float = 0.0, tls: bool = False) -> None:
        self.token = token
        self.region = region
        self.datacenter = datacenter
        self.namespaces = set(namespaces) if namespaces is not None else None  # None: any namespace exists
        #: seconds an allocation stays pending before it runs (None: it stays pending)
        self.alloc_start_delay = alloc_start_delay
        #: seconds an evaluation reads as pending before the scheduler's result shows
        self.eval_delay = eval_delay
        self.tls = tls  # nodes report TLSEnabled as the agent serves
        self.lock = threading.RLock()
        self.index = 10
        self.jobs: t.Dict[t.Tuple[str, str], t.Dict[str, t.Any]] = {}
        self.allocs: t.Dict[str, t.Dict[str, t.Any]] = {}
        self.nodes: t.Dict[str, t.Dict[str, t.Any]] = {}
        self.variables: t.Dict[t.Tuple[str, str], t.Dict[str, t.Any]] = {}
        self.logs: t.Dict[t.Tuple[str, str, str], bytearray] = {}
        self.evals: t.Dict[str, t.Dict[str, t.Any]] = {}

    def next_index(self) -> int:
        with self.lock:
            self.index += 1
            return self.index

    def authorize(self, token: t.Optional[str]) -> None:
        """The one management token, if ACLs are on."""
        if self.token is not None and token != self.token:
            raise CodedError(403, "Permission denied" if token is None else "ACL token not found")

    def check_region(self, region: t.Optional[str]) -> None:
        """A request for another region has nowhere to go (``nomad/rpc.go`` forwardRegion)."""
        if region and region != self.region:
            raise CodedError(500, "No path to region")

    def check_namespace(self, ns: str) -> None:
        if ns != "*" and self.namespaces is not None and ns not in self.namespaces and ns != "default":
            raise CodedError(400, 'namespace "%s" not found' % ns)
