"""What a submission under way is doing, for a front end to show while it waits: each Slurm
command it runs as a step in the user's words (asking the controller, the cluster's limits,
accounting, the queue, sbatch) with how long it has taken and may take, and the runs it is
about to store, as rows SUBMITTING (shown before Slurm has said a word)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .backends.slurm.calls import Step
from .config.spec import LoadedSpec
from .launching.plan import plan
from .runs import State
from .tracking.queue import QueueRow

# What each command a submission runs is for, in the user's words.
WORDS = {
    "scontrol ping": "asking the controller (scontrol ping)",
    "scontrol show": "the cluster's limits (scontrol show config)",
    "sacctmgr": "accounting: your limits (sacctmgr)",
    "squeue": "the queue: your jobs (squeue)",
    "sbatch": "handing the jobs to Slurm (sbatch)",
}
# A planned run's reason while its submission is under way.
BEING_SUBMITTED = "not yet seen by Slurm: being submitted"


@dataclass(frozen=True)
class SubmitStep:
    """One step of a submission: what it is, how many commands of it ran (sbatch: one a
    job), how long it has taken, the most each may take (the profile's command_timeout),
    and whether it is done and went well."""

    what: str
    count: int
    seconds: float
    timeout: float
    done: bool
    ok: bool

    def __str__(self) -> str:
        what = f"{self.what} x{self.count}" if self.count > 1 else self.what
        if not self.done:
            return f"{what}: {self.seconds:.0f} s (at most {self.timeout:.0f} s)"
        return f"{what}: {'done' if self.ok else 'no'} in {self.seconds:.1f} s"


def steps(recorded: list[Step], now: float | None = None) -> list[SubmitStep]:
    """The recorded commands as steps, in the order they started; commands of one kind in
    a row (one sbatch a job) are one step."""
    now = time.monotonic() if now is None else now
    out: list[SubmitStep] = []
    for s in sorted(recorded, key=lambda s: s.started):
        what = WORDS.get(s.command, s.command)
        seconds = (s.ended if s.ended is not None else now) - s.started
        step = SubmitStep(what, 1, seconds, s.timeout, s.ended is not None, bool(s.ok))
        if out and out[-1].what == what and out[-1].done:
            last = out.pop()
            step = SubmitStep(
                what,
                last.count + 1,
                last.seconds + seconds,
                s.timeout,
                step.done,
                last.ok and (step.ok or not step.done),
            )
        out.append(step)
    return out


def planned_rows(loaded: LoadedSpec, completed: set[str]) -> list[QueueRow]:
    """The runs a submission of `loaded` will store and claim (all but the `completed`
    run ids), as the queue shows them while it asks Slurm: SUBMITTING, no job yet."""
    return [
        QueueRow(
            run.run_id,
            run.experiment,
            run.framework,
            run.model,
            run.scale,
            run.per_device_batch,
            run.repetition,
            None,
            None,
            State.SUBMITTING,
            BEING_SUBMITTED,
            None,
            None,
            None,
            None,
            comm_benchmark=run.comm_benchmark,
        )
        for run in plan(loaded).runs
        if run.run_id not in completed
    ]
