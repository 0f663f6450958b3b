"""The Results table's columns and each point's cells, in the words of `dlscale results`
(engine.results.tables), with headings short enough for 80 columns: what the Results screen
shows of a point in its row, in the line under the table, and in full (enter)."""

from __future__ import annotations

from ..engine.results import tables
from ..engine.results.formatting import throughput_text
from ..engine.results.rows import ResultRow

# The columns in the order shown, and the order they are given room in at 80 columns: the
# numbers a study is read for first, then what tells the rows apart, then the rest.
SHOWN: tuple[str, ...] = ("model", "framework", "axes", "scale", "dev", "batch", "n")
SHOWN += ("throughput", "speedup", "eff.", "pred. eff.", "per J", "TTA s", "state")
PRIORITY: tuple[str, ...] = ("scale", "throughput", "speedup", "eff.", "model", "axes", "batch")
PRIORITY += ("state", "n")
PRIORITY += ("framework", "dev", "pred. eff.", "per J", "TTA s")
FROZEN = ("model", "framework", "axes")  # stay put when the table scrolls sideways
# Their names in full, where a row's dropped cells are said in words.
LONG = {
    "dev": "devices",
    "batch": "batch per device",
    "n": "repetitions",
    "eff.": "efficiency",
    "pred. eff.": "predicted efficiency",
    "TTA s": "time to accuracy (s)",
}
# The columns whose "-" the engine explains (a result's `unmeasured`: field -> why).
EXPLAINED = {"pred. eff.": "predicted_efficiency", "per J": "images_per_joule"}
# Columns with one value in every row go: the line above the table names it.
HIDEABLE = ("model", "framework", "axes", "batch", "n", "state")


def batch_of(r: ResultRow) -> int:
    """The batch a point's curve keeps: per device (weak scaling), global (strong)."""
    return int(r["global_batch"] if r.get("scaling") == "strong" else r["per_device_batch"])


def batch_words(r: ResultRow) -> str:
    strong = r.get("scaling") == "strong"
    return f"global batch {batch_of(r)}" if strong else f"batch {batch_of(r)}"


def headings(results: list[ResultRow]) -> dict[str, str]:
    """Each column's heading: the throughput's in the rows' unit (tokens/s is not
    images/s), the axes' by their names (`mode`)."""
    per_s = tables.throughput_unit(results) if results else "images/s"
    axes = sorted({k for r in results for k in (r.get("axes") or {})})
    strong = any(r.get("scaling") == "strong" for r in results)
    return {
        **{c: c for c in SHOWN},
        "throughput": f"{per_s} ± CI95",
        "per J": f"{per_s.removesuffix('/s')}/J",
        "axes": " ".join(axes) or "axes",
        "batch": "global" if strong else "batch",
    }


def cells(r: ResultRow) -> dict[str, str]:
    """A point's cells by column, as `dlscale results` writes them."""
    axes = r.get("axes") or {}
    return {
        "model": r["model"],
        "framework": r["framework"],
        "axes": " ".join(str(axes[k]) for k in sorted(axes)),
        "scale": f"{tables.scale_of(r)}",
        "dev": str(r["ranks"]),
        "batch": str(batch_of(r)),
        "n": f"{r['n']}/{r['repetitions']}",
        "throughput": throughput_text(r),
        "speedup": tables.fmt(r["speedup"]),
        "eff.": tables.fmt(r["efficiency"]),
        "pred. eff.": tables.fmt(r.get("predicted_efficiency")),
        "per J": tables.fmt(r.get("images_per_joule"), 1),
        "TTA s": tables.fmt(r["time_to_accuracy_s"], 1),
        "state": r["state"],
    }


def why_missing(r: ResultRow, heads: dict[str, str]) -> str:
    """Why this result's explained columns are empty, one clause each; "" when none is."""
    why = r.get("unmeasured") or {}
    return "; ".join(
        f"{heads[col]} -: {why[key]}"
        for col, key in EXPLAINED.items()
        if r.get(key) is None and why.get(key)
    )


def point_words(r: ResultRow) -> str:
    """Which point a row is, in a few words: `gpt2-large 1x2 batch 16 mode=ok`."""
    axes = "".join(f" {k}={v}" for k, v in sorted((r.get("axes") or {}).items()))
    return f"{r['framework']} {r['model']} {tables.scale_of(r)} {batch_words(r)}{axes}"


def baseline_words(r: ResultRow) -> str:
    if not r.get("baseline"):
        return "no baseline (no completed 1-device point)"
    return f"baseline {r['baseline']}, run {r['baseline_run_id']}"


def in_full(r: ResultRow, heads: dict[str, str]) -> list[str]:
    """Every cell of a point, by its full name, with its baseline, its step-time breakdown
    and why any number is missing: what enter shows."""
    shown = cells(r)
    lines = [point_words(r), ""]
    for col in SHOWN:
        if col == "axes" and not r.get("axes"):
            continue
        name = heads[col] if col in ("throughput", "per J", "axes") else LONG.get(col, col)
        lines.append(f"{name:<22} {shown[col] or '-'}")
    lines += ["", baseline_words(r)]
    for extra in (tables.breakdown_text(r), why_missing(r, heads)):
        if extra:
            lines += ["", extra]
    return lines
