"""pyslurm's job records read as the command-line backend reads Slurm's output: the ids a
record answers for (an array's tasks), its state, pending reason, nodes and times."""

from __future__ import annotations

from ....runs import State
from ..parsing import SlurmJob, expand_array, map_state


def text_of(value) -> str | None:
    text = str(value).strip() if value is not None else ""
    return None if not text or text in ("None", "None assigned", "(null)") else text


def reason_of(value) -> str | None:
    """squeue's %r is the reason's code (`ReqNodeNotAvail`); pyslurm gives Slurm's
    description where it wrote one, which starts with that code and a comma."""
    text = text_of(value)
    if text and "," in text and text.split(",", 1)[0].isidentifier():
        return text.split(",", 1)[0]
    return text


def keys(job, live: set[str]) -> list[str]:
    """The ids dlscale may track a job under: its own, or `ARRAY_TASK` for an array task
    (a pending array's tasks share one record)."""
    own = str(job.id)
    array_id, task = getattr(job, "array_id", None), _task(job)
    if not array_id:
        return [own]
    if task is not None:
        return [own, f"{array_id}_{task}"]
    return [own, *[t for t in waiting_tasks(job) or [] if t in live]]


def _task(job) -> int | None:
    """The array task a record is; None outside arrays and for a pending array's shared
    record. pyslurm 25.11 gives task 0 as None (it reads a 0 as "no value"), so a record
    of an array with no task id and no tasks waiting is task 0."""
    task = getattr(job, "array_task_id", None)
    if task is not None or not getattr(job, "array_id", None):
        return task
    return None if _waiting_text(job) else 0


def _waiting_text(job) -> str:
    return str(getattr(job, "array_tasks_waiting", None) or "")


def waiting_tasks(job) -> list[str] | None:
    """A pending array's tasks that share its one record (`ARRAY_TASK` each); None for a
    job that is not such a record."""
    array_id, waiting = getattr(job, "array_id", None), _waiting_text(job)
    if not array_id or not waiting or getattr(job, "array_task_id", None) is not None:
        return None
    if waiting.startswith("0x"):  # the database's form: a bitmap of the waiting tasks
        bits = int(waiting, 16)
        return [f"{array_id}_{i}" for i in range(bits.bit_length()) if bits >> i & 1]
    return expand_array(f"{array_id}_[{waiting}]")


def status(key: str, job, from_controller: bool) -> SlurmJob:
    """A job record as dlscale keeps it under `key`: the controller's or the database's."""
    raw = text_of(job.state) or State.UNKNOWN
    state = map_state(raw)
    if from_controller:
        # squeue's pending reason; a finished job's (NonZeroExitCode...) is not what
        # sacct, and so the commands, report
        nodes, elapsed = job.allocated_nodes, job.run_time
        reason = job.state_reason if state == State.PENDING else None
    else:  # the reason a job last pended for, as sacct shows it
        nodes, elapsed, reason = job.nodelist, job.elapsed_time, job.state_reason
    return SlurmJob(
        key,
        state,
        raw,
        job.exit_code,
        job.exit_code_signal,
        int(elapsed or 0),
        text_of(nodes),
        reason_of(reason),
    )
