"""Numbers as the tables show them: plain text, no rendering library, so the queue rows and
every table format alike."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def throughput_text(r: dict[str, Any]) -> str:
    if r["throughput"] is None:
        return "-"
    ci = f" ± {r['throughput_ci95']:,.1f}" if r["throughput_ci95"] is not None else ""
    return f"{r['throughput']:,.1f}{ci}{' *' if r['noisy'] else ''}"


def elapsed_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def finite(value: Any) -> float | None:
    """A stored number as a float, or None when it is not a finite number: records are
    checked by type on ingest, and this keeps a store written before that from breaking a
    whole table over one bad value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
