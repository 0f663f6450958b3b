"""Past the measured scales: each point family projected to scales it did not run (devices
inside a node and nodes), with intervals and the names of its inputs, and the held-out
check wherever three or more scales were measured; or, with no store, from figures the user
states (stated.py). The model is scaling_model.py's; one scale's projection and its
interval, projected.py's; the model's defaults and error, calibration.py's.

A family is every point of one framework, model, dataset, precision, batch (per device for
weak scaling, global for strong), loader, device and lr schedule. Its projection starts
from the largest measured single-node point, which carries what a node loses by itself
(shared CPU and memory, loader, PCIe). Each of the model's inputs is measured where the
study measured it: the allreduce's links (the comm benchmark's sweeps, commfit.py), the
gradient (its buckets), the overlap (the base's step-time breakdown), the jitter (the
step-time CV of the 1-device point, else the base's), the overhead per step (1-device points
at two or more per-device batches); else stated (a profile's [interconnect], a declared
framework's [comm] parameters) or the calibrated default; every row says which.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ...paths import RunPaths
from ...runs import RunRow
from ...tracking.store import Store
from .. import analysis, explained
from ..points import Point
from ..rows import MEASURED, PROJECTED, STATED, Family, HeldOut, Interval, ProjectionRow
from ..stats import fieller
from . import calibration, commfit, stated, strategies
from .bounds import held_to_ideal, noisy_baseline
from .commfit import CommData, Link
from .projected import Estimate, Mean, Setup, links_said, project

STATED_FIGURES = "stated figures"  # the experiment a projection from stated figures is of


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


def targets(per_node: int, to: int) -> list[tuple[int, int]]:
    """(nodes, devices a node): inside one node 1, 2, 4, ... up to `per_node`, then nodes
    2, 4, ... up to `to`, and `to` itself, `per_node` devices each."""
    inside = {1, per_node}
    k = 2
    while k < per_node:
        inside.add(k)
        k *= 2
    nodes = {to} | {2**i for i in range(1, max(to, 1).bit_length()) if 2**i < to}
    return [(1, d) for d in sorted(inside)] + [(n, per_node) for n in sorted(nodes) if n > 1]


def _same_device(a: Point, b: Point) -> bool:
    keys = ("experiment", "framework", "model", "dataset", "precision", "loader", "device", "unit")
    return all(getattr(a, k) == getattr(b, k) for k in keys) and a.axes == b.axes


def _measured_terms(base_p: Point, baseline: Point | None, pts: list[Point]) -> dict:
    """The model's terms this study measured: jitter from the step-time CV, overhead from
    1-device points at two or more per-device batches, overlap from the breakdown."""
    out: dict[str, stated.Choice] = {}
    for p in (baseline, base_p):
        cv = explained.summary_median(p, "step_time_cv")
        if p is not None and cv is not None:
            out[stated.JITTER] = stated.Choice(
                cv,
                stated.MEASURED,
                f"the step-time CV of {p.label()} (runs {', '.join(p.completed_run_ids)})",
            )
            break
    ones = [
        p
        for p in pts
        if p.devices == 1
        and p.throughput.mean
        and _same_device(p, base_p)
        and p.unit == base_p.unit
    ]
    fit = stated.overhead_fit(
        [p.per_device_batch for p in ones],
        [p.per_device_batch / float(p.throughput.mean or 1) for p in ones],
    )
    if fit is not None:
        out[stated.OVERHEAD] = stated.Choice(
            fit[0],
            stated.MEASURED,
            "fitted on the 1-device points at batches "
            + ", ".join(str(b) for b in sorted({p.per_device_batch for p in ones}))
            + fit[2],
        )
    exposed = explained.summary_median(base_p, "exposed_comm_s")
    if exposed is not None and base_p.devices > 1:
        # the value is the base's own (scaling_model.fix_base): its exposed allreduce
        out[stated.OVERLAP] = stated.Choice(
            math.nan,
            stated.MEASURED,
            f"the base's step-time breakdown ({1e3 * exposed:.3g} ms of its allreduce exposed)",
        )
    return out


def declared_parameters(runs: list[RunRow], framework: str) -> int | None:
    """A declared framework's `[comm] parameters`, as its runs' recipes keep it."""
    for r in runs:
        if r["framework"] != framework:
            continue
        try:
            custom = json.loads(r.get("training") or "{}").get("custom") or {}
            return int(custom["comm"]["parameters"])
        except (ValueError, AttributeError, KeyError, TypeError):
            continue
    return None


def gradient_of(first: Point, data: CommData, runs: list[RunRow]) -> tuple[list[int] | None, str]:
    """One step's traffic as allreduce buckets, and where it came from: the gradient's
    buckets (the comm benchmark's; else a declared framework's [comm] parameters; else the
    model's parameter count, fp32), scaled by what the framework's strategy moves beside an
    allreduce of them (strategies.py: FSDP and ZeRO-3 all-gather the parameters too)."""
    buckets, how = _gradient(first, data, runs)
    training = next((r["training"] for r in runs if r["framework"] == first.framework), None)
    traffic = strategies.of_run(first.framework, training, first.precision)
    if buckets is None or traffic.factor() == 1.0:
        return buckets, how
    scaled = [round(b * traffic.factor()) for b in buckets]
    return scaled, f"{how}; {traffic.words()}: {stated.mb(sum(scaled))}"


def _gradient(first: Point, data: CommData, runs: list[RunRow]) -> tuple[list[int] | None, str]:
    got = data.buckets.get((first.framework, first.model, first.precision)) or (
        ((first.comm or {}).get("record") or {}).get("buckets")
    )
    if got:
        return list(got), f"measured: the comm benchmark's buckets, {stated.mb(sum(got))}"
    declared = declared_parameters(runs, first.framework)
    named = stated.named_parameters(first.model)
    if declared is not None:
        count, how = declared, f"stated: [frameworks.{first.framework}.comm] parameters"
    elif named is not None:
        count, how = named[0], f"default: {first.model}'s parameter count ({named[1]})"
    else:
        return None, ""
    buckets = stated.gradient_buckets(4 * count)
    return buckets, (
        f"{how}, {count:,} as fp32 in DDP-sized buckets: {stated.mb(sum(buckets))} "
        "(no communication benchmark ran)"
    )


def setup_of(
    base_p: Point,
    baseline: Point | None,
    pts: list[Point],
    links: dict[str, Link],
    buckets: list[int],
    grad_how: str,
    cal: calibration.Calibration,
    stated_terms: dict[str, float | None] | None = None,
) -> Setup:
    f = explained.efficiency_fields(base_p)
    terms = stated.choose(cal, _measured_terms(base_p, baseline, pts), stated_terms)
    inputs = [f"base: {base_p.label()} measured (runs {', '.join(base_p.completed_run_ids)})"]
    if baseline is not None:
        inputs.append(
            f"baseline: {baseline.label()} measured (runs {', '.join(baseline.completed_run_ids)})"
        )
    inputs.append(f"gradient: {grad_how}")
    inputs += [f"{t} link: {lk.source} ({', '.join(lk.inputs)})" for t, lk in links.items()]
    inputs += stated.terms_lines(terms)
    inputs.append(cal.error.how())
    return Setup(
        base_p.ranks_per_node,
        base_p.per_device_batch,
        Mean.of(base_p),
        links,
        buckets,
        terms,
        cal,
        baseline=Mean.of(baseline) if baseline else None,
        exposed_comm_s=f["exposed_comm_s"] if base_p.devices > 1 else None,
        comm_s=f["comm_time_s"] if base_p.devices > 1 else None,
        scaling=base_p.scaling,
        global_batch=base_p.global_batch,
        inputs=inputs,
    )


def measured_row(p: Point, baseline: Point | None) -> ProjectionRow:
    """A measured scale beside the projected ones, with the interval every table shows of
    a measured point (stats.INTERVAL: mean ± CI95, its low end at 0 at the least), and its
    speedup's and efficiency's as Fieller's interval of its mean over the baseline's (both
    measured with noise); the baseline against itself is 1, exactly."""
    s = p.throughput
    mean = float(s.mean or 0.0)
    low, high = s.interval or (mean, mean)
    x = Estimate(mean, max(low, 0.0), high)
    row: ProjectionRow = {
        "kind": MEASURED,
        "nodes": p.nodes,
        "ranks_per_node": p.ranks_per_node,
        "ranks": p.devices,
        "global_batch": p.global_batch,
        "throughput": x.as_dict(),
        "step_time_s": Estimate(
            p.global_batch / mean,
            p.global_batch / x.high,
            p.global_batch / x.low if x.low > 0 else math.inf,
        ).as_dict(),
        "inputs": [f"measured: runs {', '.join(p.completed_run_ids)}"],
    }
    if baseline is not None and baseline.throughput.mean:
        if baseline is p:
            speedup = Estimate(1.0, 1.0, 1.0)
        else:
            r = fieller(baseline.throughputs, p.throughputs)
            b = float(baseline.throughput.mean)
            value = mean / b
            if r is None or r.low is None:
                speedup = Estimate(value, value, value)
            else:
                speedup = Estimate(value, r.low, math.inf if r.high is None else r.high)
        row["speedup"] = speedup.as_dict()
        row["efficiency"] = Estimate(
            speedup.value / p.devices, speedup.low / p.devices, speedup.high / p.devices
        ).as_dict()
    return row


def projected_row(
    result: dict[str, Any], nodes: int, per_node: int, kind: str = PROJECTED
) -> ProjectionRow:
    row: ProjectionRow = {
        "kind": kind,
        "nodes": nodes,
        "ranks_per_node": per_node,
        "ranks": nodes * per_node,
    }
    if "why" in result:
        return {**row, "why": result["why"]}
    used = result["links_used"]
    row.update(
        {
            "global_batch": result["global_batch"],
            "per_device_batch": result["per_device_batch"],
            "stated": commfit.STATED in used.values(),
            "links_used": used,
            "link": links_said(used),
            "terms_s": result["terms"],
            "dominant": {"term": result["dominant"][0], "share": result["dominant"][1]},
            "notes": result["notes"],
        }
    )
    for k in ("step_time_s", "throughput", "speedup", "efficiency"):
        if k in result:
            row[k] = result[k].as_dict()
    return row


def stated_row(setup: Setup, devices: int) -> ProjectionRow:
    """The figures as stated, at the scale they were measured on: a number, no interval
    (nothing about it was modelled)."""
    x = setup.throughput.value
    row: ProjectionRow = {
        "kind": STATED,
        "nodes": 1,
        "ranks_per_node": devices,
        "ranks": devices,
        "global_batch": devices * setup.per_device_batch,
        "throughput": Estimate(x, x, x).as_dict(),
        "step_time_s": Estimate(*[setup.step_s(x)] * 3).as_dict(),
        "inputs": ["stated"],
    }
    if setup.baseline is not None:
        sp = x / setup.baseline.value
        row["speedup"] = Estimate(sp, sp, sp).as_dict()
        row["efficiency"] = Estimate(sp / devices, sp / devices, sp / devices).as_dict()
    return row


def rows_of(setup: Setup, scales: list[tuple[int, int]], skip: set) -> list[ProjectionRow]:
    """The projected rows at `scales`, less those in `skip` (measured there)."""
    return [
        projected_row(project(setup, nodes, per_node), nodes, per_node)
        for nodes, per_node in scales
        if (nodes, per_node) not in skip
    ]


def _family(
    pts: list[Point],
    everything: list[Point],
    data: CommData,
    runs: list[RunRow],
    stated_links: dict[str, Link],
    to: int | None,
    per_node: int | None,
    stated_terms: dict[str, float | None] | None,
) -> Family:
    done = [p for p in pts if p.throughput.mean]
    first = pts[0]
    out: Family = {
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
        "inputs": [],
        "notes": [],
    }
    singles = [p for p in done if p.nodes == 1]
    if not singles:
        out["why"] = "no completed single-node point to project from"
        return out
    baseline = next((p.baseline for p in done if p.baseline is not None), None)
    links = {**stated_links, **data.links(first.framework)}
    out["links"] = {t: lk.as_dict() for t, lk in links.items()}
    base_p = max(singles, key=lambda p: p.ranks_per_node)
    out["base"] = base_p.label()
    out["baseline"] = baseline.label() if baseline else None
    by_scale = {(p.nodes, p.ranks_per_node) for p in done}
    out["rows"] = [measured_row(p, baseline) for p in done]
    buckets, grad_how = gradient_of(first, data, runs)
    if not buckets:
        out["why"] = (
            "one step's gradient is unknown: no communication benchmark ran for this "
            "framework and model, and it is neither a declared framework with [comm] "
            "parameters nor a model dlscale knows the size of; set "
            "experiment.comm_benchmark = true"
        )
        out["rows"].sort(key=lambda r: (r["ranks"], r["nodes"]))
        return out
    out["gradient_bytes"] = sum(buckets)
    cal = calibration.calibrated()
    setup = setup_of(base_p, baseline, everything, links, buckets, grad_how, cal, stated_terms)
    out["held_out"] = held_out(done, everything, data, stated_links, buckets, grad_how, baseline)
    held = out["held_out"] or {}
    if "projected_throughput" in held:  # this study's own check joins the model error
        d = calibration.distance(
            held["base_devices"], held["ranks"], first.per_device_batch, first.per_device_batch
        )
        ratio = held["measured_throughput"] / held["projected_throughput"]["value"]
        setup.extra_scores = [math.log(ratio) / d]
        setup.inputs.append(
            "model error: with this study's own held-out check among its calibration rows"
        )
    out["inputs"] = setup.inputs
    last = to or max(p.nodes for p in done)
    scales = targets(per_node or base_p.ranks_per_node, last)
    out["rows"] += rows_of(setup, scales, by_scale)
    out["rows"].sort(key=lambda r: (r["ranks"], r["nodes"]))
    out["notes"] = list(dict.fromkeys(n for r in out["rows"] for n in r.get("notes") or []))
    out["bounds"] = held_to_ideal(out["rows"]) + noisy_baseline(baseline)
    return out


def held_out(
    done: list[Point],
    everything: list[Point],
    data: CommData,
    stated_links: dict[str, Link],
    buckets: list[int],
    grad_how: str,
    baseline: Point | None,
) -> HeldOut | None:
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
    row: HeldOut = {"nodes": nodes, "ranks_per_node": rpn, "ranks": target.devices}
    if not singles:
        return {**row, "why": "no other single-node point to project from"}
    base_p = max(singles, key=lambda p: p.ranks_per_node)
    exclude = frozenset({(nodes, target.devices)})
    links = {**stated_links, **data.links(target.framework, exclude=exclude)}
    cal = calibration.calibrated()
    rest = [p for p in everything if p is not target]
    setup = setup_of(base_p, baseline, rest, links, buckets, grad_how, cal)
    res = project(setup, nodes, rpn)
    if "why" in res:
        return {**row, "why": res["why"]}
    measured = float(target.throughput.mean or 0.0)
    x: Estimate = res["throughput"]
    held: HeldOut = {
        **row,
        "from": sorted(p.label() for p in others),
        "base": base_p.label(),
        "base_devices": base_p.ranks_per_node,
        "measured_throughput": measured,
        "projected_throughput": x.as_dict(),
        "error": x.value / measured - 1 if measured else None,
        "outside_interval": not x.holds(measured),
        "stated": commfit.STATED in res["links_used"].values(),
        "inputs": setup.inputs,
    }
    return held


def projections(
    store: Store,
    experiment: str | None,
    to: int | None = None,
    stated_links: dict[str, Link] | None = None,
    per_node: int | None = None,
    stated_terms: dict[str, float | None] | None = None,
) -> list[Family]:
    """Every family's measured rows, projected rows up to `to` nodes (default: the largest
    measured) of `per_node` devices (default: the base's) and held-out check; JSON-ready,
    every row saying measured or projected."""
    pts = analysis.points(store, experiment)
    data = commfit.measurements(store, experiment)
    runs = store.runs(experiment)
    families: dict[tuple, list[Point]] = {}
    for p in pts:
        families.setdefault(family_key(p), []).append(p)
    out = [
        _family(ps, pts, data, runs, stated_links or {}, to, per_node, stated_terms)
        for ps in families.values()
    ]
    for f in out:
        f["skipped"] = data.skipped
    return out


def from_figures(fig: stated.Figures, to: int, per_node: int) -> Family:
    """A family projected from stated figures alone (no store): the stated scale's row
    says "stated", every other one "projected"."""
    setup = stated.setup(fig, calibration.calibrated())
    own = (1, fig.measured_on)
    scales = sorted(set(targets(per_node, to)) - {own})
    # The stated throughput holds its own scale's allreduce: a smaller scale projected from
    # it would read above ideal, so the rows start at the stated scale, and say so.
    below = [s for s in scales if s[0] * s[1] < fig.measured_on]
    rows = [projected_row(project(setup, *scale), *scale) for scale in scales if scale not in below]
    rows.append(stated_row(setup, fig.measured_on))
    rows.sort(key=lambda r: (r["ranks"], r["nodes"]))
    bounds = held_to_ideal(rows)
    name = fig.model or f"{fig.parameters:,} parameters"
    return {
        "family": f"stated: {name} {fig.dtype} b{setup.per_device_batch:g} {fig.scaling}",
        "experiment": STATED_FIGURES,
        "model": fig.model,
        "scaling": fig.scaling,
        "per_device_batch": setup.per_device_batch,
        "unit": stated.counts(fig),
        "rows": rows,
        "bounds": bounds,
        "held_out": None,
        "inputs": setup.inputs,
        "links": {t: lk.as_dict() for t, lk in setup.links.items()},
        "notes": list(dict.fromkeys(n for r in rows for n in r.get("notes") or []))
        + (
            [
                f"scales below the stated {fig.measured_on} device(s) not projected "
                f"({', '.join(f'{n}x{d}' for n, d in below)}): the stated throughput "
                "already holds its scale's allreduce, so a smaller scale would read above ideal"
            ]
            if below
            else []
        ),
        "skipped": [],
    }


@dataclass(frozen=True)
class Projection:
    """What `dlscale project` answers, the report shows and the TUI draws: the families
    projected, how far (nodes) and where that reach comes from."""

    families: list[Family]
    to: int
    to_from: str


def of_study(
    store: Store,
    name: str,
    to: int | None = None,
    profile: str | Path | None = None,
    per_node: int | None = None,
    stated_links: dict[str, Link] | None = None,
    stated_terms: dict[str, float | None] | None = None,
) -> Projection:
    """A study's families projected as far as `reach` says, with the links a profile and
    the command line state (the command line's win)."""
    to, to_from, links = reach(store, name, to, profile)
    links = {**links, **(stated_links or {})}
    return Projection(projections(store, name, to, links, per_node, stated_terms), to, to_from)


def of_figures(fig: stated.Figures, to: int, per_node: int) -> Projection:
    return Projection([from_figures(fig, to, per_node)], to, "--to")


def kept_profile(runs: list[RunRow]) -> Path | None:
    """The cluster profile a Slurm run kept beside its job script, if any run kept one."""
    for r in runs:
        path = RunPaths(Path(r["run_dir"] or "")).profile
        if path.is_file():
            return path
    return None


def reach(
    store: Store, experiment: str, to: int | None, profile: str | Path | None
) -> tuple[int, str, dict[str, Link]]:
    """The one rule for how far a study is projected (the command, the report and the TUI
    alike): (nodes, where that number comes from, the links the profile states). --to when
    given, else the size of the default partition of the profile given or kept by the runs,
    else 8 x the largest measured node count. A profile that does not validate raises
    SpecError."""
    from ...config.profile import load_profile

    path = Path(profile) if profile else kept_profile(store.runs(experiment))
    loaded = load_profile(path) if path is not None else None
    links = commfit.stated(loaded.profile.interconnect, str(path)) if loaded else {}
    if to is not None:
        return to, "--to", links
    if loaded is not None:
        part = loaded.profile.partition(None)
        return part.nodes, f"partition {part.name} of {path}", links
    nodes = [r["nodes"] for r in store.runs(experiment)]
    return (
        8 * max(nodes, default=1),
        "8 x the largest measured; no cluster profile was kept to give a partition (--to "
        "says how far)",
        links,
    )


def chart_series(families: list[Family], metric: str = "efficiency") -> list[dict]:
    """What a chart of the projection draws, as plain data (the TUI's Results screen and the
    report's figure): per family, measured and projected points as (devices, value, low,
    high), and the held-out check. Stated figures count as measured points: they are not
    the model's."""
    out = []
    for f in families:
        measured: list[tuple] = []
        projected: list[tuple] = []
        for r in f["rows"]:
            v = cast("Interval | None", r.get(metric))  # a metric's name: one of the Intervals
            if v is None:
                continue
            point = (r["ranks"], v["value"], v["ci95_low"], v["ci95_high"])
            (projected if r["kind"] == PROJECTED else measured).append(point)
        out.append(
            {
                "name": f["family"],
                "measured": measured,
                "measured_as": STATED if any(r["kind"] == STATED for r in f["rows"]) else MEASURED,
                "projected": projected,
                "stated": any(r.get("stated") for r in f["rows"] if r["kind"] == PROJECTED),
                "held_out": f.get("held_out"),
            }
        )
    return out


def largest(fam: Family) -> ProjectionRow | None:
    """The family's largest projected row that could be projected."""
    rows = [r for r in fam["rows"] if r["kind"] == PROJECTED and "why" not in r]
    return max(rows, key=lambda r: (r["ranks"], r["nodes"]), default=None)
