"""One projected scale: from a setup (a base step, the links, the gradient, the model's
terms, each with where it came from) to its step time, throughput, speedup and efficiency
with 95% intervals, the terms of its step and which of them dominates.

The interval has two parts (docs/measuring.md):
- the inputs' spread: a Monte Carlo over the base's and the baseline's mean throughput
  (Student-t over their repetitions) and each fitted link's (alpha, 1/B) (normal with the
  fit's covariance); SAMPLES draws, SEED fixed, so the same inputs project the same numbers;
- the model's own error, calibrated on published scaling (calibration.py): the inputs'
  2.5th and 97.5th percentiles times exp(low x d) and exp(high x d), d how far the
  projection reaches. Log scale: never below zero, never of zero width, always around the
  central value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...runs import scale_label
from ..points import Point
from ..rows import Interval, ProjectionRow
from . import calibration, commfit, scaling_model
from .commfit import INTER, INTRA, Link

SAMPLES = 4000
SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A value and its 95% interval."""

    value: float
    low: float
    high: float

    def as_dict(self) -> Interval:
        """As JSON holds it: an interval with no upper bound has `ci95_high` None."""
        high = self.high if math.isfinite(self.high) else None
        return {"value": self.value, "ci95_low": self.low, "ci95_high": high}

    def holds(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class Mean:
    """A mean throughput, its standard error and repetitions (measured or stated)."""

    value: float
    se: float
    n: int
    label: str = ""

    @classmethod
    def of(cls, p: Point) -> Mean:
        s = p.throughput
        se = s.standard_error
        return cls(float(s.mean or 0.0), se, s.n, p.label())

    def draws(self, rng: np.random.Generator, k: int) -> np.ndarray:
        if self.se <= 0 or self.n < 2:
            return np.full(k, self.value)
        return np.maximum(self.value + self.se * rng.standard_t(self.n - 1, size=k), 1e-12)


@dataclass
class Setup:
    """What a family's projections start from. `throughput` is the base's, over its
    `devices` devices of one node; `terms` the model's parameters with their sources;
    `inputs` says where every figure came from, in words."""

    devices: int
    per_device_batch: float
    throughput: Mean
    links: dict[str, Link]
    buckets: list[int]
    terms: scaling_model.Terms
    calibrated: calibration.Calibration
    baseline: Mean | None = None  # one device's throughput: speedup and efficiency
    accumulation: int = 1
    exposed_comm_s: float | None = None
    comm_s: float | None = None  # the base's benchmarked allreduce
    scaling: str = "weak"
    global_batch: float | None = None  # strong scaling's, fixed
    weak_batch: float | None = None  # weak scaling's per-device batch, if not the base's
    inputs: list[str] = field(default_factory=list)
    extra_scores: list[float] = field(default_factory=list)  # this study's held-out check

    def batch_at(self, devices: int) -> float:
        if self.scaling == "strong":
            return float(self.global_batch or self.devices * self.per_device_batch) / devices
        return self.weak_batch or self.per_device_batch

    def step_s(self, throughput: Any) -> Any:
        return self.devices * self.per_device_batch * self.accumulation / throughput

    def error_factors(self, devices: int) -> tuple[float, float]:
        """The model error's factors at this reach: the published calibration's, with this
        study's own held-out check among its scores where it has one."""
        d = calibration.distance(
            self.devices, devices, self.per_device_batch, self.batch_at(devices)
        )
        lo, hi = calibration.conformal(np.array(self.calibrated.scores), self.extra_scores)
        return float(np.exp(lo * d)), float(np.exp(hi * d))


def _link_params(lk: Link | None, rng: np.random.Generator | None, k: int) -> Any:
    if lk is None:
        return None
    if rng is None:
        return (lk.latency_s, lk.inv_bandwidth)
    return lk.sample(rng, k)


def why_not(setup: Setup, nodes: int, per_node: int) -> str | None:
    """Why this scale cannot be projected, or None."""
    n = nodes * per_node
    if setup.batch_at(n) < 1:
        return (
            f"fewer than one sample per device at {n} devices (global batch {setup.global_batch:g})"
        )
    # the device links: crossed at this scale, or the base's own allreduce to model
    need = [INTRA] if per_node > 1 or (setup.devices > 1 and setup.comm_s is None) else []
    need += [INTER] if nodes > 1 else []
    for tier in need:
        if tier not in setup.links:
            return (
                f"no {tier} link: the comm benchmark did not measure it and none was stated "
                "(a profile's [interconnect], or --intra-gbps / --inter-gbps)"
            )
    return None


def project(
    setup: Setup, nodes: int, per_node: int, samples: int = SAMPLES, seed: int = SEED
) -> dict[str, Any]:
    """One scale's step time, throughput, speedup and efficiency (Estimates), the terms of
    its step (central values, seconds) and the notes the base needed; or {"why": ...}."""
    why = why_not(setup, nodes, per_node)
    if why:
        return {"why": why}
    n = nodes * per_node
    b_n = setup.batch_at(n)
    k = setup.accumulation
    rng = np.random.default_rng(seed)

    def run(x: Any, intra: Any, inter: Any) -> tuple[dict[str, Any], list[str]]:
        net = scaling_model.Net(setup.buckets, intra, inter)
        base = scaling_model.Base(
            setup.devices,
            setup.per_device_batch,
            setup.step_s(x),
            k,
            setup.exposed_comm_s,
            setup.comm_s,
        )
        fixed = scaling_model.fix_base(base, setup.terms, net)
        stepped = scaling_model.step(fixed, setup.terms, net, base, nodes, per_node, b_n, k)
        return stepped, fixed.notes

    central, notes = run(
        setup.throughput.value,
        _link_params(setup.links.get(INTRA), None, 0),
        _link_params(setup.links.get(INTER), None, 0),
    )
    drawn, _ = run(
        setup.throughput.draws(rng, samples),
        _link_params(setup.links.get(INTRA), rng, samples),
        _link_params(setup.links.get(INTER), rng, samples),
    )
    samples_per_step = n * b_n * k
    t_c = float(central["step"])
    t_d = np.broadcast_to(drawn["step"], (samples,))
    lo_f, hi_f = setup.error_factors(n)

    def est(value: float, draws: np.ndarray) -> Estimate:
        lo, hi = np.percentile(draws, [2.5, 97.5])
        return Estimate(value, min(float(lo), value) * lo_f, max(float(hi), value) * hi_f)

    x_c = samples_per_step / t_c
    x_d = samples_per_step / t_d
    inverse = est(1 / t_c, 1 / t_d)  # the step time's interval from its inverse's
    out: dict[str, Any] = {
        "step_time_s": Estimate(t_c, 1 / inverse.high, 1 / inverse.low),
        "throughput": est(x_c, x_d),
        "global_batch": n * b_n,
        "per_device_batch": b_n,
        "terms": {t: float(central[t]) for t in scaling_model.TERMS},
        "dominant": scaling_model.dominant(central),
        "notes": notes,
        "links_used": {
            tier: setup.links[tier].source
            for tier, used in ((INTRA, per_node > 1), (INTER, nodes > 1))
            if used and tier in setup.links
        },
    }
    if setup.baseline is not None and setup.baseline.value > 0:
        b_draws = setup.baseline.draws(rng, samples)
        out["speedup"] = est(x_c / setup.baseline.value, x_d / b_draws)
        out["efficiency"] = est(x_c / setup.baseline.value / n, x_d / b_draws / n)
    return out


def links_said(used: dict[str, str]) -> str:
    """The link column: which tiers a projected row crossed and whether each was a fit of
    the comm benchmark's sweeps or stated; "measured fit" only where it was."""
    if not used:
        return "-"
    words = {commfit.MEASURED: "measured fit", commfit.STATED: "stated, not measured"}
    if len(set(used.values())) == 1:
        return words[next(iter(used.values()))]
    return "; ".join(f"{t}: {words[s]}" for t, s in used.items())


def terms_said(row: ProjectionRow) -> str:
    """Where a projected row's step goes, in words, naming the term that dominates."""
    terms = row["terms_s"]
    step = sum(terms.values())
    name, share = row["dominant"]["term"], row["dominant"]["share"]
    parts = [f"{t} {1e3 * v:.3g} ms" for t, v in terms.items() if abs(v) >= 1e-4 * step]
    return (
        f"at {scale_label(row['nodes'], row['ranks_per_node'])} (projected): "
        f"step {1e3 * step:.3g} ms = "
        + " + ".join(parts)
        + f"; dominant beyond compute: {name}, {100 * share:.1f}% of the step"
        + (f" (the slowest of {row['ranks']} ranks)" if name == scaling_model.WAIT else "")
    )
