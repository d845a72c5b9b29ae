# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A watch over the Nomad API double's state: how long each job was half-placed (used by the
contention tests and ``benchmarks/admission.py``)."""

from __future__ import annotations

import threading
import time
import typing as t

from .server import NomadAPIDouble


class HalfPlacedWatch:
    """Samples the double's state: how long each job had some groups live while others were not placed."""

    def __init__(self, double: NomadAPIDouble, period: float = 0.02) -> None:
        self.double = double
        self.period = period
        self.since: t.Dict[str, float] = {}
        self.longest: t.Dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        d = self.double.model
        now = time.monotonic()
        with d.lock:  # the watch reads the double's model directly
            half = set()
            for (_ns, job_id), rec in d.jobs.items():
                groups = [g["Name"] for g in rec["job"].get("TaskGroups") or []]
                live = {a["TaskGroup"] for a in d.job_allocs(_ns, job_id) if d.live(a)}
                if live and any(g not in live for g in groups):
                    half.add(job_id)
        for job_id in half:
            start = self.since.setdefault(job_id, now)
            self.longest[job_id] = max(self.longest.get(job_id, 0.0), now - start)
        for job_id in list(self.since):
            if job_id not in half:
                del self.since[job_id]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.period)

    def __enter__(self) -> "HalfPlacedWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: t.Any) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def worst(self) -> float:
        return max(self.longest.values(), default=0.0)
