"""What the Slurm backends share, whichever way they reach Slurm (its commands or pyslurm):
where runs go (the cluster profile, its partition), how their watcher starts and waves are
paced, and the jobs themselves: a run's job is a batch script rendered into its folder,
with the spec and the cluster profile beside it, checked by bash before Slurm sees it;
repeating a run submits that script again. Submitting goes the same way for both, tagged
(tags) and in job arrays (arrays); each backend says only how one script reaches Slurm
(`submit_script`) and how its watcher learns of a new job (`submitted`)."""

from __future__ import annotations

import abc
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import PlanError, UserError
from ...paths import RunPaths
from ...runs import RunRow
from ..base import Backend, JobRequest
from . import arrays, tags

if TYPE_CHECKING:
    from ...config.profile import LoadedProfile
    from ...config.spec import LoadedSpec
    from ...launching.plan import Run
    from ...tracking.store import Store

NEEDS_PROFILE = "--backend slurm needs --profile CLUSTER.toml (see examples/clusters/)"


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

    @abc.abstractmethod
    def submit_script(self, script: Path, tag: str, array: str | None = None) -> str:
        """Submit one job script (as a job array of `array`, e.g. "0-9%2", if given) with
        `tag` in its comment; the job id. Raises SubmitError, ControllerUnreachable."""

    @abc.abstractmethod
    def submitted(self, job_id: str) -> None:
        """Tell the watcher: known PENDING until the scheduler says more."""

    # --- what arrays and tags ask of Slurm, each backend its own way --------------------

    @abc.abstractmethod
    def site_max_array_size(self) -> int | None:
        """MaxArraySize, where the controller says."""

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

    def submit(self, request: JobRequest) -> str:
        tag = tags.token(tags.home_of(request.run_dir), request.run_id)
        job_id = self.submit_script(RunPaths(request.run_dir).job_script, tag)
        self.submitted(job_id)
        return job_id

    def submit_array(self, script: Path, spec: str) -> str:
        return self.submit_script(script, tags.array_token(script), array=spec)

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Runs of one job shape as one job array, within the site's limits; the rest
        WAITING for a later wave (arrays)."""
        if not requests or (self.profile is not None and not self.profile.profile.arrays):
            return super().submit_many(requests)
        return arrays.submit_many(self, requests, self.profile, self.throttle)

    def next_wave(self, store: Store, experiment: str | None = None) -> int:
        # at most one try every few seconds: each asks the controller for the queue
        if time.monotonic() - self._last_wave < self.wave_every:
            return 0
        self._last_wave = time.monotonic()
        return arrays.next_wave(self, store, experiment)

    def orphans(self, home: Path, run_ids: list[str]) -> dict[str, str]:
        return tags.orphans(self, home, run_ids)

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
        from ...config.profile import time_to_seconds

        p = self.profile.profile
        limits = [
            time_to_seconds(t) for t in (p.time_limit, p.partition(self.partition).max_time) if t
        ]
        return min((s for s in limits if s), default=None)

    def site_profile(self) -> LoadedProfile | None:
        return self.profile

    def site_partition(self) -> str | None:
        return self.partition

    def refusals(self, loaded: LoadedSpec, runs: list[Run]) -> list[str]:
        from ...launching import gpu_checks, jobscript

        if self.profile is None:
            return [NEEDS_PROFILE]
        partition = self.profile.profile.partition(self.partition)
        # the partition's GPUs: builds with kernels for them, precisions they have
        problems = gpu_checks.check_gpus(loaded, runs, self.profile, self.partition, self.home)
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
            jobscript.render(run, profile, paths.root, loaded.path, self.partition, home=self.home)
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
