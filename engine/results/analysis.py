"""From runs to results: throughput with its spread, speedup, efficiency, time-to-accuracy.

Rules (docs/measuring.md): throughput is the mean over repetitions with a Student-t 95%
confidence interval; a coefficient of variation above 5% marks the point noisy. Speedup is
against the best single-device point of the same model, dataset, precision and batch
(per-device batch for weak scaling, global batch for strong) in any framework of the same
experiment, and that baseline is named; efficiency = speedup / devices. The speedup against
the framework's own single-device point is reported too. Where the efficiency goes (the
step-time breakdown, the communication benchmark, the model beside the measurement) and the
energy per image are efficiency.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ...trainers.common.records import ENERGY_FIELDS
from ..io.text import printable
from ..runs import State, run_label
from ..tracking import completion
from ..tracking.store import Store
from . import disturbed, explained
from .formatting import finite
from .points import (
    POINT_FIELDS,
    Point,
    device_kind,
    unit_and_axes,
)
from .rows import ResultRow
from .stats import counted, spread

# What results read of each run's env record: its device, and why it has no energy.
ENV_FIELDS = {"device": "$.devices[0]", "energy_unavailable": "$.energy_unavailable"}


def points(store: Store, experiment: str | None = None) -> list[Point]:
    # Reruns (`dlscale rerun`) are compared with their original in `reruns`, not pooled
    # into its point: a rerun asks "does it measure the same again?", not "one more sample".
    # Where a spec reruns disturbed runs (`disturbed = "rerun"`), the rerun stands in for
    # the run it repeats, and the run it replaced is named in the point's notes.
    all_runs = store.runs(experiment)
    by_id = {r["run_id"]: r for r in all_runs}
    choices = disturbed.choices(store, {r["experiment"] for r in all_runs})
    judged = disturbed.judge(store, list(by_id) if experiment else None)
    rerunning = {name for name, c in choices.items() if c.action == disturbed.RERUN}
    replaced = disturbed.stand_ins(all_runs, judged, rerunning) if rerunning else {}
    originals = [r for r in all_runs if not r.get("rerun_of")]
    every = [by_id[disturbed.standing(r["run_id"], replaced)] for r in originals]
    # Communication benchmark runs measure a scale, not a point: efficiency.attach's.
    comm = [r for r in every if explained.is_comm(r)]
    runs = [r for r in every if not explained.is_comm(r)]
    ids = [r["run_id"] for r in runs] if experiment else None
    summaries = summaries_of(store, ids)
    # The device is measured, not planned: the same spec runs on CPUs or on GPUs. A run
    # without its env record yet (queued) joins the point its siblings ran on.
    envs = store.records.last_fields("env", ENV_FIELDS, ids)
    kinds = {r["run_id"]: device_kind(envs.get(r["run_id"])) for r in runs}
    seen: dict[str, str] = {}
    for r in runs:
        if (kind := kinds[r["run_id"]]) is not None:
            seen.setdefault(r["point_id"], kind)
    by_point: dict[tuple[str, str | None], Point] = {}
    for r in runs:
        device = kinds[r["run_id"]] or seen.get(r["point_id"])
        p = by_point.get((r["point_id"], device))
        if p is None:
            unit, axes = unit_and_axes(r)
            fields = cast("Mapping[str, Any]", r)  # read by the names POINT_FIELDS holds
            p = by_point[(r["point_id"], device)] = Point(
                **{k: fields[k] for k in POINT_FIELDS},
                device=device,
                site=r.get("site"),
                lr_schedule=explained.schedule_of(r),
                unit=unit,
                axes=axes,
                disturbed_action=choices[r["experiment"]].action,
            )
        p.run_ids.append(r["run_id"])
        p.rerun_for.update(disturbed.chain(r, replaced))
        p.states.append(r["state"])
        s = summaries.get(r["run_id"]) or {}
        throughput = counted(s.get("throughput"))
        if r["state"] == State.COMPLETED and throughput is not None:
            if judged.known(r["run_id"]):
                p.judged += 1
            if (why := judged.disturbed.get(r["run_id"])) is not None:
                p.disturbed[r["run_id"]] = why
                if p.disturbed_action == disturbed.LEAVE_OUT:
                    continue  # listed with its reasons, not counted
            p.completed_run_ids.append(r["run_id"])
            p.throughputs.append(throughput)
            p.summaries.append(s)
            for values, key in (
                (p.runtimes, "total_wall_s"),
                (p.ttas, "time_to_accuracy_s"),
                (p.best_top1, "best_top1"),
            ):
                if (value := finite(s.get(key))) is not None:
                    values.append(value)
    out = list(by_point.values())
    for p in out:
        p.throughput = spread(p.throughputs)
        quiet = [
            t
            for rid, t in zip(p.completed_run_ids, p.throughputs)
            if rid not in p.disturbed and judged.known(rid)
        ]
        p.quiet_cv = spread(quiet).cv if p.disturbed and len(quiet) < len(p.throughputs) else None
    singles: dict[tuple, list[Point]] = {}
    for p in out:
        if p.devices == 1 and p.throughput.mean:
            singles.setdefault(p.baseline_key(), []).append(p)
    for p in out:
        candidates = singles.get(p.baseline_key(), [])
        if candidates:
            p.baseline = max(candidates, key=_mean)
            own = [c for c in candidates if c.framework == p.framework]
            p.own_baseline = max(own, key=_mean) if own else None
    explained.attach(store, out, comm, envs)
    out.sort(
        key=lambda p: (
            p.experiment,
            p.model,
            p.dataset,
            p.framework,
            p.precision,
            p.per_device_batch,
            str(p.lr_schedule),
            str(sorted(p.axes.items())),
            p.devices,
            p.nodes,
        )
    )
    return out


def summaries_of(store: Store, ids: list[str] | None) -> dict[str, dict[str, Any]]:
    """Each run's summary, by run id, as every answer reads it (points, the check's
    pairs): its last summary record, completed by with_metered."""
    return with_metered(store, store.records.last("summary", ids), ids)


def with_metered(
    store: Store, summaries: dict[str, dict[str, Any]], ids: list[str] | None
) -> dict[str, dict[str, Any]]:
    """Summaries completed by what dlscale's meter measured around a declared framework's
    script, where the script's own summary left those fields empty: the energy (its
    `energy` record) and the CPU seconds per timed step (its `interference` record's
    metered tree: the script's processes and the meter's, which samples a few times a
    second), so `check --measure cpu` judges a user's own script as it does the trainers."""
    for run_id, energy in store.records.last("energy", ids).items():
        s = summaries.get(run_id)
        if s is not None:
            summaries[run_id] = {
                **s,
                **{k: energy[k] for k in ENERGY_FIELDS if k in energy and s.get(k) is None},
            }
    for run_id, seen in store.records.last("interference", ids).items():
        s = summaries.get(run_id)
        if s is None or not seen.get("metered") or s.get("cpu_s_per_step") is not None:
            continue  # a trainer's own CPU time, or nothing metered to fill it from
        cpu, steps = finite(seen.get("rank_cpu_s")), finite(s.get("timed_steps"))
        if cpu and steps and cpu > 0 and steps > 0:
            summaries[run_id] = {**s, "cpu_s_per_step": cpu / steps}
        elif isinstance(why := seen.get("unavailable"), str):
            summaries[run_id] = {**s, "cpu_unavailable": why}  # the meter's reason
    return summaries


def _mean(p: Point) -> float:
    return p.throughput.mean or 0.0  # singles are the points with a mean


def results(store: Store, experiment: str | None = None) -> list[ResultRow]:
    return [result_row(p) for p in points(store, experiment)]


def result_row(p: Point) -> ResultRow:
    """A point as every front end reads it: the one place a result row is made
    (tests/test_rows.py holds its keys to ResultRow's)."""
    return cast("ResultRow", {**p.as_dict(), **explained.efficiency_fields(p)})


def accuracy_curves(store: Store, experiment: str | None = None) -> dict[str, list]:
    """Top-1 against epoch per lr schedule, when the experiment compares more than one."""
    return explained.accuracy_curves(store, points(store, experiment))


def notes(store: Store, experiment: str | None = None) -> list[str]:
    """What the results leave out and why: metric lines skipped on ingest, by run, file and
    line (a run whose summary was skipped has no throughput in the table); runs counted
    though their job failed after their measurement (completion.py), with how it ended."""
    runs = store.runs(experiment)
    marked = [
        f"run {r['run_id']} ({run_label(r)}) is counted: "
        f"{printable(str(r['reason']).split(chr(10), 1)[0])}"
        for r in runs
        if r["state"] == State.COMPLETED and completion.marked(r["reason"])
    ]
    return store.records.skipped_notes([r["run_id"] for r in runs] if experiment else None) + marked


def reruns(store: Store, experiment: str | None = None) -> list[dict[str, Any]]:
    """Each rerun next to the run it repeats: both throughputs and their ratio (rerun /
    original), so a reader sees how well a measurement repeats."""
    runs = store.runs(experiment)
    again = [(r, of) for r in runs if (of := r.get("rerun_of"))]
    if not again:
        return []
    ids = [r["run_id"] for r in runs] + [of for _, of in again]
    summaries = store.records.last("summary", ids)
    out = []
    for r, of in again:
        orig = store.run(of)
        t0 = finite((summaries.get(orig["run_id"]) or {}).get("throughput"))
        t1 = finite((summaries.get(r["run_id"]) or {}).get("throughput"))
        ok = orig["state"] == r["state"] == State.COMPLETED
        out.append(
            {
                "run_id": r["run_id"],
                "rerun_of": orig["run_id"],
                "experiment": r["experiment"],
                "framework": r["framework"],
                "model": r["model"],
                "nodes": r["nodes"],
                "ranks_per_node": r["ranks_per_node"],
                "ranks": r["devices"],
                "state": r["state"],
                "original_state": orig["state"],
                "original_throughput": t0 if orig["state"] == State.COMPLETED else None,
                "rerun_throughput": t1 if r["state"] == State.COMPLETED else None,
                "ratio": (t1 / t0) if ok and t0 and t1 is not None else None,
            }
        )
    return out
