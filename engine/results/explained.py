"""Where the efficiency goes: per point, what its runs measured of a step (compute, the
communication not hidden behind it, the rest), the communication benchmark of its scale, and
a model of the step beside the measurement.

The model: a step at this point takes the 1-device baseline's compute time (scaled to this
point's per-device batch, linearly, for strong scaling) plus the benchmark's allreduce of one
step's gradient at this scale, none of it hidden behind compute:

    predicted_step_s     = c + comm_time_s,   c = baseline compute_time_s x batch / its batch
    predicted_efficiency = c / predicted_step_s

It is 1 at one device and falls as the allreduce grows against the compute; a measured
efficiency above it means the framework hid communication behind the backward pass (the
breakdown's exposed_comm_s says how much was left), one below it that something else was
lost (compute slowed by sharing the node, data waits: the breakdown's rest). Every field a
part could not be measured for is null, and `unmeasured` says why.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from ..config.frameworks import FRAMEWORKS, NO_COMM_BENCHMARK
from ..runs import COMM_MARK, RunRow, State, scale_label
from ..tracking.store import Store
from .points import Point


def is_comm(row: RunRow) -> bool:
    """A communication benchmark run (plan.py), not a training run."""
    return COMM_MARK in (row.get("training") or "")


def schedule_of(row: RunRow) -> str | None:
    try:
        return json.loads(row.get("training") or "{}").get("lr_schedule")
    except (ValueError, AttributeError):
        return None


def comm_key(r: RunRow) -> tuple:
    return (
        r["experiment"],
        r["framework"],
        r["model"],
        r["dataset"],
        r["nodes"],
        r["ranks_per_node"],
        r["precision"],
    )


def attach(
    store: Store,
    points: list[Point],
    comm_rows: list[RunRow],
    envs: dict[str, dict[str, Any]],
) -> None:
    """Give each point its scale's benchmark and, where no energy was measured, why not
    (from `envs`, the env records analysis read for the points' device)."""
    records = store.records.last("comm", [r["run_id"] for r in comm_rows]) if comm_rows else {}
    bench: dict[tuple, dict[str, Any]] = {}
    for r in sorted(comm_rows, key=lambda r: r["created"] or 0):  # the latest one wins
        rec = records.get(r["run_id"]) if r["state"] == State.COMPLETED else None
        if rec is not None or comm_key(r) not in bench or bench[comm_key(r)]["record"] is None:
            bench[comm_key(r)] = {
                "run_id": r["run_id"],
                "state": r["state"],
                "record": rec,
                "reason": (r.get("reason") or "").split("\n")[0],
            }
    # Why no energy: the first repetition's env record says it for the point (the others
    # ran on the same kind of device).
    wanting = [
        p for p in points if p.completed_run_ids and summary_median(p, "energy_per_image_j") is None
    ]
    wanting_ids = {id(p) for p in wanting}
    for p in points:
        p.comm = bench.get(
            (p.experiment, p.framework, p.model, p.dataset, p.nodes, p.ranks_per_node, p.precision)
        )
        if id(p) in wanting_ids:
            # a counter that failed mid-run says so in the summary; else the env record
            why = next(
                (s["energy_unavailable"] for s in p.summaries if s.get("energy_unavailable")),
                None,
            ) or (envs.get(p.completed_run_ids[0]) or {}).get("energy_unavailable")
            p.energy_why = why or "no energy was recorded (runs from before dlscale metered it)"


def summary_median(p: Point | None, key: str) -> float | None:
    """A summary field's median over the point's completed repetitions (finite, not
    negative: a time, an energy), computed once per point and field."""
    if p is None:
        return None
    cache = p.medians
    if key not in cache:
        # type() rather than finite(): a study's results read every field of every summary
        got: list[Any] = [s.get(key) for s in p.summaries]
        values = [v for v in got if type(v) in (int, float) and 0 <= v < math.inf]
        cache[key] = statistics.median(values) if values else None
    return cache[key]


def _breakdown_why(p: Point) -> str:
    if not p.summaries:
        return "no completed repetition"
    why = {
        str(s["breakdown_unavailable"])
        for s in p.summaries
        if s.get("breakdown_unavailable") is not None
    }
    if why:
        return "; ".join(sorted(why))
    if p.framework not in FRAMEWORKS:  # a declared framework: its script may record one
        return (
            f"{p.framework}'s script records no step-time breakdown (compute_time_s and "
            "exposed_comm_s in its summary record)"
        )
    return f"the {p.framework} trainer records no step-time breakdown"


def _comm_why(p: Point) -> str:
    if p.framework in NO_COMM_BENCHMARK:
        return f"no communication benchmark for {p.framework}: {NO_COMM_BENCHMARK[p.framework]}"
    if p.comm is None:
        return "no communication benchmark: the spec does not set experiment.comm_benchmark = true"
    c = p.comm
    return f"the communication benchmark run {c['run_id']} is {c['state']}" + (
        f" ({c['reason']})" if c["reason"] else ""
    )


def efficiency_fields(p: Point) -> dict[str, Any]:
    """The point's efficiency fields for its result row."""
    why: dict[str, str] = {}
    compute = summary_median(p, "compute_time_s")
    exposed = summary_median(p, "exposed_comm_s")
    if compute is None:
        why["compute_time_s"] = _breakdown_why(p)
    if exposed is None:
        why["exposed_comm_s"] = _breakdown_why(p)
    mean = p.throughput.mean
    step = p.global_batch / mean if mean else None  # the timed steps' mean, whole job
    if p.unit != "images":  # a declared framework's step holds units of its own (tokens)
        steps = [s["elapsed_s"] / s["timed_steps"] for s in p.summaries if s.get("timed_steps")]
        step = statistics.median(steps) if steps else None
    other = (
        step - compute - exposed
        if step is not None and compute is not None and exposed is not None
        else None
    )

    comm_time = busbw = algbw = None
    rec = (p.comm or {}).get("record")
    if p.devices == 1:
        comm_time = 0.0
        why["comm_busbw_gbps"] = "one device: nothing to communicate"
    elif rec is not None:
        comm_time, busbw, algbw = rec["comm_time_s"], rec["comm_busbw_gbps"], rec["comm_algbw_gbps"]
    else:
        why["comm_busbw_gbps"] = _comm_why(p)

    predicted_step = predicted = None
    base = p.baseline
    base_compute = summary_median(base, "compute_time_s")
    if base is None:
        why["predicted_efficiency"] = "no 1-device baseline point"
    elif base_compute is None:
        why["predicted_efficiency"] = (
            f"its baseline ({base.label()}) has no compute time: {_breakdown_why(base)}"
        )
    elif comm_time is None:
        why["predicted_efficiency"] = "no allreduce time for this scale: " + why["comm_busbw_gbps"]
    else:
        c = base_compute * p.per_device_batch / base.per_device_batch
        predicted_step = c + comm_time
        predicted = c / predicted_step if predicted_step else None

    per_image = summary_median(p, "energy_per_image_j")
    if per_image is None:
        why["images_per_joule"] = p.energy_why or "no completed repetition"
    return {
        "lr_schedule": p.lr_schedule,
        "step_time_s": step,
        "compute_time_s": compute,
        "exposed_comm_s": exposed,
        "other_s": other,
        "forward_s": summary_median(p, "forward_s"),
        "backward_s": summary_median(p, "backward_s"),
        "optimizer_s": summary_median(p, "optimizer_s"),
        "data_wait_s": summary_median(p, "data_wait_s"),
        "comm_time_s": comm_time,
        "comm_busbw_gbps": busbw,
        "comm_algbw_gbps": algbw,
        "comm_run_id": (p.comm or {}).get("run_id") if rec is not None else None,
        "predicted_step_s": predicted_step,
        "predicted_efficiency": predicted,
        "energy_per_image_j": per_image,
        "images_per_joule": 1.0 / per_image if per_image else None,
        "mean_power_w": summary_median(p, "mean_power_w"),
        "device_util": summary_median(p, "device_util"),
        "achieved_tflops_per_device": summary_median(p, "achieved_tflops_per_device"),
        "mfu": summary_median(p, "mfu"),
        "peak_memory_bytes": summary_median(p, "peak_memory_bytes"),
        "unmeasured": why,
    }


def accuracy_curves(store: Store, points: list[Point]) -> dict[str, list[tuple[float, float]]]:
    """Top-1 against epoch, the mean over each point's completed repetitions, one curve per
    point named by its lr schedule first (and what else varies): drawn when a study compares
    more than one schedule."""
    if len({p.lr_schedule for p in points}) < 2:
        return {}
    varying = [
        k
        for k in ("framework", "model", "scale", "per_device_batch", "precision")
        if len({_attr(p, k) for p in points}) > 1
    ]
    out: dict[str, list[tuple[float, float]]] = {}
    for p in sorted(points, key=lambda p: (str(p.lr_schedule), p.devices)):
        by_epoch: dict[int, list[float]] = {}
        for rid in p.completed_run_ids:
            for rec in store.records.of(rid, "eval"):
                by_epoch.setdefault(rec["epoch"], []).append(rec["top1"])
        if by_epoch:
            name = " ".join([str(p.lr_schedule)] + [str(_attr(p, k)) for k in varying])
            out[name] = [(float(e), statistics.fmean(v)) for e, v in sorted(by_epoch.items())]
    return out


def _attr(p: Point, key: str) -> Any:
    if key == "scale":
        return f"{scale_label(p.nodes, p.ranks_per_node)}"
    if key == "per_device_batch":
        return f"b{p.per_device_batch}"
    return getattr(p, key)
