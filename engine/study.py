"""What the CLI and the TUI do with a study: plan it, submit it, cancel, look it up.

Both front ends call these functions and nothing below them, so they behave alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import PlanError, SubmitError, UserError
from .launch import local_command, local_env
from .plan import Plan, Run, plan
from .schedulers.base import JobRequest, Scheduler
from .schedulers.local import LocalScheduler, check_fits
from .spec import LoadedSpec
from .store import ACTIVE, Store

BACKENDS = ("local",)


def make_scheduler(backend: str, store: Store) -> Scheduler:
    if backend == "local":
        return LocalScheduler(store)
    raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)} "
                    "(slurm arrives with issue 3)")


def check_plan(loaded: LoadedSpec, p: Plan, backend: str) -> None:
    """Everything that can be refused is refused before anything is submitted."""
    problems = []
    seen = set()
    for run in p.runs:
        key = (run.nodes, run.ranks_per_node)
        if backend == "local" and key not in seen:
            seen.add(key)
            try:
                check_fits(run.nodes, run.ranks_per_node, run.training["threads_per_rank"],
                           f"{loaded.path}: experiment.scales {run.scale}")
            except PlanError as exc:
                problems.append(str(exc))
    data_dir = loaded.spec.training.data_dir
    if backend == "local" and data_dir and not Path(data_dir).is_dir():
        problems.append(f"{loaded.path}: training.data_dir: {data_dir} is not a folder here")
    if problems:
        raise PlanError("\n".join(problems))


@dataclass
class SubmitReport:
    submitted: list[Run] = field(default_factory=list)
    resubmitted: list[Run] = field(default_factory=list)  # failed or cancelled earlier
    completed: list[Run] = field(default_factory=list)    # finished earlier: skipped
    active: list[Run] = field(default_factory=list)       # queued or running already
    failed_to_submit: list[tuple[Run, str]] = field(default_factory=list)

    @property
    def all_runs(self) -> list[Run]:
        return self.submitted + self.resubmitted + self.completed + self.active + [
            r for r, _ in self.failed_to_submit]


def submit(store: Store, loaded: LoadedSpec, backend: str) -> SubmitReport:
    p = plan(loaded)
    check_plan(loaded, p, backend)
    scheduler = make_scheduler(backend, store)
    store.save_experiment(loaded.spec.experiment.name, loaded.path, loaded.text, loaded.digest)
    report = SubmitReport()
    for run in p.runs:
        row = store.add_run(run)
        if row["state"] == "COMPLETED":
            report.completed.append(run)
            continue
        if row["state"] in ACTIVE:
            report.active.append(run)
            continue
        again = row["state"] != "PLANNED"
        row = store.start_attempt(run.run_id)
        run_dir = Path(row["run_dir"])
        request = JobRequest(run.run_id, run_dir, local_command(run, run_dir), local_env(run),
                             run.nodes, run.ranks_per_node, run.training["threads_per_rank"],
                             f"{run.experiment}:{run.label()}")
        try:
            scheduler.submit(request)
        except SubmitError as exc:
            # One refused job does not stop the others, and nothing already queued is lost.
            store.update_run(run.run_id, state="FAILED", reason=f"not submitted: {exc}")
            report.failed_to_submit.append((run, str(exc)))
            continue
        (report.resubmitted if again else report.submitted).append(run)
    return report


def cancel(store: Store, run_ids: list[str]) -> list[str]:
    """Cancel runs' live jobs; returns the ids of the runs that had one."""
    by_backend: dict[str, list[str]] = {}
    done = []
    for rid in run_ids:
        row = store.run(rid)
        if row["state"] in ACTIVE and row["job_id"]:
            by_backend.setdefault(row["backend"], []).append(row["job_id"])
            done.append(row["run_id"])
    for backend, jobs in by_backend.items():
        make_scheduler(backend, store).cancel(jobs)
    for rid in done:
        store.update_run(rid, state="CANCELLED", reason="cancelled by the user")
    return done


def backends_in_use(store: Store) -> list[str]:
    return sorted({r["backend"] for r in store.runs(states=ACTIVE) if r["backend"]})
