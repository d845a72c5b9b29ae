# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluations, after ``nomad/structs/eval.go`` shapes and ``scheduler/generic_sched.go``: every register
creates one, ``complete`` with ``FailedTGAllocs`` (the scheduler's ``AllocMetric`` per group it could not
place) and, if any, a ``BlockedEval`` (status ``blocked``). For ``eval_delay`` seconds after its creation an
evaluation reads as ``pending`` (no scheduler worker has processed it yet).

Blocking reads (``GET /v1/evaluation/:id?index=&wait=``): ``Eval.GetEval`` runs through ``blockingRPC``
(``nomad/eval_endpoint.go``) and answers the evaluation's ``ModifyIndex`` as the query index. Processing it is a raft
write (the worker's ``Eval.Update`` after ``Plan.Submit``), so a processed evaluation reads with a ModifyIndex above
its CreateIndex: here the index taken when it is first read processed (:meth:`EvalsModel.evaluation`), and a read
blocked on the pending one's index answers when ``eval_delay`` has passed.

What it does not model: the eval broker and its queues, nack/retry, evaluations of node updates or
deregistration (a deregister answers an EvalID that cannot be read), and unblocking: a blocked evaluation
stays blocked (a new register places what capacity allows); the updates a real evaluation may go through before
it completes (each would answer a blocked read: a client reads again while it is pending).
"""

from __future__ import annotations

import copy
import time
import typing as t
import uuid

from .state import ZERO_TIME, CodedError, ModelState


class EvalsModel(ModelState):
    def create_eval(self, eval_id: str, rec: t.Mapping[str, t.Any], failed: t.Mapping[str, t.Any], index: int) -> None:
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
            self.evals[blocked] = dict(base, ID=blocked, Status="blocked", StatusDescription="created to place remaining allocations",
                                        PreviousEval=eval_id, FailedTGAllocs=None, BlockedEval="",
                                        ClassEligibility={}, created=time.monotonic())
        self.evals[eval_id] = dict(base, ID=eval_id, Status="complete", StatusDescription="",
                                    FailedTGAllocs=copy.deepcopy(dict(failed)) or None, BlockedEval=blocked,
                                    created=time.monotonic())


    def evaluation(self, eval_id: str) -> t.Dict[str, t.Any]:
        ev = self.evals.get(eval_id)
        if ev is None:
            raise CodedError(404, "eval not found")
        out = {k: copy.deepcopy(v) for k, v in ev.items() if k not in ("created", "processed_index")}
        if out["Status"] == "complete" and self.eval_processed_in(eval_id) > 0:
            # not processed by a scheduler worker yet
            out.update(Status="pending", FailedTGAllocs=None, BlockedEval="", QueuedAllocations=None)
        elif out["Status"] == "complete":
            if "processed_index" not in ev:  # the worker's update: a raft write
                ev["processed_index"] = self.next_index()
            out["ModifyIndex"] = ev["processed_index"]
        return out

    def eval_processed_in(self, eval_id: str) -> float:
        """Seconds until a scheduler worker has processed the evaluation (0: done, or not one the model delays)."""
        ev = self.evals.get(eval_id)
        if ev is None or ev["Status"] != "complete":
            return 0.0
        return max(0.0, self.eval_delay - (time.monotonic() - ev["created"]))
