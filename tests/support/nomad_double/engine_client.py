# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A client double for the Nomad API double: the allocations of one job are run for real, as the engine containers of
a local session of the same spec (``_local.task_start`` derives each container from the group's task of the rendered
job: entrypoint, env, job Meta with the failure policy's supervisor, templates, mounts), and what a Nomad client does
with their starts and exits is told to the model (``model/tasks.py``: the group's restart policy, TaskStates with
``Restarts`` and events, the allocation's ClientStatus). Each allocation's directory is the container's, so that
``/v1/client/fs/cat`` serves what its task wrote (``NomadAPIDouble.alloc_dirs``).

What it does, each :data:`TICK`:

* an allocation it has not seen whose container runs: the task started;
* a running task whose container exited: ``task_exited`` with podman's exit code and OOM flag (the docker driver
  reports the container's exit code, 128 + the signal for a killed process, and signal 0: drivers/docker/handle.go
  ``run``); when the
  restart tracker says so, ``podman start`` of the same container after the delay (Nomad's docker driver makes a
  new container of the same config; the task directory, hence its files, stays either way), then ``task_started``;
  the delay passes ``time_scale`` times as fast (the events and TaskStates still say the policy's delay: the tests
  look at what was restarted and how often, and need not wait out the restart policy's 5 s per restart);
* a lost allocation (its node went ``down``: ``set_node_status``) is left alone: its client is gone;
* a replacement (``model.node_back``) whose container is gone: the container is made again with the arguments of its
  first start (``_local.recreate``), then ``task_started``.

Not done: a container removed while its node is up (the driver's exit result for it is not modelled: the tests take
the node down first), task kills on job stop (the test tears the local session down), ``podman start`` failures.
"""

from __future__ import annotations

import threading
import time
import typing as t

from ansible_collections.backendai.cluster.plugins.module_utils._local.engine import inspect_containers, podman
from ansible_collections.backendai.cluster.plugins.module_utils._local.recreate import recreate_gone
from ansible_collections.backendai.cluster.plugins.module_utils._local.state import SessionPaths, read_json

TICK = 0.2
FIELDS = "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}"


class EngineClient:
    """Runs ``job_id``'s allocations in the double as the engine containers of the local session at ``paths``."""

    def __init__(self, double: t.Any, job_id: str, paths: SessionPaths, namespace: str = "default",
                 time_scale: float = 1.0) -> None:
        self.double, self.model, self.job_id, self.paths, self.namespace = double, double.model, job_id, paths, namespace
        self.time_scale = time_scale
        info = read_json(paths.session_json)
        self.conf = info["engine"]["conf"]
        self.engines = {c["hostname"]: c["engine"] for c in info["containers"]}
        #: alloc ID -> "running", "dead", or the monotonic time its restart is due
        self.phase: t.Dict[str, t.Any] = {}
        self.errors: t.List[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine client double", daemon=True)

    def start(self) -> "EngineClient":
        self._tick()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the engine client double did not stop"
        assert not self.errors, self.errors

    def _loop(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self._tick()
            except Exception as e:  # reported by stop(): a test must not pass over a broken client
                self.errors.append("%s: %s" % (type(e).__name__, e))

    def _allocs(self) -> t.List[t.Tuple[str, str, str]]:
        """(ID, group, client status) of the job's allocations."""
        with self.model.lock:
            return [(a["ID"], a["TaskGroup"], self.model.client_status(a)) for a in self.model.allocs.values()
                    if a["JobID"] == self.job_id and a["Namespace"] == self.namespace]

    def _tick(self) -> None:
        seen = inspect_containers(list(self.engines.values()), self.conf, FIELDS)
        for alloc_id, group, status in self._allocs():
            phase = self.phase.get(alloc_id)
            got = seen.get(self.engines[group])
            state, code, oom = (list(got) + ["", "", ""])[:3] if got is not None else ("gone", "", "")
            if status == "lost" or phase == "dead":
                continue
            if phase is None:
                if state == "gone":  # a replacement: its container is made again as it was first made
                    recreate_gone(self.paths, [group])
                    continue
                if state == "running":
                    self.double.alloc_dirs[alloc_id] = "%s/alloc" % self.paths.container_dir(group)
                    self.model.task_started(alloc_id)
                    self.phase[alloc_id] = "running"
            elif phase == "running" and state in ("exited", "stopped"):
                delay = self.model.task_exited(alloc_id, int(code) if code.lstrip("-").isdigit() else 1,
                                               oom=oom == "true")
                self.phase[alloc_id] = "dead" if delay is None else time.monotonic() + delay / self.time_scale
            elif isinstance(phase, float) and time.monotonic() >= phase:
                podman(["start", self.engines[group]], self.conf, what="podman start of %s" % group)
                self.model.task_started(alloc_id)
                self.phase[alloc_id] = "running"
