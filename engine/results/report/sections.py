"""The report's own tables (the table model, table.Table): time-to-accuracy, loaders side by
side, noisy points, reruns, and the published numbers beside yours. Every number is a field
of analysis.results' rows; the results table itself is tables.results_table, the one every
front end shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runs import scale_label
from .. import disturbed
from ..formatting import fmt, throughput_text
from ..points import speedup, throughput_unit
from ..reference import LoadedReference, compare
from ..rows import ResultRow, number
from ..table import Table


def _scale(r: ResultRow) -> str:
    return scale_label(r["nodes"], r["ranks_per_node"])


def tta_table(rows: list[ResultRow]) -> Table | None:
    rows = [r for r in rows if r["best_top1"] is not None]
    if not rows:
        return None
    body = [
        [
            r["model"],
            r["framework"],
            _scale(r),
            str(r["ranks"]),
            str(r["per_device_batch"]),
            fmt(r["time_to_accuracy_s"], 1),
            fmt(r["time_to_accuracy_ci95"], 1),
            r["reached_target"] or "-",
            fmt(r["best_top1"], 3),
            fmt(r["runtime_s"], 1),
        ]
        for r in rows
    ]
    return Table(
        "Time-to-accuracy",
        [
            "model",
            "framework",
            "scale",
            "devices",
            "batch/dev",
            "TTA s",
            "CI95",
            "reached target",
            "best top-1",
            "runtime s",
        ],
        body,
        [
            "TTA: wall time from the first training step to the first evaluation at "
            "or above the target; 'reached target' counts the repetitions that got "
            "there of those that evaluated."
        ],
        set(range(3, 10)),
    )


def loader_table(rows: list[ResultRow]) -> Table | None:
    loaders = sorted({r["loader"] for r in rows}, key=lambda x: (x != "native", x))
    if len(loaders) < 2:
        return None
    groups: dict[tuple, dict[str, ResultRow]] = {}
    for r in rows:
        key = (
            r["model"],
            r["framework"],
            r["nodes"],
            r["ranks_per_node"],
            r["per_device_batch"],
            r["precision"],
        )
        groups.setdefault(key, {})[r["loader"]] = r
    body = []
    for (model, fw, n, rpn, batch, prec), by in sorted(groups.items()):
        base = by.get(loaders[0])
        cells = [model, fw, f"{n}x{rpn}", str(batch), prec]
        for ld in loaders:
            at = by.get(ld)
            cells.append(throughput_text(at) if at else "-")
        for ld in loaders[1:]:
            other = by.get(ld)
            ratio = speedup(
                other["throughput"] if other else None, base["throughput"] if base else None
            )
            cells.append(fmt(ratio))
        body.append(cells)
    headers = (
        ["model", "framework", "scale", "batch/dev", "precision"]
        + [f"{ld} images/s" for ld in loaders]
        + [f"{ld} / {loaders[0]}" for ld in loaders[1:]]
    )
    return Table(
        "Data loaders",
        headers,
        body,
        [f"throughput with each loader at the same point; the ratio is against {loaders[0]}."],
        set(range(5, len(headers))),
    )


def noisy_table(rows: list[ResultRow]) -> Table | None:
    noisy = [r for r in rows if r["noisy"]]
    if not noisy:
        return None
    body = [
        [
            r["model"],
            r["framework"],
            _scale(r),
            f"{r['n']}",
            fmt(r["throughput"], 1),
            fmt(100 * (r["throughput_cv"] or 0.0), 1, "%"),
            " ".join(r["run_ids"]),
        ]
        for r in noisy
    ]
    return Table(
        "Noisy points (CV > 5%)",
        ["model", "framework", "scale", "n", throughput_unit(noisy), "CV", "runs"],
        body,
        [
            "these points vary more than 5% between repetitions: trust their mean "
            "less, look at the runs' nodes, or repeat them."
        ],
        {3, 4, 5},
    )


# The signals the quiet table shows, in the words of its rows, with their thresholds
QUIET_SIGNALS = (
    ("others' share of the run's CPUs", "others_cpu_share", disturbed.OTHERS_CPU),
    ("run-queue wait of the run's threads", "run_queue_wait_share", disturbed.QUEUE_WAIT),
    ("CPU steal", "steal_share", disturbed.STEAL),
    ("I/O stall (machine)", "io_stall_share", disturbed.IO_STALL),
    ("memory stall (machine)", "memory_stall_share", disturbed.MEMORY_STALL),
    ("other processes on the run's GPU", "foreign_gpu_util_share", disturbed.FOREIGN_GPU),
    ("CPU stall (machine)", "cpu_stall_share", None),
)


def quiet_table(records: dict[str, dict[str, Any]], rows: list[ResultRow]) -> Table | None:
    """How quiet the machine was: each signal of the completed runs' interference records
    (by run id) over their timed steps, its median and largest, and how many runs it put
    past its threshold; the notes say how many runs were judged disturbed and what was done
    with them. None where no run has a record."""
    judged = {rid for r in rows for rid in r["run_ids"]} & set(records)
    if not judged:
        return None
    body = []
    for words, name, limit in QUIET_SIGNALS:
        values = sorted(v for rid in judged if (v := number(records[rid], name)) is not None)
        if not values:
            body.append([words, "0", "-", "-", "-", "-"])
            continue
        past = "-" if limit is None else str(sum(v > limit for v in values))
        body.append(
            [
                words,
                str(len(values)),
                fmt(100 * values[len(values) // 2], 1, "%"),
                fmt(100 * values[-1], 1, "%"),
                "-" if limit is None else fmt(100 * limit, 0, "%"),
                past,
            ]
        )
    flagged = {rid for r in rows for rid in r["disturbed"]}
    left = sum(len(r["disturbed"]) for r in rows if r["disturbed_action"] == disturbed.LEAVE_OUT)
    notes = [
        f"{len(flagged)} of {len(judged)} runs with a record were disturbed"
        + (f" ({left} left out of their points, as the spec asks)" if left else "")
        + "; a run is disturbed when a signal passes its threshold (others' share counts only "
        "with the run's threads waiting for a CPU): docs/measuring.md.",
        "CPU stall is the machine's, the run's own threads included: shown, not judged.",
    ]
    return Table(
        "How quiet was the machine",
        ["signal", "runs", "median", "largest", "threshold", "past it"],
        body,
        notes,
        {1, 2, 3, 4, 5},
    )


def rerun_table(reruns: list[dict[str, Any]]) -> Table | None:
    if not reruns:
        return None
    body = [
        [
            r["framework"],
            r["model"],
            f"{scale_label(r['nodes'], r['ranks_per_node'])}",
            r["rerun_of"],
            r["run_id"],
            fmt(r["original_throughput"], 1),
            fmt(r["rerun_throughput"], 1),
            fmt(r["ratio"], 3),
            r["state"],
        ]
        for r in reruns
    ]
    return Table(
        "Reruns (original against its exact repeat)",
        [
            "framework",
            "model",
            "scale",
            "original run",
            "rerun",
            "original images/s",
            "rerun images/s",
            "rerun / original",
            "state",
        ],
        body,
        [
            "A rerun repeats one run from its record (`dlscale rerun`); it is not "
            "pooled into the point's statistics above."
        ],
        {5, 6, 7},
    )


def reference_table(ref: LoadedReference, rows: list[ResultRow]) -> Table:
    p = ref.reference.paper
    body = []
    for c in compare(ref.reference, rows):
        digits = 1 if c["metric"].endswith("_s") else 2
        paper = {"=": "", "<": "< ", ">": "> "}[c["bound"]] + fmt(c["paper_value"], digits)
        yours = fmt(c["yours"], digits) if c["yours"] is not None else "not measured"
        where = "-"
        if c["your_devices"]:
            differs = [
                what
                for what, same in (("scale", c["same_scale"]), ("loader", c["same_loader"]))
                if not same
            ]
            where = f"{c['your_devices']} devices, {c['your_loader']} loader" + (
                f" (not the paper's {' or '.join(differs)})" if differs else ""
            )
        body.append(
            [
                c["metric"],
                c["unit"],
                c["framework"],
                c["model"],
                f"{c['paper_devices']} x {c['hardware']}",
                paper,
                yours,
                where,
                c["note"] or "-",
            ]
        )
    return Table(
        f"Against the paper: {p.authors}, {p.venue}",
        [
            "metric",
            "unit",
            "framework",
            "model",
            "paper's scale",
            "paper",
            "yours",
            "your point",
            "note",
        ],
        body,
        [
            f"{p.title}" + (f" ({p.url})" if p.url else ""),
            f"published numbers from {shown_path(Path(ref.path).resolve())}",
        ],
        {5, 6},
    )


def shown_path(path: str | Path) -> str:
    """A path as a reader of the report wants it: relative when it lies under the folder
    the report is made in (a checkout), absolute otherwise."""
    p = Path(path)
    return str(p.relative_to(Path.cwd()) if p.is_absolute() and p.is_relative_to(Path.cwd()) else p)
