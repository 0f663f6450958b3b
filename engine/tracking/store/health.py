"""Telling a damaged store from a healthy one, and what to do about it.

SQLite takes a 0-byte file for a new, empty database, and reports a damaged page only when
a query reads it; both would lose the user's runs silently or as an internal error. The
run folders hold every record, so the way out is always `dlscale store rebuild`.
"""

from __future__ import annotations

import errno
import re
import sqlite3
import urllib.parse
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


# Faults of the world an OSError or SQLite reports: each a sentence, exit 1, no traceback.
_OS_FAULTS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file grew past the size allowed",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted (an immutable file or folder?)",
    errno.EIO: "an I/O error",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files",
}
BUSY_S = 30  # how long a command waits for another process's write lock on the store


def fault_message(exc: BaseException, home: Path) -> str | None:
    """One sentence for a fault of the world under a command (the store damaged, locked,
    read-only or on a full disk; a file it could not write): what the CLI says, exit 1,
    instead of an internal error. None for anything else (a bug)."""
    damage = damage_message(exc, home)
    if damage is not None:
        return damage
    db = home / "dlscale.db"
    if isinstance(exc, sqlite3.OperationalError):
        name, text = getattr(exc, "sqlite_errorname", ""), str(exc)
        if name.startswith("SQLITE_BUSY") or "database is locked" in text:
            return (
                f"the store {db} is busy: another process has held its write lock for over "
                f"{BUSY_S} s; nothing was changed by this command, try it again"
            )
        if name.startswith("SQLITE_READONLY") or "readonly" in text:
            return (
                f"the store {db} cannot be written ({text}): check the permissions and "
                "attributes (lsattr) of it and its folder"
            )
        if name == "SQLITE_FULL" or "disk is full" in text:
            return f"the store {db} cannot grow: the disk holding it is full ({text})"
        if name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN")) or "disk I/O" in text:
            return f"the store {db} cannot be read or written ({text})"
    if isinstance(exc, OSError) and exc.errno in _OS_FAULTS:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"cannot write or read{where}: {_OS_FAULTS[exc.errno]} ({exc.strerror})"
    return _read_through_damage(exc, home)


def _read_through_damage(exc: BaseException, home: Path) -> str | None:
    """A damaged page is not always an SQLite error: which damage a query notices depends
    on the SQLite version, and one that does not returns NULLs or garbage that fail later
    as a TypeError or a KeyError. Before such an error is called a bug, the store is
    checked (quick_check, read-only; only on this error path, so its cost is paid only
    here)."""
    db = home / "dlscale.db"
    if isinstance(exc, (OSError, KeyboardInterrupt)) or not db.is_file():
        return None
    try:
        answer = _quick_check(db)
    except sqlite3.DatabaseError as check_exc:  # the check itself cannot read it (3.10's SQLite)
        if damage_message(check_exc, home) is None:
            return None
        answer = [str(check_exc)]
    except OSError:
        return None
    if answer == ["ok"]:
        return None
    return (
        f"the store {db} is damaged (SQLite's check: {'; '.join(answer[:3])}), and reading "
        f"it failed ({type(exc).__name__}: {exc}); {REBUILD_HINT}"
    )


def _quick_check(db: Path) -> list[str]:
    """SQLite's quick_check of the file, opened read-only: ["ok"] for a sound one."""
    conn = sqlite3.connect(f"{file_uri(db)}?mode=ro", uri=True, timeout=30)
    try:
        return [r[0] for r in conn.execute("PRAGMA quick_check")]
    finally:
        conn.close()


def write_locked(home: Path) -> bool:
    """Whether another process holds the store's write lock at this moment (asked without
    waiting, and without writing)."""
    try:
        conn = sqlite3.connect(file_uri(home / "dlscale.db"), uri=True, timeout=0)
    except sqlite3.Error:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
        return False
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc) or "busy" in str(exc)
    finally:
        conn.close()


def store_problem(home: Path) -> str | None:
    """What is wrong with a store's file, if anything, read-only: empty (0 bytes), not a
    database, or pages that fail SQLite's quick_check. None for a healthy or absent one."""
    db = home / "dlscale.db"
    if not db.exists():
        return None if not db.is_symlink() else f"{db} is a link to nothing"
    if not db.is_file():
        return f"{db} is {'a folder' if db.is_dir() else 'not a regular file'}, not a store"
    if db.stat().st_size == 0:
        return f"{db} is empty (0 bytes)"
    try:
        answer = _quick_check(db)
    except sqlite3.DatabaseError as exc:
        return damage_message(exc, home) or f"{db}: {exc}"
    return None if answer == ["ok"] else f"{db} fails SQLite's check: {'; '.join(answer[:3])}"


def file_uri(path: Path) -> str:
    """SQLite's `file:` URI of a path: `#`, `?` and `%` in it quoted, else SQLite would
    read them as the URI's fragment or query and open another file."""
    return "file:" + urllib.parse.quote(str(path.absolute()))


def run_folders(runs_dir: Path) -> int:
    """How many run folders (named by a 12-hex-digit run id) are under `runs_dir`."""
    try:
        return sum(1 for p in runs_dir.iterdir() if p.is_dir() and _RUN_FOLDER.fullmatch(p.name))
    except OSError:
        return 0
