"""Following a study's live jobs from a front end: find a run by its id or a job's, bring the
store up to date with every backend that has live jobs, cancel. Light on imports: `dlscale
status` and `dlscale logs` start with these alone."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..backends.base import Backend
from ..backends.registry import BACKENDS, make_backend
from ..errors import NotFoundError
from ..runs import ACTIVE, RunRow, State
from .monitor import Tick, settle, sync
from .store import RUN_ID_PREFIX, RUN_ID_RULE, Store


def find_run(store: Store, ident: str) -> RunRow:
    """A run by id (or unique prefix), or by the id of one of its jobs (local-3, or a
    Slurm job number). Anything else is refused (UserError), never matched as a pattern.
    Digits that are both a job's id and the start of another run's id name neither: the
    error lists both (`cancel 2111` must not pick one silently)."""
    named: dict[str, str] = {}  # run id: what names it
    for backend in BACKENDS:
        job = store.jobs.get(backend, ident)
        if job:
            named.setdefault(job["run_id"], f"{backend} job {ident} (of run {job['run_id']})")
    if not RUN_ID_PREFIX.fullmatch(ident):
        if not named:
            raise NotFoundError(
                f"no run {ident!r}: {RUN_ID_RULE}, or the id of one of its "
                "jobs (local-3 on this machine, 12345 on Slurm)"
            )
    elif named:
        for run_id in store.run_ids_from(ident):
            named.setdefault(run_id, f"run {run_id}")
    if len(named) > 1:
        raise NotFoundError(
            f"{ident!r} is ambiguous: it names {' and '.join(named.values())}; give the "
            f"whole id of the run you mean ({', '.join(named)})"
        )
    return store.run(next(iter(named)) if named else ident)


def cancel(
    store: Store, run_ids: list[str], backend_of: Callable[[str], Backend] | None = None
) -> list[str]:
    """Cancel every live job of these runs (named by run or job id): all the jobs the
    store holds for a run, not only the one its row names, each through `backend_of(name)`
    (a front end's own backends; else made here). Returns the runs that had one."""
    rows = {}
    for ident in run_ids:
        row = find_run(store, ident)
        rows[row["run_id"]] = row
    make = backend_of or (lambda name: make_backend(name, store))
    # A job that ended on its own since the last poll is still live in the store: its
    # scheduler is asked first, so its run keeps how it ended (a completed run is not
    # recorded as cancelled) and only jobs still queued or running are cancelled.
    for name in sorted({r["backend"] for r in rows.values() if r["backend"]}):
        settle(store, make(name), list(rows))
    rows = {rid: store.run(rid) for rid in rows}
    by_backend: dict[str, list[str]] = {}
    done = []
    live = store.jobs.live(list(rows))
    for rid, row in rows.items():
        jobs = [(j["backend"], j["job_id"]) for j in live if j["run_id"] == rid]
        backend, job_id = row["backend"], row["job_id"]
        if row["state"] in ACTIVE and backend and job_id and (backend, job_id) not in jobs:
            jobs.append((backend, job_id))
        for backend, job_id in jobs:
            by_backend.setdefault(backend, []).append(job_id)
        if jobs or row["state"] == State.WAITING:  # a waiting run has no job: no wave takes it
            done.append(rid)
    for backend, job_ids in by_backend.items():
        make(backend).watcher.cancel(job_ids)
        # The jobs' rows say so at once (the local scheduler's already do), so a resubmit
        # right after is not refused for a job that is on its way out.
        for job in store.jobs.find(backend, job_ids, states=ACTIVE):
            store.jobs.update(
                backend,
                job["job_id"],
                state=State.CANCELLED,
                ended=time.time(),
                reason="cancelled by the user",
            )
    for rid in done:
        store.update_run(rid, state=State.CANCELLED, reason="cancelled by the user")
    return done


def refresh(store: Store) -> list[str]:
    """Bring the store up to date with every backend that has live jobs; returns what went
    wrong (a one-shot command reports a failed poll at once: it has no later poll)."""
    return [
        tick.problem or f"{backend}: did not answer"
        for backend, tick in sync_live(store, lambda name: make_backend(name, store))
        if tick.warning or not tick.reachable
    ]


def sync_live(store: Store, backend_of: Callable[[str], Backend]) -> list[tuple[str, Tick]]:
    """One poll of every backend with live jobs, each asked through `backend_of(name)`: what
    `dlscale` commands (refresh) and a front end's Session (Session.refresh) both do. Claims
    of submitters that are gone are released first, whatever backends are live: a submission
    killed mid-way shows as not submitted."""
    store.claims.release_stale()
    return [(backend, sync(store, backend_of(backend))) for backend in backends_in_use(store)]


def backends_in_use(store: Store) -> list[str]:
    return store.live_backends(states=ACTIVE + (State.WAITING,))
