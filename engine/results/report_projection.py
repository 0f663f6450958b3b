"""The report's "Scaling beyond what was measured": each family's measured rows and its
projection (results/projection.py) in one table that says which is which, the links the
projection used, and the held-out check (an alert where it missed its interval)."""

from __future__ import annotations

from typing import Any

from ..runs import per_second
from . import projection
from .formatting import fmt
from .projected import terms_said
from .report_tables import Table

TITLE = "Scaling beyond what was measured"


def _interval(v: dict[str, float] | None, digits: int) -> str:
    if v is None:
        return "-"
    return (
        f"{fmt(v['value'], digits)} [{fmt(v['ci95_low'], digits)}, {fmt(v['ci95_high'], digits)}]"
    )


def link_line(lk: dict[str, Any]) -> str:
    """A link as projection.py used it: its source, bandwidth, latency and inputs."""
    lo, hi = lk["bandwidth_ci95_gbps"]
    return (
        f"{lk['tier']} link {lk['source']}: {fmt(lk['bandwidth_gbps'], 3)} GB/s "
        f"[{fmt(lo, 3)}, {fmt(hi, 3)}], latency {fmt(lk['latency_us'], 1)} us "
        f"(from {', '.join(lk['inputs'])})" + (f"; {lk['note']}" if lk["note"] else "")
    )


def held_out_line(fam: dict[str, Any]) -> tuple[str, bool]:
    """(the held-out check in words, whether it missed its interval)."""
    held = fam.get("held_out")
    if held is None:
        return f"{fam['family']}: fewer than 3 scales measured, no held-out check.", False
    scale = f"{held['nodes']}x{held['ranks_per_node']}"
    if "why" in held:
        return f"{fam['family']}: held-out check at {scale} not possible: {held['why']}.", False
    x = held["projected_throughput"]
    line = (
        f"{fam['family']}: held-out check: {scale} projected from {', '.join(held['from'])} "
        f"at {fmt(x['value'], 1)} {per_second([fam.get('unit')])} "
        f"[{fmt(x['ci95_low'], 1)}, {fmt(x['ci95_high'], 1)}]"
        f", measured {fmt(held['measured_throughput'], 1)}: error {100 * held['error']:+.1f}%"
    )
    if held["outside_interval"]:
        return line + ", OUTSIDE its interval.", True
    return line + ", within its interval.", False


def projection_table(families: list[dict[str, Any]], to: int, to_from: str) -> Table | None:
    if not families:
        return None
    headers = [
        "family",
        "scale",
        "devices",
        "measured/projected",
        f"{per_second(f.get('unit') for f in families)} [95%]",
        "speedup [95%]",
        "efficiency [95%]",
        "link",
    ]
    body = []
    notes = [
        f"Projected up to {to} nodes ({to_from}) from each family's largest measured "
        "single-node point: its step, plus at each scale the wait for the slowest rank "
        "(the step-time jitter's expected maximum), the small-batch overhead (strong "
        "scaling) and the hierarchical allreduce of one step's gradient (in the node, then "
        "across nodes; each tier fitted from the communication benchmark's sweeps or "
        "stated) not hidden behind compute. Each input says where it came from: measured, "
        "stated or the calibrated default. [95%]: the inputs' spread (a Monte Carlo over "
        "the repetitions and the fits) widened by the model's own error, calibrated on "
        "published scaling leaving each source out (docs/measuring.md). A projection is a "
        "model, not a measurement: the held-out checks below say how far it was right here."
    ]
    alerts: list[str] = []
    for fam in families:
        for r in fam["rows"]:
            link = r.get("link", "-") if r["kind"] == projection.PROJECTED else "-"
            body.append(
                [
                    fam["family"],
                    f"{r['nodes']}x{r['ranks_per_node']}",
                    str(r["ranks"]),
                    r["kind"],
                    r["why"] if "why" in r else _interval(r.get("throughput"), 1),
                    _interval(r.get("speedup"), 2),
                    _interval(r.get("efficiency"), 2),
                    link,
                ]
            )
        if fam.get("why"):
            notes.append(f"{fam['family']}: not projected: {fam['why']}.")
        notes += [f"{fam['family']}: input: {line}." for line in fam.get("inputs") or []]
        notes += [f"{fam['family']}: {link_line(lk)}." for lk in (fam.get("links") or {}).values()]
        alerts += [f"{fam['family']}: {note}." for note in fam.get("notes") or []]
        if (top := projection.largest(fam)) is not None:
            notes.append(f"{fam['family']}: {terms_said(top)}.")
        line, missed = held_out_line(fam)
        (alerts if missed else notes).append(line)
    return Table(TITLE, headers, body, notes, {2, 4, 5, 6}, alerts)
