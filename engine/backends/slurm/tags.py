"""Finding the jobs dlscale submitted when it never heard Slurm's answer.

sbatch can time out after the controller took the job ("Socket timed out"), and dlscale can
be killed between Slurm's acceptance and recording the job. Either way a blind retry makes
a second job for one run, the store knows only one, and `cancel` never reaches the other.
So every submission carries a token in the job's comment, `dlscale:HOME:WHAT:NONCE` (HOME
a short hash of the store's folder, WHAT the run id or `array-FOLDER` for a job array,
NONCE new for each submission), and:

- a submission whose answer was lost asks the queue for its token before trying again,
  and takes the job it finds (`submit_tagged`); where the queue cannot be asked either, it
  is not retried (the run is left PLANNED saying so, and the next `run` looks first);
- a run whose earlier submission was interrupted is looked for in the queue before it is
  submitted again, and a live job of it is adopted (`orphans`).

Both ways of reaching Slurm (its commands, pyslurm) share this; each only lists the user's
jobs with their comments (SlurmJobs.tagged_jobs). A job that finished and left the
controller's memory (MinJobAge, 300 s by default) before the next `run` is not found: its
run is submitted again, as before.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import ControllerUnreachable
from ...runs import TERMINAL

if TYPE_CHECKING:
    from .jobs import SlurmJobs  # the backends tags serve (it imports this module)

PREFIX = "dlscale"
ARRAY = "array-"


@dataclass(frozen=True)
class Tagged:
    """A job in the controller with a dlscale comment: its id (an array's own id for all
    its tasks), state (dlscale's words) and comment."""

    job_id: str
    state: str
    comment: str


def home_tag(home: Path) -> str:
    return hashlib.blake2b(str(Path(home).resolve()).encode(), digest_size=4).hexdigest()


def home_of(run_dir: Path) -> Path:
    """A run folder is HOME/runs/RUN_ID."""
    return Path(run_dir).resolve().parent.parent


def token(home: Path, what: str) -> str:
    """A new token for one submission of `what` (a run id, or ARRAY + the array's folder)."""
    return f"{PREFIX}:{home_tag(home)}:{what}:{secrets.token_hex(4)}"


def array_token(script: Path) -> str:
    """A new token for a job array's submission: its script is HOME/arrays/FOLDER/array.sh."""
    folder = Path(script).resolve().parent
    return token(folder.parent.parent, ARRAY + folder.name)


def parse(comment: str) -> tuple[str, str] | None:
    """(home tag, what) of a dlscale token; None for any other comment."""
    parts = comment.strip().split(":")
    if len(parts) != 4 or parts[0] != PREFIX:
        return None
    return parts[1], parts[2]


def submit_tagged(place: SlurmJobs, send: Callable[[str], str], tag: str) -> str:
    """send(tag) until Slurm answers: its job id. `send` makes one try and raises
    ControllerUnreachable when the answer was lost (a transient error), SubmitError when
    Slurm refused. Before each retry the queue is asked for `tag`: a job that carries it
    was made by the try whose answer was lost, and is the answer."""
    delay = 1.0
    for attempt in range(place.retries):
        try:
            return send(tag)
        except ControllerUnreachable as lost:
            try:
                found = find(place, tag)
            except ControllerUnreachable as exc:
                raise ControllerUnreachable(
                    f"{lost}; whether Slurm made the job is unknown (the queue does not "
                    f"answer either: {exc}), so it is not retried: the next `dlscale run` "
                    "looks for it first"
                ) from None
            if found is not None:
                return found
            if attempt == place.retries - 1:
                raise
            place.sleep(delay)
            delay *= 2
    raise AssertionError("not reached")  # retries >= 1


def find(place: SlurmJobs, tag: str) -> str | None:
    """The job carrying exactly this token, if the controller knows one."""
    return next((j.job_id for j in place.tagged_jobs() if j.comment.strip() == tag), None)


def orphans(place: SlurmJobs, home: Path, run_ids: list[str]) -> dict[str, str]:
    """The live jobs of these runs that a submission from this home made (their tokens
    say so), by run id: a plain job's id, or `ARRAYID_TASK` for an array task (the array's
    runs.tsv says which task is which run). One query to the controller. Raises
    ControllerUnreachable."""
    wanted, mine = set(run_ids), home_tag(home)
    live: dict[str, tuple[str, str]] = {}  # job id -> (home, what), any record not finished
    for job in place.tagged_jobs():
        tag = parse(job.comment)
        if tag is not None and tag[0] == mine and job.state not in TERMINAL:
            live[job.job_id] = tag
    out: dict[str, str] = {}
    for job_id, (_, what) in sorted(live.items()):
        if what.startswith(ARRAY):
            for task, run_id in _array_runs(Path(home) / "arrays" / what[len(ARRAY) :]):
                if run_id in wanted:
                    out.setdefault(run_id, f"{job_id}_{task}")
        elif what in wanted:
            out.setdefault(what, job_id)
    return out


def _array_runs(folder: Path) -> list[tuple[str, str]]:
    """(task, run id) of a job array's runs.tsv (arrays.write_array); none if it is
    gone or unreadable."""
    try:
        text = (folder / "runs.tsv").read_text()
    except (OSError, UnicodeDecodeError):
        return []
    rows = (line.split("\t") for line in text.splitlines())
    return [(r[0], r[1]) for r in rows if len(r) == 3 and r[0].isdigit()]
