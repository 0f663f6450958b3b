"""A run folder's layout, named in one place: what the engine writes there before a job
starts, what the job writes, and where an earlier attempt's files go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The records' file name also names them in messages ("metrics.jsonl line 7 skipped").
METRICS_NAME = "metrics.jsonl"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunPaths:
        """The folder of a run as the store records it."""
        return cls(Path(row["run_dir"]))

    # Written by the engine when a run is submitted (kept with every attempt).
    @property
    def job_script(self) -> Path:
        return self.root / "job.sh"

    @property
    def spec(self) -> Path:
        return self.root / "spec.toml"

    @property
    def profile(self) -> Path:
        return self.root / "profile.toml"

    @property
    def record(self) -> Path:
        """What the run is (run.json): enough to rebuild a store from the folders."""
        return self.root / "run.json"

    @property
    def rerun_of(self) -> Path:
        return self.root / "rerun_of"

    # Written by the job.
    @property
    def log(self) -> Path:
        return self.root / "run.log"

    @property
    def exit_marker(self) -> Path:
        """`exit N` or `signal TERM`, written by the job script as it ends: the final state
        where Slurm keeps no accounting."""
        return self.root / "job.exit"

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_NAME

    # Earlier attempts keep their files apart from the current one's.
    @property
    def attempts(self) -> Path:
        return self.root / "attempts"

    def attempt(self, n: int) -> RunPaths:
        return RunPaths(self.attempts / str(n))

    # The files that repeat a run exactly, copied into a new attempt or a rerun's folder.
    @property
    def submission(self) -> tuple[Path, ...]:
        return (self.job_script, self.spec, self.profile)
