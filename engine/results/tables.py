"""Text renderings of runs and results, shared by the CLI (rich) and exports (csv, json)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rich.table import Table

from ..text import csv_cell, printable
from ..tracking.queue import QUEUE_COLUMNS, queue_header
from . import report_tables
from .formatting import fmt, throughput_text
from .formatting import slowed_note as slowed_note  # the TUI's too (it imports tables)
from .points import throughput_unit


def results_table(rows: list[dict[str, Any]]) -> Table:
    experiments = sorted({r["experiment"] for r in rows})
    one = len(experiments) == 1  # then its name goes in the title, and the table narrows
    title = (
        f"Results of {experiments[0]}" if one else "Results"
    ) + " (weak scaling unless noted; * = noisy, CV > 5%)"
    t = Table(title=title, title_justify="left")
    columns = [
        ("model", "left"),
        ("framework", "left"),
        ("scale", "right"),
        ("devices", "right"),
        ("batch/dev", "right"),
        ("precision", "left"),
        ("n", "right"),
        (f"{throughput_unit(rows)} ± CI95", "right"),
        ("speedup", "right"),
        ("efficiency", "right"),
        ("baseline", "left"),
        ("TTA s", "right"),
        ("state", "left"),
    ]
    # Time-to-accuracy, the efficiency model and the energy where any point has them
    # (explained_note says why not otherwise): a narrow table stays narrow.
    tta = any(r["time_to_accuracy_s"] is not None for r in rows)
    if not tta:
        columns.remove(("TTA s", "right"))
    if not one:
        columns.insert(0, ("experiment", "left"))
    loaders = len({r["loader"] for r in rows}) > 1  # then the same point shows once a loader
    if loaders:
        columns.insert(columns.index(("scale", "right")), ("loader", "left"))
    schedules = len({r.get("lr_schedule") for r in rows}) > 1
    if schedules:
        columns.insert(columns.index(("scale", "right")), ("lr schedule", "left"))
    axes = any(r.get("axes") for r in rows)  # a declared framework's own axes' values
    if axes:
        columns.insert(columns.index(("scale", "right")), ("axes", "left"))
    devices = len({r.get("device") for r in rows}) > 1  # CPU and GPU points side by side
    if devices:
        columns.insert(columns.index(("framework", "left")) + 1, ("device", "left"))
    extra = [
        (key, col)
        for key, col in (("images_per_joule", "images/J"),)
        if any(r.get(key) is not None for r in rows)
    ]
    at = columns.index(("baseline", "left"))
    columns[at:at] = [(col, "right") for _, col in extra]
    for col, just in columns:
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for r in rows:
        cells = (
            [
                r["model"],
                r["framework"],
                f"{r['nodes']}x{r['ranks_per_node']}",
                str(r["ranks"]),
                str(r["per_device_batch"]) + ("" if r["scaling"] == "weak" else " (strong)"),
                r["precision"],
                f"{r['n']}/{r['repetitions']}",
                throughput_text(r),
                fmt(r["speedup"]),
                fmt(r["efficiency"]),
            ]
            + [fmt(r.get(key), 1) for key, _ in extra]
            + [r["baseline"] or "-"]
            + ([fmt(r["time_to_accuracy_s"], 1)] if tta else [])
            + [r["state"]]
        )
        if axes:
            cells.insert(2, " ".join(f"{k}={v}" for k, v in (r.get("axes") or {}).items()))
        if schedules:
            cells.insert(2, r.get("lr_schedule") or "-")
        if loaders:
            cells.insert(2, r["loader"])
        if devices:
            cells.insert(2, r.get("device") or "-")
        t.add_row(*([] if one else [r["experiment"]]), *cells)
    return t


def baselines_note(rows: list[dict[str, Any]]) -> str:
    """Which run each speedup is measured against (kept out of the table to keep it narrow)."""

    # Each model, dataset, precision and batch (per device for weak scaling, global for
    # strong: analysis.Point.baseline_key) has its own baseline; those that vary in the rows
    # are named, so two baselines with the same label are told apart.
    def batch(r: dict[str, Any]) -> str:
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


# The report's long headers, shortened for a terminal (the title gives the unit).
_SHORT = {
    "step ms": "step",
    "compute ms": "compute",
    "exposed comm ms": "exp. comm",
    "rest ms": "rest",
    "allreduce ms": "allreduce",
    "busbw GB/s": "busbw GB/s",
    "predicted step ms": "pred. step",
    "predicted eff": "pred. eff",
    "measured eff": "eff",
}


def efficiency_table(rows: list[dict[str, Any]]) -> Table | None:
    """The report's "where the efficiency goes" table for a terminal: times in ms."""
    made = report_tables.efficiency_table(rows)
    if made is None:
        return None
    drop = {"devices"} | ({"model"} if len({r["model"] for r in rows}) == 1 else set())
    keep = [i for i, h in enumerate(made.headers) if h not in drop]
    t = Table(
        title="Where the efficiency goes (ms per step; pred.: the model, 1-device "
        "compute + the benchmarked allreduce)",
        title_justify="left",
    )
    for i in keep:
        h = made.headers[i]
        t.add_column(_SHORT.get(h, h), justify="right" if i in made.right else "left", no_wrap=True)
    for row in made.rows:
        t.add_row(*[row[i] for i in keep])
    return t


def explained_note(rows: list[dict[str, Any]]) -> str:
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
                    f"{r['framework']} {r['nodes']}x{r['ranks_per_node']}"
                )
    return "\n".join(f"{what} ({', '.join(sorted(where))})" for what, where in seen.items())


def _cell(value: Any) -> Any:
    """A CSV cell: a number as itself, text neutralised for a spreadsheet (text.csv_cell)."""
    if isinstance(value, list):
        value = " ".join(map(str, value))
    elif isinstance(value, dict):  # unmeasured: field -> why
        value = "; ".join(f"{k}: {v}" for k, v in value.items())
    return csv_cell(value)


def results_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    if not rows:
        return ""
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    return out.getvalue()


def results_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, allow_nan=False)


def status_table(queue: list) -> str:
    """`dlscale status`: the queue rows (engine.queue) plus the run id and experiment, as
    plain aligned columns. Not a rich Table: laying one out measured and wrapped every cell
    (2.6 s for 1,000 runs); this is a join per row. The reason comes last and whole (it is
    cut at 80 characters already), so a narrow terminal wraps only that line's end."""
    names: tuple[str, ...] = ("run", "experiment", *QUEUE_COLUMNS)  # as head shows them
    # the axes column only where a declared framework's run has axes of its own
    keep = [i for i, n in enumerate(names) if n != "axes" or any(q.axes for q in queue)]
    head = tuple(("run", "experiment", *queue_header(queue))[i] for i in keep)
    # measured as they will be shown: a name's control or format character as its escape
    rows = [
        tuple(
            printable(str(c))
            for i, c in enumerate((q.run_id, q.experiment, *q.cells()))
            if i in keep
        )
        for q in queue
    ]
    names = tuple(names[i] for i in keep)
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(len(head) - 1)]
    right = {names.index(c) for c in ("batch", "rep", "elapsed", "throughput")}

    # One format for every row: str.format pads in C.
    form = "  ".join(
        [f"{{:{'>' if i in right else '<'}{w}}}" for i, w in enumerate(widths)] + ["{}"]
    )
    top = form.format(*head).rstrip()
    return "\n".join(["Runs", top, "─" * len(top), *(form.format(*r).rstrip() for r in rows)])


def breakdown_text(r: dict[str, Any]) -> str:
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
