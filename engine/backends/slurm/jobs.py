"""What the Slurm backends share, whichever way they reach Slurm (its commands or pyslurm):
where runs go (the cluster profile, its partition), how their watcher starts and waves are
paced, and the jobs themselves: a run's job is a batch script rendered into its folder,
with the spec and the cluster profile beside it, checked by bash before Slurm sees it;
repeating a run submits that script again. Submitting goes the same way for both, tagged
(tags) and in job arrays (arrays); each backend says only how one script reaches Slurm in
one try (`submit_script`), what Slurm says of limits and queues, and how its watcher learns
of a new job (`submitted`). The loops live here: arrays and tags only compute (shapes,
limits, tokens), so a submission goes down from here and never calls back up."""

from __future__ import annotations

import abc
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...errors import ControllerUnreachable, DlscaleError, PlanError, SubmitError, UserError
from ...paths import RunPaths
from ...runs import RunRow, State
from ..base import Backend, JobRequest
from . import arrays, tags
from .common import Runner, SlurmWatcher, run_command

if TYPE_CHECKING:
    from ...config.profile import LoadedProfile
    from ...config.spec import LoadedSpec
    from ...launching.plan import Run
    from ...tracking.store import Store

NEEDS_PROFILE = "--backend slurm needs --profile CLUSTER.toml (see examples/clusters/)"


@dataclass(frozen=True)
class Site:
    """What a Slurm site says of itself: asked once (a front end asks at its start), then
    handed to every submission, which then asks nothing of sacctmgr or the controller's
    configuration. None: the site did not say (no answer in time, or no accounting)."""

    max_array_size: int | None = None
    max_submit_jobs: int | None = None
    accounting: bool | None = None  # whether a slurmdbd keeps accounting


@dataclass
class SlurmJobs(Backend):
    """The base of SlurmCLI and PyslurmBackend, which differ in how they reach Slurm."""

    needs_profile = True
    profile: Any = None  # where runs go: the cluster profile (LoadedProfile),
    partition: str | None = None  # its partition,
    home: Path | None = None  # and where `dlscale env create` recorded environments
    max_failures: int = 3  # the watcher's: failed polls in a row before "unreachable"
    retries: int = 3  # submit/cancel attempts on transient errors
    sleep: Callable[[float], None] = time.sleep
    name: str = "slurm"  # both follow the same Slurm jobs
    via: str = ""  # how it reaches Slurm, in the user's words
    note: str | None = None
    throttle: int | None = None  # the spec's max_concurrent: job arrays' %N
    # the watcher's to start with: None takes the profile's, else Slurm's answer decides
    accounting: InitVar[bool | None] = None
    wave_every: float = 5.0  # seconds between tries of the next wave
    _last_wave: float = -1e9
    limits: arrays.Limits | None = None  # the site's, once asked
    site: Site | None = None  # what the site said of itself (learn_site), once asked
    runner: Runner = run_command  # every Slurm command this backend runs

    @abc.abstractmethod
    def submit_script(self, script: Path, tag: str, array: str | None = None) -> str:
        """One try at submitting a job script (as a job array of `array`, e.g. "0-9%2", if
        given) with `tag` in its comment; the job id. Raises SubmitError where Slurm
        refused, ControllerUnreachable where its answer was lost (submit_tagged retries)."""

    @abc.abstractmethod
    def submitted(self, job_id: str) -> None:
        """Tell the watcher: known PENDING until the scheduler says more."""

    # --- what arrays and tags ask of Slurm, each backend its own way --------------------

    @abc.abstractmethod
    def site_max_array_size(self) -> int | None:
        """MaxArraySize, where the controller says."""

    @abc.abstractmethod
    def site_accounting(self) -> bool | None:
        """Whether the controller names an accounting database (None: it did not say)."""

    @abc.abstractmethod
    def site_max_submit_jobs(self) -> int | None:
        """The user's MaxSubmitJobs (the lowest of their associations), where known."""

    @abc.abstractmethod
    def queued_tasks(self) -> int:
        """The user's queued and running jobs, array tasks one each. Raises
        ControllerUnreachable."""

    @abc.abstractmethod
    def tagged_jobs(self) -> list[tags.Tagged]:
        """The user's jobs the controller knows, with their comments. Raises
        ControllerUnreachable."""

    def learn_site(self) -> Site:
        """The site's limits and whether it keeps accounting, asked of Slurm once for this
        backend (the profile's `accounting` is its word where it gives one)."""
        if self.site is None:
            accounting = cast(SlurmWatcher, self.watcher).accounting
            if accounting is None:
                accounting = self.site_accounting()
            self.site = Site(
                self.site_max_array_size(),
                self.site_max_submit_jobs() if accounting is not False else None,
                accounting,
            )
        return self.site

    def knows_site(self, site: object) -> None:
        if not isinstance(site, Site):
            return
        self.site = site
        watcher = cast(SlurmWatcher, self.watcher)
        if watcher.accounting is None and site.accounting is not None:
            watcher.accounting = site.accounting

    def submit(self, request: JobRequest) -> str:
        tag = tags.token(tags.home_of(request.run_dir), request.run_id)
        job_id = self.submit_tagged(RunPaths(request.run_dir).job_script, tag)
        self.submitted(job_id)
        return job_id

    def submit_array(self, script: Path, spec: str) -> str:
        return self.submit_tagged(script, tags.array_token(script), array=spec)

    def submit_tagged(self, script: Path, tag: str, array: str | None = None) -> str:
        """submit_script until Slurm answers: the job id. Before each retry the queue is
        asked for `tag`: a job that carries it was made by the try whose answer was lost,
        and is the answer. Raises SubmitError, ControllerUnreachable."""
        delay = 1.0
        for attempt in range(self.retries):
            try:
                return self.submit_script(script, tag, array)
            except ControllerUnreachable as lost:
                try:
                    found = tags.find(self.tagged_jobs(), tag)
                except ControllerUnreachable as exc:
                    raise ControllerUnreachable(
                        f"{lost}; whether Slurm made the job is unknown (the queue does not "
                        f"answer either: {exc}), so it is not retried: the next `dlscale run` "
                        "looks for it first"
                    ) from None
                if found is not None:
                    return found
                if attempt == self.retries - 1:
                    raise
                self.sleep(delay)
                delay *= 2
        raise AssertionError("not reached")  # retries >= 1

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Runs of one job shape as one job array, within the site's limits; the rest
        WAITING for a later wave (arrays): each request's job id (`ARRAYID_TASK`, or a
        plain id for a shape of one run), or why not."""
        if not requests or (self.profile is not None and not self.profile.profile.arrays):
            return super().submit_many(requests)
        return self._submit_arrays(requests, self.profile, self.throttle)

    def _submit_arrays(
        self, requests: list[JobRequest], profile, throttle: int | None
    ) -> list[str | Exception]:
        out: list[str | Exception | None] = [None] * len(requests)
        site = self.learn_site()
        limits = self.limits or arrays.site_limits(
            site.max_array_size, site.max_submit_jobs, profile, throttle
        )
        self.limits = limits  # the site's answers hold for a study's waves
        room = None if limits.jobs is None else max(0, limits.jobs - self.queued_tasks())
        for script_shape, members in arrays.groups(requests).items():
            while members:
                take = arrays.take(limits, room)
                if take <= 0:
                    for i in members:
                        out[i] = arrays.WaitForSlots(f"{arrays.WAITING_REASON} ({limits.why})")
                    break
                chunk, members = members[:take], members[take:]
                ids = self._submit_chunk([requests[i] for i in chunk], script_shape, limits)
                for i, job in zip(chunk, ids):
                    out[i] = job
                if room is not None:  # only what Slurm took fills the queue
                    room -= sum(1 for j in ids if isinstance(j, str))
                if any(isinstance(j, ControllerUnreachable) for j in ids):
                    for i, o in enumerate(out):
                        if o is None:
                            out[i] = ids[0]
                    return out  # type: ignore[return-value]
        return out  # type: ignore[return-value]

    def _submit_chunk(
        self, group: list[JobRequest], script_shape: tuple[str, ...], limits: arrays.Limits
    ) -> list[str | Exception]:
        if len(group) == 1:
            try:
                return [self.submit(group[0])]
            except (SubmitError, ControllerUnreachable) as exc:
                return [exc]
        try:
            script = arrays.write_array(group, script_shape)
        except (OSError, SubmitError) as exc:
            return [SubmitError(f"job array: {exc}")] * len(group)
        try:
            array_id = self.submit_array(script, arrays.array_spec(len(group), limits))
        except (SubmitError, ControllerUnreachable) as exc:
            return [exc] * len(group)
        ids: list[str | Exception] = [f"{array_id}_{i}" for i in range(len(group))]
        for i in range(len(group)):
            self.submitted(f"{array_id}_{i}")
        return ids

    def next_wave(self, store: Store, experiment: str | None = None) -> int:
        """Submit the WAITING runs the queue has room for now; returns how many went. Their
        job scripts were written when they were planned; the limits and throttle come from
        the profile and spec kept in their folders."""
        # at most one try every few seconds: each asks the controller for the queue
        if time.monotonic() - self._last_wave < self.wave_every:
            return 0
        self._last_wave = time.monotonic()
        waiting = store.runs(experiment, states=(State.WAITING,))
        if not waiting:
            return 0
        from ...config.profile import load_profile
        from ...config.spec import load_spec

        first = RunPaths.of(waiting[0])
        profile = load_profile(first.profile) if first.profile.exists() else self.profile
        throttle = None
        try:
            throttle = load_spec(first.spec).spec.experiment.max_concurrent
        except (DlscaleError, OSError):
            pass
        claimed, requests = [], []
        for r in waiting:
            row = store.claims.take(r["run_id"])
            if row is None:
                continue
            # a wave is the same attempt as the submission that left the run waiting
            store.update_run(row["run_id"], attempts=max(1, row["attempts"] - 1))
            claimed.append(row)
            paths = RunPaths.of(row)
            requests.append(
                JobRequest(row["run_id"], paths.root, ["sbatch", str(paths.job_script)])
            )
        if not claimed:
            return 0
        try:
            outcomes = self._submit_arrays(requests, profile, throttle)
        except BaseException:
            for row in claimed:
                store.claims.release(
                    row["run_id"], State.WAITING, f"{arrays.WAITING_REASON} (the wave failed)"
                )
            raise
        went = 0
        for row, request, outcome in zip(claimed, requests, outcomes):
            if isinstance(outcome, arrays.WaitForSlots):
                store.claims.release(row["run_id"], State.WAITING, str(outcome))
            elif isinstance(outcome, Exception):
                store.claims.release(
                    row["run_id"],
                    State.FAILED if isinstance(outcome, SubmitError) else State.WAITING,
                    f"not submitted: {outcome}",
                )
            else:
                store.jobs.add(
                    self.name, outcome, row["run_id"], State.PENDING, self.payload(request)
                )
                went += 1
        return went

    def orphans(self, home: Path, run_ids: list[str]) -> dict[str, str]:
        return tags.orphans(self.tagged_jobs(), home, run_ids)

    def first_accounting(self, given: bool | None) -> bool | None:
        """What the watcher knows of accounting at the start: the caller's word, else the
        profile's (None: asked of Slurm)."""
        if given is None and self.profile is not None:
            return self.profile.profile.accounting
        return given

    def _profile(self) -> LoadedProfile:
        if self.profile is None:
            raise PlanError(NEEDS_PROFILE)
        return self.profile

    def describe(self) -> str:
        if self.profile is None:
            return "slurm"
        p = self.profile.profile
        return f"slurm {p.name}:{p.partition(self.partition).name}"

    def time_limit_s(self) -> int | None:
        if self.profile is None:
            return None
        from ...config.times import time_to_seconds

        p = self.profile.profile
        limits = [
            time_to_seconds(t) for t in (p.time_limit, p.partition(self.partition).max_time) if t
        ]
        return min((s for s in limits if s), default=None)

    def site_profile(self) -> LoadedProfile | None:
        return self.profile

    def site_partition(self) -> str | None:
        return self.partition

    def neighbours(self, store: Store, row: RunRow, nodes: str | None) -> dict[str, Any] | None:
        """Where the profile asked for whole nodes (exclusive = true): the other jobs
        accounting says ran on the run's nodes between its first record and its summary
        (neighbours.py). None where nothing was promised, or the run measured nothing."""
        from . import neighbours

        if self.profile is None or not self.profile.profile.exclusive or not nodes:
            return None
        run_id = row["run_id"]
        first = store.records.last("params", [run_id]).get(run_id)
        summary = store.records.last("summary", [run_id]).get(run_id)
        if not first or not summary:
            return None
        start, end = first.get("time"), summary.get("time")
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            return None
        res = self.runner(neighbours.argv(nodes, float(start), float(end)))
        if res.returncode != 0:
            why = (res.stderr.strip().splitlines() or ["sacct failed"])[-1][:200]
            return neighbours.record(nodes, None, f"accounting did not answer: {why}")
        return neighbours.record(nodes, neighbours.others(res.stdout, str(row["job_id"])))

    def refusals(self, loaded: LoadedSpec, runs: list[Run]) -> list[str]:
        from ...launching import gpu_checks, jobscript

        if self.profile is None:
            return [NEEDS_PROFILE]
        partition = self.profile.profile.partition(self.partition)
        # the partition's GPUs: builds with kernels for them, precisions they have
        problems = gpu_checks.check_gpus(loaded, runs, self.profile, self.partition, self.home)
        if loaded.spec.experiment.cpus != "all":
            problems.append(
                f"{loaded.path}: experiment.cpus: pins runs on the local backend only; on "
                "Slurm a job's CPUs are its task plugin's (--cpus-per-task from "
                "threads_per_rank, and the profile's exclusive = true keeps others off the "
                'node): leave cpus out, or set it to "all"'
            )
        seen = set()
        for run in runs:
            key = (run.framework, run.nodes, run.ranks_per_node, run.training["threads_per_rank"])
            if key in seen:
                continue
            seen.add(key)
            try:
                jobscript.check_fits(run, partition, self.profile.path)
                jobscript.launcher_for(
                    run,
                    self.profile.profile.environments.get(run.framework, jobscript.Environment()),
                )
            except PlanError as exc:
                if str(exc) not in problems:
                    problems.append(str(exc))
        return problems

    def prepare(self, run: Run, paths: RunPaths, loaded: LoadedSpec) -> JobRequest:
        from ...launching import jobscript

        profile = self._profile()
        # the study's own throttle for the arrays its runs go in (submit_many)
        self.throttle = loaded.spec.experiment.max_concurrent or self.throttle
        script = paths.job_script
        script.write_text(
            jobscript.render(
                run,
                profile,
                paths.root,
                loaded.path,
                self.partition,
                home=self.home,
                time_limit=loaded.spec.experiment.time_limit,
            )
        )
        paths.profile.write_text(profile.text)
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        if check.returncode != 0:
            raise PlanError(
                f"{script}: the rendered job script does not parse: {check.stderr.strip()}"
            )
        return JobRequest(
            run.run_id,
            paths.root,
            ["sbatch", str(script)],
            {},
            run.nodes,
            run.ranks_per_node,
            run.training["threads_per_rank"],
            f"{run.experiment}:{run.label()}",
        )

    def again(self, row: RunRow, paths: RunPaths, payload: dict[str, Any]) -> JobRequest:
        return JobRequest(row["run_id"], paths.root, ["sbatch", str(paths.job_script)])

    def check_repeatable(self, row: RunRow, payload: dict[str, Any]) -> None:
        script = RunPaths.of(row).job_script
        if not script.is_file():
            raise UserError(
                f"run {row['run_id']}: its job script {script} is gone; it cannot "
                "be repeated exactly"
            )

    def repeat(
        self,
        old_row: RunRow,
        new_row: RunRow,
        payload: dict[str, Any],
        moved: Callable[[str], str],
    ) -> JobRequest:
        old, new = RunPaths.of(old_row), RunPaths.of(new_row)
        shebang, _, rest = moved(old.job_script.read_text()).partition("\n")
        new.job_script.write_text(
            f"{shebang}\n# dlscale rerun of run {old_row['run_id']}: its "
            f"job script, with the run id and folder moved\n{rest}"
        )
        if old.profile.exists():
            shutil.copy2(old.profile, new.profile)
        return JobRequest(new_row["run_id"], new.root, ["sbatch", str(new.job_script)])

    def payload(self, request: JobRequest) -> dict[str, Any]:
        return {"script": str(RunPaths(request.run_dir).job_script)}
