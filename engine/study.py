"""What the CLI and the TUI do with a study: plan it, submit it, cancel, look it up.

Both front ends call these functions and nothing below them, so they behave alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import json
import shutil
import subprocess
import time

from . import envs, gpus, jobscript
from .errors import ControllerUnreachable, DlscaleError, PlanError, SubmitError, UserError
from .launch import local_command
from .plan import Plan, Run, plan
from .plan import digest as plan_digest
from .profile import LoadedProfile
from .schedulers.base import JobRequest, Scheduler
from .schedulers.local import LocalScheduler, check_fits
from .schedulers.slurm import SlurmCLI
from .spec import LoadedSpec
from .store import ACTIVE, Store, default_home

BACKENDS = ("local", "slurm")


def pyslurm_status() -> str:
    """Why the pyslurm backend is or is not used (PyPI's pyslurm targets Slurm 25.11)."""
    try:
        import pyslurm  # type: ignore[import-not-found]  # noqa: F401
    except Exception as exc:  # ImportError, or a build for another Slurm failing to load
        return f"pyslurm not usable here ({type(exc).__name__}); using Slurm's commands"
    return ("pyslurm imports, but dlscale's pyslurm backend is not written yet; "
            "using Slurm's commands")


def make_scheduler(backend: str, store: Store) -> Scheduler:
    if backend == "local":
        return LocalScheduler(store)
    if backend == "slurm":
        return SlurmCLI()
    raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)}")


def check_plan(loaded: LoadedSpec, p: Plan, backend: str,
               profile: LoadedProfile | None = None, partition: str | None = None,
               home: Path | None = None) -> None:
    """Everything that can be refused is refused before anything is submitted: a
    framework without a working environment too, with the command that builds it."""
    home = Path(home) if home else default_home()
    site = profile if backend == "slurm" else None
    problems = [f"{loaded.path}: experiment.frameworks: {problem}" for problem in
                envs.check_frameworks([r.framework for r in p.runs], home, site, partition)]
    needs: dict[str, set[str]] = {}
    for r in p.runs:
        needs.setdefault(r.framework, set()).add(r.loader)
    problems += [f"{loaded.path}: experiment.loaders: {problem}" for problem in
                 envs.check_loaders(needs, home, site, partition)]
    problems += gpus.check_gpus(loaded, p.runs, site, partition, home)
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
    script = run_dir / "job.sh"
    script.write_text(jobscript.render(run, profile, run_dir, loaded.path, partition,
                                       home=home))
    (run_dir / "spec.toml").write_text(loaded.text)
    (run_dir / "profile.toml").write_text(profile.text)
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
    p = plan(loaded)
    check_plan(loaded, p, backend, profile, partition, store.home)
    environments = {fw: envs.resolve(fw, store.home, check=False)
                    for fw in {r.framework for r in p.runs}} if backend == "local" else {}
    scheduler = scheduler or make_scheduler(backend, store)
    # The absolute path, so files kept beside the spec (a study's reference.toml) are found
    # from wherever `dlscale report` runs.
    store.save_experiment(loaded.spec.experiment.name, str(Path(loaded.path).resolve()),
                          loaded.text, loaded.digest)
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
        if backend == "slurm":
            assert profile is not None
            request = _slurm_request(run, run_dir, loaded, profile, partition, store.home)
        else:
            argv, env = local_command(run, run_dir, environments[run.framework], store.home)
            request = JobRequest(run.run_id, run_dir, argv, env, run.nodes, run.ranks_per_node,
                                 run.training["threads_per_rank"],
                                 f"{run.experiment}:{run.label()}")
        try:
            job_id = scheduler.submit(request)
        except ControllerUnreachable as exc:
            # Nothing more can be submitted now; what was submitted stays tracked.
            store.update_run(run.run_id, state="PLANNED", reason=f"not submitted: {exc}")
            report.failed_to_submit.append((run, str(exc)))
            break
        except SubmitError as exc:
            # One refused job does not stop the others, and nothing already queued is lost.
            store.update_run(run.run_id, state="FAILED", reason=f"not submitted: {exc}")
            report.failed_to_submit.append((run, str(exc)))
            continue
        if backend != "local":  # the local scheduler records its own queue entry
            store.add_job(backend, job_id, run.run_id, "PENDING", {"script": str(run_dir / "job.sh")})
        (report.resubmitted if again else report.submitted).append(run)
    return report


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
        last = store.job(backend, row["job_id"]) or {}
        payload = json.loads(last.get("payload") or "{}")
        row = store.start_attempt(row["run_id"])
        run_dir = Path(row["run_dir"])
        if backend == "slurm":
            previous = run_dir / "attempts" / str(row["attempts"] - 1)
            for name in ("job.sh", "spec.toml", "profile.toml"):
                if (previous / name).exists():
                    shutil.copy2(previous / name, run_dir / name)
        out.append((row["run_id"], _submit_again(store, row, payload.get("argv"),
                                                 payload.get("env"), scheduler_for)))
    return out


def _submit_again(store: Store, row: dict, argv: list[str] | None, env: dict | None,
                  scheduler_for=None) -> str:
    """Submit a run whose folder already holds what it needs: job.sh for Slurm, or the
    local command line `argv` with its environment."""
    backend, run_dir = row["backend"], Path(row["run_dir"])
    scheduler = (scheduler_for or make_scheduler)(backend, store)
    if backend == "slurm":
        request = JobRequest(row["run_id"], run_dir, ["sbatch", str(run_dir / "job.sh")])
    else:
        assert argv is not None
        request = JobRequest(row["run_id"], run_dir, argv, env or {}, row["nodes"],
                             row["ranks_per_node"],
                             json.loads(row["training"])["threads_per_rank"])
    job_id = scheduler.submit(request)
    if backend != "local":  # the local scheduler records its own queue entry
        store.add_job(backend, job_id, row["run_id"], "PENDING",
                      {"script": str(run_dir / "job.sh")})
    return job_id


def rerun(store: Store, ident: str, scheduler_for=None) -> tuple[str, str]:
    """Repeat a finished run exactly, from its record, as a new run that names it in
    `rerun_of`: the same job script (Slurm) or command line and environment (local), with
    only its run id and folder changed. The original and its result stay as they are.
    Returns (new run id, job id)."""
    row = find_run(store, ident)
    old_id = row["run_id"]
    if row["state"] in ACTIVE + ("PLANNED",):
        raise UserError(f"run {old_id} is {row['state']}; a rerun repeats a finished run "
                        "(wait for it, or cancel it)")
    if not row["job_id"]:
        raise UserError(f"run {old_id} was never submitted; use `dlscale run SPEC`")
    old_dir = Path(row["run_dir"])
    payload = json.loads((store.job(row["backend"], row["job_id"]) or {}).get("payload") or "{}")
    if row["backend"] == "slurm" and not (old_dir / "job.sh").is_file():
        raise UserError(f"run {old_id}: its job script {old_dir / 'job.sh'} is gone; "
                        "it cannot be repeated exactly")
    if row["backend"] != "slurm" and "argv" not in payload:
        raise UserError(f"run {old_id}: its command line is not in the store; "
                        "it cannot be repeated exactly")
    new_id = plan_digest({"rerun_of": old_id, "rerun": len(store.reruns(old_id)) + 1,
                          "at": time.time()})
    new = store.add_rerun(row, new_id)
    new_dir = Path(new["run_dir"])
    new_dir.mkdir(parents=True, exist_ok=True)

    def moved(text: str) -> str:
        # The run folder and id are the only things that differ between the two runs.
        return (text.replace(str(old_dir), str(new_dir)).replace(old_id, new_id)
                .replace(f"-{old_id[:8]}", f"-{new_id[:8]}"))
    if row["backend"] == "slurm":
        shebang, _, rest = moved((old_dir / "job.sh").read_text()).partition("\n")
        (new_dir / "job.sh").write_text(f"{shebang}\n# dlscale rerun of run {old_id}: its job "
                                        f"script, with the run id and folder moved\n{rest}")
        for name in ("spec.toml", "profile.toml"):
            if (old_dir / name).exists():
                shutil.copy2(old_dir / name, new_dir / name)
    (new_dir / "rerun_of").write_text(old_id + "\n")
    argv = [moved(a) for a in payload.get("argv", [])] or None
    try:
        job_id = _submit_again(store, {**new, "backend": row["backend"]}, argv,
                               payload.get("env"), scheduler_for)
    except DlscaleError as exc:  # refused (or no longer fits here): the rerun says why
        store.update_run(new_id, state="FAILED", reason=f"not submitted: {exc}")
        raise
    return new_id, job_id


def find_run(store: Store, ident: str) -> dict:
    """A run by id (or unique prefix), or by the id of one of its jobs."""
    for backend in BACKENDS:
        job = store.job(backend, ident)
        if job:
            return store.run(job["run_id"])
    return store.run(ident)


def cancel(store: Store, run_ids: list[str]) -> list[str]:
    """Cancel runs' live jobs (runs named by run or job id); returns the runs that had one."""
    by_backend: dict[str, list[str]] = {}
    done = []
    for rid in run_ids:
        row = find_run(store, rid)
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
