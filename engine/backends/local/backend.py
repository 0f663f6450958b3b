"""The local backend: this machine as a one-node cluster.

Jobs queue in the store; one detached worker process (worker.py) runs them one after
another, so a measurement never shares cores with another measurement, and runs go on when
the CLI or TUI that submitted them exits, as they would under Slurm.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....trainers.common import interference
from ...errors import PlanError, UserError
from ...paths import RunPaths
from ...runs import ACTIVE, JobRow, RunRow, State, scale_label
from ...tracking.monitor import finalize_run
from ...tracking.store import Store
from ..base import Backend, JobRequest, JobStatus, Watcher
from .processes import signal_job, valid_pid
from .starting import ensure_worker

if TYPE_CHECKING:
    from ...config.spec import LoadedSpec
    from ...launching.plan import Run

LOCK_NAME = "local-worker.lock"
# Every local run's time limit where its spec sets none (experiment.time_limit): a profile's
# default on Slurm. A run past it (a hung or stopped trainer) is stopped and ends TIMEOUT.
DEFAULT_TIME_LIMIT = "00:30:00"
# The counter local job ids are numbered by: local-1, local-2, ...
JOB_COUNTER = "local_job"


def job_number(job_id: str) -> int | None:
    """N of a local job's id, local-N; None for any other id."""
    head, _, n = job_id.partition("-")
    return int(n) if head == "local" and n.isdigit() and len(n) < 10 else None


def time_limit_s(loaded: LoadedSpec) -> int | None:
    """The seconds a run of this spec may take here (None: UNLIMITED, the spec's word)."""
    from ...config.times import time_to_seconds

    return time_to_seconds(loaded.spec.experiment.time_limit or DEFAULT_TIME_LIMIT)


def worker_alive(home: Path) -> bool:
    """Whether a local worker runs for this home: it holds the lock file while it runs."""
    path = home / LOCK_NAME
    if not path.exists():
        return False
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_fits(
    nodes: int, ranks_per_node: int, threads_per_rank: int, what: str, loader_workers: int = 0
) -> None:
    """Refuse a run the local backend cannot run without oversubscribing cores."""
    if nodes != 1:
        raise PlanError(
            f"{what}: scale {scale_label(nodes, ranks_per_node)} needs {nodes} nodes; the local "
            "backend is one node (use --backend slurm, or scales of 1xN)"
        )
    cores = usable_cores()
    if ranks_per_node * threads_per_rank > cores:
        raise PlanError(
            f"{what}: {ranks_per_node} ranks x {threads_per_rank} thread(s) need "
            f"{ranks_per_node * threads_per_rank} cores; this machine has {cores} "
            "(oversubscribed cores would measure contention, not scaling)"
        )
    if ranks_per_node * loader_workers > cores:
        raise PlanError(
            f"{what}: {ranks_per_node} ranks x {loader_workers} loader worker(s) "
            f"(training.loader_workers) need {ranks_per_node * loader_workers} cores; this "
            f"machine has {cores}"
        )


def pinning(run: Run, loaded: LoadedSpec) -> dict[str, Any]:
    """What the worker pins the run's job to (experiment.cpus), and how many CPUs its
    ranks, their threads and their loader workers want."""
    cpus = loaded.spec.experiment.cpus
    if cpus == "all":
        return {}
    threads = run.training["threads_per_rank"] + (run.training.get("loader_workers") or 0)
    return {"cpus": cpus, "cpus_needed": run.ranks_per_node * threads}


def cpu_problems(loaded: LoadedSpec, runs: list[Run]) -> list[str]:
    """A list of CPUs this machine does not let dlscale use, or too short for a run."""
    cpus = loaded.spec.experiment.cpus
    if not isinstance(cpus, list) or not runs:
        return []
    where = f"{loaded.path}: experiment.cpus"
    try:
        usable = os.sched_getaffinity(0)
    except AttributeError:  # not Linux: nothing to pin with
        return [f"{where}: this system cannot pin a process to CPUs; leave cpus out"]
    if missing := sorted(set(cpus) - usable):
        return [
            f"{where}: CPU {', '.join(map(str, missing))} is not one dlscale may use here "
            f"(it may use {', '.join(map(str, sorted(usable)))})"
        ]
    need = max(pinning(r, loaded)["cpus_needed"] for r in runs)
    if need > len(cpus):
        return [
            f"{where}: a run wants {need} CPUs (ranks x (threads_per_rank + loader_workers)); "
            f"the list has {len(cpus)}"
        ]
    return []


def lost_reason(job: JobRow) -> str:
    worker = f" (pid {job['worker_pid']} ended)" if job.get("worker_pid") else ""
    return f"the local worker was lost{worker}; this job's ranks were stopped"


def settle_failed(
    store: Store,
    job: JobRow,
    reason: str,
    exit_code: int | None = None,
    state: State = State.FAILED,
) -> None:
    """Mark a job and its run FAILED (or TIMEOUT) for a reason the backend knows (not the
    trainer's): the reason says what happened, and the log's last lines follow it as
    usual."""
    store.jobs.update(
        "local",
        job["job_id"],
        state=state,
        ended=time.time(),
        reason=reason,
        exit_code=exit_code,
    )
    finalize_run(store, job["run_id"], state)
    log_tail = (store.run(job["run_id"])["reason"] or "").split("\n")[1:]
    store.update_run(job["run_id"], reason="\n".join([reason, *log_tail]))


class LocalBackend(Backend):
    """This machine: runs queue in the store and one worker runs them in turn."""

    name = "local"
    folders_at_start = True  # the worker lays out each run's folder as it starts the run
    # A poll reads the store and asks no one: a check's next round starts within a second
    # of the last run's end, not up to 5 s later (a tenth of an interleaved pair here).
    poll_cap_s = 1.0

    def __init__(self, store: Store, start_worker: bool = True) -> None:
        self.store = store
        self.start_worker = start_worker
        self._envs: dict[str, Any] = {}  # each framework's environment, resolved once
        self.watcher = LocalWatcher(store, self.ensure_worker)

    def describe(self) -> str:
        return "local"

    def busy(self) -> str | None:
        """Half a second's look at this machine's CPUs (interference.glance), less dlscale's own
        worker and the runs it runs; busy when others used more of them than a run may
        have others use before it counts as disturbed (results/disturbed.py)."""
        from ...results.disturbed import OTHERS_CPU

        ours = {j["worker_pid"] for j in self.store.jobs.live() if j.get("worker_pid")}
        seen = interference.glance(0.5, {p for p in ours if valid_pid(p)})
        if seen.others_share is None or seen.others_share <= OTHERS_CPU:
            return None
        who = ", ".join(
            f"{cmd} (pid {pid}, {100 * s:.0f}% of a CPU)" for cmd, pid, s in seen.busiest[:3]
        )
        return (
            f"this machine is busy: other processes used {100 * seen.others_share:.0f}% of its "
            f"{seen.cpus} CPUs over the last half second" + (f", the most {who}" if who else "")
        )

    def refusals(self, loaded: LoadedSpec, runs: list[Run]) -> list[str]:
        from ...launching import custom_launch, gpu_checks

        # this machine's GPUs: one per rank, builds with kernels for them
        problems = gpu_checks.check_gpus(loaded, runs, None, None, self.store.home)
        problems += custom_launch.local_problems(loaded, runs)
        seen = set()
        for run in runs:
            workers = run.training.get("loader_workers") or 0
            key = (run.nodes, run.ranks_per_node, run.training["threads_per_rank"], workers)
            if key in seen:
                continue
            seen.add(key)
            try:
                check_fits(
                    run.nodes,
                    run.ranks_per_node,
                    run.training["threads_per_rank"],
                    f"{loaded.path}: experiment.scales {run.scale}",
                    workers,
                )
            except PlanError as exc:
                problems.append(str(exc))
        problems += cpu_problems(loaded, runs)
        data_dir = loaded.spec.training.data_dir
        if data_dir and not Path(data_dir).is_dir():
            problems.append(f"{loaded.path}: training.data_dir: {data_dir} is not a folder here")
        return problems

    def prepare(self, run: Run, paths: RunPaths, loaded: LoadedSpec) -> JobRequest:
        from ...launching import custom_launch, envs
        from ...launching.gpus import local_device
        from ...launching.launch import local_command, local_env

        if custom_launch.is_declared(run):  # the user's own script (config/custom.py)
            argv, env = custom_launch.local_command(
                run,
                paths.root,
                str(Path(loaded.path).resolve().parent),
                local_device(),
                envs.trainer_path(self.store.home),
            )
            return JobRequest(
                run.run_id,
                paths.root,
                argv,
                {**local_env(run), **env},
                run.nodes,
                run.ranks_per_node,
                run.training["threads_per_rank"],
                f"{run.experiment}:{run.label()}",
                time_limit_s=time_limit_s(loaded),
                **pinning(run, loaded),
            )
        if run.framework not in self._envs:
            self._envs[run.framework] = envs.resolve(run.framework, self.store.home, check=False)
        argv, env = local_command(run, paths.root, self._envs[run.framework], self.store.home)
        return JobRequest(
            run.run_id,
            paths.root,
            argv,
            env,
            run.nodes,
            run.ranks_per_node,
            run.training["threads_per_rank"],
            f"{run.experiment}:{run.label()}",
            time_limit_s=time_limit_s(loaded),
            **pinning(run, loaded),
        )

    def again(self, row: RunRow, paths: RunPaths, payload: dict[str, Any]) -> JobRequest:
        return self._from_record(row, paths, payload.get("argv"), payload.get("env"), payload)

    def check_repeatable(self, row: RunRow, payload: dict[str, Any]) -> None:
        if "argv" not in payload:
            raise UserError(
                f"run {row['run_id']}: its command line is not in the store; "
                "it cannot be repeated exactly"
            )

    def repeat(
        self,
        old_row: RunRow,
        new_row: RunRow,
        payload: dict[str, Any],
        moved: Callable[[str], str],
    ) -> JobRequest:
        # the variables too: a declared framework's name its records' file and run id
        env = {k: moved(v) for k, v in (payload.get("env") or {}).items()}
        return self._from_record(
            new_row,
            RunPaths.of(new_row),
            [moved(a) for a in payload["argv"]],
            env,
            payload,
        )

    @staticmethod
    def _from_record(
        row: RunRow,
        paths: RunPaths,
        argv: list[str] | None,
        env: dict[str, str] | None,
        payload: dict[str, Any],
    ) -> JobRequest:
        """A job again as its record says: its command, and its time limit and CPUs."""
        if not argv:
            raise UserError(
                f"run {row['run_id']}: its command line is not in the store; "
                "it cannot be submitted again"
            )
        return JobRequest(
            row["run_id"],
            paths.root,
            argv,
            env or {},
            row["nodes"],
            row["ranks_per_node"],
            json.loads(row["training"])["threads_per_rank"],
            time_limit_s=_limit_of(payload),
            cpus=payload.get("cpus"),
            cpus_needed=payload.get("cpus_needed") or 1,
        )

    def records_its_jobs(self) -> bool:
        return True  # its queue is the store's jobs table

    def observed(self, store: Store, status: JobStatus) -> None:
        pass  # the worker keeps the job rows

    # A worker holds an exclusive lock on this file for as long as it lives.
    @property
    def lock_path(self) -> Path:
        return self.store.home / LOCK_NAME

    def worker_alive(self) -> bool:
        return worker_alive(self.store.home)

    def ensure_worker(self, wait: bool = False) -> str | None:
        """Start a worker if none runs. With `wait`, return why it cannot (the store full,
        read-only, locked), or None: what a front end shows, instead of runs that stay
        pending with no reason (starting.py)."""
        if not self.start_worker:
            return None
        return ensure_worker(self.store.home, self.worker_alive, wait)

    def submit(self, request: JobRequest) -> str:
        result = self.submit_many([request])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Queue them all in the store at once: their job numbers taken together and their
        jobs recorded in one transaction, then the worker started once (a study of 10,000
        runs made 10,000 of each)."""
        out: list[str | Exception] = []
        fits: list[JobRequest] = []
        for request in requests:
            try:
                check_fits(
                    request.nodes, request.ranks_per_node, request.threads_per_rank, request.name
                )
                fits.append(request)
                out.append("")
            except PlanError as exc:
                out.append(exc)
        if not fits:
            return out
        first = self.store.jobs.next_counter(JOB_COUNTER, len(fits))
        ids = [f"local-{first + i}" for i in range(len(fits))]
        refused = self.store.jobs.add_many(
            self.name,
            [
                (
                    job_id,
                    r.run_id,
                    State.PENDING,
                    {
                        "argv": r.argv,
                        "env": r.env,
                        "run_dir": str(r.run_dir),
                        "log": str(r.log_path),
                        "time_limit_s": r.time_limit_s,
                        **({"cpus": r.cpus, "cpus_needed": r.cpus_needed} if r.cpus else {}),
                        **({"layout": asdict(r.layout)} if r.layout else {}),
                    },
                )
                for job_id, r in zip(ids, fits)
            ],
        )
        given = iter(exc or job_id for job_id, exc in zip(ids, refused))
        out = [next(given) if o == "" else o for o in out]
        self.ensure_worker()
        return out


def _limit_of(payload: dict[str, Any]) -> int | None:
    """A recorded job's limit, for its run submitted again (the default for jobs recorded
    before there was one)."""
    if "time_limit_s" in payload:
        return payload["time_limit_s"]
    from ...config.times import time_to_seconds

    return time_to_seconds(DEFAULT_TIME_LIMIT)


class LocalWatcher(Watcher):
    """Following local jobs: their rows in the store, which the worker keeps; a worker that
    died is replaced, and its job's processes stopped."""

    name = "local"

    def __init__(self, store: Store, ensure_worker: Callable[..., str | None]) -> None:
        self.store = store
        self.ensure_worker = ensure_worker  # the backend's: starts a worker if none runs

    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        rows = self._jobs(job_ids)
        active = [r for r in rows if r["state"] in ACTIVE]
        self.last_poll_ok, self.last_error = True, None
        if active and not worker_alive(self.store.home):
            # A worker that died (killed, machine rebooted) leaves RUNNING jobs nobody owns.
            # Its launcher and ranks died with it (a parent-death signal); stop any that did
            # not, proven to be the job's own, never by the recorded pid alone.
            for r in active:
                if r["state"] == State.RUNNING:
                    signal_job(r["pid"], r["pid_mark"], r["token"], signal.SIGKILL)
                    settle_failed(self.store, r, lost_reason(r))
            why = self.ensure_worker(wait=True)
            if why is not None:  # the runs wait; the front end says why, every poll
                self.last_poll_ok = False
                self.last_error = (
                    f"the local worker cannot run: {why}; "
                    f"{sum(r['state'] != State.RUNNING for r in active)} run(s) wait until "
                    "it can (the next dlscale command that can write starts it again)"
                )
            rows = self._jobs(job_ids)
        now = time.time()
        out = {}
        for r in rows:
            elapsed = ((r["ended"] or now) - r["started"]) if r["started"] else None
            out[r["job_id"]] = JobStatus(
                r["job_id"],
                r["state"],
                r["reason"],
                "localhost" if r["started"] else None,
                elapsed,
                r["exit_code"],
            )
        return out

    def problem(self, warning: str, reachable: bool) -> str:
        return warning  # already the sentence to show (poll)

    def _jobs(self, job_ids: list[str]) -> list[JobRow]:
        """The rows of these jobs; of many, every local job's read in one go and picked
        out (cheaper than binding thousands of ids)."""
        if len(job_ids) <= 500:
            return self.store.jobs.find(self.name, job_ids, payload=False)
        wanted = set(job_ids)
        return [j for j in self.store.jobs.find(self.name, payload=False) if j["job_id"] in wanted]

    def cancel(self, job_ids: list[str]) -> None:
        for r in self.store.jobs.find(self.name, job_ids, states=ACTIVE):
            self.store.jobs.update(
                self.name,
                r["job_id"],
                state=State.CANCELLED,
                ended=time.time(),
                reason="cancelled by the user",
            )
            if r["state"] == State.RUNNING:  # the worker follows up (SIGKILL after a grace)
                signal_job(r["pid"], r["pid_mark"], r["token"], signal.SIGTERM)
