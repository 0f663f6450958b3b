"""Job arrays and waves: runs that share a job shape go to Slurm as one `sbatch --array`,
within the site's limits, the rest later as slots free up.

The shape is the run's own job script's #SBATCH lines, less those that name the run (job
name, log): exactly what Slurm allocates (partition, nodes, tasks, CPUs, GPUs, time limit,
account, QOS...). Environment and launcher need not match: each task runs its own run's
job.sh, unchanged. Beside the array script, `runs.tsv` maps each task id to its run (task
id, run id, run folder), and `logs/<task>.log` links to that run's log, so every run keeps
its own folder, log and records; a task's job id is `ARRAYID_TASK`, which sacct, squeue and
scancel all take, so states, cancel and resubmit work per run.

Limits: tasks per array from MaxArraySize (`scontrol show config`), queued jobs per user
from MaxSubmitJobs (`sacctmgr show assoc`), each lowered by the profile's max_array_size
and max_jobs. Runs beyond them stay WAITING (not submitted) and go in a later wave, which
the watcher submits (Backend.next_wave) when the user's queue has room.

This module only computes and writes files: the shapes, the limits from the answers it is
given, the array script. SlurmJobs (jobs.py) asks Slurm and submits, so a submission goes
one way, from the backend down to here and back, never from here up to the backend.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import SubmitError
from ...paths import RunPaths
from ..base import JobRequest, NotYet

WAITING_REASON = "waiting for a free slot"
# #SBATCH options that name one run rather than shape its job
_PER_RUN = ("--job-name", "--output", "--open-mode")
_ARRAY_SCRIPT = """#!/bin/bash
# dlscale job array of {n} runs sharing one job shape: task i runs the run on the line of
# runs.tsv that starts with i (task id, run id, run folder), its own job.sh, unchanged.
#SBATCH --job-name={name}
{shape}
#SBATCH --output={logs}/%a.log
#SBATCH --open-mode=append
set -euo pipefail
run_dir=$(awk -F '\\t' -v t="$SLURM_ARRAY_TASK_ID" '$1 == t {{ print $3 }}' {index})
if [ -z "$run_dir" ]; then
    echo "dlscale: array task $SLURM_ARRAY_TASK_ID has no run in {index}" >&2
    exit 2
fi
exec bash "$run_dir/job.sh"
"""


class WaitForSlots(NotYet):
    """The site's limits leave no room for this run now: a later wave submits it."""


@dataclass(frozen=True)
class Limits:
    array_size: int  # tasks per array
    jobs: int | None  # queued jobs (array tasks count one each) per user
    throttle: int | None  # %N: tasks of one array running at once
    why: str  # where the limits came from, for the waiting runs' reason


def shape(script: str) -> tuple[str, ...]:
    """The job shape of a rendered job script: its #SBATCH lines, less the per-run ones."""
    return tuple(
        line.strip()
        for line in script.splitlines()
        if line.startswith("#SBATCH") and line.split()[1].split("=")[0] not in _PER_RUN
    )


def groups(requests: list[JobRequest]) -> dict[tuple[str, ...], list[int]]:
    """The requests' indexes by job shape (their job scripts' #SBATCH lines), in order."""
    out: dict[tuple[str, ...], list[int]] = {}
    for i, request in enumerate(requests):
        out.setdefault(shape(RunPaths(request.run_dir).job_script.read_text()), []).append(i)
    return out


def site_limits(
    site_array: int | None, site_jobs: int | None, profile=None, throttle: int | None = None
) -> Limits:
    """The limits that hold for this user: the site's (MaxArraySize, MaxSubmitJobs, None
    where it did not say) where it answers, the profile's where it sets lower ones."""
    why = []
    # MaxArraySize N allows task ids 0..N-1: N tasks
    site_array = site_array or 1001  # Slurm's default
    p = profile.profile if profile is not None else None
    array = min(x for x in (site_array, p and p.max_array_size) if x)
    jobs = min((x for x in (site_jobs, p and p.max_jobs) if x), default=None)
    why.append(
        f"MaxArraySize {site_array}"
        + (f", profile max_array_size {p.max_array_size}" if p and p.max_array_size else "")
    )
    if jobs:
        why.append(f"{jobs} queued jobs per user")
    throttle = throttle or (p.max_concurrent if p else None)
    return Limits(array, jobs, throttle, "; ".join(why))


def take(limits: Limits, room: int | None) -> int:
    """How many runs of one shape the next array may hold: the array size, within the room
    left in the user's queue."""
    return limits.array_size if room is None else min(limits.array_size, room)


def array_spec(n: int, limits: Limits) -> str:
    """sbatch's --array for n tasks, with the throttle: `0-N-1%M`."""
    return f"0-{n - 1}" + (f"%{limits.throttle}" if limits.throttle else "")


def _array_dir(request: JobRequest) -> Path:
    # beside the run folders: DLSCALE_HOME/arrays/<when>-<first run>
    root = Path(request.run_dir).parent.parent / "arrays"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        d = root / f"{stamp}-{request.run_id[:8]}-{n}"
        try:
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            continue
    raise SubmitError(f"{root}: no free folder name for a job array")


def write_array(group: list[JobRequest], script_shape: tuple[str, ...]) -> Path:
    """The array script, its runs.tsv and the log links; returns the script's path."""
    from ...launching.jobscript import sbatch_value  # the one rule for #SBATCH values

    d = _array_dir(group[0])
    (d / "logs").mkdir()
    lines = []
    for i, request in enumerate(group):
        run_dir = str(Path(request.run_dir).resolve())
        if "\t" in run_dir or "\n" in run_dir:
            raise SubmitError(f"run folder {run_dir!r} cannot go into an array index")
        lines.append(f"{i}\t{request.run_id}\t{run_dir}\n")
        (d / "logs" / f"{i}.log").symlink_to(RunPaths(Path(run_dir)).log)
    (d / "runs.tsv").write_text("".join(lines))
    script = d / "array.sh"
    script.write_text(
        _ARRAY_SCRIPT.format(
            n=len(group),
            name=sbatch_value(f"dlscale-array-{group[0].run_id[:8]}", "job name"),
            shape="\n".join(script_shape),
            logs=sbatch_value(str(d / "logs"), "array log folder"),
            index=shlex.quote(str(d / "runs.tsv")),
        )
    )
    return script
