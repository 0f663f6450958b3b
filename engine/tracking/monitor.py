"""Following jobs: one backend query per tick for every live job, metrics ingested as
they are written, run states settled when jobs end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...trainers.common.records import RecordWriter
from ..backends.base import Backend
from ..errors import ControllerUnreachable
from ..paths import RunPaths, write_job_file
from ..runs import ACTIVE, FAILURES, TERMINAL, UNDER_WAY, RunRow, State
from . import completion, custom_energy, custom_load, custom_software, log_patterns
from .logs import failure_reason
from .store import Store


def finalize_run(store: Store, run_id: str, job_state: str) -> str:
    """Settle a run whose job ended: ingest the rest of its records and decide its state.
    A job that exited 0 without a summary record did not measure anything: FAILED. A
    declared framework's run whose measurement was complete before its job failed counts as
    COMPLETED, marked with how its job ended (completion.py)."""
    row = store.run(run_id)
    paths = RunPaths(Path(row["run_dir"]))
    ended = job_state
    if job_state in FAILURES and row["job_id"] and completion.measured_before_end(row):
        job_state = State.COMPLETED
    # A declared framework reporting through its log: its records are made from it now.
    measured_nothing = (
        log_patterns.settle(row, (store.jobs.get(row["backend"], row["job_id"]) or {}).get("nodes"))
        if job_state == State.COMPLETED and row["job_id"]
        else None
    )
    store.records.ingest(run_id, paths.metrics, final=True)
    # A declared framework metered around its script: its energy and interference over the
    # timed steps, and the software its interpreter held where its own records left it out.
    if job_state == State.COMPLETED and (
        custom_energy.settle(store, run_id)
        | custom_load.settle(store, run_id)
        | custom_software.settle(store, run_id)
    ):
        store.records.ingest(run_id, paths.metrics, final=True)
    state, reason = job_state, None
    summary = job_state == State.COMPLETED and store.records.of(run_id, "summary")
    if measured_nothing:
        state = State.FAILED
        reason = measured_nothing + "\n" + failure_reason(paths.log).split("\n", 1)[-1]
    elif state == State.COMPLETED and not summary and ended != State.COMPLETED:
        state, reason = ended, failure_reason(paths.log)  # its summary did not hold
    elif state == State.COMPLETED and not summary:
        state = State.FAILED
        reason = (
            "the job ended without a summary record\n"
            + failure_reason(paths.log).split("\n", 1)[-1]
        )
    elif state == State.COMPLETED and ended != State.COMPLETED:
        job = store.jobs.get(row["backend"], row["job_id"]) or {}
        reason = f"{completion.after_end(ended, job.get('exit_code'))}: {failure_reason(paths.log)}"
    elif state in FAILURES:
        reason = failure_reason(paths.log)
    elif state == State.CANCELLED:
        reason = "cancelled"
    store.update_run(run_id, state=state, reason=reason)
    _keep_job(store, row, ended, state, reason)
    return state


def _keep_job(store: Store, row: RunRow, ended: str, state: str, reason: str | None) -> None:
    """The job as it ended, and its run as settled, in the run's folder (job.json), for a
    rebuilt store: the job's state is its end; the local worker dates the end just after
    this, so a job not dated yet ends now."""
    job = store.jobs.get(row["backend"], row["job_id"]) if row["job_id"] else None
    if job is None:
        return
    try:
        write_job_file(
            {
                **job,
                "state": ended,
                "ended": job["ended"] or time.time(),
                "run_state": state,
                "run_reason": reason,
            },
            Path(row["run_dir"]),
        )
    except (OSError, ValueError):
        pass  # a folder gone or full: the store still holds the job; only a rebuild lacks it


VANISHED = "the scheduler no longer knows this job (not in its queue or accounting)"


@dataclass
class Tick:
    """What one sync saw: counts by state, and whether the scheduler answered."""

    states: dict[str, int]
    reachable: bool = True  # False once the scheduler's tolerance for failures is spent
    new_records: int = 0
    warning: str | None = None  # the last poll failed (still tolerated): why
    problem: str | None = None  # what a front end says of it (Watcher.problem)


def sync(store: Store, backend: Backend, experiment: str | None = None) -> Tick:
    """One tick: ask the backend about every live job at once, ingest, settle."""
    # A submission killed mid-way (its process gone) shows as not submitted, with why.
    store.claims.release_stale()
    # runs left waiting for the site's limits go as far as the queue has room now
    backend.next_wave(store, experiment)
    live = [r for r in store.live_runs(experiment) if r["backend"] == backend.name and r["job_id"]]
    reachable, new = _poll(store, backend, live)
    watcher = backend.watcher
    counts = store.state_counts(experiment)
    warning = None
    if live and not watcher.last_poll_ok:
        warning = watcher.last_error or "the scheduler did not answer"
    if not reachable:
        warning = warning or watcher.last_error or "unreachable"
    problem = watcher.problem(warning, reachable) if warning else None
    return Tick(counts, reachable, new, warning, problem)


def settle(store: Store, backend: Backend, run_ids: list[str]) -> None:
    """Ask the scheduler about these runs' live jobs now and record what it says, and
    nothing else (no next wave is submitted): `cancel` asks first, so a job that ended on
    its own since the last poll keeps how it ended instead of being recorded cancelled."""
    live = [
        r
        for r in map(store.run, run_ids)
        if r["state"] in ACTIVE and r["backend"] == backend.name and r["job_id"]
    ]
    _poll(store, backend, live)


def _poll(store: Store, backend: Backend, live: list[RunRow]) -> tuple[bool, int]:
    """One query for these runs' jobs, each answer ingested and settled: (whether the
    controller was reachable, the records read)."""
    reachable, new, watcher = True, 0, backend.watcher
    if live:
        try:
            statuses = watcher.poll([str(r["job_id"]) for r in live])  # each has one
        except ControllerUnreachable:
            statuses, reachable = {}, False
        answered = reachable and watcher.last_poll_ok
        for r in live:
            st = statuses.get(str(r["job_id"]))
            if st is None and answered:
                st = watcher.last_word(r)  # forgotten by the scheduler: what the job left
            if st is None and answered and r["reason"] != VANISHED:
                # Neither the queue nor accounting knows the job (purged, or a controller
                # that lost its state): say so on the run, keep its last known state.
                store.update_run(r["run_id"], reason=VANISHED)
            elif st is not None and r["reason"] == VANISHED:
                store.update_run(r["run_id"], reason=st.reason)
            if st is None or (st.state == State.PENDING and r["state"] == State.RUNNING):
                # sacct (slurmdbd) can lag the controller by seconds: a job seen running is
                # not sent back to pending by a stale answer (our scripts never requeue).
                continue
            backend.observed(store, st)
            if st.state == State.RUNNING or st.state in TERMINAL:
                new += store.records.ingest(r["run_id"], RunPaths.of(r).metrics)
            if st.state in TERMINAL:
                # The local worker settles its own runs; this covers the gap in between and
                # every other backend.
                if store.run(r["run_id"])["state"] in ACTIVE:
                    _neighbours(store, backend, r, st.nodes)
                    finalize_run(store, r["run_id"], st.state)
            elif st.state != r["state"]:
                store.advance_run(r["run_id"], st.state, st.reason)
    return reachable, new


def _neighbours(store: Store, backend: Backend, row: RunRow, nodes: str | None) -> None:
    """The other jobs on the run's nodes, where its place promised none, written after
    its own records (finalize_run reads them in)."""
    found = backend.neighbours(store, row, nodes)
    if found is not None:
        with RecordWriter(str(RunPaths.of(row).metrics)) as w:
            w.write("neighbours", **found)


class Backoff:
    """Poll fast right after a submission, slower while nothing changes, capped."""

    def __init__(self, first: float = 0.5, factor: float = 1.5, cap: float = 10.0) -> None:
        self.first, self.factor, self.cap = first, factor, cap
        self.delay = first

    def reset(self) -> None:
        self.delay = self.first

    def next(self) -> float:
        d = self.delay
        self.delay = min(self.cap, self.delay * self.factor)
        return d


def wait_until_done(
    store: Store,
    backend: Backend,
    run_ids: list[str],
    on_tick=lambda tick, rows: None,
    after_sync: Callable[[Tick], Tick] = lambda tick: tick,
    more: Callable[[list[str]], list[str]] = lambda run_ids: [],
) -> Tick:
    """Sync until none of `run_ids` is queued or running; `on_tick` gets each tick and the
    runs' rows as that tick left them; `after_sync` acts on each sync first, and `more`
    names runs to wait for beside the ones waited for (disturbed_reruns.py: the reruns of
    disturbed runs). Polls back off to the backend's own cap."""
    backoff = Backoff(cap=backend.poll_cap_s)
    last = None
    waited = list(run_ids)
    while True:
        tick = after_sync(sync(store, backend))
        waited += [r for r in more(waited) if r not in waited]
        rows = [store.run(rid) for rid in waited]
        on_tick(tick, rows)
        # A run another dlscale is submitting is not done either: it is about to queue.
        if not any(r["state"] in UNDER_WAY for r in rows):
            return tick
        if tick.states != last or tick.new_records:
            backoff.reset()
        last = tick.states
        time.sleep(backoff.next())
