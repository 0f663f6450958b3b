"""Claiming runs for submission: only one process at a time may submit a run.

A claimed run is State.SUBMITTING, owned by the process that claimed it (host, pid and the
process's start time, so a later process reusing the pid is not taken for it), until that
process records its job (Jobs.add / add_many) or releases it saying why not. The schema's
own guard (one queued or running job per run) backs the claims up.

A submission claims all its runs in one transaction (take_many): 10,000 runs in one
write, not 10,000, and two submissions of one spec at once still never both get a run.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ...errors import NotFoundError
from ...runs import ACTIVE, ACTIVE_SQL, RunRow, State
from .database import Database, chunks

# A claim by a process on another host cannot be checked; after this long it is stale.
_FOREIGN_CLAIM_S = 600.0


class Claims:
    """The store's claims on runs (`store.claims`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def take(self, run_id: str, skip: tuple[str, ...] = ()) -> RunRow | None:
        """Take a run for submission, in one transaction: it becomes SUBMITTING, owned by
        this process, its attempt is counted and the earlier attempt's records dropped.
        Returns None, changing nothing, when the run is in `skip`, queued or running, has
        a live job, or is claimed by another process that is still alive; so of two
        `dlscale run` of one spec, each run is submitted by exactly one. The claimer must
        end the claim: Jobs.add (submitted) or release (not, with why)."""
        if self.db.conn.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
            raise NotFoundError(f"no run {run_id!r} in the store ({self.db.home})")
        return self.take_many([run_id], skip).get(run_id)

    def take_many(self, run_ids: list[str], skip: tuple[str, ...] = ()) -> dict[str, RunRow]:
        """take for many runs in one transaction: the rows of those this process now
        holds, by run id (runs not in the store are left out)."""
        me = _process_id()
        claimable: list[str] = []
        with self.db.transaction() as c:
            for part in chunks(run_ids):
                marks = ",".join("?" * len(part))
                live = {
                    r[0]
                    for r in c.execute(
                        f"SELECT run_id FROM jobs WHERE state IN {ACTIVE_SQL} AND "
                        f"run_id IN ({marks})",
                        part,
                    )
                }
                for row in c.execute(
                    f"SELECT run_id, state, claimed_by, updated FROM runs "
                    f"WHERE run_id IN ({marks})",
                    part,
                ):
                    if (
                        row["state"] in skip + ACTIVE
                        or row["run_id"] in live
                        or (
                            row["state"] == State.SUBMITTING
                            and _claim_alive(row["claimed_by"], row["updated"])
                        )
                    ):
                        continue
                    claimable.append(row["run_id"])
            now, reason = time.time(), f"being submitted by {_claimer(me)}"
            ids = [(rid,) for rid in claimable]
            c.executemany("DELETE FROM records WHERE run_id=?", ids)
            c.executemany("DELETE FROM skipped_records WHERE run_id=?", ids)
            c.executemany(
                "UPDATE runs SET state=?, claimed_by=?, reason=?, "
                "attempts=attempts+1, ingest_offset=0, ingest_lines=0, "
                "bad_records=0, updated=? WHERE run_id=?",
                [(State.SUBMITTING, me, reason, now, rid) for rid in claimable],
            )
        return self.db.runs_by_id(claimable)

    # --- ending a claim without a job ------------------------------------------------

    def release(self, run_id: str, state: str, reason: str) -> None:
        """End this process's claim on a run that was not submitted, saying why; a run a
        job was recorded for meanwhile (Jobs.add) is left as it is."""
        with self.db.transaction() as c:
            c.execute(
                "UPDATE runs SET state=?, reason=?, updated=? WHERE run_id=? AND "
                "state=? AND claimed_by=?",
                (state, reason, time.time(), run_id, State.SUBMITTING, _process_id()),
            )

    def release_stale(self) -> list[str]:
        """Claims whose process is gone (killed mid-submission) go back to PLANNED with
        the reason, so the run shows as not submitted and the next `run` takes it (and
        adopts a job the scheduler had taken, study.adopt). Every command that reads the
        queue calls it (follow.refresh, Session.refresh, each sync)."""
        stale = [
            r
            for r in self.db.conn.execute(
                "SELECT run_id, claimed_by, updated FROM runs WHERE state=?", (State.SUBMITTING,)
            )
            if not _claim_alive(r["claimed_by"], r["updated"])
        ]
        if stale:
            with self.db.transaction() as c:
                c.executemany(
                    f"UPDATE runs SET state='{State.PLANNED}', reason=?, updated=? WHERE "
                    "run_id=? AND state=? AND claimed_by IS ?",
                    [
                        (
                            f"not submitted: the submission by {_claimer(r['claimed_by'])} was "
                            "interrupted; `dlscale run SPEC` submits it (or adopts its job, "
                            "where the scheduler had taken one)",
                            time.time(),
                            r["run_id"],
                            State.SUBMITTING,
                            r["claimed_by"],
                        )
                        for r in stale
                    ],
                )
        return [r["run_id"] for r in stale]


def _process_id() -> str:
    """This process, told apart from a later one that reuses its pid: host, pid and the
    process's start time (Linux: /proc/self/stat field 22)."""
    return f"{socket.gethostname()} {os.getpid()} {_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "-"
    return stat.rpartition(")")[2].split()[19]  # fields after the command name, 22nd in all


def _claim_alive(claimed_by: str | None, since: float | None) -> bool:
    try:
        host, pid, start = (claimed_by or "").split(" ")
    except ValueError:
        return False
    if host != socket.gethostname():
        return time.time() - (since or 0) < _FOREIGN_CLAIM_S
    return start != "-" and _start_time(int(pid)) == start


def _claimer(claimed_by: str | None) -> str:
    host, _, rest = (claimed_by or "? ?").partition(" ")
    return f"dlscale pid {rest.split(' ')[0]} on {host}"
