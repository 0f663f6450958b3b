"""The study's memory: experiments, runs, jobs and the metric records, in SQLite (WAL).

`Store` owns the experiments and runs, and is composed of the parts that own the rest, each
over the same connection (database.py): `claims` (who is submitting a run), `jobs`,
`records` (ingest and reading back), `queue` (what the queue's rows are made from) and
`imports` (runs from other sites' bundles).

Several processes use it at once (the CLI, the TUI, the local worker), so every write is a
short explicit transaction and readers never block writers. Ingest is idempotent: a record
is keyed by (run, line number), and the byte offset read so far moves in the same
transaction as the records, so a crash mid-ingest neither loses nor doubles a record.
"""

from __future__ import annotations

import json
import operator
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import AlreadyMade, NotFoundError, StoreError, UserError
from ...paths import RunPaths, own_folder
from ...runs import ACTIVE, ACTIVE_SQL, COLUMN_TYPES, CONFIGURATION, TEXTS, RunRow, State
from . import locks
from .claims import Claims
from .database import Database, run_row
from .health import BUSY_S, REBUILD_HINT, fault_message, run_folders
from .imports import Imports
from .jobs import Jobs
from .locks import Lock
from .queue import QueueView
from .records import RECORDS_CHECKED, Records
from .revisions import add_revisions

if TYPE_CHECKING:  # the store takes plans' runs, but needs no planning to open
    from ...launching.plan import Run

DB_NAME = "dlscale.db"
RUN_ID_PREFIX = re.compile(r"[0-9a-f]{1,12}")
RUN_ID_RULE = "a run id is 12 hex digits or a unique prefix of them"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS experiments (
    name TEXT PRIMARY KEY, spec_path TEXT, spec_text TEXT, spec_digest TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, point_id TEXT NOT NULL, experiment TEXT NOT NULL,
    framework TEXT, model TEXT, dataset TEXT, nodes INTEGER, ranks_per_node INTEGER,
    devices INTEGER, per_device_batch INTEGER, global_batch INTEGER, scaling TEXT,
    precision TEXT, loader TEXT, repetition INTEGER, training TEXT,
    state TEXT NOT NULL DEFAULT '{State.PLANNED}', reason TEXT, backend TEXT, job_id TEXT,
    run_dir TEXT, attempts INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL,
    ingest_offset INTEGER NOT NULL DEFAULT 0, ingest_lines INTEGER NOT NULL DEFAULT 0,
    bad_records INTEGER NOT NULL DEFAULT 0, rerun_of TEXT);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs(experiment);
CREATE TABLE IF NOT EXISTS jobs (
    backend TEXT NOT NULL, job_id TEXT NOT NULL, run_id TEXT NOT NULL, state TEXT NOT NULL,
    reason TEXT, nodes TEXT, submitted REAL, started REAL, ended REAL, exit_code INTEGER,
    pid INTEGER, payload TEXT, elapsed REAL, pid_mark TEXT, worker_pid INTEGER, token TEXT,
    PRIMARY KEY (backend, job_id));
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(backend, state);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT NOT NULL, line INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run_id, line));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS skipped_records (
    run_id TEXT NOT NULL, line INTEGER NOT NULL, file TEXT NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY (run_id, line));
"""

# Added after the first release; _migrate adds them to older stores. A configuration field
# (runs.Configuration) missing from a store gains its column the same way: a new study axis
# needs no schema change of its own.
# site: where an imported run was measured (NULL: here); see store_imports.py.
_ADDED_RUN_COLUMNS = {
    **{name: COLUMN_TYPES[name] for name in CONFIGURATION},
    "rerun_of": "TEXT",
    "claimed_by": "TEXT",
    "rev": "INTEGER",
    "site": "TEXT",
}
_ADDED_EXPERIMENT_COLUMNS = {"site": "TEXT"}
# The local backend's proof of which processes are a job's (backends/local/processes.py).
_ADDED_JOB_COLUMNS = {
    "pid_mark": "TEXT",
    "worker_pid": "INTEGER",
    "token": "TEXT",
    "rev": "INTEGER",
}
# The schema's own guard against duplicate jobs: at most one queued or running job per run.
_ONE_LIVE_JOB_PER_RUN = (
    "CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_live_per_run ON "
    f"jobs(run_id) WHERE state IN {ACTIVE_SQL}"
)


# A planned run's row (Store.add_runs): its configuration's columns named by runs.py.
_INSERTED = ("run_id", "point_id", *CONFIGURATION, "devices", "repetition", "training")
_INSERT_RUN = (
    f"INSERT OR IGNORE INTO runs ({', '.join(_INSERTED)}, state, run_dir, created, updated) "
    f"VALUES ({', '.join('?' * len(_INSERTED))}, '{State.PLANNED}', ?, ?, ?)"
)


def default_home() -> Path:
    return Path(os.environ.get("DLSCALE_HOME") or Path.home() / ".dlscale")


def _check_db_path(db: Path) -> None:
    """The store file is the home's own: SQLite would make the target of a dangling link
    (outside the home, wherever it points) and cannot open a folder or a FIFO."""
    if db.is_symlink() and not db.exists():
        raise StoreError(
            f"{db} is a link to {os.readlink(db)}, which does not exist; dlscale makes its "
            "store only in its home: remove the link, or point it at an existing store"
        )
    if db.exists() and not db.is_file():
        what = "a folder" if db.is_dir() else "not a regular file"
        raise StoreError(
            f"{db} is {what}, not a store; move it aside (`dlscale store rebuild` makes a "
            "new store from the run folders)"
        )


class Store:
    def __init__(
        self, home: str | Path | None = None, file: str = DB_NAME, shared: bool = True
    ) -> None:
        """The store of `home` (its `file`: a rebuild makes a new one under another name
        first). `shared`: held open beside other processes (locks.py); a rebuild,
        which holds the home alone, opens its new file without."""
        self.home = Path(home) if home else default_home()
        db = self.home / file
        self._lock: Lock | None = None
        try:
            _check_db_path(db)
            if db.is_file() and db.stat().st_size == 0 and run_folders(self.runs_dir):
                # SQLite would take it as a new, empty store and every run would vanish.
                raise StoreError(
                    f"{db} is empty (0 bytes) but {self.runs_dir} holds "
                    f"{run_folders(self.runs_dir)} run folder(s) it should "
                    f"list; {REBUILD_HINT}"
                )
            self.home.mkdir(parents=True, exist_ok=True)
            if shared:
                self._lock = locks.using(self.home)
            self.conn = sqlite3.connect(
                db, timeout=BUSY_S, isolation_level=None, check_same_thread=False
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
            self.db = Database(self.conn, self.home)
            self.claims = Claims(self.db)
            self.jobs = Jobs(self.db)
            self.records = Records(self.db)
            self.imports = Imports(self.db)
            self.queue = QueueView(self.db)
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._release()
            raise StoreError(
                fault_message(exc, self.home) or f"cannot open the store in {self.home}: {exc}"
            ) from None
        except OSError as exc:
            self._release()
            raise StoreError(f"cannot open the store in {self.home}: {exc}") from None
        except BaseException:
            self._release()
            raise

    def _migrate(self) -> None:
        """Columns added after a store was first made: stores from earlier versions gain
        them (NULL), so an upgrade keeps every run measured before it."""

        def missing(table: str, added: dict[str, str]) -> list[str]:
            have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            return [c for c in added if c not in have]

        for table, added in (
            ("runs", _ADDED_RUN_COLUMNS),
            ("jobs", _ADDED_JOB_COLUMNS),
            ("experiments", _ADDED_EXPERIMENT_COLUMNS),
        ):
            if missing(table, added):
                with self.db.transaction() as c:  # two processes may open an old store at once
                    for column in missing(table, added):
                        c.execute(f"ALTER TABLE {table} ADD COLUMN {column} {added[column]}")
        add_revisions(self.conn)
        try:
            self.conn.execute(_ONE_LIVE_JOB_PER_RUN)
        except sqlite3.IntegrityError:
            # A store from before the guard that already holds duplicate live jobs: cancel
            # reaches them all (jobs.live), and the guard is made at an open after they end.
            pass
        if self.conn.execute("PRAGMA user_version").fetchone()[0] < RECORDS_CHECKED:
            self.records.revalidate()
        self._follow_home()

    def _follow_home(self) -> None:
        """A run's folder is where its home is now. A home copied or moved elsewhere keeps
        its old absolute paths; they are rewritten once, so that nothing (an ingest, a
        resubmission) reads from or writes into the old home. One row says whether."""
        row = self.conn.execute("SELECT run_id, run_dir FROM runs LIMIT 1").fetchone()
        here = str(self.runs_dir) + os.sep
        if row is None or row["run_dir"] == here + row["run_id"]:
            return
        try:
            with self.db.transaction() as c:
                c.execute(
                    "UPDATE runs SET run_dir = ? || run_id WHERE run_dir IS NOT ? || run_id",
                    (here, here),
                )
        except sqlite3.OperationalError:
            pass  # a store that cannot be written now: its paths as stored

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    def close(self) -> None:
        self.conn.close()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --- experiments and runs ------------------------------------------------------------

    def save_experiment(self, name: str, path: str, text: str, digest: str) -> None:
        with self.db.transaction() as c:
            c.execute(
                "INSERT INTO experiments (name, spec_path, spec_text, spec_digest, updated) "
                "VALUES (?,?,?,?,?) ON CONFLICT(name) DO UPDATE "
                "SET spec_path=excluded.spec_path, spec_text=excluded.spec_text, "
                "spec_digest=excluded.spec_digest, updated=excluded.updated",
                (name, path, text, digest, time.time()),
            )

    def experiments(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM experiments ORDER BY updated")]

    def experiment_names(self) -> list[str]:
        """Every experiment the store knows: saved with its spec, or only named by runs (a
        rebuilt store, runs added by hand)."""
        return sorted(
            {
                r[0]
                for r in self.conn.execute(
                    "SELECT name FROM experiments UNION SELECT DISTINCT experiment FROM runs"
                )
            }
        )

    def pick_experiment(self, name: str | None) -> str:
        """The experiment a command means: the one named, which must be in the store, or
        else the store's only one. The one rule every command, the report and the TUI pick
        an experiment by."""
        known = self.experiment_names()
        if name is None:
            if len(known) == 1:
                return known[0]
            if not known:
                raise NotFoundError(
                    f"the store ({self.home}) has no experiments yet; run one with "
                    "`dlscale run SPEC`"
                )
            raise UserError(
                f"the store holds {len(known)} experiments; name one with --experiment: "
                + ", ".join(known)
            )
        if name not in known:
            raise NotFoundError(
                f"no experiment {name!r} in the store ({self.home}); it has: "
                f"{', '.join(known) or 'none'}"
            )
        return name

    def experiment(self, name: str) -> dict[str, Any]:
        """An experiment's row: as saved with its spec, or (named only by runs: a rebuilt
        store) its name with no spec."""
        row = self.conn.execute("SELECT * FROM experiments WHERE name = ?", (name,)).fetchone()
        if row is not None:
            return dict(row)
        return {"name": name, "spec_path": None, "spec_text": "", "spec_digest": None}

    def add_run(self, run: Run) -> RunRow:
        """Insert the run if new; return its row either way."""
        return self.add_runs([run])[run.run_id]

    def add_runs(self, runs: list[Run], rows: bool = True) -> dict[str, RunRow]:
        """Insert the runs that are new, in one transaction; every run's row, by id (with
        rows=False only its state: a submission reads whole rows only of those it claims)."""
        now = time.time()
        texts: dict[int, str] = {}  # a plan's runs share a few recipes: each dumped once

        def training(run: Run) -> str:
            text = texts.get(id(run.training))
            if text is None:
                text = texts[id(run.training)] = json.dumps(
                    run.training, sort_keys=True, allow_nan=False
                )
            return text

        runs_dir = str(self.runs_dir)
        configuration = operator.attrgetter(*CONFIGURATION)
        with self.db.transaction() as c:
            c.executemany(
                _INSERT_RUN,
                [
                    (
                        run.run_id,
                        run.point_id,
                        *configuration(run),
                        run.devices,
                        run.repetition,
                        training(run),
                        os.path.join(runs_dir, run.run_id),
                        now,
                        now,
                    )
                    for run in runs
                ],
            )
        return self.db.runs_by_id(
            [run.run_id for run in runs], columns=None if rows else ("run_id", "state")
        )

    def restore_run(self, row: dict[str, Any]) -> None:
        """Insert a run row as given (`dlscale store rebuild`, from a run folder)."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(runs)")}
        row = {k: v for k, v in row.items() if k in have}
        row.setdefault("created", time.time())
        row["updated"] = time.time()
        with self.db.transaction() as c:
            c.execute(
                f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )

    def add_rerun(self, original: RunRow, run_id: str) -> RunRow:
        """A new run that repeats `original` exactly: the same point and parameters, its own
        id and folder, and `rerun_of` naming the run it repeats."""
        now = time.time()
        skip = {
            "run_id",
            "state",
            "reason",
            "backend",
            "job_id",
            "run_dir",
            "attempts",
            "created",
            "updated",
            "ingest_offset",
            "ingest_lines",
            "bad_records",
            "rerun_of",
        }
        copied = {k: v for k, v in original.items() if k not in skip}
        row = {
            **copied,
            "run_id": run_id,
            "state": State.PLANNED,
            "rerun_of": original["run_id"],
            "run_dir": str(self.runs_dir / run_id),
            "created": now,
            "updated": now,
        }
        try:
            with self.db.transaction() as c:
                c.execute(
                    f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                    tuple(row.values()),
                )
        except sqlite3.IntegrityError:
            raise AlreadyMade(f"run {run_id} is in the store already") from None
        return self.run(run_id)

    def reruns(self, run_id: str) -> list[RunRow]:
        return [
            run_row(r)
            for r in self.conn.execute(
                "SELECT * FROM runs WHERE rerun_of=? ORDER BY created", (run_id,)
            )
        ]

    def run(self, run_id: str) -> RunRow:
        """A run by its id or a unique prefix of it. The prefix is compared as text, never
        as a pattern: `%`, `_` or an empty id name no run (NotFoundError, exit 2)."""
        row = self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is not None:
            return run_row(row)
        if not RUN_ID_PREFIX.fullmatch(run_id):
            raise NotFoundError(f"no run {run_id!r}: {RUN_ID_RULE}")
        matches = self.conn.execute(
            "SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 4",
            (len(run_id), run_id),
        ).fetchall()
        if len(matches) == 1:
            return run_row(matches[0])
        if not matches:
            raise NotFoundError(f"no run {run_id!r} in the store ({self.home})")
        raise NotFoundError(
            f"run id {run_id!r} is ambiguous: it begins "
            f"{', '.join(m['run_id'] for m in matches[:3])}"
            f"{' and more' if len(matches) > 3 else ''}; give more digits"
        )

    def run_ids_from(self, prefix: str, limit: int = 4) -> list[str]:
        """The ids of the runs that begin with `prefix` (compared as text), at most
        `limit`; the run itself when `prefix` is a whole id."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT ?",
                (len(prefix), prefix, limit),
            )
        ]

    def runs(
        self,
        experiment: str | None = None,
        states: tuple[str, ...] | None = None,
        columns: tuple[str, ...] | None = None,
    ) -> list[RunRow]:
        """columns: only these (a queue of 10,000 runs reads a third of each row)."""
        sql, args = f"SELECT {', '.join(columns) if columns else '*'} FROM runs WHERE 1=1", []
        if experiment:
            sql += " AND experiment=?"
            args.append(experiment)
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        return [run_row(r) for r in self.conn.execute(sql + " ORDER BY created, run_id", args)]

    def names(self, field: str) -> list[str]:
        """The distinct values of a configuration's text field (model, dataset, framework...)
        among the store's runs: what an option filtering by it may name (a declared
        framework's own words among them)."""
        if field not in TEXTS:
            raise ValueError(f"{field} is not a configuration's text field")
        sql = f"SELECT DISTINCT {field} FROM runs ORDER BY {field}"  # noqa: S608 (a column of TEXTS)
        return [r[0] for r in self.conn.execute(sql)]

    def state_counts(self, experiment: str | None = None) -> dict[str, int]:
        """Runs by state, counted by SQLite (a watcher's tick, whatever the store's size)."""
        sql, args = "SELECT state, count(*) FROM runs", []
        if experiment:
            sql, args = sql + " WHERE experiment=?", [experiment]
        return dict(self.conn.execute(sql + " GROUP BY state", args).fetchall())

    def live_backends(self, states: tuple[str, ...] = ACTIVE) -> list[str]:
        """The backends that have runs in `states` (queued or running)."""
        return sorted(
            r[0]
            for r in self.conn.execute(
                f"SELECT DISTINCT backend FROM runs WHERE state IN ({','.join('?' * len(states))}) "
                "AND backend IS NOT NULL AND backend != ''",
                states,
            )
        )

    def live_runs(self, experiment: str | None = None) -> list[RunRow]:
        """The queued and running runs, with only what a watcher's tick reads of them."""
        sql = (
            "SELECT run_id, backend, job_id, state, reason, run_dir FROM runs WHERE "
            f"state IN {ACTIVE_SQL}"
        )
        args = []
        if experiment:
            sql, args = sql + " AND experiment=?", [experiment]
        return [run_row(r) for r in self.conn.execute(sql + " ORDER BY created, run_id", args)]

    def update_run(self, run_id: str, **fields: Any) -> None:
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.db.transaction() as c:
            c.execute(f"UPDATE runs SET {cols} WHERE run_id=?", (*fields.values(), run_id))

    def advance_run(self, run_id: str, state: str, reason: str | None) -> None:
        """A watcher's news of a live run (pending to running): written only while the run
        is still live, so an answer read before the local worker settled it (FAILED at its
        start, say) cannot bring it back to life."""
        with self.db.transaction() as c:
            c.execute(
                f"UPDATE runs SET state=?, reason=?, updated=? WHERE run_id=? "
                f"AND state IN {ACTIVE_SQL}",
                (state, reason, time.time(), run_id),
            )

    def start_attempt(self, run_id: str) -> RunRow:
        """A run is (re)submitted: older records belong to an earlier attempt and move aside
        with its files, so the new attempt's numbers are not mixed with them."""
        row = self.run(run_id)
        self.set_aside({**row, "attempts": row["attempts"] + 1})
        with self.db.transaction() as c:
            c.execute("DELETE FROM records WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM skipped_records WHERE run_id=?", (run_id,))
            c.execute(
                "UPDATE runs SET attempts=attempts+1, ingest_offset=0, ingest_lines=0, "
                "bad_records=0, reason=NULL, updated=? WHERE run_id=?",
                (time.time(), run_id),
            )
        return self.run(run_id)

    def set_aside(self, row: RunRow) -> None:
        """A claimed run's earlier attempt moves its files to attempts/N, so the new
        attempt's numbers are not mixed with them; then its folder is ready."""
        run_dir = own_folder(Path(row["run_dir"]))  # a link in its place: refused, named
        if row["attempts"] > 1 and run_dir.is_dir():
            old = RunPaths(run_dir).attempt(row["attempts"] - 1).root
            old.mkdir(parents=True, exist_ok=True)
            for p in run_dir.iterdir():
                if p.is_file():
                    p.rename(old / p.name)
        run_dir.mkdir(parents=True, exist_ok=True)
