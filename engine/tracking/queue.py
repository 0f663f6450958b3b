"""The queue as the user reads it: one row per run with its job's state, pending reason,
nodes, elapsed time and throughput so far. `dlscale status` and the TUI's queue screen both
show these rows.

The TUI reads the queue again every watcher tick, 10,000 runs included, within its 100 ms
for a whole refresh: one query of the columns shown (store.queue.changes), the latest records
read again only for runs that ingested lines since, and a row rebuilt only when what it
shows changed, so the screen can pass over the others by identity (QueueReader)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..io.text import printable
from ..results import disturbed
from ..results.formatting import elapsed_text, finite, fmt
from ..runs import ACTIVE, State, per_second, scale_label
from .store import Store
from .store.queue import QUEUE_CHANGES, QUEUE_POINT
from .store.records import skipped_text


@dataclass(frozen=True)
class QueueRow:
    run_id: str
    experiment: str
    framework: str
    model: str
    scale: str
    per_device_batch: int
    repetition: int
    backend: str | None
    job_id: str | None
    state: str
    reason: str  # first line only: the rest is in the log
    nodes: str | None
    elapsed_s: float | None
    images_per_s: float | None
    step: int | None  # last reported step while running
    comm_benchmark: bool = False  # times the allreduce (plan.py): not a training run
    busbw_gbps: float | None = None  # what a communication benchmark measured
    unit: str = "images"  # what its throughput counts a second (a declared framework's own)
    axes: tuple[tuple[str, str], ...] = ()  # a declared framework's own axes, name and value

    def why_not_cancel(self) -> str | None:
        """Why cancelling this run would do nothing (None: it can be cancelled), in the
        words `follow.cancel` acts on: a queued, running or waiting run."""
        if self.state in ACTIVE or self.state == State.WAITING:
            return None
        return (
            f"run {self.run_id} is {self.state}: only a queued, running or waiting run "
            "can be cancelled"
        )

    def why_not_resubmit(self) -> str | None:
        """Why resubmitting this run would be refused (None: it can be), as
        `study.resubmit` refuses it."""
        if self.state in ACTIVE or self.state == State.SUBMITTING:
            return f"run {self.run_id} is {self.state}: cancel it first, then resubmit"
        if not self.job_id:
            return (
                f"run {self.run_id} was never submitted: ctrl+r on Build, or "
                "`dlscale run SPEC`, submits it"
            )
        return None

    def cells(self, show: Callable[[str], str] = printable) -> tuple[str, ...]:
        """The row as text, in QUEUE_COLUMNS order, its job's and the user's words made
        safe by `show` (text.printable; the TUI shows signs). A communication benchmark
        says so where a training run's reason goes and in its repetition's place (seen at
        80 columns, where the reason is cut), and has no throughput."""
        reason = self.reason
        if self.comm_benchmark:
            if reason:
                reason = f"{COMM_WORDS}: {reason}"
            elif self.busbw_gbps is not None:  # the allreduce's bus bandwidth, as nccl-tests
                reason = f"{COMM_WORDS}, busbw {fmt(self.busbw_gbps, 2)} GB/s"
            else:
                reason = COMM_WORDS
        return (
            show(self.job_id or "-"),
            show(self.framework),
            show(self.model),
            self.scale,
            str(self.per_device_batch),
            "comm" if self.comm_benchmark else str(self.repetition),
            " ".join(show(v) for _, v in self.axes),
            self.state,
            show(self.nodes or "-"),
            elapsed_text(self.elapsed_s),
            "-" if self.comm_benchmark else fmt(self.images_per_s, 1),
            show(reason[:80]),
        )


COMM_WORDS = "communication benchmark"


QUEUE_COLUMNS = (
    "job",
    "framework",
    "model",
    "scale",
    "batch",
    "rep",
    "axes",  # a declared framework's own: headed by their names (queue_header)
    "state",
    "nodes",
    "elapsed",
    "throughput",  # shown as what it counts a second: queue_header
    "reason",
)


def queue_header(queue: list[QueueRow]) -> tuple[str, ...]:
    """QUEUE_COLUMNS as a table heads them: the throughput column says what the rows' runs
    count a second (images/s, a declared framework's tokens/s, units/s where they differ;
    a communication benchmark counts none), and the axes column names the axes (`mode`)."""
    unit = printable(per_second(r.unit for r in queue if not r.comm_benchmark))
    axes = next((r.axes for r in queue if r.axes), ())
    named = {"throughput": unit, "axes": " ".join(printable(n) for n, _ in axes) or "axes"}
    return tuple(named.get(c, c) for c in QUEUE_COLUMNS)


# Run ids per `IN (...)` list: SQLite takes at most 32,766 parameters in one statement.
_IDS_PER_QUERY = 5000
_RERUN_OF = QUEUE_POINT.index("rerun_of")
# Where store.queue.changes puts what decides whether a run's records or clock must be read.
_LINES, _BAD, _ELAPSED, _STARTED, _ENDED = (
    1 + QUEUE_CHANGES.index(c)
    for c in ("r.ingest_lines", "r.bad_records", "j.elapsed", "j.started", "j.ended")
)


# What a row shows of a run's latest records: a running run's last interval; a finished
# one's summary (its throughput where it has one, else the rate it reported).
_PROGRESS = {"images_per_s": "$.images_per_s", "step": "$.step"}
_SHARES = {name: f"$.{name}" for name in disturbed.SHARES}
_PROGRESS_DONE = {**_PROGRESS, "throughput": "$.throughput", "busbw": "$.comm_busbw_gbps"}


@dataclass(frozen=True)
class _Ingested:
    """What a run's records add to its row, as of `lines` (ingested, skipped) lines."""

    lines: tuple[int, int]
    images_per_s: float | None
    step: int | None
    skipped: str  # the reason when a run has none of its own
    busbw: float | None = None  # a communication benchmark's summary
    disturbed: str = ""  # what disturbed a completed run (results/disturbed.py)


_NOTHING = _Ingested((0, 0), None, None, "")


class QueueReader:
    """Reads one store's queue again and again (Session.refresh, every watcher tick).

    The first read takes every run; each later one only the runs written since the store
    revision it last saw (store.queue.changes's `since`), plus the running jobs, whose clocks
    move. It keeps, per run, its point (which never changes), what its records add, and the
    values its row was last made from: a run whose values did not change keeps the same
    QueueRow object. New runs (the count grew), or another store or experiment, mean a
    whole read again, in order. One reader may be called from several threads (each with
    its own store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._points: dict[str, tuple] = {}
        self._ingested: dict[str, _Ingested] = {}
        self._values: dict[str, tuple] = {}  # what each row was last made from
        self._rows: dict[str, QueueRow] = {}
        self._ticking: set[str] = set()  # running jobs that report no elapsed time
        self._seen: tuple[str, str | None, int] | None = None  # (store, experiment, rev)
        self._rerun_as: dict[str, str] = {}  # a run: its latest rerun (rows name it)
        self._renamed: set[str] = set()  # runs whose latest rerun is new since their row

    def rows(
        self, store: Store, experiment: str | None = None, now: float | None = None
    ) -> list[QueueRow]:
        now = time.time() if now is None else now
        db = store.home / "dlscale.db"
        where = f"{db.resolve()}:{db.stat().st_ino}"  # a store rebuilt there starts anew
        with self._lock:
            view: list[tuple] = []
            whole = self._seen is None or self._seen[:2] != (where, experiment)
            if not whole:
                assert self._seen is not None
                view = store.queue.changes(experiment, since=self._seen[2])
                # New runs (counted after: a new run among the changes is counted too).
                whole = store.queue.count(experiment) != len(self._rows) or any(
                    v[0] not in self._rows for v in view
                )
            if whole:
                view = store.queue.changes(experiment)
            self._read_points(store, view, whole)
            self._read_records(store, view, whole)
            # a run whose rerun is new (a new run: always a whole read) gets its row again
            renamed, self._renamed = self._renamed, set()
            points, ingested = self._points, self._ingested
            values_before, rows_before = self._values, self._rows
            if whole:
                # Two flat dicts, not one of (values, row) pairs: 10,000 fewer objects a read
                # for the garbage collector to count, whose full passes showed as slow ticks.
                values: dict[str, tuple] = {}
                made: dict[str, QueueRow] = {}
                ticking: set[str] = set()
            else:  # the same dicts, changed in place: a run keeps its place in the order
                values, made, ticking = values_before, rows_before, self._ticking
            for v in view:
                run_id = v[0]
                point = points.get(run_id)
                if point is None:
                    continue  # deleted between the two queries: gone next read too
                clock = v[_ELAPSED] is None and v[_STARTED] and not v[_ENDED]
                row = rows_before.get(run_id)
                if row is None or values_before[run_id] != v or clock or run_id in renamed:
                    row = self._make_row(point, v, ingested.get(run_id, _NOTHING), now)
                values[run_id] = v
                made[run_id] = row
                if clock:
                    ticking.add(run_id)
                else:
                    ticking.discard(run_id)
            if not whole:  # running jobs not written since: only their clocks moved
                for run_id in ticking.difference(v[0] for v in view):
                    made[run_id] = self._make_row(
                        points[run_id], values[run_id], ingested.get(run_id, _NOTHING), now
                    )
            self._values, self._rows, self._ticking = values, made, ticking
            rev = max((v[-1] for v in view), default=0)
            before = self._seen[2] if self._seen and not whole else 0
            self._seen = (where, experiment, max(before, rev))
            return list(made.values())

    def _read_points(self, store: Store, view: list[tuple], whole: bool) -> None:
        new = [v[0] for v in view if v[0] not in self._points]
        if whole and len(self._points) + len(new) > len(view):  # another experiment
            self._points = {v[0]: self._points[v[0]] for v in view if v[0] in self._points}
            self._rerun_as = {
                run: rerun for run, rerun in self._rerun_as.items() if rerun in self._points
            }
        for i in range(0, len(new), _IDS_PER_QUERY):
            for point in store.queue.points(new[i : i + _IDS_PER_QUERY]):
                self._points[point[0]] = point
                if point[_RERUN_OF]:  # in the order made: the latest rerun wins
                    self._rerun_as[point[_RERUN_OF]] = point[0]
                    self._renamed.add(point[_RERUN_OF])

    def _make_row(self, point: tuple, v: tuple, ingested: _Ingested, now: float) -> QueueRow:
        row = _make_row(point, v, ingested, now)
        links = [f"rerun of {point[_RERUN_OF]}"] if point[_RERUN_OF] else []
        if point[0] in self._rerun_as:
            links.append(f"rerun as {self._rerun_as[point[0]]}")
        if not links:
            return row
        return dataclasses.replace(row, reason="; ".join(filter(None, [row.reason, *links])))

    def _read_records(self, store: Store, view: list[tuple], whole: bool) -> None:
        """The latest interval or summary record and the skipped lines of each run that
        ingested lines since the last read; a run with none ingested has none to read."""
        known = self._ingested
        stale = [v for v in view if (v[_LINES], v[_BAD]) != known.get(v[0], _NOTHING).lines]
        if whole and (stale or len(known) > len(view)):
            self._ingested = known = {v[0]: known[v[0]] for v in view if v[0] in known}
        for v in stale:
            known.pop(v[0], None)
        for i in range(0, len(stale), _IDS_PER_QUERY):
            chunk = stale[i : i + _IDS_PER_QUERY]
            ids = [v[0] for v in chunk]
            progress = store.records.last_fields("interval", _PROGRESS, ids)
            progress.update(store.records.last_fields("summary", _PROGRESS_DONE, ids))
            skipped = store.records.skipped(ids)
            load = store.records.last_fields("interference", _SHARES, ids)
            for v in chunk:
                last = progress.get(v[0]) or {}
                bad = skipped.get(v[0]) or []
                known[v[0]] = _Ingested(
                    (v[_LINES], v[_BAD]),
                    finite(last.get("throughput"))
                    if last.get("throughput") is not None
                    else finite(last.get("images_per_s")),
                    last.get("step"),
                    skipped_text(bad[0]) + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                    if bad
                    else "",
                    finite(last.get("busbw")),
                    "; ".join(disturbed.reasons(load.get(v[0]) or {}) or ()),
                )


def _make_row(point: tuple, v: tuple, ingested: _Ingested, now: float) -> QueueRow:
    (
        run_id,
        experiment,
        framework,
        model,
        nodes,
        ranks_per_node,
        batch,
        repetition,
        comm,
        unit,
        axes,
        _,
    ) = point
    (
        _,
        backend,
        job_id,
        state,
        run_reason,
        _,
        _,
        job_reason,
        job_nodes,
        elapsed,
        started,
        ended,
        _rev,
    ) = v
    if elapsed is None and started:
        elapsed = (ended or now) - started
    # job text (a log's last line, a scheduler's words): kept as written, made safe where
    # shown (cells)
    reason = (run_reason or job_reason or "").split("\n", 1)[0] or ingested.skipped
    if ingested.disturbed and state == State.COMPLETED:  # after what the run said itself
        reason = (f"{reason}; " if reason else "") + f"disturbed: {ingested.disturbed}"
    return QueueRow(
        run_id,
        experiment,
        framework,
        model,
        scale_label(nodes, ranks_per_node),
        batch,
        repetition,
        backend,
        job_id,
        state,
        reason,
        job_nodes,
        elapsed,
        ingested.images_per_s,
        ingested.step,
        bool(comm),
        ingested.busbw,
        str(unit),
        _axes(axes),
    )


def _axes(text: str | None) -> tuple[tuple[str, str], ...]:
    """A run's own axes from the JSON its recipe holds (none where it holds none)."""
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return ()
    return tuple((str(k), str(v)) for k, v in found.items()) if isinstance(found, dict) else ()


def rows(store: Store, experiment: str | None = None, now: float | None = None) -> list[QueueRow]:
    """The queue once (`dlscale status`); a watcher keeps a QueueReader instead."""
    return QueueReader().rows(store, experiment, now)


def counts(queue: list[QueueRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in queue:
        out[q.state] = out.get(q.state, 0) + 1
    return out
