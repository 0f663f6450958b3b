"""The scheduler interface every backend implements (local today; Slurm next).

A backend turns a `JobRequest` into a job, reports many jobs' states in one call, and
cancels. It raises only the errors named on each method, so callers know what to catch.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import RunPaths


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


class Scheduler(abc.ABC):
    name: str

    @abc.abstractmethod
    def submit(self, request: JobRequest) -> str:
        """Queue the job; return its id. Raises SubmitError with the scheduler's reason."""

    @abc.abstractmethod
    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """States of all `job_ids` in one query. Raises ControllerUnreachable."""

    @abc.abstractmethod
    def cancel(self, job_ids: list[str]) -> None:
        """Cancel the jobs (finished ones are left alone). Raises SchedulerError."""
