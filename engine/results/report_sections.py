"""The report's tables of the results (as report_tables.Table data): the results themselves,
time-to-accuracy, loaders side by side, noisy points, reruns, and the published numbers
beside yours. Every number is a field of analysis.results' rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import tables
from .formatting import slowed_mark, slowed_note
from .points import speedup, throughput_unit
from .reference import LoadedReference, compare
from .report_tables import Table


def _scale(r: dict[str, Any]) -> str:
    return f"{r['nodes']}x{r['ranks_per_node']}"


def results_table(rows: list[dict[str, Any]], skipped: list[str]) -> Table:
    loaders = len({r["loader"] for r in rows}) > 1
    schedules = len({r.get("lr_schedule") for r in rows}) > 1
    devices = len({r.get("device") for r in rows}) > 1
    several = len({r["experiment"] for r in rows}) > 1  # a report of several experiments
    per_s = throughput_unit(rows)  # tokens/s is not images/s (a declared framework's unit)
    counted = per_s.removesuffix("/s")
    headers = (
        (["experiment", "site"] if several else [])
        + ["model", "framework"]
        + (["device"] if devices else [])
        + (["loader"] if loaders else [])
        + (["lr schedule"] if schedules else [])
        + [
            "scale",
            "devices",
            "batch/dev",
            "precision",
            "n",
            per_s,
            "CI95",
            "CV",
            "speedup",
            "efficiency",
            "speedup (own)",
            f"{counted}/J",
            "baseline",
            "state",
        ]
    )
    body = []
    for r in rows:
        body.append(
            ([r["experiment"], r.get("site") or "-"] if several else [])
            + [r["model"], r["framework"]]
            + ([r.get("device") or "-"] if devices else [])
            + ([r["loader"]] if loaders else [])
            + ([r.get("lr_schedule") or "-"] if schedules else [])
            + [
                _scale(r),
                str(r["ranks"]),
                str(r["per_device_batch"]) + ("" if r["scaling"] == "weak" else " (strong)"),
                r["precision"],
                f"{r['n']}/{r['repetitions']}",
                tables.fmt(r["throughput"], 1) + slowed_mark(r),
                tables.fmt(r["throughput_ci95"], 1),
                (
                    tables.fmt(100 * r["throughput_cv"], 1, "%")
                    if r["throughput_cv"] is not None
                    else "-"
                )
                + (" *" if r["noisy"] else ""),
                tables.fmt(r["speedup"]),
                tables.fmt(r["efficiency"]),
                tables.fmt(r["speedup_own"]),
                tables.fmt(r.get("images_per_joule"), 1),
                r["baseline"] or "-",
                r["state"],
            ]
        )
    first_num = headers.index("devices")
    right = set(range(first_num, headers.index("baseline"))) - {headers.index("precision")}
    scaling = sorted({r["scaling"] for r in rows})
    notes = [
        f"{' and '.join(scaling)} scaling; {per_s} is the mean over repetitions, CI95 "
        "the half-width of its Student-t 95% confidence interval, CV the coefficient "
        "of variation; * = noisy (CV > 5%)."
    ]
    notes += [line for line in tables.baselines_note(rows).splitlines() if line]
    energy = {
        str(why)
        for r in rows
        if (why := (r.get("unmeasured") or {}).get("images_per_joule")) is not None
    }
    notes += [
        f"{counted}/J: {counted} trained per joule of the devices' energy over the timed "
        "steps (NVML on GPUs, the CPU packages' RAPL counters)"
        + (f"; not measured: {'; '.join(sorted(energy))}" if energy else "")
        + "."
    ]
    notes += [note] if (note := slowed_note(rows)) else []
    notes += skipped  # metric lines left out on ingest, by run, file and line
    return Table("Throughput, speedup and efficiency", headers, body, notes, right)


def tta_table(rows: list[dict[str, Any]]) -> Table | None:
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
            tables.fmt(r["time_to_accuracy_s"], 1),
            tables.fmt(r["time_to_accuracy_ci95"], 1),
            r["reached_target"] or "-",
            tables.fmt(r["best_top1"], 3),
            tables.fmt(r["runtime_s"], 1),
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


def loader_table(rows: list[dict[str, Any]]) -> Table | None:
    loaders = sorted({r["loader"] for r in rows}, key=lambda x: (x != "native", x))
    if len(loaders) < 2:
        return None
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
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
            cells.append(tables.throughput_text(at) if at else "-")
        for ld in loaders[1:]:
            other = by.get(ld)
            ratio = speedup(
                other["throughput"] if other else None, base["throughput"] if base else None
            )
            cells.append(tables.fmt(ratio))
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


def noisy_table(rows: list[dict[str, Any]]) -> Table | None:
    noisy = [r for r in rows if r["noisy"]]
    if not noisy:
        return None
    body = [
        [
            r["model"],
            r["framework"],
            _scale(r),
            f"{r['n']}",
            tables.fmt(r["throughput"], 1),
            tables.fmt(100 * r["throughput_cv"], 1, "%"),
            " ".join(r["run_ids"]),
        ]
        for r in noisy
    ]
    return Table(
        "Noisy points (CV > 5%)",
        ["model", "framework", "scale", "n", throughput_unit(noisy), "CV", "runs"],
        body,
        [
            "These points vary more than 5% between repetitions: trust their mean "
            "less, look at the runs' nodes, or repeat them."
        ],
        {3, 4, 5},
    )


def rerun_table(reruns: list[dict[str, Any]]) -> Table | None:
    if not reruns:
        return None
    body = [
        [
            r["framework"],
            r["model"],
            f"{r['nodes']}x{r['ranks_per_node']}",
            r["rerun_of"],
            r["run_id"],
            tables.fmt(r["original_throughput"], 1),
            tables.fmt(r["rerun_throughput"], 1),
            tables.fmt(r["ratio"], 3),
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


def reference_table(ref: LoadedReference, rows: list[dict[str, Any]]) -> Table:
    p = ref.reference.paper
    body = []
    for c in compare(ref.reference, rows):
        digits = 1 if c["metric"].endswith("_s") else 2
        paper = {"=": "", "<": "< ", ">": "> "}[c["bound"]] + tables.fmt(c["paper_value"], digits)
        yours = tables.fmt(c["yours"], digits) if c["yours"] is not None else "not measured"
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
