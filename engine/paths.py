"""A run folder's layout, named in one place: what the engine writes there before a job
starts, what the job writes, and where an earlier attempt's files go; and the writing of
what it is given before its job starts (run.json, its spec), at every submission or as the
job starts (Backend.folders_at_start)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError
from .io.reading import read_json, read_text
from .runs import CONFIGURATION, RunRow

# The records' file name also names them in messages ("metrics.jsonl line 7 skipped").
METRICS_NAME = "metrics.jsonl"
# What run.json keeps of a run's row (with its backend and spec): enough to rebuild a store
# from the folders (tracking/recovery).
RUN_FIELDS = (
    "run_id",
    "point_id",
    *CONFIGURATION,
    "devices",
    "repetition",
    "training",
    "rerun_of",
    "created",
    "site",
)


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def of(cls, row: RunRow) -> RunPaths:
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
    def job_record(self) -> Path:
        """The job as it ended (job.json: its id, nodes, times, state), written when the
        run is settled, so a rebuilt store shows what `status` showed."""
        return self.root / "job.json"

    @property
    def exit_marker(self) -> Path:
        """`exit N` or `signal TERM`, written by the job script as it ends: the final state
        where Slurm keeps no accounting."""
        return self.root / "job.exit"

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_NAME

    @property
    def energy(self) -> Path:
        """A declared framework's energy timelines, one per metered task
        (trainers/common/metered.py), read when its run is settled."""
        return self.root / "energy"

    @property
    def software(self) -> Path:
        """What a declared framework's Python holds, as its meter asked it after the run
        (trainers/common/interpreter.py), read when its run is settled."""
        return self.root / "software.json"

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


def own_folder(run_dir: Path) -> Path:
    """A run's folder as the store made it: absent or a folder, never a link. A link (or a
    file) where the home expects a run folder is refused, naming it (UserError, exit 2):
    dlscale writes and removes nothing through it."""
    try:
        mode = os.lstat(run_dir).st_mode
    except FileNotFoundError:
        return run_dir
    if stat.S_ISLNK(mode):
        raise UserError(
            f"{run_dir} is a link (to {os.readlink(run_dir)}) where the store expects a run's "
            "folder; dlscale writes and removes nothing through it: move it away"
        )
    if not stat.S_ISDIR(mode):
        raise UserError(
            f"{run_dir} is not a folder, where the store expects a run's folder: move it away"
        )
    return run_dir


@dataclass(frozen=True)
class Layout:
    """What a run's folder is given before its job starts: its row as submitted (run.json,
    naming the spec it came from) and its spec, a link to the store's one copy."""

    spec_path: str
    spec_digest: str
    spec_file: str


def write_run_file(
    row: RunRow, run_dir: Path, backend: str, spec_path: str = "", spec_digest: str = ""
) -> None:
    """The run's row as submitted, beside its records, so a lost store can be rebuilt. A
    resubmission, which has no spec in hand, keeps the one its earlier attempt named."""
    data = {k: row.get(k) for k in RUN_FIELDS}
    if isinstance(data["training"], str):
        data["training"] = _parsed(data["training"])
    if not spec_path:
        earlier = RunPaths(run_dir).attempt((row.get("attempts") or 1) - 1).record
        if earlier.is_file():
            try:
                before = read_json(earlier, follow=False)
            except (OSError, ValueError):  # not the run's own: not trusted
                before = {}
            if not isinstance(before, dict):
                before = {}
            spec_path, spec_digest = before.get("spec_path", ""), before.get("spec_digest", "")
    data.update(backend=backend, spec_path=spec_path, spec_digest=spec_digest)
    # One line, by json's C encoder (an indent takes its slow pure-Python one: a study of
    # 10,000 runs writes 10,000 of these).
    RunPaths(run_dir).record.write_text(json.dumps(data, sort_keys=True, allow_nan=False) + "\n")


# What job.json keeps of a job's row (JobRow): what `status` shows of a finished job; and
# of its run as settled (monitor.finalize_run): RUN_SETTLED.
RUN_SETTLED = ("run_state", "run_reason")
JOB_FIELDS = (
    "backend",
    "job_id",
    "state",
    "nodes",
    "submitted",
    "started",
    "ended",
    "exit_code",
    "elapsed",
)


def write_job_file(job: dict[str, Any], run_dir: Path) -> None:
    """A finished job's row beside its run's records (job.json), whole or not at all."""
    kept = {k: job.get(k) for k in (*JOB_FIELDS, *RUN_SETTLED)}
    _write_whole(RunPaths(run_dir).job_record, json.dumps(kept, allow_nan=False) + "\n")


def _write_whole(path: Path, text: str) -> None:
    """A file of dlscale's own, whole or not at all, whoever writes it at the same time."""
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(text)
    os.replace(part, path)


def lay_out(row: RunRow, backend: str, layout: Layout) -> None:
    """A run's folder made ready for its job: run.json and its spec (see write_run_file and
    shared_spec); before submission, or when the job starts (Backend.folders_at_start)."""
    run_dir = own_folder(Path(row["run_dir"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    link_or_copy(Path(layout.spec_file), RunPaths(run_dir).spec)
    write_run_file(row, run_dir, backend, layout.spec_path, layout.spec_digest)


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> Any:
    """A run's training recipe from its row, parsed once: a plan's runs share a handful.
    (Only ever dumped again, never changed.)"""
    return json.loads(text)


def shared_spec(home: Path, text: str, spec_digest: str) -> Path:
    """The spec's text, once per spec digest (specs/DIGEST.toml), for its runs' folders to
    link to instead of each writing its own copy."""
    path = home / "specs" / f"{spec_digest}.toml"
    try:
        same = read_text(path, follow=False) == text
    except (OSError, ValueError):  # absent, or not dlscale's own file: written anew
        same = False
    if not same:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_whole(path, text)
    return path


def link_or_copy(source: Path, target: Path) -> None:
    """target as a hard link to source (one inode, no bytes written), or a copy where the
    file system has no links. A file already there is dlscale's own (this run's spec from
    an attempt that did not get that far): it is replaced."""
    try:
        os.link(source, target)
        return
    except FileExistsError:
        target.unlink()
    except OSError:
        shutil.copyfile(source, target)
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
