"""Slurm through pyslurm (Slurm's C API), where a pyslurm built for the cluster's release
imports (probe.py decides that): the same jobs as the command-line backend's, submitted
without a process per call; its watcher (watcher.py) follows them.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ....errors import ControllerUnreachable, SchedulerError, SubmitError
from ....runs import TERMINAL, State
from .. import tags
from ..common import clean_env, has_accounting, user_name
from ..jobs import SlurmJobs
from ..parsing import map_state, site_limit
from .api import Controller
from .records import text_of, waiting_tasks
from .submit import job_description
from .watcher import PyslurmWatcher


@dataclass
class PyslurmBackend(SlurmJobs):
    """Slurm through pyslurm's API, in this process: the same jobs as SlurmCLI's."""

    via: str = "pyslurm"

    def __post_init__(self, accounting: bool | None) -> None:
        self.controller = Controller(self.retries, self.sleep)
        self.watcher: PyslurmWatcher = PyslurmWatcher(
            max_failures=self.max_failures,
            accounting=self.first_accounting(accounting),
            controller=self.controller,
            runner=self.runner,
        )

    def submitted(self, job_id: str) -> None:
        self.watcher.submitted(job_id)

    # --- what arrays and tags ask of Slurm (SlurmJobs' abstract methods) ----------------

    def site_max_array_size(self) -> int | None:
        config = self.controller.config()
        if config is None:
            return None
        return site_limit(config.max_array_size)

    def site_accounting(self) -> bool | None:
        config = self.controller.config()
        return None if config is None else has_accounting(config.accounting_storage_type)

    def site_max_submit_jobs(self) -> int | None:
        if self.watcher.accounting is False:
            return None  # no slurmdbd: no association limits to read
        db = self.controller.api.db
        try:
            found = self.controller.call(
                "associations",
                lambda: db.Associations.load(db.AssociationFilter(users=[user_name()])),
            )
        except (SchedulerError, ControllerUnreachable, ValueError):
            return None
        limits = (site_limit(a.max_submit_jobs) for a in found.values())
        return min((n for n in limits if n is not None), default=None)

    def queued_tasks(self) -> int:
        jobs = self.controller.call("queue", self.controller.api.Jobs.load)
        me, count = os.getuid(), 0
        for job in jobs.values():
            if job.user_id != me or map_state(text_of(job.state) or State.UNKNOWN) in TERMINAL:
                continue
            waiting = waiting_tasks(job)
            count += 1 if waiting is None else len(waiting)
        return count

    def tagged_jobs(self) -> list[tags.Tagged]:
        jobs = self.controller.call("queue", self.controller.api.Jobs.load)
        me, out = os.getuid(), []
        for job in jobs.values():
            comment = text_of(getattr(job, "comment", None)) or ""
            if job.user_id == me and comment.startswith(tags.PREFIX + ":"):
                state = map_state(text_of(job.state) or State.UNKNOWN)
                own = getattr(job, "array_id", None) or job.id
                out.append(tags.Tagged(str(own), state, comment))
        return out

    def submit_script(self, script: Path, tag: str, array: str | None = None) -> str:
        """The script submitted once, as sbatch would (its #SBATCH lines, sbatch's
        environment), as a job array of `array` tasks if given, with the tag in its comment
        (SlurmJobs.submit_tagged looks for a lost answer's job by it). The job id."""
        try:
            text = script.read_text()
            options = job_description(text, str(script))
        except (OSError, ValueError) as exc:
            raise SubmitError(str(exc)) from None
        env = clean_env()
        # What sbatch adds to the job's environment, so that jobs see the same.
        env.update(
            SLURM_SUBMIT_DIR=os.getcwd(),
            SLURM_SUBMIT_HOST=socket.gethostname(),
            SLURM_UMASK=f"0{_umask():03o}",
        )
        env.setdefault("SLURM_PRIO_PROCESS", str(os.getpriority(os.PRIO_PROCESS, 0)))
        options.setdefault("working_directory", os.getcwd())  # sbatch's default, or --chdir
        if array:
            options["array"] = array
        options.pop("comment", None)  # the tag's place (sbatch_extra may not set one)

        try:
            desc = self.controller.api.JobSubmitDescription(
                script=text, environment=env, **options, comment=tag
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise SubmitError(f"{script}: {exc}") from None
        try:
            return str(self.controller.call("submit", desc.submit, tries=1))
        except ValueError as exc:  # pyslurm's own checks of the description
            raise SubmitError(f"{script}: {exc}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
