"""A measurement point (all repetitions of one configuration on one kind of device) and the
arithmetic of its numbers: the spread of its throughput, speedup and efficiency."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..runs import CONFIGURATION, RunRow, State, per_second, scale_label
from .stats import Spread, spread


def speedup(throughput: float | None, baseline: float | None) -> float | None:
    if throughput is None or not baseline:
        return None
    return throughput / baseline


def efficiency(speedup_value: float | None, devices: int) -> float | None:
    return None if speedup_value is None else speedup_value / devices


@dataclass
class Point:
    """One measurement point: all repetitions of one configuration. Its first fields are
    runs.Configuration's, in order (checked below): a frozen dataclass cannot be the base
    of this one, which analysis fills in as it goes."""

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
    device: str | None = None  # "cpu", or the GPU's model: a CPU point never meets a GPU baseline
    site: str | None = None  # where it was measured, for a point imported from a bundle
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
    comm: dict[str, Any] | None = None  # the communication benchmark of its scale
    energy_why: str | None = None  # why no energy was measured, where none was
    medians: dict[str, float | None] = field(default_factory=dict)  # efficiency.py's cache
    # What the throughput counts (images for the built-in trainers; a declared framework's
    # unit), and a declared framework's own axes' values: a point of its own per value.
    unit: str = "images"
    axes: dict[str, Any] = field(default_factory=dict)
    # Other work on the machine (results/disturbed.py): completed runs judged disturbed, with
    # what disturbed them; how many completed runs could be judged; what the experiment does
    # with disturbed runs (flag: counted and marked; leave-out: not counted); the CV of the
    # counted runs judged quiet, where some counted were disturbed
    disturbed: dict[str, list[str]] = field(default_factory=dict)
    judged: int = 0
    disturbed_action: str = "flag"
    quiet_cv: float | None = None
    # disturbed = "rerun": each disturbed run a rerun stands in for, and that rerun
    rerun_for: dict[str, str] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def state(self) -> str:
        distinct = set(self.states)
        if len(distinct) == 1:
            return self.states[0]
        for s in (State.RUNNING, State.PENDING):
            if s in distinct:
                return s
        return State.PARTIAL  # some repetitions completed, others failed or were cancelled

    def baseline_key(self) -> tuple:
        batch = self.per_device_batch if self.scaling == "weak" else self.global_batch
        return (
            self.experiment,
            self.model,
            self.dataset,
            self.precision,
            self.scaling,
            batch,
            self.device,
            self.unit,
            tuple(sorted(self.axes.items())),
        )

    @property
    def test_slowdown(self) -> float | None:
        """The largest test-only slowdown (DLSCALE_TEST_SLOWDOWN) any of its completed runs
        was made with, from their summaries; None when none was: such numbers are marked
        wherever they are shown."""
        asked = [s.get("test_slowdown") for s in self.summaries]
        slowed = [v for v in asked if isinstance(v, (int, float)) and v > 0]
        return max(slowed) if slowed else None

    def label(self) -> str:
        axes = "".join(f" {k}={v}" for k, v in self.axes.items())
        return f"{self.framework} {scale_label(self.nodes, self.ranks_per_node)}{axes}"

    def as_dict(self) -> dict[str, Any]:
        sp = speedup(self.throughput.mean, self.baseline.throughput.mean if self.baseline else None)
        own = speedup(
            self.throughput.mean, self.own_baseline.throughput.mean if self.own_baseline else None
        )
        tta = spread(self.ttas)
        return {
            "run_id": self.run_ids[0],
            "run_ids": self.run_ids,
            "experiment": self.experiment,
            "framework": self.framework,
            "model": self.model,
            "dataset": self.dataset,
            "nodes": self.nodes,
            "ranks": self.devices,
            "ranks_per_node": self.ranks_per_node,
            "per_device_batch": self.per_device_batch,
            "global_batch": self.global_batch,
            "scaling": self.scaling,
            "precision": self.precision,
            "loader": self.loader,
            "device": self.device,
            "site": self.site,
            "state": self.state,
            "repetitions": len(self.run_ids),
            "n": self.throughput.n,
            "throughput": self.throughput.mean,
            "throughput_median": self.throughput.median,
            "throughput_ci95": self.throughput.ci95,
            "throughput_cv": self.throughput.cv,
            "noisy": self.throughput.noisy,
            "speedup": sp,
            "efficiency": efficiency(sp, self.devices),
            "baseline_run_id": (self.baseline.completed_run_ids[0] if self.baseline else None),
            "baseline": (self.baseline.label() if self.baseline else None),
            "speedup_own": own,
            "efficiency_own": efficiency(own, self.devices),
            "time_to_accuracy_s": tta.mean,
            "time_to_accuracy_ci95": tta.ci95,
            "runtime_s": spread(self.runtimes).mean,
            # "2/3": repetitions that reached the target of those that evaluated
            "reached_target": f"{len(self.ttas)}/{len(self.best_top1)}" if self.best_top1 else None,
            "best_top1": max(self.best_top1) if self.best_top1 else None,
            # throughput is this many a second: "tokens/s" is not "images/s"
            "unit": self.unit,
            "axes": self.axes,
            "test_slowdown": self.test_slowdown,
            "disturbed": self.disturbed,
            "disturbed_judged": self.judged,
            "disturbed_action": self.disturbed_action,
            "throughput_cv_quiet": self.quiet_cv,
            "disturbed_rerun": self.rerun_for,
        }


POINT_FIELDS = CONFIGURATION
if tuple(f.name for f in fields(Point))[: len(CONFIGURATION)] != CONFIGURATION:
    raise TypeError("Point's first fields must be runs.Configuration's, in order")


def throughput_unit(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the rows' throughput counts a second, for a column or an axis: "tokens/s" where
    they all count tokens, "units/s" where they differ."""
    return per_second(r.get("unit") for r in rows)


def unit_and_axes(row: RunRow) -> tuple[str, dict[str, Any]]:
    """A run's unit and user axes, from its stored recipe: a declared framework's
    (engine/config/custom.py), else images and none."""
    try:
        training = json.loads(row.get("training") or "{}")
    except ValueError:
        return "images", {}
    custom = training.get("custom") if isinstance(training, dict) else None
    if not isinstance(custom, dict):
        return "images", {}
    axes = training.get("axes")
    return str(custom.get("unit", "samples")), axes if isinstance(axes, dict) else {}


def device_kind(env: dict[str, Any] | None) -> str | None:
    """What a run trained on, from its env record: "cpu", or the GPU's model (rank 0's: a
    job gets one kind of GPU); None before the record arrives. `env` is the whole record,
    or the fields analysis picks of it (`device`: rank 0's)."""
    env = env or {}
    first = env.get("device")
    if first is None:
        devices = env.get("devices") or []
        first = devices[0] if devices else None
    if not isinstance(first, str):
        return None
    return "cpu" if first.startswith("cpu") else first
