"""The run's vocabulary: the states a run and its job go through, and what identifies a run.

Everything else derives from these: the planner's `Run` (launching/plan.py) is a
`Configuration` with its repetition and recipe, a point (results/points.py) is all
repetitions of one configuration, `store rebuild` checks a run.json's fields by their types
here, and the store adds a configuration field's column to an older store. Standard library
only: every layer imports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, TypedDict


class State(str, Enum):
    """A run's state, a job's (as a backend maps its scheduler's words), or a point's. The
    values are the strings stored in SQLite and written in JSON, so a member is equal to its
    string, and prints as it (str, format) on every Python."""

    PLANNED = "PLANNED"  # in the store, not submitted
    SUBMITTING = "SUBMITTING"  # claimed by one process, between its job's script and the answer
    WAITING = "WAITING"  # not submitted yet: the place's limits leave no room (next_wave)
    PENDING = "PENDING"  # queued
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    UNKNOWN = "UNKNOWN"  # a job's: a scheduler's word dlscale does not know
    PARTIAL = "PARTIAL"  # a point's: some repetitions completed, others did not

    def __str__(self) -> str:
        return self.value


def per_second(units: Iterable[str | None]) -> str:
    """What a set of runs' throughput counts a second, for a column or an axis: "images/s"
    for the built-in trainers, a declared framework's own ("tokens/s"), "units/s" where
    they differ. `units`: an iterable of unit words (None or "" meaning images; none at all
    too)."""
    found = {u or "images" for u in units} or {"images"}
    return f"{found.pop() if len(found) == 1 else 'units'}/s"


# A live job: queued or running (the schema allows one per run).
ACTIVE = (State.PENDING, State.RUNNING)
# ACTIVE as an SQL list, `('PENDING', 'RUNNING')`: the text of the schema's partial index on
# live jobs, which a query must repeat for SQLite to use it.
ACTIVE_SQL = "(" + ", ".join(f"'{s.value}'" for s in ACTIVE) + ")"
# How a job ends; the run takes its job's end (monitor.finalize_run).
TERMINAL = (State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.NODE_FAIL)
# Ends whose reason is in the job's log.
FAILURES = (State.FAILED, State.TIMEOUT, State.NODE_FAIL)
# Not (yet) given to the place: no job of its own.
UNSUBMITTED = (State.PLANNED, State.SUBMITTING, State.WAITING)
# In hand already: queued, running or being submitted; a new submission leaves it be.
UNDER_WAY = ACTIVE + (State.SUBMITTING, State.WAITING)
# Still to end, as far as a watcher waiting for it knows: queued, running, or on its way.
UNFINISHED = ACTIVE + (State.PLANNED, State.SUBMITTING)


@dataclass(frozen=True)
class Configuration:
    """What a measurement point is: the configuration its repetitions share. A run is one
    repetition of it (plan.Run); its id hashes these fields with the repetition and the
    training recipe. The one place a study axis is named."""

    experiment: str
    framework: str
    model: str
    dataset: str
    nodes: int
    ranks_per_node: int
    per_device_batch: int
    global_batch: int
    scaling: str
    precision: str
    loader: str

    @property
    def devices(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def scale(self) -> str:
        return scale_label(self.nodes, self.ranks_per_node)


def scale_label(nodes: int, ranks_per_node: int) -> str:
    """A scale as the user writes it in a spec and reads it everywhere: nodes x ranks per
    node, "2x4"."""
    return f"{nodes}x{ranks_per_node}"


def run_label(row: Mapping[str, Any]) -> str:
    """A run as the user reads it beside its id: "pytorch-ddp resnet20 1x2 #3" (its
    repetition)."""
    scale = scale_label(row["nodes"], row["ranks_per_node"])
    return f"{row['framework']} {row['model']} {scale} #{row['repetition']}"


# Asked once: dataclasses.fields() walks the class at every call.
CONFIGURATION = tuple(f.name for f in fields(Configuration))
# What a stored run's row may hold, wherever it is read from (a bundle being imported, a
# run.json that `store rebuild` reads): one bound for both, so a run the one accepts the
# other keeps.
COUNT_MAX = 1 << 31
TEXT_MAX = 200
# The configuration's whole-number fields and names, with their SQLite column types (a
# field's type is its annotation's text here, or the type itself without the __future__ import).
COUNTS = tuple(f.name for f in fields(Configuration) if f.type in ("int", int))
TEXTS = tuple(f.name for f in fields(Configuration) if f.type in ("str", str))
COLUMN_TYPES = {name: "INTEGER" if name in COUNTS else "TEXT" for name in CONFIGURATION}

# How a communication benchmark run's recipe reads in a stored row (its training column:
# sorted JSON), for readers that test it in SQL over many rows or without decoding it.
COMM_MARK = '"comm_benchmark": true'


def declaration(row: RunRow) -> dict[str, Any] | None:
    """A declared framework's declaration, as a stored run's recipe holds it (its training
    column, JSON, under "custom"); None for a built-in framework's run."""
    training = row.get("training")
    if isinstance(training, str):
        try:
            training = json.loads(training)
        except ValueError:
            return None
    decl = training.get("custom") if isinstance(training, dict) else None
    return decl if isinstance(decl, dict) else None


# --- rows: runs and jobs as the store returns them, typed ----------------------------------
# Keys and value types are checked where rows cross modules; total=False, because a read may
# ask for only some columns (Store.runs(columns=...), live_runs). tests/test_rows.py keeps
# them equal to the store's tables, and RunRow's configuration part to Configuration.


class RunRow(TypedDict, total=False):
    run_id: str
    point_id: str
    experiment: str
    framework: str
    model: str
    dataset: str
    nodes: int
    ranks_per_node: int
    devices: int
    per_device_batch: int
    global_batch: int
    scaling: str
    precision: str
    loader: str
    repetition: int
    training: str  # the recipe, as sorted JSON
    state: str
    reason: str | None
    backend: str | None
    job_id: str | None
    run_dir: str
    attempts: int
    created: float | None
    updated: float | None
    ingest_offset: int
    ingest_lines: int
    bad_records: int
    rerun_of: str | None
    claimed_by: str | None
    rev: int | None
    site: str | None  # where an imported run was measured (None: here)


class JobRow(TypedDict, total=False):
    backend: str
    job_id: str
    run_id: str
    state: str
    reason: str | None
    nodes: str | None
    submitted: float | None
    started: float | None
    ended: float | None
    exit_code: int | None
    pid: int | None
    payload: str  # JSON: a local job's command line and environment
    elapsed: float | None
    pid_mark: str | None
    worker_pid: int | None
    token: str | None
    rev: int | None
