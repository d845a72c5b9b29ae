# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The servers' garbage collection of finished jobs, evaluations and allocations, and the client's removal of an
allocation the servers collected: the minimum ``keep_after`` on Nomad relies on (docs/session-lifecycle.md).

Followed from hashicorp/nomad at aa026cc99cfb (main, version 2.0.6-dev, 2026-08-21):

* ``nomad/core_sched.go``: ``jobGC`` (a GC-able job whose ``SubmitTime`` is older than ``job_gc_threshold`` and whose
  every evaluation ``gcEval`` collects, with ``allowBatch``, is purged with them and their allocations), ``evalGC``
  (evaluations older than ``eval_gc_threshold``, ``batch_eval_gc_threshold`` for batch ones, without ``allowBatch``:
  a batch evaluation of a job that is not stopped keeps its allocations but those of older job versions,
  ``olderVersionTerminalAllocs``), ``gcEval`` and ``allocGCEligible`` (terminal and old enough, not running on its
  client; any once the job is gone, stopped or dead; otherwise a failed one only when it cannot be rescheduled),
  ``forceGC`` (``nomad system gc``: every threshold 1 ms), ``getCutoffTime`` (now minus the threshold);
* ``nomad/state/schema.go`` ``jobIsGCable``: a dead job is GC-able when stopped, or when it is a batch or sysbatch job
  (a dead service job that was not stopped is kept); a tagged version never;
* ``nomad/config.go`` ``DefaultConfig``: ``job_gc_threshold`` 4 h, ``eval_gc_threshold`` 1 h,
  ``batch_eval_gc_threshold`` 24 h (each checked every 5 minutes: here when :meth:`GCModel.garbage_collect` is called);
* ``client/client.go`` ``removeAlloc``: an allocation the servers removed is collected by its client at once (its
  directory, hence the task's files and logs, goes): the server double (``NomadAPIDouble.garbage_collect``) no longer
  serves its files (``/v1/client/fs``), and the model drops its logs.

Not modelled: the periodic core jobs and their intervals (the test calls the collection with the time it wants),
periodic and parameterized jobs, deployments, nodes, CSI and keys GC, the client's own GC of terminal allocations it
still tracks (``client/gc.go``: by disk usage and ``gc_max_allocs``, which only frees a directory sooner), job
version GC, and ``PUT /v1/system/gc`` over HTTP (the collection never calls it).
"""

from __future__ import annotations

import time
import typing as t

from .state import ModelState

NS = 1_000_000_000
#: nomad/config.go DefaultConfig
JOB_GC_THRESHOLD = 4 * 3600 * NS
EVAL_GC_THRESHOLD = 3600 * NS
BATCH_EVAL_GC_THRESHOLD = 24 * 3600 * NS
#: core_sched.go forceGC: "set a minimal threshold for all objects to make force GC possible"
FORCE_THRESHOLD = 1_000_000
TERMINAL_EVAL = ("complete", "failed", "canceled")


class GCModel(ModelState):
    """``garbage_collect``: what the servers' core jobs and the allocations' clients remove."""

    def garbage_collect(self, now: t.Optional[int] = None, force: bool = False) -> t.Dict[str, t.List[str]]:
        """One run of ``jobGC`` then ``evalGC`` at ``now`` (ns since the epoch; default: the time now), with the
        default thresholds or ``forceGC``'s; what it removed: job IDs, evaluation and allocation IDs."""
        now = time.time_ns() if now is None else now
        job_cut, eval_cut, batch_cut = (now - (FORCE_THRESHOLD if force else th) for th in (
            JOB_GC_THRESHOLD, EVAL_GC_THRESHOLD, BATCH_EVAL_GC_THRESHOLD))
        with self.lock:
            gone_jobs: t.List[t.Tuple[str, str]] = []
            gone_evals: t.List[str] = []
            gone_allocs: t.List[str] = []
            for key, rec in list(self.jobs.items()):  # jobGC
                if not self._job_gcable(rec) or rec["SubmitTime"] > job_cut:
                    continue
                evals = [e for e in self.evals.values() if (e["Namespace"], e["JobID"]) == key]
                collected = [self._gc_eval(e, job_cut, now, allow_batch=True) for e in evals]
                if all(ok for ok, _ in collected):
                    gone_jobs.append(key)
                    gone_evals.extend(e["ID"] for e in evals)
                    gone_allocs.extend(a for _, allocs in collected for a in allocs)
            for ev in list(self.evals.values()):  # evalGC
                if ev["ID"] in gone_evals:
                    continue
                ok, allocs = self._gc_eval(ev, batch_cut if ev["Type"] == "batch" else eval_cut, now, allow_batch=False)
                if ok:
                    gone_evals.append(ev["ID"])
                gone_allocs.extend(allocs)
            for eval_id in gone_evals:
                self.evals.pop(eval_id, None)
            emptied = set()
            for alloc_id in gone_allocs:
                alloc = self.allocs.pop(alloc_id, None)
                if alloc is not None:
                    emptied.add((alloc["Namespace"], alloc["JobID"]))
                for key in [k for k in self.logs if k[0] == alloc_id]:
                    del self.logs[key]
            for key in gone_jobs:  # jobReap: a batch deregister with Purge
                del self.jobs[key]
            for key in emptied - set(gone_jobs):  # getJobStatus with evalDelete: dead, with nothing left to count
                if key in self.jobs and not self.job_allocs(*key):  # type: ignore[attr-defined]
                    self.jobs[key]["reaped"] = True
            if gone_evals or gone_allocs or gone_jobs:
                self.next_index()
            return {"jobs": [job_id for _, job_id in gone_jobs], "evals": gone_evals, "allocs": gone_allocs}

    def _job_gcable(self, rec: t.Mapping[str, t.Any]) -> bool:
        """``jobIsGCable`` (nomad/state/schema.go)."""
        job = rec["job"]
        if job.get("VersionTag") is not None:
            return False
        if self.job_status(rec) != "dead":  # type: ignore[attr-defined]
            return False
        return bool(job.get("Stop")) or job.get("Type") in ("batch", "sysbatch")

    def _gc_eval(self, ev: t.Mapping[str, t.Any], cutoff: int, now: int, allow_batch: bool
                 ) -> t.Tuple[bool, t.List[str]]:
        """``gcEval``: whether the evaluation goes, and which of its allocations."""
        if ev["Status"] not in TERMINAL_EVAL or ev["ModifyTime"] > cutoff:
            return False, []
        rec = self.jobs.get((ev["Namespace"], ev["JobID"]))
        allocs = [a for a in self.allocs.values() if a.get("EvalID") == ev["ID"]]
        status = self.job_status(rec) if rec is not None else ""  # type: ignore[attr-defined]
        if ev["Type"] == "batch":
            collect = rec is None or (status == "dead" and (bool(rec["job"].get("Stop")) or allow_batch))
            if not collect:  # olderVersionTerminalAllocs
                old = [a["ID"] for a in allocs if a["CreateIndex"] < rec["JobModifyIndex"]  # type: ignore[index]
                       and a["ModifyTime"] < cutoff and self._terminal(a)]
                return len(old) == len(allocs), old
        eligible = [a["ID"] for a in allocs if self._alloc_gc_eligible(a, rec, status, cutoff)]
        return len(eligible) == len(allocs), eligible

    def _terminal(self, alloc: t.Mapping[str, t.Any]) -> bool:
        """``Allocation.TerminalStatus``: desired stop or evict, or a terminal client status."""
        return alloc["DesiredStatus"] in ("stop", "evict") or \
            self.client_status(alloc) in ("complete", "failed", "lost")  # type: ignore[attr-defined]

    def _alloc_gc_eligible(self, alloc: t.Mapping[str, t.Any], rec: t.Optional[t.Mapping[str, t.Any]], status: str,
                           cutoff: int) -> bool:
        """``allocGCEligible`` (core_sched.go)."""
        if not self._terminal(alloc) or alloc["ModifyTime"] > cutoff:
            return False
        client = self.client_status(alloc)  # type: ignore[attr-defined]
        if client == "running":
            return False
        if rec is None or rec["job"].get("Stop") or status == "dead":
            return True
        if alloc["DesiredStatus"] == "stop" or client != "failed":
            return True
        group = next((g for g in rec["job"].get("TaskGroups") or [] if g["Name"] == alloc["TaskGroup"]), {})
        policy = group.get("ReschedulePolicy") or rec["job"].get("Reschedule")
        if not policy or (not policy.get("Unlimited") and not policy.get("Attempts")):
            return True
        if alloc.get("NextAllocation"):
            return True
        return False  # unlimited, or attempts left and no reschedule tracker (the double keeps none)
