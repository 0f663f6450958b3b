"""The results table as the Results screen shows it: the one table `dlscale results` and the
report show (engine.results.tables.results_table), its columns under their short headings,
those that fit whole at the screen's width, the least important (Column.keep) left out
first; a column with one value in every row is named above the table instead. What a
point's row leaves out is said under the table, and enter shows the point in full."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.results import disturbed, tables
from ..engine.results.rows import ResultRow
from ..engine.results.table import Table
from .columns import fit, widest

FROZEN_MOST = 3  # text columns at the left that stay put when the table scrolls sideways


@dataclass
class Shown:
    """The table, which of its columns are shown (indices, in the table's order), and
    which hold one value in every row (index -> the value, said above the table)."""

    table: Table
    shown: list[int] = field(default_factory=list)
    constants: dict[int, str] = field(default_factory=dict)
    widths: dict[int, int] = field(default_factory=dict)

    def heading(self, i: int) -> str:
        return self.table.columns[i].narrow

    @property
    def frozen(self) -> int:
        """The text columns (model, framework, axes) before the first number, at most 3."""
        n = 0
        for i in self.shown[:FROZEN_MOST]:
            if self.table.columns[i].right:
                break
            n += 1
        return n


def shown(results: list[ResultRow], room: int) -> Shown:
    """The results table fitted into `room` cells: constant columns named above it (the
    numbers a study is read for always stay), then the most important that fit whole."""
    table = tables.results_table(results)
    cols = table.columns
    rows = table.rows
    read_for = {i for i, c in enumerate(cols) if c.keep == 0 and c.right}
    constants = {
        i: rows[0][i]
        for i in range(len(cols))
        if i not in read_for and len(rows) > 1 and all(row[i] == rows[0][i] for row in rows)
    }
    widths = {
        i: widest(cols[i].narrow, (row[i] for row in rows))
        for i in range(len(cols))
        if i not in constants
    }
    priority = sorted(widths, key=lambda i: (cols[i].keep, i))
    return Shown(table, sorted(fit(widths, priority, room)), constants, widths)


def batch_of(r: ResultRow) -> int:
    """The batch a point's curve keeps: per device (weak scaling), global (strong)."""
    return int(r["global_batch"] if r["scaling"] == "strong" else r["per_device_batch"])


def batch_words(r: ResultRow) -> str:
    strong = r["scaling"] == "strong"
    return f"global batch {batch_of(r)}" if strong else f"batch {batch_of(r)}"


def why_missing(r: ResultRow) -> str:
    """Why this result's explained numbers are missing, one clause each; "" when none is."""
    why = r["unmeasured"] or {}
    counted = tables.throughput_unit([r]).removesuffix("/s")
    # the explained numbers by their short headings in the table, each with its value
    said = (
        ("pred. eff", "predicted_efficiency", r["predicted_efficiency"]),
        (f"{counted}/J", "images_per_joule", r["images_per_joule"]),
    )
    return "; ".join(
        f"{word} -: {why[key]}" for word, key, value in said if value is None and why.get(key)
    )


def point_words(r: ResultRow) -> str:
    """Which point a row is, in a few words: `gpt2-large 1x2 batch 16 mode=ok`."""
    axes = "".join(f" {k}={v}" for k, v in sorted((r["axes"] or {}).items()))
    return f"{r['framework']} {r['model']} {tables.scale_of(r)} {batch_words(r)}{axes}"


def baseline_words(r: ResultRow) -> str:
    if not r["baseline"]:
        return "no baseline (no completed 1-device point)"
    return f"baseline {r['baseline']}, run {r['baseline_run_id']}"


def left_out(view: Shown, index: int) -> list[str]:
    """A row's cells the screen has no room for, by their short headings (a "-" is
    explained apart, the devices are in the scale)."""
    row = view.table.rows[index]
    return [
        f"{view.heading(i)} {row[i]}"
        for i, c in enumerate(view.table.columns)
        if i not in view.shown
        and i not in view.constants
        and c.heading != "devices"
        and row[i] not in ("", "-")
    ]


def in_full(r: ResultRow, view: Shown, index: int) -> list[str]:
    """Every cell of a point, by its full heading, with its baseline, its step-time
    breakdown and why any number is missing: what enter shows."""
    lines = [point_words(r), ""]
    for c, cell in zip(view.table.columns, view.table.rows[index]):
        lines.append(f"{c.heading:<22} {cell or '-'}")
    lines += ["", baseline_words(r)]
    for extra in (disturbed.point_text(r), tables.breakdown_text(r), why_missing(r)):
        if extra:
            lines += ["", extra]
    return lines
