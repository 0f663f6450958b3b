"""What the CLI and the TUI do with a study: check it, submit it, repeat runs.

Written once for every backend: what differs between the places a run can go (whether it
fits, preparing its job, submitting, repeating it) is the backend's (engine/backends/).
Both front ends call these functions and nothing below them, so they behave alike.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .backends.base import Backend, JobRequest, NotYet
from .config.spec import LoadedSpec
from .errors import (
    AlreadyMade,
    ControllerUnreachable,
    DlscaleError,
    PlanError,
    StoreError,
    UserError,
)
from .launching import envs, kept_code
from .launching.plan import Plan, Run, digest, plan
from .paths import Layout, RunPaths, lay_out, shared_spec, write_run_file
from .results import disturbed
from .runs import ACTIVE, UNFINISHED, UNSUBMITTED, RunRow, State, declaration
from .tracking.follow import find_run
from .tracking.store import Store


def check_plan(loaded: LoadedSpec, p: Plan, backend: Backend, home: Path) -> None:
    """Everything that can be refused is refused before anything is submitted: what the
    place cannot hold, and a framework without a working environment there, with the
    command that builds it."""
    if backend.needs_profile and backend.site_profile() is None:
        raise PlanError(backend.refusals(loaded, p.runs)[0])
    if backend.needs_profile:  # a job script's #SBATCH lines carry the run folders' paths
        from .launching.jobscript import check_run_folder

        check_run_folder(home / "runs" / ("0" * 12))
    site = backend.site_profile()
    problems = [
        f"{loaded.path}: experiment.frameworks: {problem}"
        for problem in envs.check_frameworks(
            # a declared framework's software is its declaration's (custom_launch)
            sorted({r.framework for r in p.runs if "custom" not in r.training}),
            home,
            site,
            backend.site_partition(),
        )
    ]
    needs: dict[str, set[str]] = {}
    for r in p.runs:
        needs.setdefault(r.framework, set()).add(r.loader)
    problems += [
        f"{loaded.path}: experiment.loaders: {problem}"
        for problem in envs.check_loaders(needs, home, site, backend.site_partition())
    ]
    problems += backend.refusals(loaded, p.runs)
    if problems:
        raise PlanError.listing(problems)


@dataclass
class SubmitReport:
    submitted: list[Run] = field(default_factory=list)
    resubmitted: list[Run] = field(default_factory=list)  # failed or cancelled earlier
    completed: list[Run] = field(default_factory=list)  # finished earlier: skipped
    active: list[Run] = field(default_factory=list)  # queued or running already
    failed_to_submit: list[tuple[Run, str]] = field(default_factory=list)
    waiting: list[Run] = field(default_factory=list)  # beyond the site's limits: waves
    # queued by an earlier submission that was interrupted before it recorded the job
    adopted: list[Run] = field(default_factory=list)

    def sentence(self) -> str:
        """What became of the study's runs, as both front ends say it after a submit."""
        return (
            f"{len(self.submitted)} submitted, {len(self.resubmitted)} "
            f"resubmitted (failed or cancelled before), {len(self.completed)} completed "
            f"earlier (skipped), {len(self.active)} already queued or running"
            + (
                f", {len(self.adopted)} adopted (queued by an earlier submission that was "
                "interrupted before it recorded them)"
                if self.adopted
                else ""
            )
            + (
                f", {len(self.waiting)} waiting for room in the queue (submitted in waves "
                "by `--wait`, `dlscale status` or the TUI)"
                if self.waiting
                else ""
            )
        )

    @property
    def all_runs(self) -> list[Run]:
        return (
            self.submitted
            + self.resubmitted
            + self.completed
            + self.active
            + self.waiting
            + self.adopted
            + [r for r, _ in self.failed_to_submit]
        )


def submit(
    store: Store, loaded: LoadedSpec, backend: Backend, only: set[str] | None = None
) -> SubmitReport:
    """Submit the runs of a spec that have not completed (`only`: those of these run ids,
    as `dlscale check` adds one repetition at a time). Each run is claimed in the store
    first (store.claims), so two submissions of one spec at once never submit a run twice; a
    run that cannot be handed to the backend is released with the reason (`not submitted:
    ...`) and reported, never left half-submitted."""
    p = plan(loaded)
    if only is not None:
        p = replace(p, runs=[r for r in p.runs if r.run_id in only])
    check_plan(loaded, p, backend, store.home)
    # The absolute path, so files kept beside the spec (a study's reference.toml) are found
    # from wherever `dlscale report` runs.
    spec_path = str(Path(loaded.path).resolve())
    # Written before any run is stored or claimed: a disk that cannot take the spec's copy
    # (full, read-only) stops the submission before it has done anything.
    layout = Layout(
        spec_path, loaded.digest, str(shared_spec(store.home, loaded.text, loaded.digest))
    )
    store.save_experiment(loaded.spec.experiment.name, spec_path, loaded.text, loaded.digest)
    # a declared script's bytes, kept by content: its runs can be repeated as they ran
    # after the file is edited in place (kept_code.py)
    for decl in {
        id(d): d for r in p.runs if isinstance(d := r.training.get("custom"), dict)
    }.values():
        kept_code.keep(store.home, decl)
    report = SubmitReport()
    # Every run stored, then every run not done claimed, each in one transaction.
    rows = store.add_runs(p.runs, rows=False)
    wanted = [run for run in p.runs if rows[run.run_id]["state"] != State.COMPLETED]
    report.completed = [run for run in p.runs if rows[run.run_id]["state"] == State.COMPLETED]
    mine = store.claims.take_many([run.run_id for run in wanted], skip=(State.COMPLETED,))
    claimed: list[tuple[Run, RunRow, bool]] = []
    for run in wanted:
        if run.run_id not in mine:  # queued, running, or being submitted by another dlscale
            report.active.append(run)
            continue
        claimed.append(
            (
                run,
                mine[run.run_id],
                rows[run.run_id]["state"] not in UNSUBMITTED,
            )
        )

    def prepare(run: Run, row: RunRow) -> JobRequest:
        if backend.folders_at_start:  # its folder is laid out when its job starts
            if row["attempts"] > 1:
                store.set_aside(row)  # the earlier attempt's files move aside now
            else:
                in_the_way(Path(row["run_dir"]))
            request = backend.prepare(run, RunPaths.of(row), loaded)
            return replace(request, layout=layout)
        store.set_aside(row)
        lay_out(row, backend.name, layout)
        return backend.prepare(run, RunPaths.of(row), loaded)

    _hand_over_all(store, backend, claimed, prepare, report)
    return report


def in_the_way(run_dir: Path) -> None:
    """Raises when something that is not a folder holds a run folder's place (a file, a
    link to nowhere or to itself): said at submission, not only when the job starts. One
    lstat, no write."""
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "something else is in the way", str(run_dir))


def _hand_over_all(
    store: Store,
    backend: Backend,
    claimed: list[tuple[Run, RunRow, bool]],
    prepare,
    report: SubmitReport,
) -> None:
    """Prepare each claimed run's job, submit them (all at once where the backend can),
    record the jobs. A run whose job could not be made or was refused is released with
    why; anything unexpected (a bug, a folder that cannot be written, Ctrl-C) stops the
    submission there, and every claimed run not yet submitted is released, saying so."""
    settled: set[str] = set()
    ready: list[tuple[Run, RunRow, bool, JobRequest]] = []
    stop: BaseException | None = None
    try:
        adopted = adopt(store, backend, [row for _, row, _ in claimed])
        for run, row, again in claimed:
            if row["run_id"] in adopted:
                settled.add(row["run_id"])
                report.adopted.append(run)
                continue
            try:
                ready.append((run, row, again, prepare(run, row)))
            except (PlanError, OSError) as exc:
                _release(store, row, exc, backend)
                settled.add(row["run_id"])
                report.failed_to_submit.append((run, not_submitted_because(exc)))
                if not isinstance(exc, PlanError):
                    stop = exc
                    break
        outcomes = backend.submit_many([request for *_, request in ready]) if ready else []
        accepted = []
        for (run, row, again, request), outcome in zip(ready, outcomes):
            settled.add(row["run_id"])
            if isinstance(outcome, NotYet):  # the place's limits: a later wave submits it
                store.claims.release(row["run_id"], State.WAITING, str(outcome))
                store.update_run(row["run_id"], backend=backend.name)  # whose wave takes it
                report.waiting.append(run)
                continue
            if isinstance(outcome, Exception):
                _release(store, row, outcome, backend)
                report.failed_to_submit.append((run, not_submitted_because(outcome)))
                continue
            accepted.append((run, row, again, request, outcome))
        refused = _record_all(
            store, backend, [(row, job_id, request) for _, row, _, request, job_id in accepted]
        )
        for (run, _, again, _, _), why in zip(accepted, refused):
            if why is not None:
                report.failed_to_submit.append((run, why))
            else:
                (report.resubmitted if again else report.submitted).append(run)
    except BaseException as exc:
        stop = exc
        raise
    finally:
        for run, row, _ in claimed:  # never left SUBMITTING, whatever happened
            if row["run_id"] not in settled:
                _release(store, row, stop or RuntimeError("not reached"), backend)
                if stop is not None and not isinstance(stop, (KeyboardInterrupt, SystemExit)):
                    report.failed_to_submit.append((run, not_submitted_because(stop)))


def adopt(store: Store, backend: Backend, rows: list[RunRow]) -> set[str]:
    """Of these claimed runs, those whose earlier submission was interrupted after the
    scheduler took the job (its answer lost, or dlscale killed before recording it): their
    job is recorded and the run is not submitted again. Only runs claimed before are asked
    about, in one query; which ones were adopted is returned."""
    again = {r["run_id"]: r for r in rows if r["attempts"] > 1}
    if not again:
        return set()
    try:
        found = backend.orphans(store.home, list(again))
    except ControllerUnreachable:
        return set()  # the submission that follows meets the same controller and says so
    jobs: list[tuple[str, str, str, dict | None]] = [
        (job_id, run_id, State.PENDING, backend.payload(_request_of(again[run_id])))
        for run_id, job_id in found.items()
        if store.jobs.get(backend.name, job_id) is None
    ]
    refused = store.jobs.add_many(backend.name, jobs) if jobs else []
    out = set()
    for (job_id, run_id, *_), why in zip(jobs, refused):
        if why is None:
            out.add(run_id)
            # the job is the earlier attempt's: this claim made no new one
            store.update_run(
                run_id,
                attempts=again[run_id]["attempts"] - 1,
                reason=f"adopted {backend.name} job {job_id}, which an interrupted "
                "submission had made",
            )
    return out


def _request_of(row: RunRow) -> JobRequest:
    return JobRequest(row["run_id"], RunPaths.of(row).root, [])


def _record(store: Store, backend: Backend, row: RunRow, job_id: str, request: JobRequest) -> None:
    """The job the backend accepted, in the store; if the store refuses it, the run says
    so (the job exists: cancel it there or let it run)."""
    why = _record_all(store, backend, [(row, job_id, request)])[0]
    if why is not None:
        raise StoreError(why)


def _record_all(
    store: Store, backend: Backend, accepted: list[tuple[RunRow, str, JobRequest]]
) -> list[str | None]:
    """The jobs the backend accepted, in the store in one transaction; for each one the
    store refused, its run is FAILED saying so (the job exists: cancel it there or let it
    run) and that reason is returned in its place."""
    if backend.records_its_jobs() or not accepted:
        return [None] * len(accepted)
    try:
        refusals: list = store.jobs.add_many(
            backend.name,
            [
                (job_id, row["run_id"], State.PENDING, backend.payload(request))
                for row, job_id, request in accepted
            ],
        )
    except Exception as exc:  # the store itself failed (locked, disk full): none recorded
        for row, job_id, _ in accepted:
            store.claims.release(
                row["run_id"],
                State.FAILED,
                (
                    f"not recorded: {backend.name} job {job_id} was submitted but the store "
                    f"refused it ({not_submitted_because(exc)}); cancel it there or let it run"
                ),
            )
        raise
    out: list[str | None] = []
    for (row, job_id, _), refusal in zip(accepted, refusals):
        why = None
        if refusal is not None:
            why = (
                f"not recorded: {backend.name} job {job_id} was submitted but the store "
                f"refused it ({not_submitted_because(refusal)}); cancel it there or let it "
                "run"
            )
            store.claims.release(row["run_id"], State.FAILED, why)
        out.append(why)
    return out


def _release(
    store: Store, row: RunRow, exc: BaseException, backend: Backend, refused: str = State.PLANNED
) -> None:
    # Refused by the scheduler or never reached it, the run did not run: never FAILED
    # (which says a job ran and failed); the reason quotes what the scheduler said.
    store.claims.release(row["run_id"], refused, f"not submitted: {not_submitted_because(exc)}")


def not_submitted_because(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "the submission was interrupted (Ctrl-C)"
    if isinstance(exc, DlscaleError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _hand_over(
    store: Store, backend: Backend, row: RunRow, request_of, refused: str, layout: Layout | None
) -> str:
    """Submit one claimed run (resubmit, rerun); its claim is released with why whatever
    goes wrong. Returns the job id. Its folder is laid out now (one run: no reason to wait),
    from the layout its last job kept where it kept one (a local run may never have
    started, so its folder may hold nothing to go by)."""
    try:
        if adopt(store, backend, [row]):
            return str(store.run(row["run_id"])["job_id"])
        store.set_aside(row)
        if layout is not None:
            lay_out(row, backend.name, layout)
        else:
            write_run_file(row, RunPaths.of(row).root, backend.name)
        request = request_of()
        job_id = backend.submit(request)
    except BaseException as exc:
        _release(store, row, exc, backend, refused)
        raise
    _record(store, backend, row, job_id, request)
    return job_id


def _layout(payload: dict) -> Layout | None:
    """The layout a job was submitted with, where its backend keeps one (folders_at_start)."""
    return Layout(**payload["layout"]) if "layout" in payload else None


def _payload(store: Store, row: RunRow) -> dict:
    return json.loads((store.jobs.get(row["backend"], row["job_id"]) or {}).get("payload") or "{}")


def refuse_imported(row: RunRow) -> None:
    """A run imported from another site's bundle is a measurement of that site's: it can be
    read and compared here, never submitted again here."""
    if row.get("site"):
        raise UserError(
            f"run {row['run_id']} was imported from site {row['site']}: it can be "
            "compared here, not submitted again"
        )


def _home_mover(payload: dict, run_dir: Path) -> Callable[[str], str] | None:
    """A text rewriter from the home a run's last job was submitted in to the one it is in
    now (a home copied elsewhere: its store's paths follow it, its jobs' payloads and
    scripts do not); None when it has not moved."""
    was = payload.get("run_dir") or (
        str(Path(payload["script"]).parent) if isinstance(payload.get("script"), str) else None
    )
    if not isinstance(was, str) or Path(was).name != run_dir.name or Path(was) == run_dir:
        return None
    old, new = str(Path(was).parent.parent) + os.sep, str(run_dir.parent.parent) + os.sep
    return lambda text: text.replace(old, new)


def _each_text(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-like) with `change` applied to every string in it."""
    if isinstance(value, str):
        return change(value) if value else value
    if isinstance(value, list):
        return [_each_text(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _each_text(v, change) for k, v in value.items()}
    return value


def resubmit(store: Store, run_ids: list[str], backend_for) -> list[tuple[str, str]]:
    """Submit runs again exactly as before (the same job script or command); finished
    attempts move to attempts/N. `backend_for(name)` gives the backend a run was recorded
    with. Returns (run id, new job id) pairs."""
    out = []
    for rid in run_ids:
        row = store.run(rid)
        if row["state"] in ACTIVE:
            raise UserError(f"run {row['run_id']} is {row['state']}; cancel it first")
        refuse_imported(row)
        if not row["job_id"]:
            raise UserError(f"run {row['run_id']} was never submitted; use `dlscale run SPEC`")
        payload = _payload(store, row)
        home_moved = _home_mover(payload, Path(row["run_dir"]))
        if home_moved is not None:
            payload = _each_text(payload, home_moved)
        claimed = store.claims.take(row["run_id"])
        if claimed is None:
            raise UserError(
                f"run {row['run_id']} is being submitted or has a queued or "
                "running job; `dlscale status` shows which"
            )
        backend = backend_for(row["backend"])

        def request(
            claimed: RunRow = claimed,
            payload: dict = payload,
            backend: Backend = backend,
            home_moved: Callable[[str], str] | None = home_moved,
        ) -> JobRequest:
            paths = RunPaths.of(claimed)
            previous = paths.attempt(claimed["attempts"] - 1)
            for old, new in zip(previous.submission, paths.submission):
                if old.exists() and not new.exists():  # the layout's spec is there already
                    shutil.copy2(old, new)
            if home_moved is not None and paths.job_script.is_file():
                # a job script written in the home's old place: its paths follow the home
                paths.job_script.write_text(home_moved(paths.job_script.read_text()))
            return backend.again(claimed, paths, payload)

        layout = _layout(payload)
        out.append(
            (row["run_id"], _hand_over(store, backend, claimed, request, State.PLANNED, layout))
        )
    return out


def rerun(store: Store, ident: str, backend_for, new_id: str | None = None) -> tuple[str, str]:
    """Repeat a finished run exactly, from its record, as a new run that names it in
    `rerun_of`: the same job (script or command line and environment), with only its run id
    and folder changed. The original and its result stay as they are. Returns (new run id,
    job id). `new_id`: the rerun's id, where the caller makes it (a run made twice with one
    id is refused by the store: AlreadyMade)."""
    row = find_run(store, ident)
    old_id = row["run_id"]
    if row["state"] in UNFINISHED:
        raise UserError(
            f"run {old_id} is {row['state']}; a rerun repeats a finished run "
            "(wait for it, or cancel it)"
        )
    refuse_imported(row)
    if not row["job_id"]:
        raise UserError(f"run {old_id} was never submitted; use `dlscale run SPEC`")
    backend = backend_for(row["backend"])
    payload = _payload(store, row)
    backend.check_repeatable(row, payload)
    code = kept_code.change_of(store.home, declaration(row))
    # a run from before code was kept is repeated as before (nothing tells a change), but
    # never as a check's baseline (check --interleave refuses it)
    if code is not None and code.measured is not None and code.kept is None:
        raise UserError(
            f"run {old_id}: {code.said()}, and no copy of what it ran is kept in "
            f"{store.home / 'code'}; a rerun would measure other code: put the measured "
            f"{code.name} back (e.g. `git stash`), or run the spec again"
        )
    if new_id is None:
        new_id = digest(
            {"rerun_of": old_id, "rerun": len(store.reruns(old_id)) + 1, "at": time.time()}
        )
    store.add_rerun(row, new_id)
    claimed = store.claims.take(new_id)
    assert claimed is not None  # a run made this instant: nobody else knows it
    claimed["backend"] = row["backend"]
    old, new = RunPaths.of(row), RunPaths.of(claimed)

    def moved(text: str) -> str:
        # The run folder and id are the only things that differ between the two runs, and
        # a script edited since runs as it was measured, from its kept copy.
        text = (
            text.replace(str(old.root), str(new.root))
            .replace(old_id, new_id)
            .replace(f"-{old_id[:8]}", f"-{new_id[:8]}")
        )
        return text.replace(str(code.script), str(code.kept)) if code and code.kept else text

    def request() -> JobRequest:
        if old.spec.exists() and not new.spec.exists():  # the layout's spec is there already
            shutil.copy2(old.spec, new.spec)
        new.rerun_of.write_text(old_id + "\n")
        return backend.repeat(row, claimed, payload, moved)

    # refused or no longer fitting here: the rerun stays, FAILED, saying why
    return new_id, _hand_over(store, backend, claimed, request, State.FAILED, _layout(payload))


def rerun_disturbed(store: Store, backend: Backend, due: list[RunRow]) -> list[str]:
    """Rerun each run that other work disturbed where its spec says so (`due`, from
    results/disturbed.py, all on `backend`), under the id its run alone makes: a rerun
    another front end made a moment ago is not made again. Returns what could not be
    rerun, a line each (the run stays counted, marked)."""
    problems = []
    for r in due:
        try:
            rerun(store, r["run_id"], lambda _name: backend, disturbed.rerun_id(r["run_id"]))
        except AlreadyMade:
            continue  # another front end made it a moment ago
        except (DlscaleError, OSError) as exc:
            problems.append(f"run {r['run_id']} was disturbed and could not be rerun: {exc}")
    return problems
