"""From runs to results: throughput with its spread, speedup, efficiency, time-to-accuracy.

Rules (../METHOD.md): throughput is the mean over repetitions with a Student-t 95%
confidence interval; a coefficient of variation above 5% marks the point noisy. Speedup is
against the best single-device point of the same model, dataset, precision and batch
(per-device batch for weak scaling, global batch for strong) in any framework of the same
experiment, and that baseline is named; efficiency = speedup / devices. The speedup against
the framework's own single-device point is reported too. Where the efficiency goes (the
step-time breakdown, the communication benchmark, the model beside the measurement) and the
energy per image are efficiency.py's.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..tracking.store import Store
from . import efficiency as explained
from .formatting import finite

NOISY_CV = 0.05


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float | None
    median: float | None
    ci95: float | None  # half-width; None with fewer than 2 values
    cv: float | None

    @property
    def noisy(self) -> bool:
        return self.cv is not None and self.cv > NOISY_CV


def spread(values: list[float]) -> Spread:
    if not values:
        return Spread(0, None, None, None, None)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Spread(1, mean, mean, None, None)
    sd = statistics.stdev(values)
    from scipy import stats  # 1 s to import: only where a spread is computed
    half = float(stats.t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))
    return Spread(len(values), mean, statistics.median(values), half, sd / mean if mean else None)


def speedup(throughput: float | None, baseline: float | None) -> float | None:
    if throughput is None or not baseline:
        return None
    return throughput / baseline


def efficiency(speedup_value: float | None, devices: int) -> float | None:
    return None if speedup_value is None else speedup_value / devices


@dataclass
class Point:
    """One measurement point: all repetitions of one configuration."""

    experiment: str
    framework: str
    model: str
    dataset: str
    nodes: int
    ranks_per_node: int
    per_device_batch: int
    global_batch: int
    scaling: str
    precision: str
    loader: str
    run_ids: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)
    ttas: list[float] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)  # whole run: warm-up and evals too
    best_top1: list[float] = field(default_factory=list)
    completed_run_ids: list[str] = field(default_factory=list)
    throughput: Spread = field(default_factory=lambda: spread([]))
    baseline: Point | None = None
    own_baseline: Point | None = None
    lr_schedule: str | None = None
    summaries: list[dict[str, Any]] = field(default_factory=list)  # completed repetitions'
    comm: dict[str, Any] | None = None     # the communication benchmark of its scale
    energy_why: str | None = None          # why no energy was measured, where none was
    medians: dict[str, float | None] = field(default_factory=dict)  # efficiency.py's cache

    @property
    def devices(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def state(self) -> str:
        distinct = set(self.states)
        if len(distinct) == 1:
            return self.states[0]
        for s in ("RUNNING", "PENDING"):
            if s in distinct:
                return s
        return "PARTIAL"  # some repetitions completed, others failed or were cancelled

    def baseline_key(self) -> tuple:
        batch = self.per_device_batch if self.scaling == "weak" else self.global_batch
        return (self.experiment, self.model, self.dataset, self.precision, self.scaling, batch)

    def label(self) -> str:
        return f"{self.framework} {self.nodes}x{self.ranks_per_node}"

    def as_dict(self) -> dict[str, Any]:
        sp = speedup(self.throughput.mean, self.baseline.throughput.mean if self.baseline else None)
        own = speedup(self.throughput.mean,
                      self.own_baseline.throughput.mean if self.own_baseline else None)
        tta = spread(self.ttas)
        return {
            "run_id": self.run_ids[0], "run_ids": self.run_ids, "experiment": self.experiment,
            "framework": self.framework, "model": self.model, "dataset": self.dataset,
            "nodes": self.nodes, "ranks": self.devices, "ranks_per_node": self.ranks_per_node,
            "per_device_batch": self.per_device_batch, "global_batch": self.global_batch,
            "scaling": self.scaling, "precision": self.precision, "loader": self.loader,
            "state": self.state, "repetitions": len(self.run_ids), "n": self.throughput.n,
            "throughput": self.throughput.mean, "throughput_median": self.throughput.median,
            "throughput_ci95": self.throughput.ci95, "throughput_cv": self.throughput.cv,
            "noisy": self.throughput.noisy,
            "speedup": sp, "efficiency": efficiency(sp, self.devices),
            "baseline_run_id": (self.baseline.completed_run_ids[0] if self.baseline else None),
            "baseline": (self.baseline.label() if self.baseline else None),
            "speedup_own": own, "efficiency_own": efficiency(own, self.devices),
            "time_to_accuracy_s": tta.mean, "time_to_accuracy_ci95": tta.ci95,
            "runtime_s": spread(self.runtimes).mean,
            # "2/3": repetitions that reached the target of those that evaluated
            "reached_target": f"{len(self.ttas)}/{len(self.best_top1)}" if self.best_top1 else None,
            "best_top1": max(self.best_top1) if self.best_top1 else None,
            **explained.fields(self),
        }


_POINT_FIELDS = ("experiment", "framework", "model", "dataset", "nodes", "ranks_per_node",
                 "per_device_batch", "global_batch", "scaling", "precision", "loader")


def points(store: Store, experiment: str | None = None) -> list[Point]:
    # Reruns (`dlscale rerun`) are compared with their original in `reruns`, not pooled
    # into its point: a rerun asks "does it measure the same again?", not "one more sample".
    every = [r for r in store.runs(experiment) if not r.get("rerun_of")]
    # Communication benchmark runs measure a scale, not a point: efficiency.attach's.
    comm = [r for r in every if explained.is_comm(r)]
    runs = [r for r in every if not explained.is_comm(r)]
    summaries = store.last_records("summary", [r["run_id"] for r in runs] if experiment else None)
    by_point: dict[str, Point] = {}
    for r in runs:
        p = by_point.get(r["point_id"])
        if p is None:
            p = by_point[r["point_id"]] = Point(**{k: r[k] for k in _POINT_FIELDS},
                                                lr_schedule=explained.schedule_of(r))
        p.run_ids.append(r["run_id"])
        p.states.append(r["state"])
        s = summaries.get(r["run_id"]) or {}
        throughput = finite(s.get("throughput"))
        if r["state"] == "COMPLETED" and throughput is not None:
            p.completed_run_ids.append(r["run_id"])
            p.throughputs.append(throughput)
            p.summaries.append(s)
            for values, key in ((p.runtimes, "total_wall_s"), (p.ttas, "time_to_accuracy_s"),
                                (p.best_top1, "best_top1")):
                if finite(s.get(key)) is not None:
                    values.append(finite(s.get(key)))
    out = list(by_point.values())
    for p in out:
        p.throughput = spread(p.throughputs)
    singles: dict[tuple, list[Point]] = {}
    for p in out:
        if p.devices == 1 and p.throughput.mean:
            singles.setdefault(p.baseline_key(), []).append(p)
    for p in out:
        candidates = singles.get(p.baseline_key(), [])
        if candidates:
            p.baseline = max(candidates, key=lambda c: c.throughput.mean)
            own = [c for c in candidates if c.framework == p.framework]
            p.own_baseline = max(own, key=lambda c: c.throughput.mean) if own else None
    explained.attach(store, out, comm)
    out.sort(key=lambda p: (p.experiment, p.model, p.dataset, p.framework, p.precision,
                            p.per_device_batch, str(p.lr_schedule), p.devices, p.nodes))
    return out


def results(store: Store, experiment: str | None = None) -> list[dict[str, Any]]:
    return [p.as_dict() for p in points(store, experiment)]


def accuracy_curves(store: Store, experiment: str | None = None) -> dict[str, list]:
    """Top-1 against epoch per lr schedule, when the experiment compares more than one."""
    return explained.accuracy_curves(store, points(store, experiment))


def notes(store: Store, experiment: str | None = None) -> list[str]:
    """What the results leave out and why: metric lines skipped on ingest, by run, file and
    line (a run whose summary was skipped has no throughput in the table)."""
    return store.skipped_notes([r["run_id"] for r in store.runs(experiment)]
                               if experiment else None)


def reruns(store: Store, experiment: str | None = None) -> list[dict[str, Any]]:
    """Each rerun next to the run it repeats: both throughputs and their ratio (rerun /
    original), so a reader sees how well a measurement repeats."""
    runs = store.runs(experiment)
    again = [r for r in runs if r.get("rerun_of")]
    if not again:
        return []
    ids = [r["run_id"] for r in runs] + [r["rerun_of"] for r in again]
    summaries = store.last_records("summary", ids)
    out = []
    for r in again:
        orig = store.run(r["rerun_of"])
        t0 = finite((summaries.get(orig["run_id"]) or {}).get("throughput"))
        t1 = finite((summaries.get(r["run_id"]) or {}).get("throughput"))
        ok = orig["state"] == r["state"] == "COMPLETED" and t0 and t1 is not None
        out.append({
            "run_id": r["run_id"], "rerun_of": orig["run_id"], "experiment": r["experiment"],
            "framework": r["framework"], "model": r["model"], "nodes": r["nodes"],
            "ranks_per_node": r["ranks_per_node"], "ranks": r["devices"],
            "state": r["state"], "original_state": orig["state"],
            "original_throughput": t0 if orig["state"] == "COMPLETED" else None,
            "rerun_throughput": t1 if r["state"] == "COMPLETED" else None,
            "ratio": (t1 / t0) if ok else None,
        })
    return out
