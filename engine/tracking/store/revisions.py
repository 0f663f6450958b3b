"""Store revisions: every run and job row changed gets the next one, so a reader asks only
for what changed since it last read (the queue's reader, tracking/queue.py)."""

from __future__ import annotations

import sqlite3

# Every run and job row changed gets the next store revision (rev), by triggers so that no
# writer can forget it: a reader of a 10,000-run queue asks only for the rows past the
# revision it last saw (queue.py's `_changes`), through an index. Revisions follow commit
# order (one writer at a time), so the highest one a read returns bounds the next read.
# Inserts get none (a study's 10,000 new rows would pay for them): a reader learns of new
# runs by their count (runs are never deleted), and a new job shows when its run names it.
_REVISIONS = """
INSERT OR IGNORE INTO counters (name, value) VALUES ('rev', 0);
CREATE INDEX IF NOT EXISTS runs_by_rev ON runs(rev);
CREATE INDEX IF NOT EXISTS jobs_by_rev ON jobs(rev);
""" + "".join(
    f"""
CREATE TRIGGER IF NOT EXISTS {table}_rev AFTER UPDATE ON {table} WHEN NEW.rev IS OLD.rev BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'rev';
    UPDATE {table} SET rev = (SELECT value FROM counters WHERE name = 'rev')
        WHERE rowid = NEW.rowid;
END;"""
    for table in ("runs", "jobs")
)


def add_revisions(conn: sqlite3.Connection) -> None:
    """The counter, indexes and triggers, where the store lacks them (a new store, or one
    from before revisions): a write, so only then. The rev columns are the migration's."""
    made = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type='trigger' AND name IN "
        "('runs_rev', 'jobs_rev')"
    ).fetchone()[0]
    if made < 2:
        conn.executescript(_REVISIONS)
