"""Following jobs on a cluster without accounting (no slurmdbd: sacct answers that
accounting is disabled, or the profile says `accounting = false`).

The controller is asked instead, once per poll for every job: `scontrol --oneliner show
job` lists queued and running jobs with their pending reasons, and ended ones with their
state and exit code for as long as Slurm remembers them (MinJobAge). A job it has
forgotten is settled from the marker its job script wrote in the run folder as it ended
(`job.exit`: `exit N` or `signal TERM`; Backend.last_word).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..paths import RunPaths
from ..runs import TERMINAL, State
from .base import JobStatus
from .slurm_parse import ParseError, parse_exit_marker, parse_scontrol_jobs

if TYPE_CHECKING:
    from .slurm import SlurmCLI


def disabled(stderr: str) -> bool:
    """sacct's answer on a cluster without slurmdbd."""
    return "accounting storage is disabled" in stderr.lower()


def poll(backend: SlurmCLI, job_ids: list[str]) -> dict[str, JobStatus]:
    """One `scontrol show job` for every job not known to be finished."""
    backend._polls += 1
    live = [j for j in job_ids if not (j in backend._cache and backend._cache[j].state in TERMINAL)]
    ok = True
    if live:
        res = backend.runner(["scontrol", "--oneliner", "show", "job"])
        if res.returncode == 0:
            try:
                found = parse_scontrol_jobs(res.stdout)
            except ParseError as exc:
                found, ok = {}, False
                backend.last_error = str(exc)
            for jid in live:
                if jid in found:
                    backend._cache[jid] = found[jid]
                elif jid in backend._cache and ok:
                    # forgotten by the controller: the marker decides (last_word)
                    del backend._cache[jid]
        else:
            ok = False
            backend.last_error = f"scontrol: {' '.join(res.stderr.split()) or res.returncode}"
    return backend._answer(ok, job_ids)


def last_word(row: dict[str, Any]) -> JobStatus | None:
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
        row["job_id"],
        state,
        None if state != State.CANCELLED else "ended by SIGTERM (scancel, or the time limit)",
        None,
        None,
        code,
    )
