# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluations, after ``nomad/structs/eval.go`` shapes and ``scheduler/generic_sched.go``: every register
creates one, ``complete`` with ``FailedTGAllocs`` (the scheduler's ``AllocMetric`` per group it could not
place) and, if any, a ``BlockedEval`` (status ``blocked``). For ``eval_delay`` seconds after its creation an
evaluation reads as ``pending`` (no scheduler worker has processed it yet).

What it does not model: the eval broker and its queues, nack/retry, evaluations of node updates or
deregistration (a deregister answers an EvalID that cannot be read), and unblocking: a blocked evaluation
stays blocked (a new register places what capacity allows).
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
        out = {k: copy.deepcopy(v) for k, v in ev.items() if k != "created"}
        if out["Status"] == "complete" and time.monotonic() - ev["created"] < self.eval_delay:
            # not processed by a scheduler worker yet
            out.update(Status="pending", FailedTGAllocs=None, BlockedEval="", QueuedAllocations=None)
        return out
