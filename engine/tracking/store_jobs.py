"""The store's jobs: a run's attempts as a backend knows them (its job id, state, times, exit
code, and for the local backend the command line it runs), and the counters job ids come
from. Mixed into Store."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..runs import ACTIVE_SQL, State
from .store_claims import chunks

_JOB_STATE = (
    "backend, job_id, run_id, state, reason, nodes, submitted, started, ended, "
    "exit_code, pid, elapsed, pid_mark, worker_pid, token"
)


class Jobs:
    """Mixed into Store: uses its `conn` and `transaction()`."""

    conn: sqlite3.Connection
    transaction: Callable[[], AbstractContextManager[Any]]

    def live_jobs(self, run_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """Every queued or running job of these runs, in any backend: not only the job a
        run row names, so a duplicate (from a store made before the guard) is reached."""
        sql, args = f"SELECT * FROM jobs WHERE state IN {ACTIVE_SQL}", []
        if run_ids is not None:
            sql += f" AND run_id IN ({','.join('?' * len(run_ids))})"
            args = list(run_ids)
        return [dict(r) for r in self.conn.execute(sql + " ORDER BY submitted", args)]

    def next_counter(self, name: str, count: int = 1) -> int:
        """Take `count` numbers of a counter at once; the first of them."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value=value+?",
                (name, count, count),
            )
            last = c.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()[0]
        return last - count + 1

    def job(self, backend: str, job_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT * FROM jobs WHERE backend=? AND job_id=?", (backend, job_id)
        ).fetchone()
        return dict(row) if row else None

    def jobs(
        self,
        backend: str,
        job_ids: list[str] | None = None,
        states: tuple[str, ...] | None = None,
        payload: bool = True,
    ) -> list[dict[str, Any]]:
        """payload=False: all but the payload (a local job's command line and environment,
        the bulk of a row), for those who only follow the jobs."""
        sql, args = f"SELECT {'*' if payload else _JOB_STATE} FROM jobs WHERE backend=?", [backend]
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args.extend(states)
        if job_ids is None:
            return [dict(r) for r in self.conn.execute(sql + " ORDER BY submitted", args)]
        out = []  # in parts: a watcher of 10,000 jobs asks for more than SQLite binds at once
        for part in chunks(job_ids):
            out += [
                dict(r)
                for r in self.conn.execute(
                    sql + f" AND job_id IN ({','.join('?' * len(part))})", [*args, *part]
                )
            ]
        return sorted(out, key=lambda j: j["submitted"] or 0)

    def claim_next_job(self, backend: str, **fields: Any) -> dict[str, Any] | None:
        """Take the oldest queued job of `backend` to run it: RUNNING, started now, with
        `fields`, and its run RUNNING, in one transaction, so no job is taken twice.
        None when nothing is queued."""
        with self.transaction() as c:
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
        return self.job(backend, row[0])

    def update_job(self, backend: str, job_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.transaction() as c:
            c.execute(
                f"UPDATE jobs SET {cols} WHERE backend=? AND job_id=?",
                (*fields.values(), backend, job_id),
            )
