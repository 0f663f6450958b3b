"""How wrong the projection's model is, measured on published scaling it was not tuned on,
and the interval that says so (docs/measuring.md, "Against published scaling").

published_scaling.toml holds published rows: a throughput at a small scale (one device or
one node), the gradient, the links' data-sheet figures, and the throughput published at a
larger scale. From them:

- The model's defaults (scaling_model.Terms: the jitter, the overhead per step, the
  overlap), for a projection that measured none, are the grid point with the least mean
  squared log error, each source weighing the same whatever its number of rows.
- The model error: every row's log(published / projected), each source's rows projected with
  defaults fitted without that source (leave one source out), divided by the row's distance
  (`distance`: how far it reaches in devices, and in per-device batch where strong scaling
  changes it). Its
  2.5th and 97.5th percentiles, conformal style (the (k+1)-corrected order statistics), are
  the interval's bounds per unit of distance: a projection's interval is its value times
  exp(low x d) to exp(high x d), never of zero width (at least FLOOR a unit each side),
  always around the central value, never below zero.
- `check()` is the validation: each source projected with everything calibrated on the
  others only (its defaults and its model error both), so nothing of it tuned what projects
  it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, StrictInt, StrictStr

from ...config.tomlfile import Number, StrictModel, load_toml_model
from . import scaling_model, strategies

DATA = Path(__file__).with_name("published_scaling.toml")
COVERAGE = 0.95
FLOOR = 0.01  # the narrowest half-width, log scale, per unit of distance: never zero width

# The defaults' grid: jitter (coefficient of variation of a rank's step), overhead per
# micro-batch (s), and the share of a micro-batch's compute the allreduce can hide behind.
JITTER = np.round(np.arange(0.0, 0.1001, 0.005), 3)
OVERHEAD_S = np.array([0, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20]) * 1e-3
OVERLAP = np.array([0.0, 0.25, 0.5, 0.75])
GRID = np.array(np.meshgrid(JITTER, OVERHEAD_S, OVERLAP, indexing="ij")).reshape(3, -1)


class Source(StrictModel):
    id: StrictStr
    title: StrictStr
    where: StrictStr


class System(StrictModel):
    id: StrictStr
    devices_per_node: StrictInt = Field(ge=1)
    intra_gbps: Number = Field(gt=0)
    nics_per_node: StrictInt | None = Field(default=None, ge=1)
    nic_gbps: Number | None = Field(default=None, gt=0)
    where: StrictStr


class Gradient(StrictModel):
    id: StrictStr
    parameters: StrictInt = Field(ge=1)
    where: StrictStr
    unit: StrictStr = Field(min_length=1)  # what its throughput counts: images, sequences


class Scale(StrictModel):
    devices: StrictInt = Field(default=1, ge=1)  # the base's, in one node
    nodes: StrictInt = Field(default=1, ge=1)  # the target's
    devices_per_node: StrictInt = Field(default=1, ge=1)
    batch: Number = Field(gt=0)
    accumulation: StrictInt = Field(default=1, ge=1)
    throughput: Number | None = Field(default=None, gt=0)


class Row(StrictModel):
    source: StrictStr
    system: StrictStr
    model: StrictStr
    what: StrictStr
    gradient: Literal["fp32", "fp16", "bf16"]  # the dtype the gradient is reduced in
    # how the step moves it (strategies.py): "fsdp" also all-gathers the parameters, in
    # `gathered` (default: the gradient's dtype), `gathers` times a step
    strategy: Literal["ddp", "fsdp"] = "ddp"
    gathered: Literal["fp32", "fp16", "bf16", "fp8"] | None = None
    gathers: StrictInt = Field(default=2, ge=1, le=2)
    base: Scale
    target: Scale
    published: Number = Field(gt=0)
    note: StrictStr = ""


class Published(StrictModel):
    sources: list[Source]
    systems: list[System]
    models: list[Gradient]
    rows: list[Row]


@functools.cache
def published() -> Published:
    return load_toml_model(DATA, Published)[1]


def gradients() -> dict[str, Gradient]:
    """The named models' parameter counts (`dlscale project --model`)."""
    return {m.id: m for m in published().models}


@dataclass(frozen=True)
class Case:
    """A published row as the model sees it."""

    row: Row
    base: scaling_model.Base
    net: scaling_model.Net
    nodes: int
    per_node: int
    distance: float

    @property
    def devices(self) -> int:
        return self.nodes * self.per_node

    def project(self, terms: scaling_model.Terms) -> Any:
        t = self.row.target
        fixed = scaling_model.fix_base(self.base, terms, self.net)
        got = scaling_model.step(
            fixed, terms, self.net, self.base, self.nodes, self.per_node, t.batch, t.accumulation
        )
        return self.devices * t.batch * t.accumulation / got["step"]


def distance(devices_from: int, devices_to: int, batch_from: float, batch_to: float) -> float:
    """How far a projection reaches: log2(1 + D), D the doublings of devices plus those of
    the per-device batch where it changes (strong scaling); at least 1. (Of the forms tried
    in docs/measuring.md, this one held the published values best: error grows with reach,
    more slowly than the reach.)"""
    reach = abs(math.log2(devices_to / devices_from)) + abs(math.log2(batch_to / batch_from))
    return max(1.0, math.log2(1.0 + reach))


def case(row: Row) -> Case:
    data = published()
    system = next(s for s in data.systems if s.id == row.system)
    params = next(m for m in data.models if m.id == row.model).parameters
    b, t = row.base, row.target
    inter = None
    if system.nics_per_node and system.nic_gbps:
        inter = (0.0, 1.0 / (system.nics_per_node * system.nic_gbps * 1e9))
    traffic = strategies.Traffic(
        row.strategy, row.gradient, row.gathered or row.gradient, row.gathers
    )
    net = scaling_model.Net(
        [round(traffic.step_bytes(params))], (0.0, 1.0 / (system.intra_gbps * 1e9)), inter
    )
    step_s = b.devices * b.batch * b.accumulation / float(b.throughput or 0)
    base = scaling_model.Base(b.devices, b.batch, step_s, b.accumulation)
    n = t.nodes * t.devices_per_node
    return Case(
        row, base, net, t.nodes, t.devices_per_node, distance(b.devices, n, b.batch, t.batch)
    )


@dataclass(frozen=True)
class ModelError:
    """The interval's bounds per unit of distance on a log scale, and how they were had."""

    low: float
    high: float
    scores: int
    sources: int

    def factors(self, d: float) -> tuple[float, float]:
        return math.exp(self.low * d), math.exp(self.high * d)

    def how(self) -> str:
        return (
            f"model error calibrated on {self.scores} published rows from {self.sources} "
            "sources, each source projected with defaults fitted on the others "
            f"(leave one source out): the {100 * (1 - COVERAGE) / 2:g}th to "
            f"{100 * (1 + COVERAGE) / 2:g}th percentile of log(published / projected), "
            f"{self.low:+.3f} to {self.high:+.3f} per unit of reach (docs/measuring.md)"
        )


def conformal(scores: np.ndarray, extra: list[float] | None = None) -> tuple[float, float]:
    """The (k+1)-corrected order statistics at COVERAGE of the scores (and any extra ones),
    widened to at least FLOOR each side of zero."""
    s = np.sort(np.concatenate([scores, np.array(extra or [], dtype=float)]))
    k = len(s)
    tail = (1 - COVERAGE) / 2
    hi = s[min(k - 1, math.ceil((k + 1) * (1 - tail)) - 1)]
    lo = s[max(0, math.floor((k + 1) * tail) - 1)]
    return min(float(lo), -FLOOR), max(float(hi), FLOOR)


@dataclass(frozen=True)
class Calibration:
    """The defaults and the model error, and which sources they were had from."""

    jitter_cv: float
    overhead_s: float
    overlap: float
    error: ModelError
    scores: tuple[float, ...]  # per unit of distance, as the error was taken from
    sources: tuple[str, ...]

    def terms_how(self) -> str:
        return (
            f"fitted on {len(self.scores)} published rows from {len(self.sources)} sources "
            "(docs/measuring.md)"
        )


class Calibrator:
    """The published rows (or any others: a test's synthetic ones) and every row's residual
    at every grid point, computed once."""

    def __init__(self, cases: tuple[Case, ...]) -> None:
        self.cases = cases
        self.sources = np.array([c.row.source for c in cases])
        self.distance = np.array([c.distance for c in cases])
        terms = scaling_model.Terms(GRID[0], GRID[1], GRID[2])
        # log(published / projected) of every row (rows) at every grid point (columns)
        self.residuals = np.array([np.log(c.row.published / c.project(terms)) for c in cases])

    def best(self, keep: np.ndarray) -> int:
        """The grid point with the least mean squared log error over the rows kept, each
        source weighing the same."""
        res, src = self.residuals, self.sources
        losses = [np.mean(res[keep & (src == s)] ** 2, axis=0) for s in np.unique(src[keep])]
        return int(np.argmin(np.mean(losses, axis=0)))

    def calibrate(self, leave_out: str | None = None) -> Calibration:
        """The defaults fitted on every source but `leave_out`; the model error from each
        of those sources projected with defaults fitted on the others (and not
        `leave_out`)."""
        keep = self.sources != leave_out
        best = self.best(keep)
        scores = np.empty(len(self.cases))
        for s in np.unique(self.sources[keep]):
            mine = self.sources == s
            scores[mine] = self.residuals[mine, self.best(keep & ~mine)] / self.distance[mine]
        kept = scores[keep]
        low, high = conformal(kept)
        used = tuple(str(s) for s in np.unique(self.sources[keep]))
        return Calibration(
            float(GRID[0, best]),
            float(GRID[1, best]),
            float(GRID[2, best]),
            ModelError(low, high, len(kept), len(used)),
            tuple(float(x) for x in kept),
            used,
        )

    def check(self) -> list[dict[str, Any]]:
        """Leave one source out: each source's rows projected with the defaults and the
        model error calibrated on the other sources alone; the projection, its interval,
        the published value, the error and whether the interval holds it."""
        out = []
        for source in dict.fromkeys(self.sources):
            cal = self.calibrate(leave_out=str(source))
            terms = scaling_model.Terms(cal.jitter_cv, cal.overhead_s, cal.overlap)
            for c in self.cases:
                if c.row.source != source:
                    continue
                x = float(c.project(terms))
                lo, hi = cal.error.factors(c.distance)
                r = c.row
                out.append(
                    {
                        "source": str(source),
                        "what": r.what,
                        "model": r.model,
                        "from_devices": r.base.devices,
                        "to_devices": c.devices,
                        "nodes": c.nodes,
                        "batch_from": r.base.batch,
                        "batch_to": r.target.batch,
                        "base": r.base.throughput,
                        "projected": x,
                        "low": x * lo,
                        "high": x * hi,
                        "published": r.published,
                        "error": x / r.published - 1,
                        "inside": x * lo <= r.published <= x * hi,
                        "defaults": {
                            "jitter_cv": cal.jitter_cv,
                            "overhead_s": cal.overhead_s,
                            "overlap": cal.overlap,
                        },
                    }
                )
        return out


@functools.cache
def published_rows() -> Calibrator:
    return Calibrator(tuple(case(r) for r in published().rows))


@functools.cache
def calibrated() -> Calibration:
    """Every published source: what a projection uses."""
    return published_rows().calibrate()


def check() -> list[dict[str, Any]]:
    """Leave one source out over the published rows (benchmarks/projection_check.py)."""
    return published_rows().check()
