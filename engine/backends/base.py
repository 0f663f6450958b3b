"""The interface every backend implements: everything that differs between the places a run
can go (this machine, a Slurm cluster through its commands or through pyslurm) lives behind
it, and the flow written once above it (engine/study.py: plan, claim, submit, watch, repeat)
never asks which backend it has. In the manner of submitit's executors.

Each method raises only the errors it names, so callers know what to catch.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ControllerUnreachable, DlscaleError
from ..paths import Layout, RunPaths
from ..runs import RunRow

if TYPE_CHECKING:
    from ..config.profile import LoadedProfile
    from ..config.spec import LoadedSpec
    from ..launching.plan import Run
    from ..tracking.store import Store


class NotYet(DlscaleError):
    """submit_many's answer for a job the place has no room for now (its limits): the run
    is left WAITING and next_wave submits it."""


@dataclass(frozen=True)
class JobRequest:
    run_id: str
    run_dir: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    nodes: int = 1
    ranks_per_node: int = 1
    threads_per_rank: int = 1
    name: str = "dlscale"
    # Where the backend lays out the run's folder when its job starts (folders_at_start):
    # what goes in it then. None: it was laid out at submission.
    layout: Layout | None = None
    # The most the job may run, where the backend itself holds it to a limit (the local
    # worker; Slurm's limit is in the job script). None: none.
    time_limit_s: int | None = None
    # The CPUs the local worker pins the job to (the spec's experiment.cpus): "quiet" (the
    # quietest `cpus_needed` just before it starts) or a list; None: no pinning.
    cpus: str | list[int] | None = None
    cpus_needed: int = 1

    @property
    def log_path(self) -> Path:
        return RunPaths(self.run_dir).log


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str  # PENDING RUNNING COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL UNKNOWN
    reason: str | None = None
    nodes: str | None = None
    elapsed_s: float | None = None
    exit_code: int | None = None


class Watcher(abc.ABC):
    """Following a place's jobs, apart from submitting them (as submitit's watcher is apart
    from its executor): what the watcher (tracking/monitor) and `cancel` ask of it."""

    # Health: whether the last poll answered, and if not why (a few failed polls are
    # tolerated before poll raises ControllerUnreachable).
    last_poll_ok: bool = True
    last_error: str | None = None

    def problem(self, warning: str, reachable: bool) -> str:
        """What a front end says when a poll went wrong (`warning`: why), as a sentence."""
        if not reachable:
            return f"controller unreachable: {warning}; states shown as last seen, retrying"
        return f"the scheduler did not answer the last poll: {warning}; states shown as last seen"

    @abc.abstractmethod
    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """States of all `job_ids` in one query. Raises ControllerUnreachable."""

    @abc.abstractmethod
    def cancel(self, job_ids: list[str]) -> None:
        """Cancel the jobs (finished ones are left alone). Raises SchedulerError."""

    def last_word(self, row: RunRow) -> JobStatus | None:
        """How a job the scheduler no longer knows ended, from what it left in the run's
        folder, where the place has such a record (Slurm without accounting)."""
        return None


class Backend(abc.ABC):
    """One place runs can go. `name` is what the store records with each job ("local",
    "slurm"): a run is followed, cancelled and repeated by the backend of that name."""

    name: str
    needs_profile = False  # planning needs a cluster profile (--profile)
    via: str = ""  # how it is reached, in the user's words
    note: str | None = None  # why this way (pyslurm or the commands), said once
    # Each run's folder (run.json, its spec) is made when its job starts rather than at
    # submission: a study of 10,000 runs then costs no file-system work per run up front,
    # which on a parallel file system is most of the submission's time. Only where nothing
    # outside dlscale needs the folder before the job starts (the local worker).
    folders_at_start = False
    # The longest a command following its jobs waits between polls while nothing changes:
    # each poll asks the scheduler, which a busy site's controller feels.
    poll_cap_s = 5.0
    # Follows the jobs this backend submits (and any job of its name in the store).
    watcher: Watcher

    # --- the place --------------------------------------------------------------------------

    @abc.abstractmethod
    def describe(self) -> str:
        """Where runs go, for headers and messages: "local", "slurm CLUSTER:PARTITION"."""

    def time_limit_s(self) -> int | None:
        """The most a job may run, where the place sets one."""
        return None

    def busy(self) -> str | None:
        """What else is using the machine the runs will run on, in one line (None: quiet,
        or a place this backend cannot look at before its jobs start)."""
        return None

    def check_reachable(self, within_s: float) -> None:
        """Raise ControllerUnreachable, saying why, when the scheduler does not answer
        within `within_s` seconds: asked before a submission, so an unreachable controller
        costs seconds, not the minutes of a submission retried. A place with no
        controller (this machine) always answers."""
        return None

    def learn_site(self) -> object | None:
        """What the place says of itself (its limits, whether it keeps accounting), asked
        once and kept; None for a place with nothing to ask."""
        return None

    def knows_site(self, site: object) -> None:
        """Take what the place said of itself to another backend (learn_site) as said
        here, so that this one asks nothing again."""
        return None

    def site_profile(self) -> LoadedProfile | None:
        """The cluster profile whose environments set up frameworks' software, if any."""
        return None

    def site_partition(self) -> str | None:
        """The profile's partition runs go to (None: its default)."""
        return None

    @abc.abstractmethod
    def refusals(self, loaded: LoadedSpec, runs: list[Run]) -> list[str]:
        """Why these runs cannot go here (scales the place cannot hold, data it cannot
        read), one `file: field: reason` line each; empty when they can."""

    # --- a run's job ------------------------------------------------------------------------

    @abc.abstractmethod
    def prepare(self, run: Run, paths: RunPaths, loaded: LoadedSpec) -> JobRequest:
        """Write what the job needs into the run's folder and say how to start it.
        Raises PlanError when the job cannot be made (a refused value, a script that does
        not parse)."""

    @abc.abstractmethod
    def again(self, row: RunRow, paths: RunPaths, payload: dict[str, Any]) -> JobRequest:
        """The same job once more (resubmit): its folder holds the previous attempt's files
        under attempts/N, and `payload` is what the store kept of its last job."""

    @abc.abstractmethod
    def check_repeatable(self, row: RunRow, payload: dict[str, Any]) -> None:
        """Raise UserError when the run's job cannot be repeated exactly (its script or
        command line is gone), before anything is made for a rerun."""

    @abc.abstractmethod
    def repeat(
        self,
        old_row: RunRow,
        new_row: RunRow,
        payload: dict[str, Any],
        moved: Callable[[str], str],
    ) -> JobRequest:
        """The old run's job as the new run's (rerun), in the new run's folder: `moved`
        rewrites the old run's id and folder in a text into the new one's (check_repeatable
        has passed)."""

    @abc.abstractmethod
    def submit(self, request: JobRequest) -> str:
        """Queue the job; return its id. Raises SubmitError with the scheduler's reason, or
        ControllerUnreachable."""

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Queue several jobs; each one's id, or the error that kept it out. A backend that
        can queue many at once (job arrays) does so; this one submits them in turn, and
        after a controller that does not answer tries no more (they all get that error)."""
        out: list[str | Exception] = []
        for request in requests:
            try:
                out.append(self.submit(request))
            except ControllerUnreachable as exc:
                return out + [exc] * (len(requests) - len(out))
            except DlscaleError as exc:  # this job refused: the others still go
                out.append(exc)
        return out

    def orphans(self, home: Path, run_ids: list[str]) -> dict[str, str]:
        """Live jobs of these runs that an interrupted submission from `home` made but
        never recorded (the scheduler's answer lost, or dlscale killed before it wrote it
        down), by run id: adopted rather than submitted again. One query. Raises
        ControllerUnreachable. A place whose jobs cannot outlive an unrecorded submission
        has none."""
        return {}

    def payload(self, request: JobRequest) -> dict[str, Any]:
        """What the store keeps of a job to repeat it."""
        return {}

    def records_its_jobs(self) -> bool:
        """True when submit() records the job in the store itself (a queue of its own)."""
        return False

    # --- what each tick asks besides the watcher ---------------------------------------------

    def next_wave(self, store: Store, experiment: str | None = None) -> int:
        """Submit runs left WAITING for the place's limits, as far as it has room now;
        how many went. The watcher calls it every tick."""
        return 0

    def neighbours(self, store: Store, row: RunRow, nodes: str | None) -> dict[str, Any] | None:
        """As a run's job ends: the other jobs that shared its nodes where the place
        promised it none (a Slurm profile's exclusive), as a `neighbours` record's fields;
        None where nothing was promised or nothing can be asked."""
        return None

    def observed(self, store: Store, status: JobStatus) -> None:
        """Keep what a poll saw of a job in the store (a backend whose own worker keeps its
        job rows does nothing here)."""
        store.jobs.update(
            self.name,
            status.job_id,
            state=status.state,
            reason=status.reason,
            nodes=status.nodes,
            elapsed=status.elapsed_s,
            exit_code=status.exit_code,
        )
