"""What bounds a projection's intervals, said beside its table: speedup and efficiency held
at ideal without evidence of more, and a noisy 1-device point named as the reason every
speedup interval is wide (issue 49: a reader believes an interval that stays within what the
scaling model and the measurements allow)."""

from __future__ import annotations

from ...runs import scale_label
from ..points import Point
from ..rows import MEASURED, ProjectionRow

# The baseline's own spread past which its note says so: a 1-device point known to ±10%
# makes every speedup's interval about as wide.
NOISY_BASELINE = 0.10


def noisy_baseline(baseline: Point | None) -> list[str]:
    """Why every speedup and efficiency interval is wide, where the 1-device point is."""
    if baseline is None:
        return []
    s = baseline.throughput
    if not s.mean or s.ci95 is None:
        return []
    half = s.ci95 / s.mean
    if half <= NOISY_BASELINE and not s.noisy:
        return []
    return [
        f"the 1-device point ({baseline.label()}) varies ±{100 * half:.0f}% (95% interval "
        f"of its {s.n} repetitions), so every speedup and efficiency interval is as wide; "
        "more repetitions of it narrow them"
    ]


def held_to_ideal(rows: list[ProjectionRow]) -> list[str]:
    """Speedup and efficiency intervals no higher than ideal (efficiency 1, or the point's own
    value where that is above it) unless a measured point scaled super-linearly with 95%
    confidence: a noisy baseline stretches Fieller's and the projection's upper bounds past
    what the scaling model and the evidence allow. Changes `rows`; says what it did."""
    measured = [r for r in rows if r["kind"] == MEASURED and "efficiency" in r]
    above = [r for r in measured if r["ranks"] > 1 and r["efficiency"]["ci95_low"] > 1]
    if above:
        at = ", ".join(scale_label(r["nodes"], r["ranks_per_node"]) for r in above)
        return [
            f"super-linear scaling measured at {at} (efficiency above 1 with 95% "
            "confidence): upper bounds above ideal kept"
        ]
    capped = []
    for r in rows:
        if "efficiency" not in r or "speedup" not in r:
            continue
        eff, sp = r["efficiency"], r["speedup"]
        top = max(1.0, eff["value"])
        if eff["ci95_high"] is None or eff["ci95_high"] > top:
            eff["ci95_high"] = top
            sp["ci95_high"] = max(float(r["ranks"]), sp["value"])
            capped.append(scale_label(r["nodes"], r["ranks_per_node"]))
    if not capped:
        return []
    return [
        f"speedup and efficiency upper bounds held at ideal at {', '.join(capped)} (their "
        "intervals reached past it): no measured point scaled super-linearly"
    ]
