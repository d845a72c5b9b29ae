# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Nomad client does with its tasks' starts and exits, for tests that run a job's tasks for real (the
double runs none: ``../engine_client.py`` runs them as engine containers and reports here). No HTTP.

Followed (hashicorp/nomad, ``main``):

* ``client/allocrunner/taskrunner/restarts/restarts.go``: :class:`RestartTracker` is its ``RestartTracker``.
  ``NewRestartTracker``: a batch job's task is not restarted after a successful exit. ``GetState``: ``Attempts``
  0 answers "Policy allows no restarts" (``TaskNotRestarting``; ``TaskTerminated`` for a successful batch exit);
  else the count starts again once ``Interval`` has passed since the interval began, each exit counts, a count
  above ``Attempts`` with mode ``fail`` answers ``Exceeded allowed attempts %d in interval %v and mode is "fail"``,
  and within the policy ``TaskRestarting`` after ``Delay`` plus up to 25 % jitter ("Restart within policy").
* ``client/allocrunner/taskrunner/task_runner.go`` (``Run``, ``handleTaskExitResult``, ``shouldRestart``): on an
  exit a ``Terminated`` event (exit code, signal, OOM), then ``Restarting`` (the delay and reason: the task is
  ``pending`` with ``Restarts`` + 1 and ``LastRestart``, ``appendTaskEvent``) and it runs again once the delay passed;
  or ``Not Restarting`` (fails the task) and the task is ``dead`` with ``Failed`` set; a task that terminated
  successfully is ``dead``, not failed.
  The events' ``DisplayMessage`` as ``nomad/structs/structs.go`` ``TaskEvent.PopulateEventDisplayMessage`` writes it.
* ``client/allocrunner/alloc_runner.go`` ``getClientStatus``: an allocation with a failed task is ``failed``
  ("Failed tasks"), else ``running``, ``pending``, ``complete``.
* ``scheduler/reconcile.go`` (lost allocations are replaced, keeping their name; the job's ``Reschedule`` policy is
  for failed ones, and the collection's jobs never reschedule) and ``nomad/node_endpoint.go`` (a node back to
  ``ready`` gets an evaluation, which places what could not be placed while it was down): :meth:`node_back`
  places the replacement of each lost allocation of a live job on the node it was pinned to, once the node is back.

Not modelled: the disconnect window (``Disconnect.LostAfter``: a node's allocations here are lost at once when it
goes down, and never ``unknown``), the restart tracker's interval jitter of ``Attempts`` > 0 beyond the delay's,
``Mode: delay``, lifecycle hooks and sidecars, the ``Received``/``Task Setup``/``Driver`` events before ``Started``
(one ``Received`` and one ``Started``), task kills on stop (a stopped job's allocations are ``complete`` as before),
follow-up evaluations, rescheduling of failed allocations (the ``Reschedule`` policy), ``Disconnect.Replace`` and
``Reconcile``, a container removed by hand on a live client (the driver's exit result then).
"""

from __future__ import annotations

import json
import random
import time
import typing as t

from .state import ZERO_TIME, ModelState, rfc3339

JITTER = 0.25
REASON_NO_RESTARTS = "Policy allows no restarts"
REASON_WITHIN_POLICY = "Restart within policy"
TASK_RESTARTING, TASK_NOT_RESTARTING, TASK_TERMINATED = "Restarting", "Not Restarting", "Terminated"


def duration_string(ns: int) -> str:
    """Go's ``time.Duration.String`` for whole seconds and minutes (what the messages print: ``5m0s``, ``5.2s``)."""
    secs = ns / 1e9
    if secs >= 60:
        return "%dm%ds" % (secs // 60, secs % 60)
    return ("%.3f" % secs).rstrip("0").rstrip(".") + "s"


class RestartTracker:
    """``restarts.RestartTracker`` for one task: ``policy`` is the group's ``RestartPolicy`` (nanoseconds)."""

    def __init__(self, policy: t.Mapping[str, t.Any], job_type: str, clock: t.Callable[[], float] = time.monotonic,
                 rand: t.Optional[random.Random] = None) -> None:
        self.policy = dict(policy)
        self.on_success = job_type not in ("batch", "sysbatch")
        self.clock = clock
        self.start = clock()
        self.count = 0
        self.rand = rand or random.Random(0)

    def state(self, exit_code: int) -> t.Tuple[str, float, str]:
        """(``Restarting``, delay in seconds, reason) or (``Not Restarting`` / ``Terminated``, 0, reason) after an exit."""
        success = exit_code == 0
        if int(self.policy.get("Attempts") or 0) == 0:
            if not self.on_success and success:
                return TASK_TERMINATED, 0.0, REASON_NO_RESTARTS
            return TASK_NOT_RESTARTING, 0.0, REASON_NO_RESTARTS
        interval = int(self.policy.get("Interval") or 0)
        now = self.clock()
        if now > self.start + interval / 1e9:
            self.count, self.start = 0, now
        self.count += 1
        if success and not self.on_success:
            return TASK_TERMINATED, 0.0, "Restart unnecessary as task terminated successfully"
        if self.count > int(self.policy["Attempts"]):
            if self.policy.get("Mode") == "fail":
                return TASK_NOT_RESTARTING, 0.0, 'Exceeded allowed attempts %d in interval %s and mode is "fail"' % (
                    self.policy["Attempts"], duration_string(interval))
            return TASK_RESTARTING, self.start + interval / 1e9 - now, "Exceeded allowed attempts, applying a delay"
        delay = max(1, int(self.policy.get("Delay") or 0))
        return TASK_RESTARTING, (delay + self.rand.randrange(delay) * JITTER) / 1e9, REASON_WITHIN_POLICY


def _event(kind: str, message: str, fails: bool = False, **fields: t.Any) -> t.Dict[str, t.Any]:
    details = {"exit_code": str(fields["ExitCode"]), "signal": str(fields.get("Signal", 0)),
               "oom_killed": str(bool(fields.get("OOMKilled"))).lower()} if "ExitCode" in fields else {}
    if "RestartReason" in fields:
        details["restart_reason"] = fields["RestartReason"]
    if fails:
        details["fails_task"] = "true"
    event = {"Type": kind, "Time": time.time_ns(), "Message": "", "DisplayMessage": message, "Details": details,
             "FailsTask": fails, "ExitCode": 0, "Signal": 0, "RestartReason": "", "StartDelay": 0}
    event.update((k, v) for k, v in fields.items() if k != "OOMKilled")
    return event


class TasksModel(ModelState):
    """The task runner of each allocation that :meth:`task_started` was told about (``alloc["runner"]``): its
    TaskState, restart tracker and the resulting ClientStatus, served through the allocation's ``override``."""

    def _runner(self, alloc: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
        runner = alloc.get("runner")
        if runner is None:
            group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
            runner = alloc["runner"] = {
                "tracker": RestartTracker(group.get("RestartPolicy") or {}, alloc["Job"].get("Type") or "service"),
                "state": {"State": "pending", "Failed": False, "Restarts": 0, "LastRestart": ZERO_TIME,
                          "StartedAt": ZERO_TIME, "FinishedAt": ZERO_TIME, "TaskHandle": None,
                          "Events": [_event("Received", "Task received by client")]}}
        return runner

    def _publish(self, alloc: t.Dict[str, t.Any]) -> None:
        state = alloc["runner"]["state"]
        status, description = {"dead": ("failed", "Failed tasks") if state["Failed"] else (
            "complete", "All tasks have completed"), "running": ("running", "Tasks are running")}.get(
            state["State"], ("pending", "No tasks have started"))
        if alloc["override"] and alloc["override"].get("ClientStatus") == "lost":
            return  # a lost allocation's client is gone: nothing it says reaches the servers
        alloc["override"] = {"ClientStatus": status, "Description": description,
                             "TaskStates": {task: dict(state, Events=list(state["Events"])) for task in alloc["Tasks"]}}
        alloc["ModifyIndex"] = self.next_index()
        alloc["ModifyTime"] = time.time_ns()

    def task_pending(self, alloc_id: str) -> None:
        """The allocation reached its client, which has not started the task yet."""
        with self.lock:
            alloc = self.allocs[alloc_id]
            self._runner(alloc)
            self._publish(alloc)

    def task_started(self, alloc_id: str) -> None:
        """The driver started the task (again, after a restart: ``Restarts`` + 1)."""
        with self.lock:
            alloc = self.allocs[alloc_id]
            state = self._runner(alloc)["state"]
            state.update(State="running", StartedAt=rfc3339(time.time_ns()))
            state["Events"].append(_event("Started", "Task started by client"))
            self._publish(alloc)

    def task_exited(self, alloc_id: str, exit_code: int, signal: int = 0, oom: bool = False) -> t.Optional[float]:
        """The task's process ended: the restart tracker decides. Returns the delay (s) after which the client starts
        the task again, or None (the task is dead)."""
        with self.lock:
            alloc = self.allocs[alloc_id]
            runner = self._runner(alloc)
            state = runner["state"]
            # the docker driver's exit error (drivers/docker/handle.go ``run``), which the event carries as its message
            error = "OOM Killed" if oom else (
                "Docker container exited with non-zero exit code: %d" % exit_code if exit_code else "")
            message = "Exit Code: %d" % exit_code + (", Signal: %d" % signal if signal else "") + (
                ", Exit Message: %s" % json.dumps(error) if error else "")
            state["Events"].append(_event(TASK_TERMINATED, message, ExitCode=exit_code, Signal=signal, OOMKilled=oom))
            verdict, delay, reason = runner["tracker"].state(exit_code)
            if verdict == TASK_RESTARTING:
                text = "Task restarting in %s" % duration_string(int(delay * 1e9))
                state["Events"].append(_event(TASK_RESTARTING, text if reason == REASON_WITHIN_POLICY else
                                              "%s - %s" % (reason, text), RestartReason=reason,
                                              StartDelay=int(delay * 1e9)))
                # pending until the delay passed (task_runner.go shouldRestart); a Restarting event counts a restart
                # (task_runner.go appendTaskEvent: Restarts + 1, LastRestart)
                state.update(State="pending", Restarts=state["Restarts"] + 1, LastRestart=rfc3339(time.time_ns()))
                self._publish(alloc)
                return delay
            if verdict == TASK_NOT_RESTARTING:
                state["Events"].append(_event(TASK_NOT_RESTARTING, reason, fails=True, RestartReason=reason))
            state.update(State="dead", Failed=verdict == TASK_NOT_RESTARTING, FinishedAt=rfc3339(time.time_ns()))
            self._publish(alloc)
            return None

    def task_dead(self, alloc_id: str) -> bool:
        with self.lock:
            runner = self.allocs[alloc_id].get("runner")
            return bool(runner) and runner["state"]["State"] == "dead"

    def node_down_of(self, alloc_id: str) -> bool:
        """Whether the allocation's node is down (its client answers nothing)."""
        with self.lock:
            alloc = self.allocs.get(alloc_id)
            node = self.nodes.get(alloc["NodeID"]) if alloc else None
            return bool(node) and node["Status"] == "down"

    def node_back(self, name: str) -> t.List[str]:
        """The node is ``ready`` again; each lost allocation of a live job pinned to it gets its replacement there
        (pending until its client starts the task). Returns the new allocations' IDs."""
        self.set_node_status(name, "ready")  # type: ignore[attr-defined]
        made = []
        with self.lock:
            node = next(n for n in self.nodes.values() if n["Name"] == name)
            lost = [a for a in self.allocs.values() if a["NodeID"] == node["ID"] and self.client_status(a) == "lost"
                    and not a.get("NextAllocation")]  # type: ignore[attr-defined]
            for alloc in lost:
                rec = self.jobs.get((alloc["Namespace"], alloc["JobID"]))
                if rec is None or rec["job"].get("Stop") or rec["job"] is not alloc["Job"]:
                    continue
                group = next(g for g in rec["job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
                before = set(self.allocs)
                self.create_alloc(rec, group, alloc["Index"], node, [], alloc["EvalID"],  # type: ignore[attr-defined]
                                  self.next_index())
                (new_id,) = set(self.allocs) - before
                alloc["NextAllocation"] = new_id
                self.allocs[new_id]["PreviousAllocation"] = alloc["ID"]
                self.task_pending(new_id)
                made.append(new_id)
        return made
