"""The store's metric records (`store.records`): ingest (idempotent, whole lines only,
checked by type), the lines it skipped with why, and reading them back.

A skipped line is kept as (run, file, line number, reason) so every front end can say which
line of which run's file was left out; a store made by an older dlscale, which kept only a
count and trusted records by shape, is checked once when opened (`revalidate`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ....trainers.common.records import RecordError, parse_record
from ...errors import NotFoundError
from ...io.reading import open_regular
from ...io.text import printable
from ...paths import METRICS_NAME, RunPaths
from ..logs import ABSENT
from .database import Database, chunks

# Bumped when stored records must be checked again by newer rules (PRAGMA user_version).
RECORDS_CHECKED = 2  # 2: bounded numbers and depth, typed lists, a time on every record
_SHOWN_PER_RUN = 3
# Read from a records file a call (a transaction each): bounds the memory an ingest takes.
INGEST_BYTES = 16 << 20


class Records:
    def __init__(self, db: Database) -> None:
        self.db = db

    def ingest(self, run_id: str, path: str | Path, final: bool = False) -> int:
        """Read the records written since the last ingest; return how many were new.
        Only whole lines are taken (ended by \\n, \\r\\n or a lone \\r): a line still
        being written waits for the next call, unless `final` (the job ended: its last
        line will never be finished, and is taken or skipped like any other). A line that
        is not a valid record is skipped, and kept with its number and why. At most
        INGEST_BYTES are read a call; a file that is not a regular file of the run's own
        (a folder, a FIFO, a link) is not read and is noted once as skipped."""
        row = self.db.conn.execute(
            "SELECT ingest_offset, ingest_lines FROM runs WHERE run_id=?", (run_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in the store ({self.db.home})")
        try:
            with open_regular(path, follow=False) as fh:
                fh.seek(row["ingest_offset"])
                chunk = fh.read(INGEST_BYTES)
                more = len(chunk) == INGEST_BYTES
        except ABSENT:  # no folder yet, or something else in its place
            return 0
        except OSError as exc:  # not a regular file: say so once, read nothing
            self._note_unread(run_id, Path(path).name, str(exc))
            return 0
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end == len(chunk) - 1 and chunk.endswith(b"\r") and not final:
            end = max(chunk.rfind(b"\n", 0, end), chunk.rfind(b"\r", 0, end))  # \r\n?
        if final and not more:
            end = len(chunk) - 1  # the unterminated last line of a finished job
        elif end < 0 and more:  # one line longer than a read: skipped as too long
            end = len(chunk) - 1
        if end < 0:
            return 0
        lines = chunk[: end + 1].splitlines()
        new, bad = [], []
        for i, raw in enumerate(lines):
            number = row["ingest_lines"] + i  # 0-based, as the records table keys them
            try:
                rec = parse_record(raw.decode("utf-8", errors="replace"))
            except RecordError as exc:
                bad.append((run_id, number + 1, Path(path).name, str(exc)))
                continue
            new.append((run_id, number, rec["kind"], json.dumps(rec, allow_nan=False)))
        with self.db.transaction() as c:
            # Re-check the offset under the write lock: another process may have ingested
            # the same bytes meanwhile; then this call adds nothing.
            now_offset = c.execute(
                "SELECT ingest_offset FROM runs WHERE run_id=?", (run_id,)
            ).fetchone()[0]
            if now_offset != row["ingest_offset"]:
                return 0
            cur = c.executemany("INSERT OR IGNORE INTO records VALUES (?,?,?,?)", new)
            c.executemany("INSERT OR REPLACE INTO skipped_records VALUES (?,?,?,?)", bad)
            c.execute(
                "UPDATE runs SET ingest_offset=?, ingest_lines=?, "
                "bad_records=bad_records+? WHERE run_id=?",
                (
                    row["ingest_offset"] + end + 1,
                    row["ingest_lines"] + len(lines),
                    len(bad),
                    run_id,
                ),
            )
            added = cur.rowcount if cur.rowcount >= 0 else len(new)
        if more:  # the rest, a read at a time
            added += self.ingest(run_id, path, final)
        return added

    def _note_unread(self, run_id: str, name: str, why: str) -> None:
        """A run's records file that cannot be read (line 0: the file, not a line)."""
        with self.db.transaction() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO skipped_records VALUES (?,0,?,?)",
                (run_id, name, f"not read: {why}"),
            )
            if cur.rowcount > 0:
                c.execute("UPDATE runs SET bad_records=bad_records+1 WHERE run_id=?", (run_id,))

    def of(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT body FROM records WHERE run_id=?", [run_id]
        if kind:
            sql += " AND kind=?"
            args.append(kind)
        return [json.loads(r[0]) for r in self.db.conn.execute(sql + " ORDER BY line", args)]

    def last(self, kind: str, run_ids: list[str] | None = None) -> dict[str, dict]:
        """The latest record of `kind` per run, in one query; only the runs asked for are
        read (the wait loop asks every tick for one run, in a store of any size)."""
        return {rid: json.loads(body) for rid, body in self._latest(kind, "r.body", run_ids)}

    def last_fields(
        self, kind: str, fields: dict[str, str], run_ids: list[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Some fields of the latest record of `kind` per run, {run id: {name: value}}, each
        picked by SQLite's JSON path (`$.devices[0]`) instead of decoding whole records in
        Python: 10,000 env and summary records took a status or results most of a second.
        A field the record lacks is None; names and paths are dlscale's, never a user's."""
        names = list(fields)
        picks = ", ".join(f"json_extract(r.body, '{fields[n]}')" for n in names)
        return {
            rid: dict(zip(names, values)) for rid, *values in self._latest(kind, picks, run_ids)
        }

    def _latest(self, kind: str, picks: str, run_ids: list[str] | None) -> Iterator[tuple]:
        """(run id, *picks) of each run's latest record of `kind`."""
        for part in [None] if run_ids is None else chunks(run_ids):
            where, args = "kind=?", [kind]
            if part is not None:
                where += f" AND run_id IN ({','.join('?' * len(part))})"
                args.extend(part)
            yield from self.db.conn.execute(
                f"SELECT r.run_id, {picks} FROM records r JOIN (SELECT run_id, MAX(line) AS "
                f"line FROM records WHERE {where} GROUP BY run_id) m ON r.run_id=m.run_id "
                "AND r.line=m.line",
                args,
            )

    def skipped(self, run_ids: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """The lines ingest skipped, per run: {run_id: [{line, file, reason}, ...]}."""
        out: dict[str, list[dict[str, Any]]] = {}
        for part in [None] if run_ids is None else chunks(run_ids):
            sql, args = "SELECT * FROM skipped_records", []
            if part is not None:
                sql += f" WHERE run_id IN ({','.join('?' * len(part))})"
                args = list(part)
            for r in self.db.conn.execute(sql + " ORDER BY run_id, line", args):
                out.setdefault(r["run_id"], []).append(dict(r))
        return dict(sorted(out.items()))

    def skipped_notes(self, run_ids: list[str] | None = None) -> list[str]:
        """One line per skipped metric line (a few per run, then how many more), naming the
        run, the file and the line: what status, results and reports print."""
        notes = []
        for run_id, lines in self.skipped(run_ids).items():
            notes += [f"run {run_id}: {printable(skipped_text(s))}" for s in lines[:_SHOWN_PER_RUN]]
            if len(lines) > _SHOWN_PER_RUN:
                notes.append(
                    f"run {run_id}: and {len(lines) - _SHOWN_PER_RUN} more skipped "
                    f"line(s) in {lines[0]['file']}"
                )
        return notes

    # --- stores from before records were checked by type --------------------------------

    def revalidate(self) -> None:
        """Once per store (PRAGMA user_version): records stored under older, looser rules
        that break today's move to skipped_records with their line; runs that counted
        skipped lines without keeping them have their file read again to find which."""
        with self.db.transaction() as c:
            if c.execute("PRAGMA user_version").fetchone()[0] >= RECORDS_CHECKED:
                return  # another process did it meanwhile
            moved = []
            for run_id, line, body in c.execute(
                "SELECT run_id, line, body FROM records"
            ).fetchall():
                try:
                    parse_record(body)
                except RecordError as exc:
                    moved.append((run_id, line, str(exc)))
            for run_id, line, why in moved:
                c.execute("DELETE FROM records WHERE run_id=? AND line=?", (run_id, line))
                c.execute(
                    "INSERT OR REPLACE INTO skipped_records VALUES (?,?,?,?)",
                    (run_id, line + 1, METRICS_NAME, why),
                )
                c.execute("UPDATE runs SET bad_records=bad_records+1 WHERE run_id=?", (run_id,))
            for r in c.execute(
                "SELECT run_id, run_dir, ingest_offset FROM runs WHERE bad_records > 0"
            ).fetchall():
                c.executemany(
                    "INSERT OR IGNORE INTO skipped_records VALUES (?,?,?,?)",
                    _find_skipped(r["run_id"], RunPaths.of(r).metrics, r["ingest_offset"]),
                )
            c.execute(f"PRAGMA user_version={RECORDS_CHECKED}")


def skipped_text(s: dict[str, Any]) -> str:
    if s["line"] == 0:  # the whole file (_note_unread)
        return f"{s['file']} {s['reason']}"
    return f"{s['file']} line {s['line']} skipped: {s['reason']}"


def _find_skipped(run_id: str, path: Path, upto: int) -> list[tuple[str, int, str, str]]:
    """The lines of a run's file, up to what was ingested, that are not valid records."""
    try:
        with open_regular(path, follow=False) as fh:
            data = fh.read(upto)
    except OSError:
        return []
    out = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            parse_record(raw.decode("utf-8", errors="replace"))
        except RecordError as exc:
            out.append((run_id, number, path.name, str(exc)))
    return out
