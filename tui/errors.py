"""Turning anything a worker raised into one line for the user (never a traceback)."""

from __future__ import annotations

from ..engine.errors import DlscaleError
from ..engine.session import damage_message


def describe(exc: BaseException) -> str:
    if isinstance(exc, DlscaleError):
        return str(exc)
    damage = damage_message(exc)  # a damaged store found by a query: say how to recover
    if damage:
        return damage
    # Not an engine error: a bug or the world (disk full...). Name it, keep it on one line.
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
