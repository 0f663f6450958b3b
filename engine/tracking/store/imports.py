"""Runs measured at another site, added to this store from a bundle (results/bundles.py).

An imported run keeps its site in the `site` column (NULL: measured here) and gets an id and
a point id of its own, hashed with its site, under an experiment named NAME@SITE: so an
imported point never merges with a local one, nor with another site's, and `dlscale run`
can never plan it (an experiment's name in a spec has no `@`). Imports are idempotent: a run
already imported with the same records and state is left alone; one that changed at its
site since (a later bundle) has its row and records replaced, in the same transaction.
The runs' folders are published by staging.py once the transaction has committed, so an
import happens whole or not at all (results/bundles.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import StoreError
from ...runs import RunRow
from .database import Database, chunks


@dataclass
class Imported:
    experiment: str
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


class Imports:
    """Runs from bundles (`store.imports`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def diff(
        self,
        experiment: dict[str, Any],
        rows: list[RunRow],
        records: dict[str, list[dict[str, Any]]],
    ) -> Imported:
        """What adding these runs would change (read only): which are new, which changed
        at their site since, which are here as they are. A bundled run with the id of a run
        of another site (or of this one) is refused (StoreError), before anything is
        written."""
        out = Imported(experiment["name"])
        for part in chunks(rows):
            ids = [r["run_id"] for r in part]
            old = {
                r[0]: r[1:]
                for r in self.db.tuples(
                    "SELECT run_id, state, reason, site FROM runs WHERE run_id IN "
                    f"({','.join('?' * len(ids))})",
                    ids,
                )
            }
            for row in part:
                rid = row["run_id"]
                if rid not in old:
                    out.added.append(rid)
                    continue
                _same_site(rid, old[rid][2], row["site"])
                kept = [b for (b,) in self.db.tuples(_BODIES, [rid])]
                same = kept == [json.dumps(r, allow_nan=False) for r in records[rid]]
                if same and old[rid][:2] == (row["state"], row["reason"]):
                    out.unchanged.append(rid)
                else:
                    out.updated.append(rid)
        return out

    def measured_here(self, runs: dict[str, tuple[float, dict[str, Any]]]) -> list[str]:
        """Which of these runs (id -> (created, first record)) are this store's own
        measurements: a run of this site with that id, made at that moment, whose first
        record (dated to its start) is the same. Another site's run of the same spec has
        the id (plans hash the same), never the moment and the record."""
        own = []
        for part in chunks(list(runs)):
            for rid, created, body in self.db.tuples(
                "SELECT r.run_id, r.created, c.body FROM runs r JOIN records c ON "
                "c.run_id=r.run_id AND c.line=0 WHERE r.site IS NULL AND r.run_id IN "
                f"({','.join('?' * len(part))})",
                part,
            ):
                when, first = runs[rid]
                if created == when and body == json.dumps(first, allow_nan=False):
                    own.append(rid)
        return own

    def add(
        self,
        experiment: dict[str, Any],
        rows: list[RunRow],
        records: dict[str, list[dict[str, Any]]],
    ) -> Imported:
        """One transaction: the experiment (name, spec, site), each run's row and records;
        a run already here as it is stays as it is, so adding the same runs again (an
        import finished after it was interrupted) changes nothing. The runs' folders are
        the caller's (staging.py), published once this has committed."""
        out = Imported(experiment["name"])
        now = time.time()
        with self.db.transaction() as c:
            c.execute(
                "INSERT INTO experiments (name, spec_path, spec_text, spec_digest, updated, "
                "site) VALUES (?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                "spec_path=excluded.spec_path, spec_text=excluded.spec_text, "
                "spec_digest=excluded.spec_digest, site=excluded.site, updated=excluded.updated "
                "WHERE spec_text IS NOT excluded.spec_text OR site IS NOT excluded.site",
                (
                    experiment["name"],
                    experiment["spec_path"],
                    experiment["spec_text"],
                    experiment["spec_digest"],
                    now,
                    experiment["site"],
                ),
            )
            for row in rows:
                rid = row["run_id"]
                bodies = [json.dumps(r, allow_nan=False) for r in records[rid]]
                old = c.execute(
                    "SELECT state, reason, site FROM runs WHERE run_id=?", (rid,)
                ).fetchone()
                if old is not None:
                    _same_site(rid, old[2], row["site"])
                    kept = [b for (b,) in c.execute(_BODIES, (rid,))]
                    if kept == bodies and (old[0], old[1]) == (row["state"], row["reason"]):
                        out.unchanged.append(rid)
                        continue
                    c.execute("DELETE FROM records WHERE run_id=?", (rid,))
                    c.execute("DELETE FROM runs WHERE run_id=?", (rid,))
                    out.updated.append(rid)
                else:
                    out.added.append(rid)
                full = {**row, "created": row.get("created") or now, "updated": now}
                c.execute(
                    f"INSERT INTO runs ({', '.join(full)}) VALUES ({', '.join('?' * len(full))})",
                    tuple(full.values()),
                )
                c.executemany(
                    "INSERT INTO records VALUES (?,?,?,?)",
                    [(rid, i, r["kind"], b) for i, (r, b) in enumerate(zip(records[rid], bodies))],
                )
        return out


_BODIES = "SELECT body FROM records WHERE run_id=? ORDER BY line"


def _same_site(run_id: str, there: str | None, site: str | None) -> None:
    if there != site:
        raise StoreError(
            f"run {run_id} of the bundle has the id of run {run_id} of "
            f"{there or 'this site'} in the store; nothing was imported"
        )
