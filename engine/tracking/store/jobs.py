"""The store's jobs (`store.jobs`): a run's attempts as a backend knows them (its job id,
state, times, exit code, and for the local backend the command line it runs), and the
counters job ids come from. Recording a job ends the claim on its run (store_claims.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from ...errors import StoreError
from ...runs import ACTIVE_SQL, JobRow, State
from .database import Database, chunks, job_row

_JOB_STATE = (
    "backend, job_id, run_id, state, reason, nodes, submitted, started, ended, "
    "exit_code, pid, elapsed, pid_mark, worker_pid, token"
)


class Jobs:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- recording jobs: each ends its run's claim (store_claims.py) -----------------

    def add(
        self,
        backend: str,
        job_id: str,
        run_id: str,
        state: str,
        payload: dict[str, Any] | None = None,
    ) -> None:
        refused = self.add_many(backend, [(job_id, run_id, state, payload)])[0]
        if refused is not None:
            raise refused

    def add_many(
        self, backend: str, jobs: list[tuple[str, str, str, dict[str, Any] | None]]
    ) -> list[StoreError | None]:
        """Record (job id, run id, state, payload) jobs and put their runs in that state,
        in one transaction. Each job the schema refuses (its run has a queued or running
        job already, or the job id is taken) gets its StoreError, in order; None where
        recorded. A refused job changes nothing; the others are recorded all the same."""
        now = time.time()
        rows = [
            (backend, job_id, run_id, state, now, json.dumps(payload or {}, allow_nan=False))
            for job_id, run_id, state, payload in jobs
        ]
        with self.db.transaction() as c:
            c.execute("SAVEPOINT jobs")
            try:  # all at once; only if the schema refuses one are they taken one by one
                c.executemany(
                    "INSERT INTO jobs (backend, job_id, run_id, state, submitted, "
                    "payload) VALUES (?,?,?,?,?,?)",
                    rows,
                )
                out: list[StoreError | None] = [None] * len(rows)
            except sqlite3.IntegrityError:
                c.execute("ROLLBACK TO jobs")
                out = [self._insert_job(c, row) for row in rows]
            c.execute("RELEASE jobs")
            c.executemany(
                "UPDATE runs SET state=?, backend=?, job_id=?, reason=NULL, "
                "updated=? WHERE run_id=?",
                [
                    (state, backend, job_id, now, run_id)
                    for (_, job_id, run_id, state, *_), refused in zip(rows, out)
                    if refused is None
                ],
            )
        return out

    def restore(self, job: dict[str, Any], counter: tuple[str, int] | None = None) -> None:
        """Insert a finished job's row as given (`dlscale store rebuild`, from a run's
        job.json), leaving its run as it is; `counter`: (name, number) a counter must
        have reached, so no later job takes this one's id."""
        with self.db.transaction() as c:
            c.execute(
                f"INSERT INTO jobs ({', '.join(job)}) VALUES ({', '.join('?' * len(job))})",
                tuple(job.values()),
            )
            if counter is not None:
                c.execute(
                    "INSERT INTO counters VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value=max(value, excluded.value)",
                    counter,
                )

    @staticmethod
    def _insert_job(c: sqlite3.Connection, row: tuple) -> StoreError | None:
        backend, job_id, run_id = row[:3]
        try:
            c.execute(
                "INSERT INTO jobs (backend, job_id, run_id, state, submitted, payload) "
                "VALUES (?,?,?,?,?,?)",
                row,
            )
        except sqlite3.IntegrityError as exc:  # this statement only: the rest stand
            if "jobs.run_id" not in str(exc):
                return StoreError(f"job {job_id} ({backend}) is in the store already")
            return StoreError(
                f"run {run_id} already has a queued or running job; job "
                f"{job_id} ({backend}) is not recorded for it"
            )
        return None

    # --- reading and following jobs ------------------------------------------------------

    def live(self, run_ids: list[str] | None = None) -> list[JobRow]:
        """Every queued or running job of these runs, in any backend: not only the job a
        run row names, so a duplicate (from a store made before the guard) is reached."""
        sql, args = f"SELECT * FROM jobs WHERE state IN {ACTIVE_SQL}", []
        if run_ids is not None:
            sql += f" AND run_id IN ({','.join('?' * len(run_ids))})"
            args = list(run_ids)
        return [job_row(r) for r in self.db.conn.execute(sql + " ORDER BY submitted", args)]

    def next_counter(self, name: str, count: int = 1) -> int:
        """Take `count` numbers of a counter at once; the first of them."""
        with self.db.transaction() as c:
            c.execute(
                "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value=value+?",
                (name, count, count),
            )
            last = c.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()[0]
        return last - count + 1

    def get(self, backend: str | None, job_id: str | None) -> JobRow | None:
        """The job, or None (also for a run row's backend and job id before it has one)."""
        row = self.db.conn.execute(
            "SELECT * FROM jobs WHERE backend=? AND job_id=?", (backend, job_id)
        ).fetchone()
        return job_row(row) if row else None

    def find(
        self,
        backend: str,
        job_ids: list[str] | None = None,
        states: tuple[str, ...] | None = None,
        payload: bool = True,
    ) -> list[JobRow]:
        """payload=False: all but the payload (a local job's command line and environment,
        the bulk of a row), for those who only follow the jobs."""
        sql, args = f"SELECT {'*' if payload else _JOB_STATE} FROM jobs WHERE backend=?", [backend]
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        if job_ids is None:
            return [job_row(r) for r in self.db.conn.execute(sql + " ORDER BY submitted", args)]
        out = []  # in parts: a watcher of 10,000 jobs asks for more than SQLite binds at once
        for part in chunks(job_ids):
            out += [
                job_row(r)
                for r in self.db.conn.execute(
                    sql + f" AND job_id IN ({','.join('?' * len(part))})", [*args, *part]
                )
            ]
        return sorted(out, key=lambda j: j["submitted"] or 0)

    def claim_next(self, backend: str, **fields: Any) -> JobRow | None:
        """Take the oldest queued job of `backend` to run it: RUNNING, started now, with
        `fields`, and its run RUNNING, in one transaction, so no job is taken twice.
        None when nothing is queued."""
        with self.db.transaction() as c:
            row = c.execute(
                "SELECT job_id, run_id FROM jobs WHERE backend=? AND "
                f"state='{State.PENDING}' ORDER BY submitted, job_id LIMIT 1",
                (backend,),
            ).fetchone()
            if row is None:
                return None
            now = time.time()
            fields = {**fields, "state": State.RUNNING, "started": now}
            c.execute(
                f"UPDATE jobs SET {', '.join(f'{k}=?' for k in fields)} "
                "WHERE backend=? AND job_id=?",
                (*fields.values(), backend, row[0]),
            )
            c.execute(
                f"UPDATE runs SET state='{State.RUNNING}', updated=? WHERE run_id=?", (now, row[1])
            )
        return self.get(backend, row[0])

    def update(self, backend: str, job_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.db.transaction() as c:
            c.execute(
                f"UPDATE jobs SET {cols} WHERE backend=? AND job_id=?",
                (*fields.values(), backend, job_id),
            )
