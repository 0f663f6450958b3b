"""A store rebuilt from its run folders, when dlscale.db is lost or damaged.

The run folders hold every record: each run's metrics.jsonl (a params record first), its
log, and since this version run.json, the run's row as submitted (what planned it, which
backend, which spec). `rebuild` moves the damaged file aside, makes a new store and
re-ingests every folder under runs/; what it cannot know (a local job's queue entry) it
says, and a run it cannot place exactly is still kept, under what its records tell. The
new store takes the old one's place in one rename, so a rebuild happens whole or not at
all.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....trainers.common.records import RecordError, parse_record
from ...backends.local.backend import JOB_COUNTER, job_number, worker_alive
from ...backends.registry import backend_of_folder, job_of_records
from ...config.spec import load_spec
from ...config.tomlfile import parse_toml
from ...errors import SpecError, UserError
from ...io.reading import open_regular, read_json, read_text
from ...io.text import printable
from ...launching.plan import digest, plan
from ...paths import JOB_FIELDS, RUN_FIELDS, RunPaths, own_folder
from ...runs import (
    CONFIGURATION,
    COUNT_MAX,
    COUNTS,
    TERMINAL,
    TEXT_MAX,
    TEXTS,
    RunRow,
    State,
)
from . import DB_NAME, RUN_ID_PREFIX, Store, locks, staging
from .health import BUSY_S, store_problem
from .records import INGEST_BYTES

# What a point id hashes: the configuration and the recipe (Run.identity without the
# repetition).
_IDENTITY = (*CONFIGURATION, "training")


@dataclass
class Rebuilt:
    kept_aside: list[Path]
    runs: dict[str, int] = field(default_factory=dict)  # by state
    experiments: list[str] = field(default_factory=list)
    records: int = 0
    skipped_lines: int = 0
    guessed: list[str] = field(default_factory=list)  # run ids placed from records
    unreadable: list[str] = field(default_factory=list)  # "folder: why"
    notes: list[str] = field(default_factory=list)  # kept, but not all of it: why


def rebuild(home: Path, force: bool = False) -> Rebuilt:
    """Make a new store from every run folder and put it in dlscale.db's place, keeping
    the old file (and its -wal, -shm) aside as dlscale.db.damaged-TIME. A store that opens
    and checks fine is rebuilt only with `force` (it would lose the local queue and job
    history).

    Whole or not at all: the new store is made under another name and takes dlscale.db's
    place with one rename, so a rebuild killed at any point leaves the old store as it
    was (and the next rebuild removes the unfinished file). It holds the home alone
    (locks.replacing): no other process has the store open meanwhile, so none can
    write to the file it replaces."""
    db = home / DB_NAME
    # the worker writes to the store it opened, which the rebuild is about to replace
    if worker_alive(home):
        raise UserError(
            f"the local worker is running jobs of {home}; rebuild the store once "
            "it has stopped (it stops when its queue is empty)"
        )
    with locks.replacing(home):
        problem = store_problem(home)
        if problem is None and db.exists() and not force:
            raise UserError(
                f"{db} opens and checks fine; `dlscale store rebuild --force` "
                "rebuilds it anyway from the run folders (the current file is kept "
                "aside)"
            )
        # what a killed import left: a decided one's folders moved in, any other removed
        staging.settle(home / "runs", None)
        for left in home.glob(f"{DB_NAME}{_REBUILDING}*"):  # a killed rebuild's file
            left.unlink(missing_ok=True)
        new = f"{DB_NAME}{_REBUILDING}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            out = _build(home, new)
            with staging.whole():  # the swap: never half done by SIGINT or SIGTERM
                out.kept_aside = _swap(home, new, problem is None)
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                (home / f"{new}{suffix}").unlink(missing_ok=True)
    return out


_REBUILDING = ".rebuilding-"  # a new store's name until it replaces dlscale.db


def _build(home: Path, name: str) -> Rebuilt:
    """The new store, in `home/name`, from every run folder; closed, and out of WAL mode
    so that the one file is all of it (its name changes, a -wal's would not)."""
    store = Store(home, file=name, shared=False)
    out = Rebuilt([])
    folders = (
        sorted(
            p
            for p in store.runs_dir.iterdir()
            if (p.is_dir() or p.is_symlink()) and RUN_ID_PREFIX.fullmatch(p.name)
        )
        if store.runs_dir.is_dir()
        else []
    )
    try:
        for folder in folders:
            try:
                _recover(store, folder, out)
            except sqlite3.Error:
                raise  # the store's own fault (a full disk): not this folder's
            except (OSError, ValueError, UserError, RecordError, RecursionError) as exc:
                out.unreadable.append(f"{folder}: {printable(str(exc))}")
            except Exception as exc:  # a folder of any content never stops the others
                out.unreadable.append(f"{folder}: {type(exc).__name__}: {printable(str(exc))}")
        _number_repetitions(store, out.guessed)
        for r in store.runs():
            out.runs[r["state"]] = out.runs.get(r["state"], 0) + 1
            out.skipped_lines += r["bad_records"]
        out.experiments = [e["name"] for e in store.experiments()]
        store.conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        store.close()
    return out


def _swap(home: Path, new: str, healthy: bool) -> list[Path]:
    """The new store into dlscale.db's place with one rename, the old one kept aside
    first. Returns the files kept aside."""
    db = home / DB_NAME
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while any(home.glob(f"{DB_NAME}.damaged-{stamp}*")):  # never over an earlier one kept
        n += 1
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    if healthy and db.is_file():
        _checkpoint(db)  # the old file whole in itself: its -wal emptied into it
    aside = []
    for suffix in ("", "-wal", "-shm"):
        path = home / f"{DB_NAME}{suffix}"
        if not os.path.lexists(path):
            continue
        target = home / f"{DB_NAME}.damaged-{stamp}{suffix}"
        if suffix == "" and not path.is_dir():
            try:  # kept aside and still in place, until the rename below replaces it
                os.link(path, target, follow_symlinks=False)
            except OSError:
                shutil.copy2(path, target, follow_symlinks=False)
        else:  # a -wal or -shm is the old file's alone: never beside the new one
            path.rename(target)
        aside.append(target)
    os.rename(home / new, db)  # the one step that publishes the rebuilt store
    return aside


def _checkpoint(db: Path) -> None:
    try:
        conn = sqlite3.connect(db, timeout=BUSY_S)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except sqlite3.Error:
        pass  # kept aside with its -wal as it is


def _recover(store: Store, folder: Path, out: Rebuilt) -> None:
    run_id = own_folder(folder).name  # a link in a run folder's place is named, not followed
    paths = RunPaths(folder)
    attempts = (
        [p for p in paths.attempts.glob("*") if p.name.isdigit()] if paths.attempts.is_dir() else []
    )
    places = [folder] + sorted(attempts, key=lambda p: -int(p.name))
    saved = _first(places, paths.record.name)
    spec_file = _first(places, paths.spec.name)
    records = _records(paths.metrics)
    params = next((r for r in records if r["kind"] == "params"), None)
    env = next((r for r in records if r["kind"] == "env"), None)
    row: dict[str, Any] | None = None
    guessed = False
    spec_text, spec_path, spec_digest = "", "", ""
    if saved is not None:
        data = read_json(saved, follow=False)  # bounded in size and depth, as on import
        if not isinstance(data, dict):
            raise ValueError(f"{saved.name} is not a JSON object")
        row = {k: data.get(k) for k in RUN_FIELDS if data.get(k) is not None}
        row["backend"] = data.get("backend")
        spec_path = data.get("spec_path") or spec_path
        spec_digest = data.get("spec_digest") or spec_digest
        if spec_file is not None:
            # run.json says what the run is: its spec is kept as text, read within the
            # bounds an import applies, and never needs to validate again (a spec of
            # another site, or of an older dlscale, still keeps its runs)
            try:
                spec_text = parse_toml(spec_file)[0]
            except SpecError as exc:
                out.notes.append(f"{folder}: its spec.toml is not kept: {exc.problems[0]}")
    elif spec_file is not None:
        loaded = load_spec(spec_file)
        spec_text, spec_digest = loaded.text, loaded.digest
        spec_path = str(spec_file)
        planned = next((r for r in plan(loaded).runs if r.run_id == run_id), None)
        if planned is not None:
            row = {**planned.identity(), "run_id": run_id, "point_id": planned.point_id}
    if row is None:
        if params is None:
            raise ValueError(
                "no run.json, no spec.toml that plans this run, and no params "
                "record: nothing says what this run was"
            )
        row = _from_records(run_id, params, env)
        guessed = True
    row["run_id"] = run_id
    _check_row(row)
    backend = row.get("backend") or backend_of_folder([RunPaths(p) for p in places])
    if paths.rerun_of.is_file():
        rerun_of = read_text(paths.rerun_of, 64, follow=False).strip()
        if not (len(rerun_of) == 12 and RUN_ID_PREFIX.fullmatch(rerun_of)):
            raise ValueError(f"{paths.rerun_of.name} holds no run id")
        row["rerun_of"] = rerun_of
    # A spec's text wins over none; an experiment seen only in records is still listed.
    if spec_text or row["experiment"] not in {e["name"] for e in store.experiments()}:
        store.save_experiment(row["experiment"], spec_path, spec_text, spec_digest)
    kept = _job_record(paths.job_record, backend, out)
    job = kept[0] if kept else None
    job_id = job["job_id"] if job else job_of_records(backend, env)
    state, reason = (
        State.PLANNED,
        ("recovered by `dlscale store rebuild`: no records yet; `dlscale run SPEC` submits it"),
    )
    if records:
        state, reason = (
            State.FAILED,
            (
                "recovered by `dlscale store rebuild` without a summary "
                "record (it had not finished); `dlscale run SPEC` runs it "
                "again"
            ),
        )
    store.restore_run(
        {
            **row,
            "backend": backend,
            "job_id": job_id,
            "state": state,
            "reason": reason,
            "attempts": 1 + len(attempts),
            "run_dir": str(folder),
            "devices": row["nodes"] * row["ranks_per_node"],
            "training": json.dumps(row.get("training") or {}, sort_keys=True, allow_nan=False),
        }
    )
    if job is not None:  # what status showed of its job: its id, nodes and times
        number = job_number(job["job_id"]) if backend == "local" else None
        store.jobs.restore(
            {**job, "run_id": run_id}, (JOB_COUNTER, number) if number is not None else None
        )
    if guessed:  # only once its row is in the store: a folder refused above is not numbered
        out.guessed.append(run_id)
    # a job the scheduler may still run (its id known, its end not kept in job.json) may
    # still finish its last line; an ended job's last line is all there will be
    out.records += store.records.ingest(run_id, paths.metrics, final=not job_id or job is not None)
    if kept is not None:  # its run as it was settled when its job ended
        store.update_run(run_id, state=kept[1][0], reason=kept[1][1])
    elif store.records.of(run_id, "summary"):
        store.update_run(run_id, state=State.COMPLETED, reason=None)
    elif job_id and job is None and not row.get("site"):
        # Slurm may still be running it (a run imported from another site's bundle never
        # runs here): the next poll asks, and settles the run.
        store.jobs.add(backend, job_id, run_id, State.RUNNING)
        store.update_run(
            run_id,
            state=State.RUNNING,
            reason=f"recovered by `dlscale store rebuild`: asking Slurm about job {job_id}",
        )


def _job_record(
    path: Path, backend: str, out: Rebuilt
) -> tuple[dict[str, Any], tuple[str, str | None]] | None:
    """The finished job job.json keeps (paths.write_job_file), held to what a job row
    holds, and its run's state and reason as settled; None where there is none, or one
    not of this run's backend or not whole (said in a note: the run is kept without its
    job)."""
    if not path.is_file():
        return None
    try:
        data = read_json(path, follow=False)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        job = {k: data.get(k) for k in JOB_FIELDS}
        if job["backend"] != backend:
            raise ValueError(f"a job of backend {str(job['backend'])[:40]!r}, not {backend}")
        for k in ("job_id", "nodes"):
            v = job[k]
            if not (isinstance(v, str) and 0 < len(v) <= TEXT_MAX) and (k == "job_id" or v):
                raise ValueError(f"{k} is {str(v)[:40]!r}, not a name")
        if job["state"] not in {str(s) for s in TERMINAL}:
            raise ValueError(f"state is {str(job['state'])[:40]!r}, not how a job ends")
        for k in ("submitted", "started", "ended", "elapsed"):
            v = job[k]
            if v is not None and not (type(v) in (int, float) and 0 <= v < 1e11):
                raise ValueError(f"{k} is {str(v)[:40]!r}, not a time")
        if job["exit_code"] is not None and type(job["exit_code"]) is not int:
            raise ValueError(f"exit_code is {str(job['exit_code'])[:40]!r}, not a whole number")
        settled = (data.get("run_state"), data.get("run_reason"))
        if settled[0] not in {str(s) for s in TERMINAL} or not (
            settled[1] is None or isinstance(settled[1], str)
        ):
            raise ValueError("its run's settled state and reason are not a run's")
    except (OSError, ValueError) as exc:
        out.notes.append(f"{path}: its job is not kept: {printable(str(exc))}")
        return None
    return job, (settled[0], settled[1][:_REASON_MAX] if settled[1] else None)


_REASON_MAX = 20_000  # a run's reason: a few of its log's lines


def _first(places: list[Path], name: str) -> Path | None:
    return next((p / name for p in places if (p / name).is_file()), None)


# What run.json must hold, by type (a hand-edited or hostile one is named, not trusted).
_COUNTS = (*COUNTS, "repetition")
_TEXTS = TEXTS


def _check_row(row: dict[str, Any]) -> None:
    for k in _COUNTS:
        v = row.get(k)
        if not (type(v) is int and 0 <= v <= COUNT_MAX) and not (k == "repetition" and v is None):
            raise ValueError(f"{k} is {str(v)[:40]!r}, not a whole number from 0 to 2^31")
    for k in _TEXTS:
        if not isinstance(row.get(k), str) or len(row[k]) > TEXT_MAX:
            raise ValueError(f"{k} is {str(row.get(k))[:40]!r}, not a name")
    if not isinstance(row.get("training") or {}, dict):
        raise ValueError("training is not a JSON object")
    for k in ("point_id", "rerun_of", "backend"):
        if row.get(k) is not None and not isinstance(row[k], str):
            raise ValueError(f"{k} is not a string")
    if row.get("created") is not None and not isinstance(row["created"], int | float):
        raise ValueError("created is not a time")


def _records(path: Path) -> list[dict[str, Any]]:
    """The valid records among the first INGEST_BYTES of a run's own records file."""
    out = []
    try:
        with open_regular(path, follow=False) as fh:
            lines = fh.read(INGEST_BYTES).decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            out.append(parse_record(line))
        except RecordError:
            continue
    return out


def _from_records(run_id: str, params: dict, env: dict | None) -> dict[str, Any]:
    """What a run was, from its params and env records alone (a folder with neither
    run.json nor its spec): its experiment is not among them, so it goes under
    `recovered`; repetitions are numbered afterwards by time."""
    world = params["world_size"]
    nodes = max(1, len((env or {}).get("nodes") or [None]))
    training = {
        k: params.get(k)
        for k in (
            "steps",
            "epochs",
            "warmup_steps",
            "lr",
            "seed",
            "lr_scaling",
            "lr_schedule",
            "threads",
        )
    }
    row = {
        "experiment": "recovered",
        "framework": params["framework"],
        "model": params["model"],
        "dataset": params["dataset"],
        "nodes": nodes,
        "ranks_per_node": max(1, world // nodes),
        "per_device_batch": params["per_device_batch"],
        "global_batch": params.get("global_batch") or params["per_device_batch"] * world,
        "scaling": "weak",
        "precision": params.get("precision") or "-",
        "loader": params.get("loader") or "native",
        "training": training,
        "created": params.get("time"),
    }
    row["point_id"] = digest({k: row[k] for k in _IDENTITY})
    row["repetition"] = 0
    return row


def _number_repetitions(store: Store, guessed: list[str]) -> None:
    """Runs placed from their records share a point with their repetitions; number them
    in the order they ran."""
    by_point: dict[str, list[RunRow]] = {}
    for rid in guessed:
        row = store.run(rid)
        by_point.setdefault(row["point_id"], []).append(row)
    for rows in by_point.values():
        for i, row in enumerate(sorted(rows, key=lambda r: (r["created"] or 0, r["run_id"]))):
            store.update_run(row["run_id"], repetition=i)
