"""`dlscale compare`'s table: the pairs of compare.rows side by side, the environment
differences and the points without a partner, as rich renders them."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ..text import printable
from .compare import RATIO_METHOD, TEST_METHOD
from .formatting import fmt, slowed_mark, slowed_note


def _throughput(side: dict[str, Any] | None) -> str:
    if side is None or side["throughput"] is None:
        return "-"
    ci = f" ± {side['throughput_ci95']:,.1f}" if side["throughput_ci95"] is not None else ""
    return (
        f"{side['throughput']:,.1f}{ci}{' *' if side['noisy'] else ''}{slowed_mark(side)} "
        f"(n={side['n']})"
    )


def _ratio(r: dict[str, Any]) -> str:
    if r["ratio"] is None:
        return "-"
    if r["ratio_low"] is None:
        return f"{r['ratio']:.3f}"
    high = "unbounded" if r["ratio_high"] is None else f"{r['ratio_high']:.3f}"
    return f"{r['ratio']:.3f} [{r['ratio_low']:.3f}, {high}]"


def _test(r: dict[str, Any]) -> str:
    if r["p_value"] is None:
        return "- (needs n>=2 a side)" if r["matched"] else "-"
    return f"{r['p_value']:.3g}" + (" yes" if r["significant"] else " no")


def _pair(a: Any, b: Any, digits: int = 2) -> str:
    return f"{fmt(a, digits)} / {fmt(b, digits)}"


COLUMNS = (
    ("model", "left"),
    ("framework", "left"),
    ("scale", "right"),
    ("batch/dev", "right"),
    ("A images/s ± CI95", "right"),
    ("B images/s ± CI95", "right"),
    ("B/A [95% interval]", "right"),
    ("p (different?)", "right"),
    ("speedup A / B", "right"),
    ("efficiency A / B", "right"),
    ("env differences", "left"),
)


def title(data: dict[str, Any]) -> str:
    (sa, sb) = data["sites"]
    return f"A = {data['a']} ({sa})  vs  B = {data['b']} ({sb})  (* = noisy, CV > 5%)"


def comparison_rows(data: dict[str, Any]) -> list[list[str]]:
    """The matched pairs as the cells of COLUMNS: the table's, and any front end's."""
    return [
        [
            r["model"],
            r["framework"],
            f"{r['nodes']}x{r['ranks_per_node']}",
            str(r["per_device_batch"]),
            _throughput(r["a"]),
            _throughput(r["b"]),
            _ratio(r),
            _test(r),
            _pair(r["a"]["speedup"], r["b"]["speedup"]),
            _pair(r["a"]["efficiency"], r["b"]["efficiency"]),
            "; ".join(f"{k}: {x} -> {y}" for k, (x, y) in r["env_differences"].items()) or "-",
        ]
        for r in data["rows"]
        if r["matched"]
    ]


def comparison_table(data: dict[str, Any]) -> Table:
    t = Table(title=title(data), title_justify="left")
    for name, justify in COLUMNS:
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for cells in comparison_rows(data):
        # names and versions are text, not markup; made printable before rich's Text drops
        # a BEL and before the columns are measured
        t.add_row(*(Text(printable(c)) for c in cells))
    return t


def comparison_notes(data: dict[str, Any]) -> list[str]:
    """What follows the table: the methods, the differences over the whole experiments and
    the points that have no partner (listed, not dropped)."""
    notes = [f"B/A: {RATIO_METHOD}; p: {TEST_METHOD}."]
    slowed = slowed_note([side for r in data["rows"] for side in (r["a"], r["b"])])
    if slowed:
        notes.append(slowed)
    if data["env_differences"]:
        notes.append(
            "environment, A -> B: "
            + "; ".join(f"{k}: {x} -> {y}" for k, (x, y) in data["env_differences"].items())
        )
    for r in data["rows"]:
        if r["matched"]:
            continue
        side, other = ("A", "B") if r["a"] is not None else ("B", "A")
        point = r["a"] or r["b"]
        notes.append(
            f"only in {side} ({point['experiment']}): {r['framework']} {r['model']} "
            f"{r['dataset']} {r['nodes']}x{r['ranks_per_node']} b{r['per_device_batch']} "
            f"{r['precision']} {r['loader']}: {_throughput(point)}; {other} has no such point"
        )
    return notes
