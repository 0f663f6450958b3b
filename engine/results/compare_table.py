"""`dlscale compare`'s table, as the one table model (table.Table): the pairs of
compare.rows side by side, then the methods, the environment differences and the points
without a partner as its notes. The B/A ratio and its interval are never left out."""

from __future__ import annotations

from ..runs import scale_label
from .compare import ALPHA, RATIO_METHOD, TEST_METHOD
from .formatting import fmt, slowed_mark, slowed_note
from .rows import CompareRow, CompareSide, SideBySide
from .table import Column, Table


def _throughput(side: CompareSide | None) -> str:
    if side is None or side["throughput"] is None:
        return "-"
    ci = f" ± {side['throughput_ci95']:,.1f}" if side["throughput_ci95"] is not None else ""
    return f"{side['throughput']:,.1f}{ci}{' *' if side['noisy'] else ''}{slowed_mark(side)}"


def ratio_text(r: CompareRow) -> str:
    """B/A with its interval, as every front end shows it."""
    if r["ratio"] is None:
        return "-"
    if r["ratio_low"] is None:
        return f"{r['ratio']:.3f}"
    high = "unbounded" if r["ratio_high"] is None else f"{r['ratio_high']:.3f}"
    return f"{r['ratio']:.3f} [{r['ratio_low']:.3f}, {high}]"


def _test(r: CompareRow) -> str:
    if r["p_value"] is None:
        return "- (needs n>=2 a side)" if r["matched"] else "-"
    return f"{r['p_value']:.3g}" + (" yes" if r["significant"] else " no")


def _pair(a: float | None, b: float | None, digits: int = 2) -> str:
    return f"{fmt(a, digits)} / {fmt(b, digits)}"


COLUMNS = (
    Column("model"),
    Column("framework", keep=2),
    Column("scale", right=True),
    Column("batch/dev", right=True, keep=4, short="batch"),
    Column("A images/s ± CI95", right=True, short="A ± CI95"),
    Column("B images/s ± CI95", right=True, short="B ± CI95"),
    Column("B/A [95% interval]", right=True, short="B/A [95%]"),
    Column("n A / B", right=True, keep=4, short="n"),
    Column("p (different?)", right=True, keep=3, short="p"),
    Column("speedup A / B", right=True, keep=5),
    Column("efficiency A / B", right=True, keep=5),
    Column("env differences", keep=6, short="env"),
)


def title(data: SideBySide) -> str:
    (sa, sb) = data["sites"]
    return f"A = {data['a']} ({sa})  vs  B = {data['b']} ({sb})  (* = noisy, CV > 5%)"


def comparison_rows(data: SideBySide) -> list[list[str]]:
    """The matched pairs as the cells of COLUMNS: the table's, and any front end's."""
    out = []
    for r in data["rows"]:
        a, b = r["a"], r["b"]
        if not r["matched"] or a is None or b is None:
            continue
        out.append(
            [
                r["model"],
                r["framework"],
                scale_label(r["nodes"], r["ranks_per_node"]),
                str(r["per_device_batch"]),
                _throughput(a),
                _throughput(b),
                ratio_text(r),
                f"{a['n']} / {b['n']}",
                _test(r),
                _pair(a["speedup"], b["speedup"]),
                _pair(a["efficiency"], b["efficiency"]),
                "; ".join(f"{k}: {x} -> {y}" for k, (x, y) in r["env_differences"].items()) or "-",
            ]
        )
    return out


def comparison_table(data: SideBySide) -> Table:
    return Table.of(title(data), COLUMNS, comparison_rows(data), comparison_notes(data))


def comparison_notes(data: SideBySide) -> list[str]:
    """What follows the table: the methods, the differences over the whole experiments and
    the points that have no partner (listed, not dropped)."""
    notes = [f"B/A: {RATIO_METHOD}; p: {TEST_METHOD} (yes below {ALPHA:g})."]
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
        assert point is not None
        notes.append(
            f"only in {side} ({point['experiment']}): {r['framework']} {r['model']} "
            f"{r['dataset']} {scale_label(r['nodes'], r['ranks_per_node'])} "
            f"b{r['per_device_batch']} {r['precision']} {r['loader']}: {_throughput(point)} "
            f"(n={point['n']}); {other} has no such point"
        )
    return notes
