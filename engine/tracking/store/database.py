"""One store's SQLite connection, as its parts share it (store.py composes them): short
explicit write transactions, reads by many ids in parts, and tuples where rows are
compared whole."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from ...runs import JobRow, RunRow

# Ids per statement: well under SQLite's limit on bound parameters (32766, or 999 in builds
# older than 3.32).
CHUNK = 500


def chunks(items: list, size: int = CHUNK):
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Database:
    """The connection (autocommit: every write says where its transaction begins and
    ends) and the home it belongs to, which messages name."""

    def __init__(self, conn: sqlite3.Connection, home: Path) -> None:
        self.conn = conn
        self.home = home

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so read-then-write is atomic."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def tuples(self, sql: str, args: list) -> list[tuple]:
        cur = self.conn.cursor()
        cur.row_factory = None  # tuples, not sqlite3.Row: compared whole, tick to tick
        return cur.execute(sql, args).fetchall()

    def runs_by_id(
        self, run_ids: list[str], columns: tuple[str, ...] | None = None
    ) -> dict[str, RunRow]:
        """The rows of these runs (only `columns`, if given), by id, in as few queries as
        the parameter limit allows."""
        out: dict[str, RunRow] = {}
        what = ", ".join(columns) if columns else "*"
        for part in chunks(run_ids):
            for row in self.conn.execute(
                f"SELECT {what} FROM runs WHERE run_id IN ({','.join('?' * len(part))})", part
            ):
                out[row["run_id"]] = run_row(row)
        return out


def run_row(row: sqlite3.Row) -> RunRow:
    """A runs table row as a typed dict (its keys are the columns read)."""
    return cast(RunRow, dict(row))


def job_row(row: sqlite3.Row) -> JobRow:
    return cast(JobRow, dict(row))
