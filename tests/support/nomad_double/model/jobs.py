# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jobs: admission of a submitted job (the ``Job.Validate`` subset of ``nomad/structs/structs.go``: job ID,
type, priority, duplicate group/task names, ``Count`` < 0, missing tasks/driver, minimum CPU/MemoryMB,
answered as a go-multierror text with 500, as Nomad does; the namespace and region checks of
``nomad/job_endpoint.go``), Nomad's top-level defaults (``api/jobs.go`` ``Canonicalize``), register with
``EnforceIndex`` (``Job.Register``), deregister and purge, the job views (``Job``, ``JobListStub`` with the
``meta`` option, ``JobSummary``), and plan (``Job.Plan``: ``DesiredTGUpdates``, ``FailedTGAllocs``, the diff
of ``diff.py``) without committing anything.

Which update a group gets follows ``scheduler/util.go`` ``tasksUpdated``: a change to a key outside
:data:`IN_PLACE_GROUP_KEYS` or to the job's ``Meta`` is destructive, any other change of the spec is in-place.

What it does not model: job versions history and revert, periodic and parameterized jobs (dispatch),
multiregion, ``Stable`` (always false), deployments, ``PreserveCounts``, job-level ``Warnings``, HCL parsing.
"""

from __future__ import annotations

import time
import typing as t
import uuid

from .diff import job_diff
from .state import ZERO_TIME, CodedError, ModelState, multierror, json_copy

SERVER_JOB_FIELDS = ("Status", "StatusDescription", "Stable", "Version", "CreateIndex", "ModifyIndex", "JobModifyIndex",
                     "SubmitTime", "NomadTokenID", "VersionTag", "ConsulToken", "VaultToken")
JOB_TYPES = ("service", "batch", "system", "sysbatch")
IN_PLACE_GROUP_KEYS = {"Count", "Services", "RestartPolicy", "ReschedulePolicy", "Update", "Migrate", "Spreads",
                       "Affinities", "Scaling", "ShutdownDelay", "StopAfterClientDisconnect", "MaxClientDisconnect",
                       "Disconnect", "PreventRescheduleOnLost"}


class JobsModel(ModelState):
    """Jobs per (namespace, ID): ``{"job": spec, "Version", "CreateIndex", "ModifyIndex", "JobModifyIndex",
    "SubmitTime", "Queued": {group: count}}``."""

    def admit_job(self, job: t.Mapping[str, t.Any], namespace: str, region: str) -> t.Dict[str, t.Any]:
        """What ``Job.Register``/``Job.Plan`` check before anything else; the job with its defaults."""
        if self.namespaces is not None and namespace not in self.namespaces and namespace != "default":
            raise CodedError(500, 'job "%s" is in nonexistent namespace "%s"' % (job["ID"], namespace))
        if region != self.region:
            raise CodedError(500, "No path to region")
        errors, _ = self.validate_job(job)
        if errors:
            raise CodedError(500, multierror(errors))
        return self.job_spec(job, namespace)

    def validate_job(self, job: t.Mapping[str, t.Any]) -> t.Tuple[t.List[str], t.List[str]]:
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
        # Job.Validate and TaskGroup.Validate (nomad/structs/structs.go): the names first, then each group and task
        errors += _name_errors(groups, "Job task group %d missing name", "Job task group %d redefines '%s' from group %d")
        for idx, group in enumerate(groups):
            name = group.get("Name") or ""
            group_errors = []
            count = group.get("Count")
            if count is not None and count < 0:
                group_errors.append("Task group count can't be negative")
            tasks = group.get("Tasks") or []
            if not tasks:
                group_errors.append("Missing tasks for task group")
            group_errors += _name_errors(tasks, "Task %d missing name", "Task %d redefines '%s' from task %d")
            for tidx, task in enumerate(tasks):
                tname = task.get("Name") or ""
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


    def job_spec(self, job: t.Mapping[str, t.Any], namespace: str) -> t.Dict[str, t.Any]:
        """The job as submitted, without server fields, with Nomad's top-level defaults."""
        spec = {k: json_copy(v) for k, v in job.items() if k not in SERVER_JOB_FIELDS}
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

    def job_view(self, rec: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        job = json_copy(rec["job"])
        job.update({"Status": self.job_status(rec), "StatusDescription": "", "Stable": False, "Version": rec["Version"],
                    "CreateIndex": rec["CreateIndex"], "ModifyIndex": rec["ModifyIndex"],
                    "JobModifyIndex": rec["JobModifyIndex"], "SubmitTime": rec["SubmitTime"]})
        return job

    def job_allocs(self, namespace: str, job_id: str) -> t.List[t.Dict[str, t.Any]]:
        return [a for a in self.allocs.values() if a["Namespace"] == namespace and a["JobID"] == job_id]

    def job_status(self, rec: t.Mapping[str, t.Any]) -> str:
        allocs = self.job_allocs(rec["job"]["Namespace"], rec["job"]["ID"])
        if any(self.client_status(a) in ("pending", "running") for a in allocs):
            return "running"
        if rec["job"].get("Stop") or allocs or rec.get("reaped"):  # (reaped: its allocations collected, ``gc``)
            return "dead"
        return "pending"

    def summary_of(self, rec: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        job = rec["job"]
        summary: t.Dict[str, t.Dict[str, int]] = {}
        for group in job.get("TaskGroups") or []:
            summary[group["Name"]] = {"Queued": rec["Queued"].get(group["Name"], 0), "Complete": 0, "Failed": 0,
                                      "Running": 0, "Starting": 0, "Lost": 0, "Unknown": 0}
        for alloc in self.job_allocs(job["Namespace"], job["ID"]):
            counts = summary.setdefault(alloc["TaskGroup"], {"Queued": 0, "Complete": 0, "Failed": 0, "Running": 0,
                                                             "Starting": 0, "Lost": 0, "Unknown": 0})
            key = {"pending": "Starting", "running": "Running", "complete": "Complete", "failed": "Failed",
                   "lost": "Lost"}.get(self.client_status(alloc), "Unknown")
            counts[key] += 1
        return {"JobID": job["ID"], "Namespace": job["Namespace"], "Summary": summary,
                "Children": {"Pending": 0, "Running": 0, "Dead": 0}, "CreateIndex": rec["CreateIndex"],
                "ModifyIndex": rec["ModifyIndex"]}


    def changes_of(self, old: t.Optional[t.Mapping[str, t.Any]], new: t.Mapping[str, t.Any]) -> t.Dict[str, str]:
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


    def register(self, spec: t.Dict[str, t.Any], enforce_index: bool = False, job_modify_index: int = 0) -> t.Dict[str, t.Any]:
        """``Job.Register``: a new version if the spec changed, its allocations reconciled, and an evaluation."""
        ns = spec["Namespace"]
        key = (ns, spec["ID"])
        rec = self.jobs.get(key)
        if enforce_index:
            jmi = job_modify_index or 0
            if rec is not None and jmi == 0:
                raise CodedError(500, "Enforcing job modify index 0: job already exists")
            if rec is not None and jmi != rec["JobModifyIndex"]:
                raise CodedError(500, "Enforcing job modify index %d: job exists with conflicting job modify index: %d"
                                 % (jmi, rec["JobModifyIndex"]))
            if rec is None and jmi != 0:
                raise CodedError(500, "Enforcing job modify index %d: job does not exist" % jmi)
        eval_id = str(uuid.uuid4())
        now = time.time_ns()
        changed = rec is None or rec["job"] != spec
        if changed:
            index = self.next_index()
            changes = self.changes_of(rec["job"] if rec else None, spec)
            if rec is None:
                rec = {"CreateIndex": index, "Version": 0, "Queued": {}}
                self.jobs[key] = rec
            else:
                rec["Version"] += 1
            rec.update({"job": spec, "ModifyIndex": index, "JobModifyIndex": index, "SubmitTime": now})
            failed = self.reconcile(rec, changes, eval_id)
        else:
            failed = {}
        eval_index = self.next_index()
        self.create_eval(eval_id, rec, failed, eval_index)
        return {"EvalID": eval_id, "EvalCreateIndex": eval_index, "JobModifyIndex": rec["JobModifyIndex"],
                "Warnings": "", "Index": eval_index, "LastContact": 0, "KnownLeader": False}

    def deregister(self, ns: str, job_id: str, purge: bool) -> t.Dict[str, t.Any]:
        """``Job.Deregister``: stop the job (or purge it); deregistering an absent job is not an error."""
        rec = self.jobs.get((ns, job_id))
        if rec is None:
            return {"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "VolumeEvalID": "",
                    "VolumeEvalIndex": 0, "Index": 0, "LastContact": 0, "KnownLeader": False}
        index = self.next_index()
        for alloc in self.job_allocs(ns, job_id):
            if purge:
                self.allocs.pop(alloc["ID"], None)
            elif alloc["DesiredStatus"] == "run":
                alloc["DesiredStatus"] = "stop"
                alloc["DesiredDescription"] = "alloc is being stopped because the job was stopped"
                alloc["ModifyIndex"] = index
        if purge:
            del self.jobs[(ns, job_id)]
        else:
            rec["job"]["Stop"] = True
            rec.update({"ModifyIndex": index, "JobModifyIndex": index, "Version": rec["Version"] + 1})
        return {"EvalID": str(uuid.uuid4()), "EvalCreateIndex": index, "JobModifyIndex": index, "VolumeEvalID": "",
                "VolumeEvalIndex": 0, "Index": index, "LastContact": 0, "KnownLeader": False}

    def _record(self, ns: str, job_id: str) -> t.Dict[str, t.Any]:
        rec = self.jobs.get((ns, job_id))
        if rec is None:
            raise CodedError(404, "job not found")
        return rec

    def job(self, ns: str, job_id: str) -> t.Dict[str, t.Any]:
        return self.job_view(self._record(ns, job_id))

    def summary(self, ns: str, job_id: str) -> t.Dict[str, t.Any]:
        return self.summary_of(self._record(ns, job_id))

    def job_stubs(self, ns: str, prefix: str, meta: bool) -> t.List[t.Dict[str, t.Any]]:
        """``JobListStub`` of every job of ``ns`` (``*``: all) whose ID starts with ``prefix``."""
        out = []
        for (job_ns, job_id), rec in sorted(self.jobs.items()):
            if (ns != "*" and job_ns != ns) or not job_id.startswith(prefix):
                continue
            job = rec["job"]
            stub = {
                "ID": job["ID"], "ParentID": job.get("ParentID", ""), "Name": job["Name"], "Namespace": job_ns,
                "Datacenters": job["Datacenters"], "NodePool": job["NodePool"], "Multiregion": None, "Type": job["Type"],
                "Priority": job["Priority"], "Periodic": bool(job.get("Periodic")), "ParameterizedJob": bool(job.get("ParameterizedJob")),
                "Stop": bool(job.get("Stop")), "Status": self.job_status(rec), "StatusDescription": "",
                "JobSummary": self.summary_of(rec), "CreateIndex": rec["CreateIndex"], "ModifyIndex": rec["ModifyIndex"],
                "JobModifyIndex": rec["JobModifyIndex"], "SubmitTime": rec["SubmitTime"],
            }
            if meta:
                stub["Meta"] = json_copy(job.get("Meta"))
            out.append(stub)
        return out

    def stored_job(self, job_id: str, namespace: str = "default") -> t.Optional[t.Dict[str, t.Any]]:
        with self.lock:
            rec = self.jobs.get((namespace, job_id))
            return json_copy(rec["job"]) if rec else None

    def plan(self, spec: t.Dict[str, t.Any], diff: bool) -> t.Dict[str, t.Any]:
        """``Job.Plan``: what a register would do (nothing is committed)."""
        ns = spec["Namespace"]
        rec = self.jobs.get((ns, spec["ID"]))
        old = rec["job"] if rec else None
        changes = self.changes_of(old, spec)
        current = self.job_allocs(ns, spec["ID"])
        ignore = {a["ID"] for a in current}
        extra: t.Dict[str, t.Dict[str, t.Any]] = {}
        desired: t.Dict[str, t.Dict[str, int]] = {}
        failed: t.Dict[str, t.Any] = {}
        groups = {g["Name"]: g for g in spec.get("TaskGroups") or []}
        for name, change in changes.items():
            d = {"Ignore": 0, "Place": 0, "Migrate": 0, "Stop": 0, "InPlaceUpdate": 0, "DestructiveUpdate": 0,
                 "Canary": 0, "Preemptions": 0}
            old_count = len([a for a in current if a["TaskGroup"] == name and a["DesiredStatus"] == "run"])
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
                placements, metric = self.schedule(spec, groups[name], to_place, ignore, extra)
                if metric is not None:
                    failed[name] = metric
            desired[name] = d
        return {
            "Index": self.index, "JobModifyIndex": rec["JobModifyIndex"] if rec else 0, "CreatedEvals": None,
            "Diff": job_diff(old, spec, changes, desired) if diff else None,
            "Annotations": {"DesiredTGUpdates": desired, "PreemptedAllocs": None},
            "FailedTGAllocs": failed or None, "NextPeriodicLaunch": ZERO_TIME, "Warnings": "",
        }


def _name_errors(items: t.Sequence[t.Mapping[str, t.Any]], missing: str, redefines: str) -> t.List[str]:
    """Nomad's check of a list's names: each one given (``missing`` % position) and none repeated (``redefines`` %
    (position, name, first position)), positions counted from 1."""
    errors: t.List[str] = []
    seen: t.Dict[str, int] = {}
    for idx, item in enumerate(items):
        name = item.get("Name") or ""
        if not name:
            errors.append(missing % (idx + 1))
        elif name in seen:
            errors.append(redefines % (idx + 1, name, seen[name] + 1))
        else:
            seen[name] = idx
    return errors
