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
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import ControllerUnreachable, DlscaleError, SubmitError
from ...paths import RunPaths
from ...runs import State
from ..base import JobRequest, NotYet

if TYPE_CHECKING:
    from ...tracking.store import Store
    from .jobs import SlurmJobs  # the backends arrays serve (it imports this module)

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


def site_limits(backend: SlurmJobs, profile=None, throttle: int | None = None) -> Limits:
    """The limits that hold for this user: the site's where it answers, the profile's where
    it sets lower ones."""
    why = []
    # MaxArraySize N allows task ids 0..N-1: N tasks
    site_array = backend.site_max_array_size() or 1001  # Slurm's default
    site_jobs = backend.site_max_submit_jobs()
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


def submit_many(
    backend: SlurmJobs, requests: list[JobRequest], profile=None, throttle: int | None = None
) -> list[str | Exception]:
    """Each request's job id (`ARRAYID_TASK`, or a plain id for a shape of one run), or
    why not: WaitForSlots for runs beyond the limits (a later wave), SubmitError and
    ControllerUnreachable as sbatch's."""
    out: list[str | Exception | None] = [None] * len(requests)
    limits = backend.limits or site_limits(backend, profile, throttle)
    backend.limits = limits  # the site's answers hold for a study's waves
    room = None if limits.jobs is None else max(0, limits.jobs - backend.queued_tasks())
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, request in enumerate(requests):
        text = RunPaths(request.run_dir).job_script.read_text()
        groups.setdefault(shape(text), []).append(i)
    for script_shape, members in groups.items():
        while members:
            take = limits.array_size if room is None else min(limits.array_size, room)
            if take <= 0:
                for i in members:
                    out[i] = WaitForSlots(f"{WAITING_REASON} ({limits.why})")
                break
            chunk, members = members[:take], members[take:]
            ids = _submit_chunk(backend, [requests[i] for i in chunk], script_shape, limits)
            for i, job in zip(chunk, ids):
                out[i] = job
            if room is not None:
                room -= sum(1 for j in ids if isinstance(j, str))
            if any(isinstance(j, ControllerUnreachable) for j in ids):
                rest = [i for i, o in enumerate(out) if o is None]
                for i in rest:
                    out[i] = ids[0]
                return out  # type: ignore[return-value]
    return out  # type: ignore[return-value]


def _submit_chunk(
    backend: SlurmJobs, group: list[JobRequest], script_shape: tuple[str, ...], limits: Limits
) -> list[str | Exception]:
    if len(group) == 1:
        try:
            return [backend.submit(group[0])]
        except (SubmitError, ControllerUnreachable) as exc:
            return [exc]
    try:
        script = write_array(group, script_shape)
    except (OSError, SubmitError) as exc:
        return [SubmitError(f"job array: {exc}")] * len(group)
    spec = f"0-{len(group) - 1}" + (f"%{limits.throttle}" if limits.throttle else "")
    try:
        array_id = backend.submit_array(script, spec)
    except (SubmitError, ControllerUnreachable) as exc:
        return [exc] * len(group)
    ids: list[str | Exception] = [f"{array_id}_{i}" for i in range(len(group))]
    for i in range(len(group)):
        backend.submitted(f"{array_id}_{i}")
    return ids


def next_wave(
    backend: SlurmJobs,
    store: Store,
    experiment: str | None = None,
    load_profile: Callable | None = None,
) -> int:
    """Submit the WAITING runs the queue has room for now; returns how many went. Their job
    scripts were written when they were planned; the limits and throttle come from the
    profile and spec kept in their folders."""
    waiting = [r for r in store.runs(experiment, states=(State.WAITING,))]
    if not waiting:
        return 0
    from ...config.profile import load_profile as load
    from ...config.spec import load_spec

    first = RunPaths.of(waiting[0])
    profile = load(first.profile) if first.profile.exists() else backend.profile
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
        requests.append(JobRequest(row["run_id"], paths.root, ["sbatch", str(paths.job_script)]))
    if not claimed:
        return 0
    try:
        outcomes = submit_many(backend, requests, profile, throttle)
    except BaseException:
        for row in claimed:
            store.claims.release(
                row["run_id"], State.WAITING, f"{WAITING_REASON} (the wave failed)"
            )
        raise
    went = 0
    for row, request, outcome in zip(claimed, requests, outcomes):
        if isinstance(outcome, WaitForSlots):
            store.claims.release(row["run_id"], State.WAITING, str(outcome))
        elif isinstance(outcome, Exception):
            store.claims.release(
                row["run_id"],
                State.FAILED if isinstance(outcome, SubmitError) else State.WAITING,
                f"not submitted: {outcome}",
            )
        else:
            store.jobs.add(
                backend.name, outcome, row["run_id"], State.PENDING, backend.payload(request)
            )
            went += 1
    return went
