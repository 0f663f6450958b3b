"""Turning anything a worker raised into one line for the user (never a traceback)."""
from __future__ import annotations

from ..engine.errors import DlscaleError


def describe(exc: BaseException) -> str:
    if isinstance(exc, DlscaleError):
        return str(exc)
    # Not an engine error: a bug or the world (disk full...). Name it, keep it on one line.
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
