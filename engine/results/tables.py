"""The tables of results, built once each as the one table model (table.Table) and rendered
by every front end for its reader: the results, where the efficiency goes; and the plain
renderings of runs and results (the status lines, CSV and JSON)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..io.text import csv_cell, printable
from ..runs import scale_label
from ..tracking.queue import QUEUE_COLUMNS, queue_header
from . import disturbed
from .formatting import fmt, slowed_mark, slowed_note
from .points import throughput_unit
from .rows import ResultRow
from .stats import INTERVAL, NOISY_CV
from .table import Column, Table


def results_table(rows: list[ResultRow], skipped: Sequence[str] = ()) -> Table:
    """The results, one row a point: the one table `dlscale results`, the report and the TUI
    show (each renders it for its reader; the terminal leaves out the least important
    columns first, `Column.keep`). Columns that tell nothing apart in these rows (one
    loader, one schedule, no axes) are not made."""
    per_s = throughput_unit(rows)  # tokens/s is not images/s (a declared framework's unit)
    counted = per_s.removesuffix("/s")
    several = len({r["experiment"] for r in rows}) > 1
    axes = sorted({k for r in rows for k in r["axes"]})
    made: list[tuple[Column, Callable[[ResultRow], str]]] = []
    if several:
        made += [
            (Column("experiment", keep=2), lambda r: r["experiment"]),
            (Column("site", keep=6), lambda r: r["site"] or "-"),
        ]
    made += [
        (Column("model"), lambda r: r["model"]),
        (Column("framework", keep=2), lambda r: r["framework"]),
    ]
    if len({r["device"] for r in rows}) > 1:  # CPU and GPU points side by side
        made.append((Column("device", keep=3), lambda r: r["device"] or "-"))
    if len({r["loader"] for r in rows}) > 1:  # then the same point shows once a loader
        made.append((Column("loader", keep=3), lambda r: r["loader"]))
    if len({r["lr_schedule"] for r in rows}) > 1:
        made.append(
            (Column("lr schedule", keep=3, short="schedule"), lambda r: r["lr_schedule"] or "-")
        )
    if axes:  # a declared framework's own axes' values
        made.append(
            (
                Column(" ".join(axes), keep=1),
                lambda r: " ".join(str(r["axes"].get(k, "-")) for k in axes),
            )
        )
    made += [
        (Column("scale", right=True), scale_of),
        (Column("devices", right=True, keep=4, short="dev"), lambda r: str(r["ranks"])),
        (Column("batch/dev", right=True, keep=3, short="batch"), batch_cell),
        (Column("precision", keep=6), lambda r: r["precision"]),
        (Column("n", right=True, keep=3), lambda r: f"{r['n']}/{r['repetitions']}"),
        (Column(per_s, right=True), throughput_cell),
        (Column("CI95", right=True, short="± CI95"), lambda r: fmt(r["throughput_ci95"], 1)),
        (Column("CV", right=True, keep=5), cv_cell),
        (Column("speedup", right=True), lambda r: fmt(r["speedup"])),
        (Column("efficiency", right=True, short="eff."), lambda r: fmt(r["efficiency"])),
        (
            Column("speedup (own)", right=True, keep=8, short="own"),
            lambda r: fmt(r["speedup_own"]),
        ),
    ]
    if any(r["predicted_efficiency"] is not None for r in rows):  # the efficiency model's
        made.append(
            (
                Column("predicted eff", right=True, keep=5, short="pred. eff"),
                lambda r: fmt(r["predicted_efficiency"]),
            )
        )
    energy_shown = any(r["images_per_joule"] is not None for r in rows)
    if energy_shown:  # else a note says why not
        made.append(
            (Column(f"{counted}/J", right=True, keep=7), lambda r: fmt(r["images_per_joule"], 1))
        )
    transformer = any(r["mfu"] is not None or r["peak_memory_bytes"] is not None for r in rows)
    if transformer:  # a transformer's measures (trainers/common/mfu.py)
        made += [
            (
                Column("TFLOPS/dev", right=True, keep=6),
                lambda r: fmt(r["achieved_tflops_per_device"], 3),
            ),
            (Column("MFU", right=True, keep=5), lambda r: fmt(_times(r["mfu"], 100), 1, "%")),
            (
                Column("peak MiB/dev", right=True, keep=6, short="MiB"),
                lambda r: fmt(_times(r["peak_memory_bytes"], 2**-20), 0),
            ),
        ]
    made.append((Column("baseline", keep=7), lambda r: r["baseline"] or "-"))
    if any(r["time_to_accuracy_s"] is not None for r in rows):
        made.append(
            (Column("TTA s", right=True, keep=5), lambda r: fmt(r["time_to_accuracy_s"], 1))
        )
    made.append((Column("state", keep=3), lambda r: r["state"]))
    scaling = sorted({r["scaling"] for r in rows})
    notes = [
        f"{' and '.join(scaling) or 'weak'} scaling; {per_s} is the mean over repetitions "
        f"that count of n; {INTERVAL}; CV the coefficient of variation; * = noisy (CV > "
        f"{100 * NOISY_CV:g}%)."
    ]
    notes += [line for line in baselines_note(rows).splitlines() if line]
    if any(r["predicted_efficiency"] is not None for r in rows):
        notes.append(
            "predicted eff: the efficiency model's, the 1-device baseline's compute over that "
            "compute and the scale's measured allreduce (where the efficiency goes: below)."
        )
    if transformer:
        notes.append(
            "TFLOPS/dev and MFU: PaLM's count of the model's FLOPs (6 x parameters + "
            "attention, a token) over the timed steps, against the device's peak for its "
            "precision (a GPU's from a table with its sources, a CPU's from a matmul measured "
            "beside the run); peak MiB/dev: the largest rank's peak memory (a GPU's most "
            "tensors held at once, a CPU rank's peak resident set): docs/transformers.md."
        )
    energy = {str(why) for r in rows if (why := r["unmeasured"].get("images_per_joule"))}
    if energy_shown:
        notes.append(
            f"{counted}/J: {counted} trained per joule of the devices' energy over the timed "
            "steps (NVML on GPUs, the CPU packages' RAPL counters)"
            + (f"; not measured: {'; '.join(sorted(energy))}" if energy else "")
            + "."
        )
    elif energy:
        notes.append(f"images_per_joule: {'; '.join(sorted(energy))}")
    notes += disturbed.notes(rows, lambda r: f"{r['framework']} {r['model']} {scale_of(r)}")
    notes += [note] if (note := slowed_note(rows)) else []
    notes += skipped  # metric lines left out on ingest, by run, file and line
    title = "Throughput, speedup and efficiency"
    body = [[cell(r) for _, cell in made] for r in rows]
    return Table.of(title, [c for c, _ in made], body, notes)


def scale_of(r: ResultRow) -> str:
    return scale_label(r["nodes"], r["ranks_per_node"])


def throughput_cell(r: ResultRow) -> str:
    """The mean, marked * where its repetitions vary more than NOISY_CV (the CV column says
    by how much, where it fits), ~ where other work disturbed runs it counts and ! where the
    test-only slowdown made it."""
    return (
        fmt(r["throughput"], 1) + (" *" if r["noisy"] else "") + disturbed.mark(r) + slowed_mark(r)
    )


def batch_cell(r: ResultRow) -> str:
    return str(r["per_device_batch"]) + ("" if r["scaling"] == "weak" else " (strong)")


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def cv_cell(r: ResultRow) -> str:
    cv = r["throughput_cv"]
    return (fmt(100 * cv, 1, "%") if cv is not None else "-") + (" *" if r["noisy"] else "")


def baselines_note(rows: list[ResultRow]) -> str:
    """Which run each speedup is measured against (kept out of the table to keep it narrow)."""

    # Each model, dataset, precision and batch (per device for weak scaling, global for
    # strong: analysis.Point.baseline_key) has its own baseline; those that vary in the rows
    # are named, so two baselines with the same label are told apart.
    def batch(r: ResultRow) -> str:
        return (
            f"batch {r['per_device_batch']}/device"
            if r["scaling"] == "weak"
            else f"global batch {r['global_batch']}"
        )

    parts = {
        "dataset": lambda r: r["dataset"],
        "precision": lambda r: r["precision"],
        "batch": batch,
        "device": lambda r: f"on {r.get('device') or '-'}",
    }
    varying = [f for f in parts.values() if len({f(r) for r in rows}) > 1]
    seen = {}
    for r in rows:
        if r["baseline"]:
            what = " ".join([r["model"]] + [f(r) for f in varying])
            seen[(r["experiment"], what, r["baseline"])] = r["baseline_run_id"]
    return "\n".join(
        f"baseline of {exp} {what}: best 1-device point {label}, run {rid}"
        for (exp, what, label), rid in sorted(seen.items())
    )


def _ms(seconds: float | None) -> str:
    return fmt(None if seconds is None else 1000 * seconds, 1)


def efficiency_table(rows: list[ResultRow]) -> Table | None:
    """Per point: the measured step split into compute, exposed communication and the rest,
    the benchmark's allreduce at its scale, and the model's step and efficiency beside the
    measured efficiency. None when no point has any of it."""
    rows = [r for r in rows if r.get("throughput") is not None]
    if not any(
        r.get("compute_time_s") is not None or r.get("comm_busbw_gbps") is not None for r in rows
    ):
        return None
    schedules = len({r["lr_schedule"] for r in rows}) > 1
    models = len({r["model"] for r in rows}) > 1  # else the results table above names it
    columns = (
        ([Column("model", keep=2)] if models else [])
        + [Column("framework", keep=2)]
        + ([Column("lr schedule", keep=3, short="schedule")] if schedules else [])
        + [
            Column("scale", right=True),
            Column("devices", right=True, keep=4, short="dev"),
            Column("step ms", right=True),
            Column("compute ms", right=True),
            Column("exposed comm ms", right=True, short="exp. comm ms"),
            Column("rest ms", right=True),
            Column("allreduce ms", right=True, keep=3),
            Column("busbw GB/s", right=True, keep=3),
            Column("predicted step ms", right=True, keep=5, short="pred. step ms"),
            Column("predicted eff", right=True, short="pred. eff"),
            Column("measured eff", right=True, short="eff"),
        ]
    )
    body = []
    for r in rows:
        body.append(
            ([r["model"]] if models else [])
            + [r["framework"]]
            + ([r["lr_schedule"] or "-"] if schedules else [])
            + [
                scale_of(r),
                str(r["ranks"]),
                _ms(r["step_time_s"]),
                _ms(r["compute_time_s"]),
                _ms(r["exposed_comm_s"]),
                _ms(r["other_s"]),
                _ms(r["comm_time_s"]),
                fmt(r["comm_busbw_gbps"], 3),
                _ms(r["predicted_step_s"]),
                fmt(r["predicted_efficiency"]),
                fmt(r["efficiency"]),
            ]
        )
    notes = [
        "step: the timed steps' mean (global batch / throughput). compute: a step without "
        "gradient synchronisation; exposed comm: what a synchronised step takes beyond it "
        "(the communication not hidden behind compute); rest: the step less both (data "
        "waits, the loop; negative where the probe's steps ran slower than the timed ones). "
        "Medians over repetitions, measured after the timed steps.",
        "allreduce and busbw: the communication benchmark of the scale (one step's gradient "
        "in the framework's buckets over its backend; busbw = algbw x 2(n-1)/n, as "
        "nccl-tests define it). predicted step = the 1-device baseline's compute + that "
        "allreduce, none of it hidden; predicted eff = that compute / predicted step.",
    ]
    seen: dict[str, list[str]] = {}
    for r in rows:
        for key in ("compute_time_s", "comm_busbw_gbps", "predicted_efficiency"):
            why = (r.get("unmeasured") or {}).get(key)
            if why and r["ranks"] > 1:
                seen.setdefault(f"{key}: {why}", []).append(f"{r['framework']} {scale_of(r)}")
    notes += [f"not measured, {what} ({', '.join(where)})" for what, where in seen.items()]
    below = [
        f"{r['framework']} {scale_of(r)} ({_ms(r['other_s'])} ms)"
        for r in rows
        if r["other_s"] is not None and r["other_s"] < 0
    ]
    if below:  # said where it happens, not only in the general note above
        notes.append(
            f"rest below zero at {', '.join(below)}: compute, measured apart after the timed "
            "steps, ran slower than those steps (a busy machine); read compute and exposed "
            "comm there as upper bounds"
        )
    return Table.of("Where the efficiency goes", columns, body, notes)


def explained_note(rows: list[ResultRow]) -> str:
    """Why the benchmark, the model or the energy is missing, once per reason and with the
    points it concerns (`unmeasured` in the rows: CSV and JSON carry it per point). A
    single device has nothing to communicate: not worth a line."""
    seen: dict[str, set[str]] = {}
    for r in rows:
        if r.get("throughput") is None:
            continue
        for key in ("comm_busbw_gbps", "predicted_efficiency", "images_per_joule"):
            why = (r.get("unmeasured") or {}).get(key)
            if why and (r["ranks"] > 1 or key == "images_per_joule"):
                seen.setdefault(f"{key}: {why}", set()).add(
                    f"{r['framework']} {scale_label(r['nodes'], r['ranks_per_node'])}"
                )
    return "\n".join(f"{what} ({', '.join(sorted(where))})" for what, where in seen.items())


def _cell(value: Any) -> Any:
    """A CSV cell: a number as itself, text neutralised for a spreadsheet (text.csv_cell)."""
    if isinstance(value, list):
        value = " ".join(map(str, value))
    elif isinstance(value, dict):  # unmeasured: field -> why; disturbed: run -> reasons
        value = "; ".join(
            f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
        )
    return csv_cell(value)


def results_csv(rows: Sequence[ResultRow]) -> str:
    out = io.StringIO()
    if not rows:
        return ""
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    return out.getvalue()


def results_json(rows: Sequence[ResultRow]) -> str:
    return json.dumps(rows, indent=2, allow_nan=False)


# `dlscale status`'s columns, the first to go on a narrow terminal first: what a glance at
# the queue needs (run, model, scale, repetition, state, throughput, the reason) stays, and
# the job id goes late: it is what scontrol, sacct and a site's support desk ask for.
STATUS_DROPPED_FIRST = ("nodes", "batch", "experiment", "framework", "elapsed", "job", "axes")


def status_table(queue: list, width: int = 10_000) -> str:
    """`dlscale status`: the queue rows (tracking/queue.py) plus the run id and experiment, as
    plain aligned columns fitted to `width`: a column with one value in every row is said
    once above the table, then the least needed go first (STATUS_DROPPED_FIRST), and a line
    names them. Not a rich Table: laying one out measured and wrapped every cell (2.6 s for
    1,000 runs); this is a join per row. The reason comes last and whole (it is cut at 80
    characters already), so a narrow terminal wraps only that line's end."""
    names: tuple[str, ...] = ("run", "experiment", *QUEUE_COLUMNS)  # as head shows them
    head_all = ("run", "experiment", *queue_header(queue))
    # measured as they will be shown: a name's control or format character as its escape
    cells = [tuple(printable(str(c)) for c in (q.run_id, q.experiment, *q.cells())) for q in queue]
    # the axes column only where a declared framework's run has axes of its own
    keep = [i for i, n in enumerate(names) if n != "axes" or any(q.axes for q in queue)]
    said = []
    for n in ("experiment", "framework", "model"):
        i = names.index(n)
        values = {r[i] for r in cells}
        if len(cells) > 1 and len(values) == 1:
            keep.remove(i)
            said.append(f"{n} {values.pop()}")
    left = []

    def widths() -> list[int]:
        return [max([len(head_all[i])] + [len(r[i]) for r in cells]) for i in keep[:-1]]

    for n in STATUS_DROPPED_FIRST:
        # the fixed columns and a reason of 20 characters at the least
        if sum(widths()) + 2 * (len(keep) - 1) + 20 <= width:
            break
        i = names.index(n)
        if i in keep:
            keep.remove(i)
            left.append(head_all[i])
    head = tuple(head_all[i] for i in keep)
    rows = [tuple(r[i] for i in keep) for r in cells]
    shown = tuple(names[i] for i in keep)
    right = {shown.index(c) for c in ("batch", "rep", "elapsed", "throughput") if c in shown}
    # One format for every row: str.format pads in C.
    form = "  ".join(
        [f"{{:{'>' if i in right else '<'}{w}}}" for i, w in enumerate(widths())] + ["{}"]
    )
    top = form.format(*head).rstrip()
    title = "Runs" + (f" ({', '.join(said)})" if said else "")
    lines = [title, top, "─" * min(len(top), width), *(form.format(*r).rstrip() for r in rows)]
    if left:
        lines.append(f"left out at {width} columns: {', '.join(left)}")
    return "\n".join(lines)


def breakdown_text(r: ResultRow) -> str:
    """One point's step time split as the efficiency model reads it (compute, exposed
    communication, the rest) beside measured and predicted efficiency: why the two differ,
    in one line ("" where the point has no breakdown)."""
    times = [r.get(k) for k in ("step_time_s", "compute_time_s", "exposed_comm_s", "other_s")]
    numbers = [float(v) for v in times if isinstance(v, (int, float))]
    if len(numbers) != len(times):
        return ""
    step, compute, exposed, rest = numbers
    ms = 1000.0
    parts = (
        f"step {step * ms:.1f} ms = compute {compute * ms:.1f} + exposed comm "
        f"{exposed * ms:.1f} + rest {rest * ms:.1f}"
    )
    if rest < 0:  # compute comes from the probe's steps, after the timed ones: not a cost
        parts += " (the probe's steps ran slower than the timed ones: noise, not a saving)"
    eff = f"efficiency {fmt(r.get('efficiency'))} measured, {fmt(r.get('predicted_efficiency'))}"
    return f"{parts}; {eff} predicted (compute + allreduce model)"
