"""Past the measured scales: each point family's step time, throughput, speedup and
efficiency projected to scales it did not run, with an interval and the names of its
inputs, and the held-out check wherever three or more scales were measured.

A family is every point of one framework, model, dataset, precision, batch (per device for
weak scaling, global for strong), loader, device and lr schedule. Its projection starts
from the largest measured single-node point, which carries what a node loses by itself
(shared CPU and memory, loader, PCIe), and adds the allreduce of one step's gradient at
N nodes from the fitted (or stated) link of its tier (commfit.py):

    local  = T_g - e                   T_g: the base's step, e: its exposed communication
    hidden = max(C_g - e, 0)           C_g: the base's allreduce (benchmark, else the model)
    T_n    = local x b_n / b_g + max(C_n - hidden, 0)

C_n is the slower of the two tiers' times at n ranks where a node holds more than one (the
ring crosses the device links too). So the allreduce is hidden behind compute as much as
the breakdown measured at the base, no more (without a breakdown none is assumed hidden:
e = C_g). b is the per-device batch: the same at every scale for weak scaling, global / n
for strong. Throughput = global batch / T_n,
speedup against the family's 1-device baseline, efficiency = speedup / n.

The interval is the 2.5th to 97.5th percentile of a Monte Carlo over the inputs' spread: the
base's and the baseline's mean throughput (Student-t over their repetitions) and each fitted
link's (alpha, 1/B) (normal with the fit's covariance); SAMPLES draws, SEED fixed, so the
same store projects the same numbers. Stated links have no spread: the interval then covers
the measurement only, which the rows say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import RunPaths
from ..runs import RunRow
from ..tracking.store import Store
from . import analysis, commfit
from . import efficiency as explained
from .commfit import INTRA, CommData, Link
from .points import Point, t_quantile_975

SAMPLES = 4000
SEED = 0
MEASURED = "measured"
PROJECTED = "projected"


@dataclass(frozen=True)
class Estimate:
    """A value and its 95% interval."""

    value: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "ci95_low": self.low, "ci95_high": self.high}

    def holds(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class Mean:
    """A measured mean throughput, its standard error and repetitions."""

    value: float
    se: float
    n: int
    label: str = ""

    @classmethod
    def of(cls, p: Point) -> Mean:
        s = p.throughput
        se = s.ci95 / t_quantile_975(s.n - 1) if s.ci95 and s.n > 1 else 0.0
        return cls(float(s.mean or 0.0), se, s.n, p.label())

    def draws(self, rng: np.random.Generator, k: int) -> np.ndarray:
        if self.se <= 0 or self.n < 2:
            return np.full(k, self.value)
        return np.maximum(self.value + self.se * rng.standard_t(self.n - 1, size=k), 1e-12)


@dataclass
class Base:
    """What the model takes of the largest measured single-node point."""

    ranks_per_node: int
    per_device_batch: int
    throughput: Mean
    exposed_comm_s: float | None  # the breakdown's median; None: no breakdown
    comm_time_s: float | None  # its benchmark's allreduce; None: modelled from the link
    run_ids: list[str] = field(default_factory=list)

    @property
    def global_batch(self) -> int:
        return self.ranks_per_node * self.per_device_batch


def project(
    base: Base,
    baseline: Mean | None,
    links: dict[str, Link],
    buckets: list[int],
    nodes: int,
    ranks_per_node: int,
    scaling: str = "weak",
    samples: int = SAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """One scale's projected step time, throughput, speedup and efficiency (Estimates),
    or {"why": ...} where it cannot be projected."""
    n = nodes * ranks_per_node
    tier = commfit.tier_of(nodes)
    link = links.get(tier)
    if link is None and n > 1:
        return {
            "why": f"no {tier} link: the comm benchmark did not measure it and the "
            "profile states no [interconnect] figure for it"
        }
    g = base.ranks_per_node
    base_link = links.get(INTRA)
    if g > 1 and base.comm_time_s is None and base_link is None:
        return {
            "why": "the base point's allreduce is neither benchmarked nor modelled "
            "(no intra-node link)"
        }
    rng = np.random.default_rng(seed)

    def step(x_g: Any, alpha: Any, inv: Any, a_g: Any, inv_g: Any) -> Any:
        t_g = base.global_batch / x_g
        c_g = (
            0.0
            if g == 1
            else base.comm_time_s
            if base.comm_time_s is not None
            else commfit.allreduce_time(a_g, inv_g, buckets, g)
        )
        e = c_g if base.exposed_comm_s is None else base.exposed_comm_s
        local = np.maximum(t_g - e, 0.0)
        hidden = np.maximum(c_g - e, 0.0)
        c_n = commfit.allreduce_time(alpha, inv, buckets, n) if n > 1 else 0.0
        if nodes > 1 and ranks_per_node > 1 and base_link is not None:
            # the ring also crosses each node's device links: the slower tier bounds it
            c_n = np.maximum(c_n, commfit.allreduce_time(a_g, inv_g, buckets, n))
        scale = 1.0 if scaling == "weak" else base.global_batch / n / base.per_device_batch
        return local * scale + np.maximum(c_n - hidden, 0.0)

    def params(lk: Link | None, k: int | None) -> tuple[Any, Any]:
        if lk is None:
            return 0.0, 0.0
        if k is None:
            return lk.latency_s, lk.inv_bandwidth
        return lk.sample(rng, k)

    global_batch = n * base.per_device_batch if scaling == "weak" else base.global_batch
    central = float(step(base.throughput.value, *params(link, None), *params(base_link, None)))
    x_draws = base.throughput.draws(rng, samples)
    alpha, inv = params(link, samples)
    a_g, inv_g = (alpha, inv) if base_link is link else params(base_link, samples)
    t_draws = step(x_draws, alpha, inv, a_g, inv_g)
    b_draws = baseline.draws(rng, samples) if baseline else None

    def est(central_value: float, draws: np.ndarray) -> Estimate:
        lo, hi = np.percentile(draws, [2.5, 97.5])
        return Estimate(central_value, float(lo), float(hi))

    out: dict[str, Any] = {
        "step_time_s": est(central, np.broadcast_to(t_draws, (samples,))),
        "throughput": est(global_batch / central, global_batch / t_draws),
        "global_batch": global_batch,
        "tier": tier if n > 1 else None,
        "link_source": link.source if link is not None and n > 1 else None,
    }
    if baseline is not None and baseline.value > 0:
        sp = global_batch / t_draws / b_draws
        out["speedup"] = est(global_batch / central / baseline.value, sp)
        out["efficiency"] = est(global_batch / central / baseline.value / n, sp / n)
    return out


# --- families from the store -------------------------------------------------------------


def family_key(p: Point) -> tuple:
    # what its speedup is measured against, and what else makes a family
    return (*p.baseline_key(), p.framework, p.loader, p.lr_schedule)


def family_name(p: Point) -> str:
    batch = f"b{p.per_device_batch}" if p.scaling == "weak" else f"global b{p.global_batch}"
    return " ".join(
        w
        for w in [p.framework, p.model, p.precision, batch, p.loader, p.device or "", p.scaling]
        + [f"{k}={v}" for k, v in p.axes.items()]  # a declared framework's axes
        if w
    )


def targets(base_rpn: int, to: int) -> list[tuple[int, int]]:
    """Node counts 1, 2, 4, ... up to `to`, and `to` itself."""
    nodes = {1, to}
    k = 2
    while k < to:
        nodes.add(k)
        k *= 2
    return [(n, base_rpn) for n in sorted(nodes)]


def _base(p: Point) -> Base:
    f = explained.fields(p)
    return Base(
        p.ranks_per_node,
        p.per_device_batch,
        Mean.of(p),
        f["exposed_comm_s"],
        f["comm_time_s"] if p.devices > 1 else 0.0,
        list(p.completed_run_ids),
    )


def _inputs(base_p: Point, base: Base, baseline: Point | None, links: dict, tier: str | None):
    out = [f"base: {base_p.label()} measured (runs {', '.join(base.run_ids)})"]
    if baseline is not None:
        out.append(
            f"baseline: {baseline.label()} measured (runs {', '.join(baseline.completed_run_ids)})"
        )
    if tier is not None and tier in links:
        lk = links[tier]
        out.append(f"{tier} link: {lk.source} ({', '.join(lk.inputs)})")
    out.append(
        "overlap: the base's breakdown (exposed_comm_s)"
        if base.exposed_comm_s is not None
        else "overlap: none assumed (the base has no step-time breakdown)"
    )
    return out


def _measured_row(p: Point, baseline: Point | None) -> dict[str, Any]:
    s = p.throughput
    mean, half = float(s.mean or 0.0), float(s.ci95 or 0.0)
    x = Estimate(mean, mean - half, mean + half)
    row: dict[str, Any] = {
        "kind": MEASURED,
        "nodes": p.nodes,
        "ranks_per_node": p.ranks_per_node,
        "ranks": p.devices,
        "global_batch": p.global_batch,
        "throughput": x.as_dict(),
        "step_time_s": Estimate(
            p.global_batch / mean, p.global_batch / x.high, p.global_batch / max(x.low, 1e-12)
        ).as_dict(),
        "inputs": [f"measured: runs {', '.join(p.completed_run_ids)}"],
    }
    if baseline is not None and baseline.throughput.mean:
        b = float(baseline.throughput.mean)
        row["speedup"] = Estimate(mean / b, x.low / b, x.high / b).as_dict()
        row["efficiency"] = Estimate(
            mean / b / p.devices, x.low / b / p.devices, x.high / b / p.devices
        ).as_dict()
    return row


def _projected_row(result: dict[str, Any], nodes: int, rpn: int, inputs: list[str]) -> dict:
    row = {"kind": PROJECTED, "nodes": nodes, "ranks_per_node": rpn, "ranks": nodes * rpn}
    if "why" in result:
        return {**row, "why": result["why"], "inputs": inputs}
    row.update(
        {
            "global_batch": result["global_batch"],
            "stated": result["link_source"] == commfit.STATED,
            "inputs": inputs,
        }
    )
    for k in ("step_time_s", "throughput", "speedup", "efficiency"):
        if k in result:
            row[k] = result[k].as_dict()
    return row


def _family(
    pts: list[Point], data: CommData, stated: dict[str, Link], to: int | None
) -> dict[str, Any]:
    done = [p for p in pts if p.throughput.mean]
    first = pts[0]
    out: dict[str, Any] = {
        "family": family_name(first),
        "experiment": first.experiment,
        "framework": first.framework,
        "model": first.model,
        "precision": first.precision,
        "scaling": first.scaling,
        "per_device_batch": first.per_device_batch,
        "loader": first.loader,
        "device": first.device,
        "unit": first.unit,  # what its throughput counts a second
        "rows": [],
        "held_out": None,
    }
    singles = [p for p in done if p.nodes == 1]
    if not singles:
        out["why"] = "no completed single-node point to project from"
        return out
    baseline = next((p.baseline for p in done if p.baseline is not None), None)
    buckets = data.buckets.get((first.framework, first.model, first.precision)) or (
        ((first.comm or {}).get("record") or {}).get("buckets")
    )
    links = {**stated, **data.links(first.framework)}
    out["links"] = {t: lk.as_dict() for t, lk in links.items()}
    base_p = max(singles, key=lambda p: p.ranks_per_node)
    out["base"] = base_p.label()
    out["baseline"] = baseline.label() if baseline else None
    by_scale = {(p.nodes, p.ranks_per_node): p for p in done}
    for p in sorted(done, key=lambda p: (p.devices, p.nodes)):
        out["rows"].append(_measured_row(p, baseline))
    if not buckets:
        out["why"] = (
            "no communication benchmark ran for this framework and model: one step's "
            "gradient (its buckets) is unknown; set experiment.comm_benchmark = true"
        )
        return out
    out["gradient_bytes"] = sum(buckets)
    base = _base(base_p)
    base_mean = Mean.of(baseline) if baseline else None
    last = to or max(p.nodes for p in done)
    for nodes, rpn in targets(base_p.ranks_per_node, last):
        if (nodes, rpn) in by_scale:
            continue
        tier = commfit.tier_of(nodes)
        res = project(base, base_mean, links, buckets, nodes, rpn, first.scaling)
        out["rows"].append(
            _projected_row(res, nodes, rpn, _inputs(base_p, base, baseline, links, tier))
        )
    out["rows"].sort(key=lambda r: (r["ranks"], r["nodes"]))
    out["held_out"] = held_out(done, data, stated, buckets, baseline)
    return out


def held_out(
    done: list[Point],
    data: CommData,
    stated: dict[str, Link],
    buckets: list[int],
    baseline: Point | None,
) -> dict[str, Any] | None:
    """With 3+ scales measured: the largest projected from the others (its comm benchmark
    left out of the fit too), the error, and whether the measurement falls outside the
    projection's interval."""
    scales = sorted({(p.devices, p.nodes, p.ranks_per_node) for p in done})
    if len(scales) < 3:
        return None
    _, nodes, rpn = scales[-1]
    target = next(p for p in done if (p.nodes, p.ranks_per_node) == (nodes, rpn))
    others = [p for p in done if p is not target]
    singles = [p for p in others if p.nodes == 1]
    row: dict[str, Any] = {"nodes": nodes, "ranks_per_node": rpn, "ranks": target.devices}
    if not singles:
        return {**row, "why": "no other single-node point to project from"}
    base_p = max(singles, key=lambda p: p.ranks_per_node)
    links = {**stated, **data.links(target.framework, exclude=frozenset({(nodes, target.devices)}))}
    base = _base(base_p)
    if base_p.ranks_per_node > 1 and base.comm_time_s is None and INTRA not in links:
        return {**row, "why": "the base point's allreduce was not benchmarked"}
    res = project(
        base,
        Mean.of(baseline) if baseline else None,
        links,
        buckets,
        nodes,
        rpn,
        target.scaling,
    )
    if "why" in res:
        return {**row, "why": res["why"]}
    measured = float(target.throughput.mean or 0.0)
    x: Estimate = res["throughput"]
    tier = commfit.tier_of(nodes)
    return {
        **row,
        "from": sorted(p.label() for p in others),
        "base": base_p.label(),
        "measured_throughput": measured,
        "projected_throughput": x.as_dict(),
        "error": x.value / measured - 1 if measured else None,
        "outside_interval": not x.holds(measured),
        "stated": res["link_source"] == commfit.STATED,
        "inputs": _inputs(base_p, base, baseline, links, tier),
    }


def projections(
    store: Store,
    experiment: str | None,
    to: int | None = None,
    stated: dict[str, Link] | None = None,
) -> list[dict[str, Any]]:
    """Every family's measured rows, projected rows up to `to` nodes (default: the largest
    measured) and held-out check; JSON-ready, every row saying measured or projected."""
    pts = analysis.points(store, experiment)
    data = commfit.measurements(store, experiment)
    families: dict[tuple, list[Point]] = {}
    for p in pts:
        families.setdefault(family_key(p), []).append(p)
    out = [_family(ps, data, stated or {}, to) for ps in families.values()]
    for f in out:
        f["skipped"] = data.skipped
    return out


def study_reach(store: Store, name: str) -> tuple[list[dict[str, Any]], int, str]:
    """The study's families projected as far as its cluster lets it go: to the size of the
    partition of the profile its runs kept, or to 8 x the largest measured node count where
    they kept none; with that reach and where it comes from (the report, the TUI)."""
    to, to_from, stated = how_far(store, name, None, None)
    if to is None:
        nodes = [r["nodes"] for r in store.runs(name)]
        to = 8 * max(nodes, default=1)
        to_from = "8 x the largest measured; no cluster profile was kept to give a partition"
    return projections(store, name, to, stated), to, to_from


def kept_profile(runs: list[RunRow]) -> Path | None:
    """The cluster profile a Slurm run kept beside its job script, if any run kept one."""
    for r in runs:
        path = RunPaths(Path(r["run_dir"] or "")).profile
        if path.is_file():
            return path
    return None


def how_far(
    store: Store, experiment: str, to: int | None, profile: str | Path | None
) -> tuple[int | None, str, dict[str, Link]]:
    """(how many nodes to project to, where that number comes from, the links the profile
    states): --to, else the size of the default partition of the profile given or kept by
    the runs; None when neither says. A profile that does not validate raises SpecError."""
    from ..config.profile import load_profile

    path = Path(profile) if profile else kept_profile(store.runs(experiment))
    loaded = load_profile(path) if path is not None else None
    stated = commfit.stated(loaded.profile.interconnect, str(path)) if loaded else {}
    if to is not None:
        return to, "--to", stated
    if loaded is None:
        return None, "", stated
    part = loaded.profile.partition(None)
    return part.nodes, f"partition {part.name} of {path}", stated


def chart_series(families: list[dict[str, Any]], metric: str = "efficiency") -> list[dict]:
    """What a chart of the projection draws, as plain data (the TUI's Results screen and the
    report's figure): per family, measured and projected points as (devices, value, low,
    high), and the held-out check."""
    out = []
    for f in families:
        measured: list[tuple] = []
        projected: list[tuple] = []
        for r in f["rows"]:
            v = r.get(metric)
            if v is None:
                continue
            point = (r["ranks"], v["value"], v["ci95_low"], v["ci95_high"])
            (measured if r["kind"] == MEASURED else projected).append(point)
        out.append(
            {
                "name": f["family"],
                "measured": measured,
                "projected": projected,
                "stated": any(r.get("stated") for r in f["rows"]),
                "held_out": f.get("held_out"),
            }
        )
    return out
