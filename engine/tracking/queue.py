"""The queue as the user reads it: one row per run with its job's state, pending reason,
nodes, elapsed time and throughput so far. `dlscale status` and the TUI's queue screen both
show these rows, from four queries whatever the number of runs."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..results.formatting import elapsed_text, finite, fmt
from .store import Store
from .store_records import skipped_text


@dataclass(frozen=True)
class QueueRow:
    run_id: str
    experiment: str
    framework: str
    model: str
    scale: str
    per_device_batch: int
    repetition: int
    backend: str | None
    job_id: str | None
    state: str
    reason: str            # first line only: the rest is in the log
    nodes: str | None
    elapsed_s: float | None
    images_per_s: float | None
    step: int | None       # last reported step while running

    def cells(self) -> tuple[str, ...]:
        """The row as text, in QUEUE_COLUMNS order."""
        return (self.job_id or "-", self.framework, self.model, self.scale,
                str(self.per_device_batch), str(self.repetition), self.state,
                self.nodes or "-", elapsed_text(self.elapsed_s), fmt(self.images_per_s, 1),
                self.reason[:80])


QUEUE_COLUMNS = ("job", "framework", "model", "scale", "batch", "rep", "state", "nodes",
                 "elapsed", "images/s", "reason")


_RUN_COLUMNS = ("run_id", "experiment", "framework", "model", "nodes", "ranks_per_node",
                "per_device_batch", "repetition", "backend", "job_id", "state", "reason")


def rows(store: Store, experiment: str | None = None,
         now: float | None = None) -> list[QueueRow]:
    runs = store.runs(experiment, columns=_RUN_COLUMNS)
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for backend in {r["backend"] for r in runs if r["backend"]}:
        for j in store.jobs(backend, payload=False):
            jobs[(backend, j["job_id"])] = j
    # Every run's, when every run is asked for: no list of 10,000 ids to bind.
    ids = [r["run_id"] for r in runs] if experiment else None
    progress = store.last_records("interval", ids)
    progress.update(store.last_records("summary", ids))
    skipped = store.skipped(ids)
    now = time.time() if now is None else now
    out = []
    for r in runs:
        job = jobs.get((r["backend"], r["job_id"])) or {}
        elapsed = job.get("elapsed")
        if elapsed is None and job.get("started"):
            elapsed = (job.get("ended") or now) - job["started"]
        last = progress.get(r["run_id"]) or {}
        reason = (r["reason"] or job.get("reason") or "").split("\n", 1)[0]
        if not reason and r["run_id"] in skipped:
            lines = skipped[r["run_id"]]
            reason = skipped_text(lines[0]) + (f" (and {len(lines) - 1} more)"
                                               if len(lines) > 1 else "")
        out.append(QueueRow(
            r["run_id"], r["experiment"], r["framework"], r["model"],
            f"{r['nodes']}x{r['ranks_per_node']}", r["per_device_batch"], r["repetition"],
            r["backend"], r["job_id"], r["state"], reason, job.get("nodes"), elapsed,
            finite(last.get("throughput")) if "throughput" in last else
            finite(last.get("images_per_s")), last.get("step")))
    return out


def counts(queue: list[QueueRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in queue:
        out[q.state] = out.get(q.state, 0) + 1
    return out
