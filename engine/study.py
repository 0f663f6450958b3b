"""What the CLI and the TUI do with a study: plan it, submit it, cancel, look it up.

Both front ends call these functions and nothing below them, so they behave alike.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config.profile import LoadedProfile
from .config.spec import LoadedSpec
from .errors import (
    ControllerUnreachable,
    DlscaleError,
    PlanError,
    SubmitError,
    UserError,
)
from .launching import envs, jobscript
from .launching.launch import local_command
from .launching.plan import Plan, Run, plan
from .launching.plan import digest as plan_digest
from .paths import RunPaths
from .schedulers.base import JobRequest, Scheduler
from .schedulers.local import check_fits
from .schedulers.registry import make_scheduler
from .tracking.follow import find_run
from .tracking.recovery import write_run_file
from .tracking.store import ACTIVE, SUBMITTING, Store, default_home


def check_plan(loaded: LoadedSpec, p: Plan, backend: str,
               profile: LoadedProfile | None = None, partition: str | None = None,
               home: Path | None = None) -> None:
    """Everything that can be refused is refused before anything is submitted: a
    framework without a working environment too, with the command that builds it."""
    home = Path(home) if home else default_home()
    site = profile if backend == "slurm" else None
    problems = [f"{loaded.path}: experiment.frameworks: {problem}" for problem in
                envs.check_frameworks([r.framework for r in p.runs], home, site)]
    needs: dict[str, set[str]] = {}
    for r in p.runs:
        needs.setdefault(r.framework, set()).add(r.loader)
    problems += [f"{loaded.path}: experiment.loaders: {problem}" for problem in
                 envs.check_loaders(needs, home, site)]
    seen = set()
    if backend == "slurm" and profile is None:
        raise PlanError("--backend slurm needs --profile CLUSTER.toml (see examples/clusters/)")
    for run in p.runs:
        key = (run.nodes, run.ranks_per_node)
        if key in seen:
            continue
        seen.add(key)
        try:
            if backend == "local":
                check_fits(run.nodes, run.ranks_per_node, run.training["threads_per_rank"],
                           f"{loaded.path}: experiment.scales {run.scale}")
            else:
                assert profile is not None
                jobscript.check_fits(run, profile.profile.partition(partition), profile.path)
                jobscript.launcher_for(run, profile.profile.environments.get(
                    run.framework, jobscript.Environment()))
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


def _slurm_request(run: Run, run_dir: Path, loaded: LoadedSpec, profile: LoadedProfile,
                   partition: str | None, home: Path) -> JobRequest:
    """Render job.sh into the run folder, with the spec and profile beside it, and check
    that bash can parse it before Slurm sees it."""
    paths = RunPaths(run_dir)
    script = paths.job_script
    script.write_text(jobscript.render(run, profile, run_dir, loaded.path, partition,
                                       home=home))
    paths.profile.write_text(profile.text)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    if check.returncode != 0:
        raise PlanError(f"{script}: the rendered job script does not parse: "
                        f"{check.stderr.strip()}")
    return JobRequest(run.run_id, run_dir, ["sbatch", str(script)], {}, run.nodes,
                      run.ranks_per_node, run.training["threads_per_rank"],
                      f"{run.experiment}:{run.label()}")


def submit(store: Store, loaded: LoadedSpec, backend: str,
           profile: LoadedProfile | None = None, partition: str | None = None,
           scheduler: Scheduler | None = None) -> SubmitReport:
    """Submit the runs of a spec that have not completed. Each run is claimed in the store
    first (claim_run), so two submissions of one spec at once never submit a run twice;
    a run that cannot be handed to the scheduler is released with the reason (`not
    submitted: ...`) and reported, never left half-submitted."""
    p = plan(loaded)
    check_plan(loaded, p, backend, profile, partition, store.home)
    environments = {fw: envs.resolve(fw, store.home, check=False)
                    for fw in {r.framework for r in p.runs}} if backend == "local" else {}
    scheduler = scheduler or make_scheduler(backend, store)
    # The absolute path, so files kept beside the spec (a study's reference.toml) are found
    # from wherever `dlscale report` runs.
    spec_path = str(Path(loaded.path).resolve())
    store.save_experiment(loaded.spec.experiment.name, spec_path, loaded.text, loaded.digest)
    report = SubmitReport()
    for run in p.runs:
        row = store.add_run(run)
        if row["state"] == "COMPLETED":
            report.completed.append(run)
            continue
        claimed = store.claim_run(run.run_id, skip=("COMPLETED",))
        if claimed is None:  # queued, running, or being submitted by another dlscale
            report.active.append(run)
            continue

        def request(run_dir: Path, run: Run = run) -> JobRequest:
            RunPaths(run_dir).spec.write_text(loaded.text)
            if backend == "slurm":
                assert profile is not None
                return _slurm_request(run, run_dir, loaded, profile, partition, store.home)
            argv, env = local_command(run, run_dir, environments[run.framework], store.home)
            return JobRequest(run.run_id, run_dir, argv, env, run.nodes, run.ranks_per_node,
                              run.training["threads_per_rank"],
                              f"{run.experiment}:{run.label()}")
        try:
            _hand_over(store, claimed, scheduler, request, spec_path, loaded.digest)
        except ControllerUnreachable as exc:
            # Nothing more can be submitted now; what was submitted stays tracked.
            report.failed_to_submit.append((run, str(exc)))
            break
        except SubmitError as exc:
            # One refused job does not stop the others, and nothing already queued is lost.
            report.failed_to_submit.append((run, str(exc)))
            continue
        except Exception as exc:
            # Anything else (a script that does not parse, a folder that cannot be written,
            # a bug) would most likely stop the next run too: stop here and say why.
            report.failed_to_submit.append((run, not_submitted_because(exc)))
            break
        again = row["state"] not in ("PLANNED", SUBMITTING)
        (report.resubmitted if again else report.submitted).append(run)
    return report


def not_submitted_because(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "the submission was interrupted (Ctrl-C)"
    if isinstance(exc, DlscaleError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _hand_over(store: Store, row: dict, scheduler: Scheduler, request, spec_path: str = "",
               spec_digest: str = "", refused: str = "PLANNED") -> str:
    """Submit a run this process has claimed: set its earlier attempt aside, write its
    record (run.json) and job, hand it to the scheduler and record the job. Whatever goes
    wrong on the way, even Ctrl-C, releases the claim with why (`refused`, or FAILED when
    the scheduler refused the job) and is raised again; returns the job id."""
    run_id, run_dir = row["run_id"], Path(row["run_dir"])
    job_id = None
    try:
        store.set_aside(row)
        write_run_file(row, run_dir, scheduler.name, spec_path, spec_digest)
        job_id = scheduler.submit(request(run_dir))
        if scheduler.name != "local":  # the local scheduler records its own queue entry
            store.add_job(scheduler.name, job_id, run_id, "PENDING",
                          {"script": str(RunPaths(run_dir).job_script)})
        return job_id
    except BaseException as exc:
        why = f"not submitted: {not_submitted_because(exc)}"
        if job_id is not None:  # the scheduler has it, the store could not record it
            why = (f"not recorded: {scheduler.name} job {job_id} was submitted but the store "
                   f"refused it ({not_submitted_because(exc)}); cancel it there or let it run")
        store.release_run(run_id, "FAILED" if isinstance(exc, SubmitError) or job_id else
                          refused, why)
        raise


def resubmit(store: Store, run_ids: list[str], scheduler_for=None) -> list[tuple[str, str]]:
    """Submit runs again exactly as before (the same job script or command); finished
    attempts move to attempts/N. Returns (run id, new job id) pairs."""
    out = []
    for rid in run_ids:
        row = store.run(rid)
        if row["state"] in ACTIVE:
            raise UserError(f"run {row['run_id']} is {row['state']}; cancel it first")
        if not row["job_id"]:
            raise UserError(f"run {row['run_id']} was never submitted; use `dlscale run SPEC`")
        backend = row["backend"]
        payload = json.loads((store.job(backend, row["job_id"]) or {}).get("payload") or "{}")
        claimed = store.claim_run(row["run_id"])
        if claimed is None:
            raise UserError(f"run {row['run_id']} is being submitted or has a queued or "
                            "running job; `dlscale status` shows which")

        def request(run_dir: Path, claimed: dict = claimed, payload: dict = payload) -> JobRequest:
            previous = RunPaths(run_dir).attempt(claimed["attempts"] - 1)
            for old, new in zip(previous.submission, RunPaths(run_dir).submission):
                if old.exists():
                    shutil.copy2(old, new)
            return _request_again(claimed, payload.get("argv"), payload.get("env"))
        scheduler = (scheduler_for or make_scheduler)(backend, store)
        out.append((row["run_id"], _hand_over(store, claimed, scheduler, request)))
    return out


def _request_again(row: dict, argv: list[str] | None, env: dict | None) -> JobRequest:
    """The job of a run whose folder already holds what it needs: job.sh for Slurm, or the
    local command line `argv` with its environment."""
    run_dir = Path(row["run_dir"])
    if row["backend"] == "slurm":
        return JobRequest(row["run_id"], run_dir, ["sbatch", str(RunPaths(run_dir).job_script)])
    assert argv is not None
    return JobRequest(row["run_id"], run_dir, argv, env or {}, row["nodes"],
                      row["ranks_per_node"], json.loads(row["training"])["threads_per_rank"])


def rerun(store: Store, ident: str, scheduler_for=None) -> tuple[str, str]:
    """Repeat a finished run exactly, from its record, as a new run that names it in
    `rerun_of`: the same job script (Slurm) or command line and environment (local), with
    only its run id and folder changed. The original and its result stay as they are.
    Returns (new run id, job id)."""
    row = find_run(store, ident)
    old_id = row["run_id"]
    if row["state"] in ACTIVE + ("PLANNED", SUBMITTING):
        raise UserError(f"run {old_id} is {row['state']}; a rerun repeats a finished run "
                        "(wait for it, or cancel it)")
    if not row["job_id"]:
        raise UserError(f"run {old_id} was never submitted; use `dlscale run SPEC`")
    old_dir = Path(row["run_dir"])
    old = RunPaths(old_dir)
    payload = json.loads((store.job(row["backend"], row["job_id"]) or {}).get("payload") or "{}")
    if row["backend"] == "slurm" and not old.job_script.is_file():
        raise UserError(f"run {old_id}: its job script {old.job_script} is gone; "
                        "it cannot be repeated exactly")
    if row["backend"] != "slurm" and "argv" not in payload:
        raise UserError(f"run {old_id}: its command line is not in the store; "
                        "it cannot be repeated exactly")
    new_id = plan_digest({"rerun_of": old_id, "rerun": len(store.reruns(old_id)) + 1,
                          "at": time.time()})
    store.add_rerun(row, new_id)
    claimed = store.claim_run(new_id)
    assert claimed is not None  # a run made this instant: nobody else knows it
    claimed["backend"] = row["backend"]

    def moved(text: str, new_dir: Path) -> str:
        # The run folder and id are the only things that differ between the two runs.
        return (text.replace(str(old_dir), str(new_dir)).replace(old_id, new_id)
                .replace(f"-{old_id[:8]}", f"-{new_id[:8]}"))

    def request(new_dir: Path) -> JobRequest:
        new = RunPaths(new_dir)
        if row["backend"] == "slurm":
            shebang, _, rest = moved(old.job_script.read_text(), new_dir).partition("\n")
            new.job_script.write_text(f"{shebang}\n# dlscale rerun of run {old_id}: its job "
                                      f"script, with the run id and folder moved\n{rest}")
        for src, dst in ((old.spec, new.spec), (old.profile, new.profile)):
            if src.exists():
                shutil.copy2(src, dst)
        new.rerun_of.write_text(old_id + "\n")
        argv = [moved(a, new_dir) for a in payload.get("argv", [])] or None
        return _request_again(claimed, argv, payload.get("env"))
    scheduler = (scheduler_for or make_scheduler)(row["backend"], store)
    # refused or no longer fitting here: the rerun stays, FAILED, saying why
    return new_id, _hand_over(store, claimed, scheduler, request, refused="FAILED")
