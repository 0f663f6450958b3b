"""What both ways of reaching Slurm (its commands, pyslurm) share: the errors worth a retry,
what a failed command said, whether a site keeps accounting, the last word a job left in its run
folder, and the watcher's memory of each job's last known state. Running a command is
calls.py's.

A cluster without accounting (no slurmdbd: sacct answers that accounting is disabled, the
controller's AccountingStorageType names none, or the profile says `accounting = false`)
forgets a job once it has ended for MinJobAge; such a job is settled from the marker its job
script wrote in the run folder as it ended (`job.exit`: `exit N` or `signal TERM`).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from typing import Protocol

from ...errors import ControllerUnreachable
from ...paths import RunPaths
from ...runs import TERMINAL, RunRow, State
from ..base import JobStatus, Watcher
from .calls import TIMED_OUT
from .calls import CommandResult as CommandResult
from .calls import run_command as run_command
from .parsing import SlurmJob, parse_exit_marker

# Messages of a controller or database that is busy or restarting: worth a retry.
TRANSIENT = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Connection refused",
    "Resource temporarily unavailable",
    "Slurm backup controller in standby mode",
    "Zero Bytes were transmitted or received",
    "Connection reset",
)


def transient(res: CommandResult) -> bool:
    """Whether a failed command is worth a retry: Slurm said it was busy or unreachable,
    or it did not answer in its time (dlscale ended it: nothing of Slurm's to quote)."""
    return res.returncode == TIMED_OUT or any(t in res.stderr for t in TRANSIENT)


def user_name() -> str:
    """Who the queue and the limits are asked about: this user, by the name the password
    database gives the process's uid where $USER and $LOGNAME are unset (a cron job, a
    container): squeue --user 0 would ask about root's jobs."""
    name = os.environ.get("USER") or os.environ.get("LOGNAME")
    if name:
        return name
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a name: Slurm takes the number
        return str(os.getuid())


class Runner(Protocol):
    def __call__(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> CommandResult: ...


def clean_env() -> dict[str, str]:
    """The environment for sbatch: SBATCH_* variables (from a user's shell or an enclosing
    job) would silently override the script's own #SBATCH lines."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def said(res: CommandResult, whole: bool = True) -> str:
    """Why a command failed, on one line, named once: `squeue: no answer in 10 s`, and
    Slurm's own `squeue: error: ...` as it is (never `squeue: squeue: ...`). whole=False:
    its first line only."""
    name = os.path.basename(res.argv[0]) if res.argv else "command"
    text = " ".join(res.stderr.split()) if whole else first_line(res.stderr)
    text = text or f"exited {res.returncode}"
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


def accounting_disabled(stderr: str) -> bool:
    """sacct's answer on a cluster without slurmdbd."""
    return "accounting storage is disabled" in stderr.lower()


def has_accounting(storage_type: str | None) -> bool:
    """Whether the controller's AccountingStorageType names a database to ask: 22.05 says
    accounting_storage/none without one, 25.11 leaves it unset."""
    storage = (storage_type or "").strip().lower()
    return bool(storage) and storage not in ("(null)", "none") and not storage.endswith("/none")


def last_word(row: RunRow) -> JobStatus | None:
    """The end a job wrote in its run folder, once the controller has forgotten it."""
    marker = RunPaths.of(row).exit_marker
    try:
        ended = parse_exit_marker(marker.read_text())
    except OSError:
        return None
    if ended is None:
        return None
    state, code = ended
    return JobStatus(
        str(row["job_id"]),  # a row with a job (the watcher asks of no other)
        state,
        None if state != State.CANCELLED else "ended by SIGTERM (scancel, or the time limit)",
        None,
        None,
        code,
    )


@dataclass
class SlurmWatcher(Watcher):
    """Following Slurm's jobs, whichever way it is asked: the last known state of each job
    (a finished one kept and never asked about again), and a few failed polls tolerated
    before the controller is reported unreachable."""

    max_failures: int = 3  # failed polls in a row before "unreachable"
    accounting: bool | None = None  # None: not known yet (the profile's word, else asked)
    last_poll_ok: bool = True  # False while failures are still being tolerated
    last_error: str | None = None
    _cache: dict[str, SlurmJob] = field(default_factory=dict)  # last known, terminal kept
    _failures: int = 0

    def submitted(self, job_id: str) -> None:
        """Known PENDING until Slurm says more (its database may not know it yet)."""
        self._cache[job_id] = SlurmJob(job_id, State.PENDING, "PENDING")

    def _live(self, job_ids: list[str]) -> list[str]:
        """The jobs not known to be finished: the only ones asked about."""
        return [j for j in job_ids if not (j in self._cache and self._cache[j].state in TERMINAL)]

    def last_word(self, row: RunRow) -> JobStatus | None:
        return last_word(row) if self.accounting is False else None

    def _answer(self, ok: bool, job_ids: list[str]) -> dict[str, JobStatus]:
        """How every poll ends, whichever way it asked: a failed poll counts towards
        "unreachable" (max_failures in a row), and the answer is the last known state of each
        job asked for (a job Slurm has not shown yet is left out)."""
        self.last_poll_ok = ok
        if ok:
            self._failures = 0
        else:
            self._failures += 1
            if self._failures >= self.max_failures:
                raise ControllerUnreachable(
                    f"Slurm did not answer {self._failures} polls in a row: {self.last_error}"
                )
        out = {}
        for j in job_ids:
            job = self._cache.get(j)
            if job is not None:
                out[j] = JobStatus(
                    j,
                    job.state,
                    job.reason,
                    job.nodes,
                    float(job.elapsed_s) if job.elapsed_s is not None else None,
                    job.exit_code,
                )
        return out
