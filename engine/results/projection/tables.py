"""A projection as every front end shows it (`dlscale project`, the report's "Scaling beyond
what was measured", the TUI): each family's measured rows and its projection (project.py)
in one table that says which is which, then as its notes the inputs, the links the
projection used, the scales not projected and why (once, not in every cell), and the
held-out check (an alert where it missed its interval)."""

from __future__ import annotations

from typing import Any

from ...runs import per_second, scale_label
from ..formatting import fmt, interval_text
from ..rows import Family
from ..table import Column, Table
from . import project
from .projected import terms_said

TITLE = "Scaling beyond what was measured"


def link_line(lk: dict[str, Any]) -> str:
    """A link as project.py used it: its source, bandwidth, latency and inputs."""
    lo, hi = lk["bandwidth_ci95_gbps"]
    return (
        f"{lk['tier']} link {lk['source']}: {fmt(lk['bandwidth_gbps'], 3)} GB/s "
        f"[{fmt(lo, 3)}, {fmt(hi, 3)}], latency {fmt(lk['latency_us'], 1)} us "
        f"(from {', '.join(lk['inputs'])})" + (f"; {lk['note']}" if lk["note"] else "")
    )


def not_projected(family: Family) -> str:
    """Why a family has no projection, in `dlscale project`'s words."""
    why = family.get("why") or next(
        (r["why"] for r in family["rows"] if r["kind"] == project.PROJECTED and "why" in r),
        "nothing past the measured scales",
    )
    return f"{family['family']}: not projected: {why}"


def held_out_line(fam: Family) -> tuple[str, bool]:
    """(the held-out check in words, whether it missed its interval)."""
    held = fam.get("held_out")
    if held is None:
        return f"{fam['family']}: fewer than 3 scales measured, no held-out check.", False
    scale = scale_label(held["nodes"], held["ranks_per_node"])
    if "why" in held:
        return f"{fam['family']}: held-out check at {scale} not possible: {held['why']}.", False
    x = held["projected_throughput"]
    line = (
        f"{fam['family']}: held-out check: {scale} projected from {', '.join(held['from'])} "
        f"at {interval_text(x, 1)} {per_second([fam.get('unit')])}"
        f", measured {fmt(held['measured_throughput'], 1)}: error "
        + (f"{100 * err:+.1f}%" if (err := held.get("error")) is not None else "unknown")
    )
    if held["outside_interval"]:
        return line + ", OUTSIDE its interval.", True
    return line + ", within its interval.", False


def projection_table(families: list[Family], to: int, to_from: str) -> Table | None:
    if not families:
        return None
    several = len(families) > 1
    columns = ([Column("family", keep=2)] if several else []) + [
        Column("scale", right=True),
        Column("devices", right=True, keep=4, short="dev"),
        Column("measured/projected", short="kind"),
        Column(f"{per_second(f.get('unit') for f in families)} [95%]", right=True),
        Column("speedup [95%]", right=True, keep=3),
        Column("efficiency [95%]", right=True),
        Column("link", keep=5),
    ]
    body = []
    notes = [
        f"projected up to {to} nodes ({to_from}) from each family's largest measured "
        "single-node point: its step, plus at each scale the wait for the slowest rank "
        "(the step-time jitter's expected maximum), the small-batch overhead (strong "
        "scaling) and the hierarchical allreduce of one step's gradient (in the node, then "
        "across nodes; each tier fitted from the communication benchmark's sweeps or "
        "stated) not hidden behind compute. Each input says where it came from: measured, "
        "stated or the calibrated default. [95%]: for a measured row, the interval every "
        "table shows of it (mean ± CI95; speedup and efficiency: Fieller's interval over "
        "the baseline's repetitions); for a projected row, the inputs' spread (a Monte Carlo "
        "over the repetitions and the fits) widened by the model's own error, calibrated on "
        "published scaling leaving each source out (docs/measuring.md). A projection is a "
        "model, not a measurement: the held-out checks below say how far it was right here."
    ]
    alerts: list[str] = []
    for fam in families:
        name = f"{fam['family']}: " if several else ""
        unprojected: dict[str, list[str]] = {}
        for r in fam["rows"]:
            scale = scale_label(r["nodes"], r["ranks_per_node"])
            kind = r["kind"]
            if "why" in r:
                unprojected.setdefault(r["why"], []).append(scale)
                kind = "not projected"
            elif kind == project.PROJECTED and r.get("stated"):
                kind = "projected (stated link)"
            link = r.get("link", "-") if r["kind"] == project.PROJECTED else "-"
            body.append(
                ([fam["family"]] if several else [])
                + [
                    scale,
                    str(r["ranks"]),
                    kind,
                    interval_text(r.get("throughput"), 1),
                    interval_text(r.get("speedup"), 2),
                    interval_text(r.get("efficiency"), 2),
                    link,
                ]
            )
        notes += [
            f"{name}not projected at {', '.join(at)}: {why}" for why, at in unprojected.items()
        ]
        if fam.get("why"):
            notes.append(f"{name}not projected: {fam['why']}.")
        notes += [f"{name}input: {line}." for line in fam.get("inputs") or []]
        notes += [f"{name}{line}." for line in fam.get("bounds") or []]
        notes += [f"{name}{link_line(lk)}." for lk in (fam.get("links") or {}).values()]
        alerts += [f"{name}{note}." for note in fam.get("notes") or []]
        if (top := project.largest(fam)) is not None:
            notes.append(f"{name}{terms_said(top)}.")
        if fam.get("experiment") != project.STATED_FIGURES:
            line, missed = held_out_line(fam)
            (alerts if missed else notes).append(line)
    notes += [f"left out of the fit: {note}" for note in families[0].get("skipped") or []]
    if not several:
        notes.insert(0, f"family: {families[0]['family']}")
    table = Table.of(TITLE, columns, body, notes)
    table.alerts = alerts
    return table
