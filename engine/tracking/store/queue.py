"""The queue's reads of the store (`store.queue`): what a queue row shows of every run, and
only of those changed since a revision (store_revisions.py), as plain tuples in one query;
the TUI reads a 10,000-run queue every tick. tracking/queue.py makes the rows."""

from __future__ import annotations

from ...runs import COMM_MARK
from .database import Database

# What the queue shows of a run that can change from one watcher tick to the next: the
# run's state and job (r.) and its job's (j.), in the order `changes` returns them after
# the run id. What cannot change, the run's point, is QUEUE_POINT (`points`).
QUEUE_CHANGES = (
    "r.backend",
    "r.job_id",
    "r.state",
    "r.reason",
    "r.ingest_lines",
    "r.bad_records",
    "j.reason",
    "j.nodes",
    "j.elapsed",
    "j.started",
    "j.ended",
)
QUEUE_POINT = (
    "run_id",
    "experiment",
    "framework",
    "model",
    "nodes",
    "ranks_per_node",
    "per_device_batch",
    "repetition",
    # whether it is a communication benchmark (plan.py), not a training run: its recipe
    # says so, and the queue names it so (it measures no images/s)
    f"instr(coalesce(training, ''), '{COMM_MARK}') > 0",
    # what its throughput counts: a declared framework's unit (config/custom.py), else
    # images; text a damaged store holds is no JSON, and asks json_extract nothing
    "CASE WHEN json_valid(training) AND json_type(training, '$.custom') = 'object' "
    "THEN coalesce(json_extract(training, '$.custom.unit'), 'samples') ELSE 'images' END",
    # a declared framework's own axes (`mode = fail/ok`), as JSON text: the queue gives
    # them a column, or two runs of one scale would look the same
    "CASE WHEN json_valid(training) AND json_type(training, '$.axes') = 'object' "
    "THEN json_extract(training, '$.axes') END",
    # the run this one repeats (`dlscale rerun`, a disturbed run's rerun): rows name both
    "rerun_of",
)


class QueueView:
    def __init__(self, db: Database) -> None:
        self.db = db

    def changes(self, experiment: str | None = None, since: int | None = None) -> list[tuple]:
        """(run id, *QUEUE_CHANGES, revision) of each run, oldest first, as plain tuples in
        one query: whole rows as dicts (Store.runs and Jobs.find) took most of the TUI's
        100 ms a tick. With `since`, only the runs whose row or current job was changed
        after that store revision, through the revision indexes
        (the queue's reader keeps the rest; new runs it counts); the revision is the higher
        of the two."""
        columns = (
            f"r.run_id, {', '.join(QUEUE_CHANGES)}, "
            "max(coalesce(r.rev, 0), coalesce(j.rev, 0)) FROM "
        )
        join = "jobs j ON j.backend=r.backend AND j.job_id=r.job_id"
        where, args = [], []
        if experiment:
            where.append("r.experiment=?")
            args.append(experiment)
        if since is None:
            cond = f" WHERE {where[0]}" if where else ""
            sql = f"SELECT {columns}runs r LEFT JOIN {join}{cond} ORDER BY r.created, r.run_id"
            return self.db.tuples(sql, args)
        cond = "".join(f" AND {w}" for w in where)
        sql = (
            f"SELECT {columns}runs r LEFT JOIN {join} WHERE r.rev > ?{cond} UNION "
            # by the job's run id (the runs' key), then only if it is the run's current job
            f"SELECT {columns}jobs j JOIN runs r ON r.run_id=j.run_id "
            f"AND r.backend=j.backend AND r.job_id=j.job_id WHERE j.rev > ?{cond}"
        )
        return self.db.tuples(sql, [since, *args, since, *args])

    def count(self, experiment: str | None = None) -> int:
        """How many runs (of one experiment): runs are never deleted, so a count that grew
        is how a queue reader learns of new ones."""
        if experiment:
            sql, args = "SELECT count(*) FROM runs WHERE experiment=?", [experiment]
        else:
            sql, args = "SELECT count(*) FROM runs", []
        return self.db.conn.execute(sql, args).fetchone()[0]

    def points(self, run_ids: list[str]) -> list[tuple]:
        """QUEUE_POINT of these runs (at most a few thousand ids a call)."""
        return self.db.tuples(
            f"SELECT {', '.join(QUEUE_POINT)} FROM runs WHERE run_id IN "
            f"({','.join('?' * len(run_ids))})",
            run_ids,
        )
