"""Telling a damaged store from a healthy one, and what to do about it.

SQLite takes a 0-byte file for a new, empty database, and reports a damaged page only when
a query reads it; both would lose the user's runs silently or as an internal error. The
run folders hold every record, so the way out is always `dlscale store rebuild`.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

_RUN_FOLDER = re.compile(r"[0-9a-f]{12}")

REBUILD_HINT = (
    "`dlscale store rebuild` makes a new store from the run folders (every "
    "run's records are there) and keeps the damaged file aside"
)


def damage_message(exc: BaseException, home: Path) -> str | None:
    """What to tell the user when SQLite says the store file is damaged; None for other
    errors (a locked or read-only store is not damage)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc)
    if (
        name in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
        or "malformed" in text
        or "not a database" in text
    ):
        return f"the store {home / 'dlscale.db'} is damaged ({text}); {REBUILD_HINT}"
    return None


def store_problem(home: Path) -> str | None:
    """What is wrong with a store's file, if anything, read-only: empty (0 bytes), not a
    database, or pages that fail SQLite's quick_check. None for a healthy or absent one."""
    db = home / "dlscale.db"
    if not db.is_file():
        return None
    if db.stat().st_size == 0:
        return f"{db} is empty (0 bytes)"
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            answer = [r[0] for r in conn.execute("PRAGMA quick_check")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return damage_message(exc, home) or f"{db}: {exc}"
    return None if answer == ["ok"] else f"{db} fails SQLite's check: {'; '.join(answer[:3])}"


def run_folders(runs_dir: Path) -> int:
    """How many run folders (named by a 12-hex-digit run id) are under `runs_dir`."""
    try:
        return sum(1 for p in runs_dir.iterdir() if p.is_dir() and _RUN_FOLDER.fullmatch(p.name))
    except OSError:
        return 0
