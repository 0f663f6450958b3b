"""Finding the jobs dlscale submitted when it never heard Slurm's answer.

sbatch can time out after the controller took the job ("Socket timed out"), and dlscale can
be killed between Slurm's acceptance and recording the job. Either way a blind retry makes
a second job for one run, the store knows only one, and `cancel` never reaches the other.
So every submission carries a token in the job's comment, `dlscale:HOME:WHAT:NONCE` (HOME
a short hash of the store's folder, WHAT the run id or `array-FOLDER` for a job array,
NONCE new for each submission), and:

- a submission whose answer was lost asks the queue for its token before trying again,
  and takes the job it finds (SlurmJobs.submit_tagged); where the queue cannot be asked either, it
  is not retried (the run is left PLANNED saying so, and the next `run` looks first);
- a run whose earlier submission was interrupted is looked for in the queue before it is
  submitted again, and a live job of it is adopted (`orphans`).

Both ways of reaching Slurm (its commands, pyslurm) share this; each only lists the user's
jobs with their comments (SlurmJobs.tagged_jobs), and this module reads such lists: it asks
Slurm nothing itself. A job that finished and left the
controller's memory (MinJobAge, 300 s by default) before the next `run` is not found: its
run is submitted again, as before.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from ...runs import TERMINAL

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


def find(jobs: list[Tagged], tag: str) -> str | None:
    """The job carrying exactly this token, among the controller's."""
    return next((j.job_id for j in jobs if j.comment.strip() == tag), None)


def orphans(jobs: list[Tagged], home: Path, run_ids: list[str]) -> dict[str, str]:
    """The live jobs among the controller's `jobs` that a submission from this home made
    for these runs (their tokens say so), by run id: a plain job's id, or `ARRAYID_TASK`
    for an array task (the array's runs.tsv says which task is which run)."""
    wanted, mine = set(run_ids), home_tag(home)
    live: dict[str, tuple[str, str]] = {}  # job id -> (home, what), any record not finished
    for job in jobs:
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
