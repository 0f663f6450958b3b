"""The alpha-beta model of allreduce, per tier (ranks within one node, ranks across nodes),
fitted from the communication benchmark's message-size sweeps or taken from the link
figures a profile states (`[interconnect]`).

One allreduce of S bytes over n ranks takes

    t(S, n) = alpha x L(n) + 2 (n - 1) / n x S / B

B is the bus bandwidth as nccl-tests define it (busbw = algbw x 2(n-1)/n; across nodes it is
bounded by a node's injection bandwidth, within one by its device links), so the bandwidth
term is the ring's. L(n) = 2 ceil(log2 n) is the number of latency steps of a tree (or
recursive halving and doubling), the algorithm NCCL and MPI pick for latency-bound messages
at scale; a ring's 2(n-1) would make a 1,024-node projection all latency. A step's gradient
travels in buckets, each paying its latency: k buckets of S bytes in all take k x alpha x L(n)
+ 2(n-1)/n x S / B.

Across nodes the allreduce is hierarchical (scaling_model.py): within each node over its
device links, then across the N nodes over their NICs. So the inter-node tier's fit is of
t(S, N) over the node count, after the intra-node tier's time (its own fit) is taken off each
sample that had more than one rank a node.

The fit is weighted linear least squares in (alpha, 1/B) with relative weights (the times
span orders of magnitude and their noise is roughly proportional to them); the parameters'
covariance is the residual variance x (X'WX)^-1, what numpy.polyfit(cov=True) gives for a
line. Fewer than three sizes, or a fitted alpha below zero, fall back to the bandwidth alone
(alpha = 0), which is said in the link's `note`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...runs import State
from ...tracking.store import Store
from ..explained import is_comm

INTRA = "intra-node"
INTER = "inter-node"
TIERS = (INTRA, INTER)
MEASURED = "measured"
STATED = "stated, not measured"


def tier_of(nodes: int) -> str:
    return INTRA if nodes == 1 else INTER


def latency_steps(n: int) -> float:
    return 2.0 * math.ceil(math.log2(n)) if n > 1 else 0.0


def bus_factor(n: int) -> float:
    """nccl-tests' 2(n-1)/n: the share of the data each rank sends (and receives)."""
    return 2.0 * (n - 1) / n


@dataclass(frozen=True)
class Sample:
    """One size of one sweep: S bytes allreduced over n ranks in t seconds."""

    run_id: str
    framework: str
    nodes: int
    ranks: int
    nbytes: int
    time_s: float


@dataclass(frozen=True)
class Link:
    """A tier's fitted (or stated) latency and bandwidth, with the covariance of
    (alpha in s, 1/B in s per byte) and where they come from."""

    tier: str
    latency_s: float
    bandwidth_gbps: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    source: str  # MEASURED or STATED
    inputs: tuple[str, ...]  # run ids, or the profile's file and table
    points: int = 0
    note: str = ""
    residual_rel: float | None = None  # the fit's relative residual (root mean square)

    @property
    def inv_bandwidth(self) -> float:
        return 1.0 / (self.bandwidth_gbps * 1e9)

    def latency_se(self) -> float:
        return math.sqrt(max(self.cov[0][0], 0.0))

    def bandwidth_interval(self) -> tuple[float, float]:
        """B's 95% interval (from 1/B's standard error, which is what the fit estimates)."""
        se = math.sqrt(max(self.cov[1][1], 0.0))
        hi_inv, lo_inv = self.inv_bandwidth + 1.96 * se, max(self.inv_bandwidth - 1.96 * se, 0)
        return 1.0 / hi_inv / 1e9, (1.0 / lo_inv / 1e9 if lo_inv > 0 else math.inf)

    def time_s(self, buckets: list[int], n: int) -> float:
        return allreduce_time(self.latency_s, self.inv_bandwidth, buckets, n)

    def sample(self, rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        """k draws of (alpha, 1/B) from the fit's normal approximation, kept physical
        (alpha >= 0, 1/B > 0)."""
        mean = np.array([self.latency_s, self.inv_bandwidth])
        draws = normal_draws(mean, np.array(self.cov, dtype=float), rng, k)
        return np.maximum(draws[:, 0], 0.0), np.maximum(draws[:, 1], mean[1] * 1e-3)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.bandwidth_interval()
        return {
            "tier": self.tier,
            "source": self.source,
            "latency_us": self.latency_s * 1e6,
            "latency_ci95_us": 1.96 * self.latency_se() * 1e6,
            "bandwidth_gbps": self.bandwidth_gbps,
            "bandwidth_ci95_gbps": [lo, hi if math.isfinite(hi) else None],
            "points": self.points,
            "residual_rel": self.residual_rel,
            "inputs": list(self.inputs),
            "note": self.note,
        }


def normal_draws(mean: np.ndarray, cov: np.ndarray, rng: np.random.Generator, k: int) -> np.ndarray:
    """k draws from N(mean, cov) for any positive semi-definite cov, singular ones included:
    a bandwidth fitted alone has no latency spread, and alpha and 1/B can be perfectly
    correlated. A Cholesky factor exists for neither, so this factors the correlation
    matrix by eigenvalues, counting rounding's negative ones as zero; working on the
    correlations keeps it exact although alpha's and 1/B's variances differ by ~12 orders."""
    cov = (cov + cov.T) / 2
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    draws = np.tile(mean, (k, 1)).astype(float)
    live = sd > 0
    if not live.any():
        return draws
    s = sd[live]
    corr = cov[np.ix_(live, live)] / np.outer(s, s)
    vals, vecs = np.linalg.eigh(corr)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    draws[:, live] += (rng.standard_normal((k, len(s))) @ root.T) * s
    return draws


def allreduce_time(alpha: Any, inv_bw: Any, buckets: list[int], n: int) -> Any:
    """The model's time for one step's buckets over n ranks (numbers or numpy arrays)."""
    if n <= 1:
        return 0.0 * alpha
    return len(buckets) * alpha * latency_steps(n) + bus_factor(n) * sum(buckets) * inv_bw


def fit(samples: list[Sample], tier: str, intra: Link | None = None) -> Link | None:
    """The tier's link fitted from its sweep samples; None with no usable sample. Across
    nodes, `intra` (the device links' fit) takes the node's own part off each sample."""
    # the ring's size: all ranks within a node; the nodes across them
    size = (lambda s: s.ranks) if tier == INTRA else (lambda s: s.nodes)
    inside = (
        (lambda s: intra.time_s([s.nbytes], s.ranks // s.nodes))
        if tier == INTER and intra is not None
        else (lambda s: 0.0)
    )
    use = [s for s in samples if size(s) > 1 and s.nbytes > 0 and s.time_s - inside(s) > 0]
    if not use:
        return None
    inputs = tuple(dict.fromkeys(s.run_id for s in use))
    t = np.array([s.time_s - inside(s) for s in use])
    x = np.column_stack(
        [[latency_steps(size(s)) for s in use], [bus_factor(size(s)) * s.nbytes for s in use]]
    )
    w = 1.0 / t  # relative errors
    note = ""
    sizes = len({(s.nbytes, size(s)) for s in use})
    params = None
    if sizes >= 3:
        params, cov, resid = _weighted_lstsq(x, t, w)
        if params[0] < 0 or params[1] <= 0:
            params = None
            note = "the fitted latency was below zero: bandwidth fitted alone (latency 0)"
    else:
        note = f"{sizes} size(s) measured, too few for a latency: bandwidth fitted alone"
    if params is None:
        p1, c1, resid = _weighted_lstsq(x[:, 1:], t, w)
        if p1[0] <= 0:
            return None
        params = np.array([0.0, p1[0]])
        cov = np.array([[0.0, 0.0], [0.0, c1[0, 0]]])
    return Link(
        tier,
        float(params[0]),
        1.0 / float(params[1]) / 1e9,
        ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        MEASURED,
        inputs,
        len(use),
        note,
        resid,
    )


def _weighted_lstsq(
    x: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Weighted least squares: parameters, their covariance (residual variance x
    (X'WX)^-1; zero without spare degrees of freedom) and the relative residual."""
    xw, yw = x * w[:, None], y * w
    params, *_ = np.linalg.lstsq(xw, yw, rcond=None)
    resid = yw - xw @ params
    dof = len(y) - x.shape[1]
    s2 = float(resid @ resid) / dof if dof > 0 else 0.0
    cov = s2 * np.linalg.pinv(xw.T @ xw)
    rms = math.sqrt(float(resid @ resid) / len(y)) if len(y) else None
    return params, cov, rms


def stated(interconnect: Any, where: str) -> dict[str, Link]:
    """The links a profile's `[interconnect]` states (no uncertainty: a data sheet gives
    none, which the projection's interval then does not include)."""
    if interconnect is None:
        return {}
    latency = (interconnect.latency_us or 0.0) * 1e-6
    out = {}
    for tier, gbps, key in (
        (INTRA, interconnect.intra_node_gbps, "intra_node_gbps"),
        (INTER, interconnect.injection_gbps, "injection_gbps"),
    ):
        if gbps:
            inputs = [f"{where} [interconnect] {key}"]
            if interconnect.latency_us is not None:
                inputs.append(f"{where} [interconnect] latency_us")
            out[tier] = Link(
                tier, latency, float(gbps), ((0.0, 0.0), (0.0, 0.0)), STATED, tuple(inputs)
            )
    return out


@dataclass
class CommData:
    """What an experiment's communication benchmark runs measured: every sweep sample, and
    one step's gradient buckets per (framework, model, precision)."""

    samples: list[Sample] = field(default_factory=list)
    buckets: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # sweep entries that were not numbers

    def links(
        self, framework: str, exclude: frozenset[tuple[int, int]] = frozenset()
    ) -> dict[str, Link]:
        """The framework's fitted links per tier, leaving out the scales in `exclude`
        (nodes, ranks)."""
        out: dict[str, Link] = {}
        for tier in TIERS:  # the device links first: the nodes' fit takes them off
            got = fit(
                [
                    s
                    for s in self.samples
                    if s.framework == framework
                    and tier_of(s.nodes) == tier
                    and (s.nodes, s.ranks) not in exclude
                ],
                tier,
                out.get(INTRA),
            )
            if got is not None:
                out[tier] = got
        return out


def measurements(store: Store, experiment: str | None) -> CommData:
    runs = [
        r
        for r in store.runs(experiment)
        if is_comm(r) and r["state"] == State.COMPLETED and not r.get("rerun_of")
    ]
    records = store.records.last("comm", [r["run_id"] for r in runs]) if runs else {}
    data = CommData()
    for r in sorted(runs, key=lambda r: r["created"] or 0):
        rec = records.get(r["run_id"])
        if rec is None:
            continue
        if rec.get("buckets"):
            data.buckets[(r["framework"], r["model"], r["precision"])] = list(rec["buckets"])
        for i, e in enumerate(rec.get("sweep") or []):
            try:
                nbytes, t = int(e["bytes"]), float(e["time_s"])
            except (TypeError, ValueError, KeyError):
                data.skipped.append(f"run {r['run_id']}: comm.sweep[{i}] is not a size and time")
                continue
            if not (nbytes > 0 and 0 < t < math.inf):
                data.skipped.append(f"run {r['run_id']}: comm.sweep[{i}] is not a size and time")
                continue
            data.samples.append(
                Sample(r["run_id"], r["framework"], r["nodes"], r["devices"], nbytes, t)
            )
    return data
