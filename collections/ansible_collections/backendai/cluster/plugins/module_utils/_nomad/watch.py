# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Watching a Nomad session: its view (allocations, addresses, logs), waiting for its containers,
and following an evaluation to Nomad's placement verdict: :class:`Watcher`, a collaborator of
:class:`_nomad.nomad_backend.NomadBackend` and of the update (``_nomad.update``), constructed with what it reads."""

from __future__ import annotations

import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._nomad import admission
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.api import NomadClient, NomadError
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.capacity import NodeCatalogue
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import TASK_NAME
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.secrets import (
    location_of_job,
)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job_view import (
    build_view,
    container_status,
    current_allocations,
)
from ansible_collections.backendai.cluster.plugins.module_utils._session import gang
from ansible_collections.backendai.cluster.plugins.module_utils._session.summaries import wait_progress
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.steps import WaitFailed, last_event


#: The longest blocking read of an evaluation (seconds): the admission lock (TTL >= 10 s) is renewed between reads.
EVAL_WAIT_SLICE = 4.0


class Watcher:
    """Reads one namespace's sessions from Nomad and waits on them (``poll_interval``: the longest delay between two
    polls; ``eval_timeout``: how long an evaluation is followed; ``warn``: where a verdict not reached is told)."""

    def __init__(self, nomad: NomadClient, node_catalogue: t.Optional[NodeCatalogue], warn: t.Callable[[str], None],
                 sleep: t.Callable[[float], None], clock: t.Callable[[], float], poll_interval: float,
                 eval_timeout: float) -> None:
        self.nomad = nomad
        self.node_catalogue = node_catalogue
        self._warn = warn
        self._sleep = sleep
        self._clock = clock
        self.poll_interval = poll_interval
        self.eval_timeout = eval_timeout

    def _logs(self, alloc: t.Mapping[str, t.Any], lines: int) -> t.List[str]:
        """The last ``lines`` lines of stdout, then the last ``lines`` lines of stderr."""
        if container_status(alloc) in ("pending", "unplaced"):
            return []
        out: t.List[str] = []
        for stream in ("stdout", "stderr"):
            try:
                out.extend(self.nomad.read_logs(alloc["ID"], TASK_NAME, stream, lines=lines).splitlines())
            except NomadError as err:
                out.append("[%s unavailable: %s]" % (stream, err))
        return out

    def _gangs(self, current: t.Mapping[str, t.Mapping[str, t.Any]]) -> t.Dict[str, t.Dict[str, t.Any]]:
        """Each started allocation's supervisor status file (``_session.gang.STATUS_FILE`` in its allocation
        directory), parsed, by group; one it cannot read (the file not written yet, a token without ``read-fs``,
        a client that does not answer) is left out: the view then shows what Nomad knows."""
        out = {}
        for group, alloc in current.items():
            if container_status(alloc) in ("pending", "unplaced"):
                continue
            text = self.nomad.read_alloc_file(alloc["ID"], "alloc/" + gang.STATUS_FILE)
            if text:
                out[group] = gang.parse_status(text)
        return out

    def view(self, job: t.Mapping[str, t.Any], log_lines: int = 0,
             stubs: t.Optional[t.List[t.Dict[str, t.Any]]] = None) -> t.Dict[str, t.Any]:
        """The session view of a job (allocations read now, or ``stubs``: the job's allocation list just read)."""
        if stubs is None:
            stubs = self.nomad.job_allocations(job["ID"])
        current = current_allocations(stubs)
        full: t.Dict[str, t.Mapping[str, t.Any]] = {}
        for alloc in current.values():
            detail = self.nomad.allocation(alloc["ID"])
            if detail is not None:
                full[alloc["ID"]] = detail
        logs = None
        if log_lines > 0:
            logs = {group: self._logs(alloc, log_lines) for group, alloc in current.items()}
        location = location_of_job(job)
        gangs = self._gangs(current) if gang.POLICY_META_KEY in (job.get("Meta") or {}) else None
        view = build_view(job, stubs, full, logs, location.public() if location else None, gangs)
        if any(c["node_id"] and not c["address"] for c in view["containers"]):
            # no address of its own reported (host networking, or an older Nomad): the node's address
            listed = self.node_catalogue.known(self.nomad) if self.node_catalogue is not None else self.nomad.list_nodes()
            nodes = {n.get("ID"): n.get("Address") or "" for n in listed}
            for c in view["containers"]:
                if not c["address"]:
                    c["address"] = nodes.get(c["node_id"], "")
        return view

    def wait(self, job: t.Mapping[str, t.Any], timeout: float,
             version: t.Optional[int] = None) -> t.List[t.Dict[str, t.Any]]:
        """Until every container's allocation runs (a batch container may also have completed); the job's allocation
        list read last (every one running: the view after the wait needs no new read of it)."""
        deadline = self._clock() + max(0.0, timeout)
        groups = [g.get("Name") for g in job.get("TaskGroups") or []]
        batch = job.get("Type") == "batch"
        delay = min(0.25, self.poll_interval)
        while True:
            listed = self.nomad.job_allocations(job["ID"])
            stubs = [a for a in listed if version is None or a.get("JobVersion") == version]
            current = current_allocations(stubs)
            status = {g: container_status(current.get(g)) for g in groups}
            broken = [g for g, s in status.items() if s in ("failed", "lost")]
            if broken:
                details = []
                for g in broken:
                    alloc = current[g]
                    why = alloc.get("ClientDescription") or last_event(alloc)
                    details.append("%s %s%s" % (g, status[g], (" (%s)" % why) if why else ""))
                raise WaitFailed("container(s) failed: %s" % ", ".join(details))
            if all(s == "running" or (batch and s == "complete") for s in status.values()):
                return listed
            remaining = deadline - self._clock()
            if remaining <= 0:
                progress = wait_progress([{"hostname": g, "status": s, "agent": (current.get(g) or {}).get("NodeName")}
                                          for g, s in status.items()], batch=batch)
                hint = " (unplaced: Nomad could not place the allocation)" if "unplaced" in status.values() else ""
                raise WaitFailed("containers not all running after %gs: %s%s" % (timeout, progress["summary"], hint))
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self.poll_interval)

    def follow_eval(self, eval_id: str, lock: t.Optional[admission.AdmissionLock], index: int = 0) -> t.Dict[str, t.Any]:
        """Nomad's verdict on a register: the groups it could not place (``FailedTGAllocs``), else {}.

        Reads ``/v1/evaluation/:id`` until it is processed (at most ``eval_timeout``: then no verdict). With
        ``index`` (the register's ``EvalCreateIndex``), each read is a blocking query from the index read last
        (``Eval.GetEval`` through ``blockingRPC``): one read answered when a worker has processed the evaluation,
        instead of polling; slices of at most :data:`EVAL_WAIT_SLICE` so that the lock is renewed between them.
        A read that answers pending at once (a server that does not block) is followed by the polling delay.
        """
        if not eval_id:
            return {}
        deadline = self._clock() + self.eval_timeout
        delay = min(0.05, self.poll_interval)
        while True:
            asked = self._clock()
            slice_s = max(0.001, min(EVAL_WAIT_SLICE, deadline - asked))
            ev = (self.nomad.evaluation(eval_id, index=index, wait=slice_s) if index > 0
                  else self.nomad.evaluation(eval_id)) or {}
            status = ev.get("Status") or "pending"
            if status not in ("pending", ""):
                failed = dict(ev.get("FailedTGAllocs") or {})
                if status in ("failed", "canceled", "blocked") and not failed:
                    failed = {"*": {"reason": "evaluation %s %s: %s" % (eval_id, status, ev.get("StatusDescription") or "")}}
                return failed
            if self._clock() >= deadline:
                self._warn("Nomad did not process evaluation %s within %gs; the wait for the containers decides"
                           % (eval_id, self.eval_timeout))
                return {}
            if lock is not None:
                lock.keep()
            if index > 0:
                index = max(index, int(ev.get("ModifyIndex") or 0))  # block again from what it answered
                if self._clock() - asked >= min(delay, slice_s):  # it blocked: no delay needed
                    continue
            self._sleep(delay)
            delay = min(delay * 2, self.poll_interval)
