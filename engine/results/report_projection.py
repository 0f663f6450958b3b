"""The report's "Scaling beyond what was measured": each family's measured rows and its
projection (results/projection.py) in one table that says which is which, the links the
projection used, and the held-out check (an alert where it missed its interval)."""

from __future__ import annotations

from typing import Any

from ..runs import per_second
from .formatting import fmt
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
        "single-node point plus the allreduce of one step's gradient at that scale, fitted "
        "per tier from the communication benchmark's message-size sweeps (alpha-beta model, "
        "nccl-tests' bus bandwidth), hidden behind compute as much as the step-time "
        "breakdown measured. [95%]: the 2.5th-97.5th percentiles of a Monte Carlo over the "
        "repetitions' spread and the fit's covariance. A projection is a model, not a "
        "measurement: see the held-out checks below for how far it was right here."
    ]
    alerts: list[str] = []
    for fam in families:
        for r in fam["rows"]:
            link = (
                "-"
                if r["kind"] == "measured"
                else "stated, not measured"
                if r.get("stated")
                else "measured fit"
            )
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
        notes += [f"{fam['family']}: {link_line(lk)}." for lk in (fam.get("links") or {}).values()]
        line, missed = held_out_line(fam)
        (alerts if missed else notes).append(line)
    return Table(TITLE, headers, body, notes, {2, 4, 5, 6}, alerts)
