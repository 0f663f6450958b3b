"""The study's memory: experiments, runs, jobs and the metric records, in SQLite (WAL).

Several processes use it at once (the CLI, the TUI, the local worker), so every write is a
short explicit transaction and readers never block writers. Ingest is idempotent: a record
is keyed by (run, line number), and the byte offset read so far moves in the same
transaction as the records, so a crash mid-ingest neither loses nor doubles a record.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import NotFoundError, StoreError
from .plan import Run
from .store_records import RECORDS_CHECKED, Records

ACTIVE = ("PENDING", "RUNNING")
RUN_ID_PREFIX = re.compile(r"[0-9a-f]{1,12}")
RUN_ID_RULE = "a run id is 12 hex digits or a unique prefix of them"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    name TEXT PRIMARY KEY, spec_path TEXT, spec_text TEXT, spec_digest TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, point_id TEXT NOT NULL, experiment TEXT NOT NULL,
    framework TEXT, model TEXT, dataset TEXT, nodes INTEGER, ranks_per_node INTEGER,
    devices INTEGER, per_device_batch INTEGER, global_batch INTEGER, scaling TEXT,
    precision TEXT, loader TEXT, repetition INTEGER, training TEXT,
    state TEXT NOT NULL DEFAULT 'PLANNED', reason TEXT, backend TEXT, job_id TEXT,
    run_dir TEXT, attempts INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL,
    ingest_offset INTEGER NOT NULL DEFAULT 0, ingest_lines INTEGER NOT NULL DEFAULT 0,
    bad_records INTEGER NOT NULL DEFAULT 0, rerun_of TEXT);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs(experiment);
CREATE TABLE IF NOT EXISTS jobs (
    backend TEXT NOT NULL, job_id TEXT NOT NULL, run_id TEXT NOT NULL, state TEXT NOT NULL,
    reason TEXT, nodes TEXT, submitted REAL, started REAL, ended REAL, exit_code INTEGER,
    pid INTEGER, payload TEXT, elapsed REAL, PRIMARY KEY (backend, job_id));
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(backend, state);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT NOT NULL, line INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run_id, line));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS skipped_records (
    run_id TEXT NOT NULL, line INTEGER NOT NULL, file TEXT NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY (run_id, line));
"""

# Added after the first release; _migrate adds them to older stores.
_ADDED_RUN_COLUMNS = {"rerun_of": "TEXT"}


def default_home() -> Path:
    return Path(os.environ.get("DLSCALE_HOME") or Path.home() / ".dlscale")


class Store(Records):
    def __init__(self, home: str | Path | None = None) -> None:
        self.home = Path(home) if home else default_home()
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.home / "dlscale.db", timeout=30,
                                        isolation_level=None, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store in {self.home}: {exc}") from None

    def _migrate(self) -> None:
        """Columns added after a store was first made: stores from earlier versions gain
        them (NULL), so an upgrade keeps every run measured before it."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(runs)")}
        for column, decl in _ADDED_RUN_COLUMNS.items():
            if column not in have:
                self.conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {decl}")
        if self.conn.execute("PRAGMA user_version").fetchone()[0] < RECORDS_CHECKED:
            self.revalidate()

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    def close(self) -> None:
        self.conn.close()

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

    # --- experiments and runs ------------------------------------------------------------

    def save_experiment(self, name: str, path: str, text: str, digest: str) -> None:
        with self.transaction() as c:
            c.execute("INSERT INTO experiments VALUES (?,?,?,?,?) ON CONFLICT(name) DO UPDATE "
                      "SET spec_path=excluded.spec_path, spec_text=excluded.spec_text, "
                      "spec_digest=excluded.spec_digest, updated=excluded.updated",
                      (name, path, text, digest, time.time()))

    def experiments(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM experiments ORDER BY updated")]

    def add_run(self, run: Run) -> dict[str, Any]:
        """Insert the run if new; return its row either way."""
        now = time.time()
        run_dir = self.runs_dir / run.run_id
        with self.transaction() as c:
            c.execute(
                "INSERT OR IGNORE INTO runs (run_id, point_id, experiment, framework, model, "
                "dataset, nodes, ranks_per_node, devices, per_device_batch, global_batch, "
                "scaling, precision, loader, repetition, training, state, run_dir, created, "
                "updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'PLANNED',?,?,?)",
                (run.run_id, run.point_id, run.experiment, run.framework, run.model,
                 run.dataset, run.nodes, run.ranks_per_node, run.devices, run.per_device_batch,
                 run.global_batch, run.scaling, run.precision, run.loader, run.repetition,
                 json.dumps(run.training, sort_keys=True), str(run_dir), now, now))
        return self.run(run.run_id)

    def add_rerun(self, original: dict[str, Any], run_id: str) -> dict[str, Any]:
        """A new run that repeats `original` exactly: the same point and parameters, its own
        id and folder, and `rerun_of` naming the run it repeats."""
        now = time.time()
        skip = {"run_id", "state", "reason", "backend", "job_id", "run_dir", "attempts",
                "created", "updated", "ingest_offset", "ingest_lines", "bad_records",
                "rerun_of"}
        copied = {k: v for k, v in original.items() if k not in skip}
        row = {**copied, "run_id": run_id, "state": "PLANNED", "rerun_of": original["run_id"],
               "run_dir": str(self.runs_dir / run_id), "created": now, "updated": now}
        with self.transaction() as c:
            c.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES "
                      f"({', '.join('?' * len(row))})", tuple(row.values()))
        return self.run(run_id)

    def reruns(self, run_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(
            "SELECT * FROM runs WHERE rerun_of=? ORDER BY created", (run_id,))]

    def run(self, run_id: str) -> dict[str, Any]:
        """A run by its id or a unique prefix of it. The prefix is compared as text, never
        as a pattern: `%`, `_` or an empty id name no run (NotFoundError, exit 2)."""
        row = self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is not None:
            return dict(row)
        if not RUN_ID_PREFIX.fullmatch(run_id):
            raise NotFoundError(f"no run {run_id!r}: {RUN_ID_RULE}")
        matches = self.conn.execute("SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? "
                                    "ORDER BY run_id LIMIT 4", (len(run_id), run_id)).fetchall()
        if len(matches) == 1:
            return dict(matches[0])
        if not matches:
            raise NotFoundError(f"no run {run_id!r} in the store ({self.home})")
        raise NotFoundError(f"run id {run_id!r} is ambiguous: it begins "
                            f"{', '.join(m['run_id'] for m in matches[:3])}"
                            f"{' and more' if len(matches) > 3 else ''}; give more digits")

    def runs(self, experiment: str | None = None,
             states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if experiment:
            sql += " AND experiment=?"
            args.append(experiment)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        return [dict(r) for r in self.conn.execute(sql + " ORDER BY created, run_id", args)]

    def update_run(self, run_id: str, **fields: Any) -> None:
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.transaction() as c:
            c.execute(f"UPDATE runs SET {cols} WHERE run_id=?", (*fields.values(), run_id))

    def start_attempt(self, run_id: str) -> dict[str, Any]:
        """A run is (re)submitted: older records belong to an earlier attempt and move aside
        with its files, so the new attempt's numbers are not mixed with them."""
        row = self.run(run_id)
        run_dir = Path(row["run_dir"])
        if row["attempts"] and run_dir.exists():
            old = run_dir / "attempts" / str(row["attempts"])
            old.mkdir(parents=True, exist_ok=True)
            for p in run_dir.iterdir():
                if p.is_file():
                    p.rename(old / p.name)
        run_dir.mkdir(parents=True, exist_ok=True)
        with self.transaction() as c:
            c.execute("DELETE FROM records WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM skipped_records WHERE run_id=?", (run_id,))
            c.execute("UPDATE runs SET attempts=attempts+1, ingest_offset=0, ingest_lines=0, "
                      "bad_records=0, reason=NULL, updated=? WHERE run_id=?",
                      (time.time(), run_id))
        return self.run(run_id)

    # --- jobs ----------------------------------------------------------------------------

    def next_counter(self, name: str) -> int:
        with self.transaction() as c:
            c.execute("INSERT INTO counters VALUES (?, 1) ON CONFLICT(name) DO UPDATE "
                      "SET value=value+1", (name,))
            return c.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()[0]

    def add_job(self, backend: str, job_id: str, run_id: str, state: str,
                payload: dict[str, Any] | None = None) -> None:
        now = time.time()
        with self.transaction() as c:
            c.execute("INSERT INTO jobs (backend, job_id, run_id, state, submitted, payload) "
                      "VALUES (?,?,?,?,?,?)",
                      (backend, job_id, run_id, state, now, json.dumps(payload or {})))
            c.execute("UPDATE runs SET state=?, backend=?, job_id=?, reason=NULL, updated=? "
                      "WHERE run_id=?", (state, backend, job_id, now, run_id))

    def job(self, backend: str, job_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM jobs WHERE backend=? AND job_id=?",
                                (backend, job_id)).fetchone()
        return dict(row) if row else None

    def jobs(self, backend: str, job_ids: list[str] | None = None,
             states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM jobs WHERE backend=?", [backend]
        if job_ids is not None:
            sql += f" AND job_id IN ({','.join('?' * len(job_ids))})"
            args.extend(job_ids)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        return [dict(r) for r in self.conn.execute(sql + " ORDER BY submitted", args)]

    def update_job(self, backend: str, job_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.transaction() as c:
            c.execute(f"UPDATE jobs SET {cols} WHERE backend=? AND job_id=?",
                      (*fields.values(), backend, job_id))
