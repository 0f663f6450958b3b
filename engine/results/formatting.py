"""Numbers as the tables show them: plain text, no rendering library, so the queue rows and
every table format alike."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...trainers.common.slowdown import VARIABLE
from .rows import Interval


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def interval_text(v: Interval | None, digits: int) -> str:
    """A value with its 95% interval, `1,234.5 [1,100.0, 1,300.2]`, as every table of a
    projection shows it: a stated figure (no interval) as the number alone, an interval with
    no upper bound (`ci95_high` None) as `[low, inf]`."""
    if v is None or v.get("value") is None:
        return "-"
    value, low, high = v["value"], v.get("ci95_low"), v.get("ci95_high")
    if low == value == high:  # a stated figure: nothing about it was modelled
        return fmt(value, digits)
    top = "unbounded" if high is None else fmt(high, digits)
    return f"{fmt(value, digits)} [{fmt(low, digits)}, {top}]"


def throughput_text(r: Mapping[str, Any]) -> str:
    if r["throughput"] is None:
        return "-"
    ci = f" ± {r['throughput_ci95']:,.1f}" if r["throughput_ci95"] is not None else ""
    return f"{r['throughput']:,.1f}{ci}{' *' if r['noisy'] else ''}{slowed_mark(r)}"


# Runs made with the test-only DLSCALE_TEST_SLOWDOWN (trainers/common/loop.py) measure the
# knob, not the machine: wherever their numbers are shown they carry this mark and a note.
SLOWED = "!"


def slowed_mark(r: Mapping[str, Any]) -> str:
    """The mark after a number measured with the test-only slowdown (a point's or a run's
    `test_slowdown`), else nothing."""
    return f" {SLOWED}" if r.get("test_slowdown") else ""


def slowed_words(asked: Iterable[float | None]) -> str | None:
    """ "made with the test-only DLSCALE_TEST_SLOWDOWN=0.1", for the values a run's or point's
    `test_slowdown` holds (None where none is): the words every mark of the knob uses."""
    values = sorted({v for v in asked if v})
    if not values:
        return None
    return f"made with the test-only {VARIABLE}=" + ", ".join(f"{v:g}" for v in values)


def slowed_note(rows: Sequence[Mapping[str, Any] | None]) -> str | None:
    """The note that explains the mark, where any row carries it."""
    words = slowed_words(r.get("test_slowdown") for r in rows if r)
    if words is None:
        return None
    return (
        f"{SLOWED} = {words}: the trainer slowed its own steps on purpose; not a measurement "
        "of this machine"
    )


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
