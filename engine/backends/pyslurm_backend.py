"""Slurm through pyslurm (Slurm's C API), where a pyslurm built for the cluster's release
imports (pyslurm_probe.py decides that).

The same jobs, states, pending reasons and exit codes as the command-line backend, without a
process per call: each poll asks the controller once for every job it holds
(`pyslurm.Jobs.load`), and the database (`pyslurm.db.Jobs.load`, filtered by id) only about
tracked jobs the controller has already forgotten or while it does not answer. Finished jobs
are cached and never asked about again; a few failed polls are tolerated before the
controller is reported unreachable, as in slurm.py.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ControllerUnreachable, SchedulerError, SubmitError
from ..paths import RunPaths
from ..runs import TERMINAL, State
from ..tracking.store import Store
from . import slurm_arrays, slurm_noacct, slurm_tags
from .base import Backend, JobRequest, JobStatus
from .pyslurm_submit import job_description
from .slurm import TRANSIENT, clean_env, run_command, user_name
from .slurm_jobs import SlurmJobs
from .slurm_parse import SlurmJob, expand_array, map_state


def import_pyslurm():
    """pyslurm, imported without keeping the dlopen flags it sets for the whole process
    (RTLD_DEEPBIND on every later extension module breaks some of them)."""
    flags = sys.getdlopenflags()
    try:
        import pyslurm  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a libslurm that does not load
        raise SchedulerError(f"pyslurm does not import: {type(exc).__name__}: {exc}") from None
    finally:
        sys.setdlopenflags(flags)
    return pyslurm


def _text(value) -> str | None:
    text = str(value).strip() if value is not None else ""
    return None if not text or text in ("None", "None assigned", "(null)") else text


def _reason(value) -> str | None:
    """squeue's %r is the reason's code (`ReqNodeNotAvail`); pyslurm gives Slurm's
    description where it wrote one, which starts with that code and a comma."""
    text = _text(value)
    if text and "," in text and text.split(",", 1)[0].isidentifier():
        return text.split(",", 1)[0]
    return text


def _keys(job, live: set[str]) -> list[str]:
    """The ids dlscale may track a job under: its own, or `ARRAY_TASK` for an array task
    (a pending array's tasks share one record)."""
    own = str(job.id)
    array_id, task = getattr(job, "array_id", None), _task(job)
    if not array_id:
        return [own]
    if task is not None:
        return [own, f"{array_id}_{task}"]
    return [own, *[t for t in _waiting_tasks(job) or [] if t in live]]


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


def _waiting_tasks(job) -> list[str] | None:
    """A pending array's tasks that share its one record (`ARRAY_TASK` each); None for a
    job that is not such a record."""
    array_id, waiting = getattr(job, "array_id", None), _waiting_text(job)
    if not array_id or not waiting or getattr(job, "array_task_id", None) is not None:
        return None
    if waiting.startswith("0x"):  # the database's form: a bitmap of the waiting tasks
        bits = int(waiting, 16)
        return [f"{array_id}_{i}" for i in range(bits.bit_length()) if bits >> i & 1]
    return expand_array(f"{array_id}_[{waiting}]")


def has_accounting(storage_type: str | None) -> bool:
    """Whether the controller's AccountingStorageType names a database to ask: 22.05 says
    accounting_storage/none without one, 25.11 leaves it unset."""
    storage = (storage_type or "").strip().lower()
    return bool(storage) and storage not in ("(null)", "none") and not storage.endswith("/none")


@dataclass
class PyslurmBackend(SlurmJobs, Backend):
    """Slurm through pyslurm's API, in this process: the same jobs as SlurmCLI's."""

    profile: Any = None
    partition: str | None = None
    home: Path | None = None
    max_failures: int = 3  # failed polls in a row before "unreachable"
    retries: int = 3  # submit/cancel attempts on transient errors
    sleep: Callable[[float], None] = time.sleep
    name: str = "slurm"  # the same Slurm jobs as the command-line backend tracks
    via: str = "pyslurm"
    note: str | None = None
    _cache: dict[str, SlurmJob] = field(default_factory=dict)  # last known, terminal kept
    _raw: dict[str, int] = field(default_factory=dict)  # tracked id -> Slurm's own
    _failures: int = 0
    controller_ok: bool = True
    last_poll_ok: bool = True  # False while failures are still being tolerated
    last_error: str | None = None
    accounting: bool | None = None  # None: the profile's (no slurmdbd: False)
    wave_every: float = 5.0  # seconds between tries of the next wave
    _last_wave: float = -1e9
    limits: slurm_arrays.Limits | None = None  # the site's, once asked
    _site_config: Any = None  # the controller's configuration, once asked (_config)

    def __post_init__(self) -> None:
        if self.accounting is None and self.profile is not None:
            self.accounting = self.profile.profile.accounting
        self.api = import_pyslurm()
        self._lock = threading.Lock()  # libslurm calls one at a time (the TUI polls in workers)

    def _call(self, what: str, fn, *args, tries: int | None = None):
        """fn(*args) under the lock, retried on the errors of a busy or restarting
        controller (as slurm.py retries sbatch and scancel). pyslurm's RPCError comes out
        as SubmitError or SchedulerError with Slurm's message, or as ControllerUnreachable
        when the retries are spent."""
        delay, message, tries = 1.0, "", tries or self.retries
        for attempt in range(tries):
            try:
                with self._lock:
                    return fn(*args)
            except self.api.RPCError as exc:
                message = " ".join(str(exc).split()) or f"{what} failed"
            if not any(t in message for t in TRANSIENT):
                raise (
                    SubmitError(message)
                    if what == "submit"
                    else SchedulerError(f"{what}: {message}")
                )
            if attempt < tries - 1:
                self.sleep(delay)
                delay *= 2
        raise ControllerUnreachable(f"{what}: {message}")

    def submit(self, request: JobRequest) -> str:
        tag = slurm_tags.token(slurm_tags.home_of(request.run_dir), request.run_id)
        job_id = self._submit_script(RunPaths(request.run_dir).job_script, tag)
        self.submitted(job_id)
        return job_id

    def submitted(self, job_id: str) -> None:
        """Known PENDING until the controller says more."""
        self._cache[job_id] = SlurmJob(job_id, State.PENDING, "PENDING")

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Runs of one job shape as one job array, within the site's limits; the rest
        WAITING for a later wave (slurm_arrays, as the command-line backend)."""
        if not requests or (self.profile is not None and not self.profile.profile.arrays):
            return super().submit_many(requests)
        return slurm_arrays.submit_many(self, requests, self.profile, self.throttle)

    def next_wave(self, store: Store, experiment: str | None = None) -> int:
        if time.monotonic() - self._last_wave < self.wave_every:
            return 0  # at most one try every few seconds: each asks for the whole queue
        self._last_wave = time.monotonic()
        return slurm_arrays.next_wave(self, store, experiment)

    # --- what job arrays ask of the place (slurm_arrays.ArrayPlace) ------------------------

    def site_max_array_size(self) -> int | None:
        config = self._config()
        if config is None:
            return None
        return int(config.max_array_size or 0) or None

    def _config(self) -> Any | None:
        """The controller's configuration (slurm.conf as it runs), asked once; None while
        the controller does not answer."""
        if self._site_config is None:
            try:
                self._site_config = self._call("config", self.api.slurmctld.Config.load)
            except (SchedulerError, ControllerUnreachable):
                return None
        return self._site_config

    def site_max_submit_jobs(self) -> int | None:
        if self.accounting is False:
            return None  # no slurmdbd: no association limits to read
        db = self.api.db
        try:
            found = self._call(
                "associations",
                lambda: db.Associations.load(db.AssociationFilter(users=[user_name()])),
            )
        except (SchedulerError, ControllerUnreachable, ValueError):
            return None
        return min(
            (int(a.max_submit_jobs) for a in found.values() if a.max_submit_jobs), default=None
        )

    def queued_tasks(self) -> int:
        jobs = self._call("queue", self.api.Jobs.load)
        me, count = os.getuid(), 0
        for job in jobs.values():
            if job.user_id != me or map_state(_text(job.state) or State.UNKNOWN) in TERMINAL:
                continue
            waiting = _waiting_tasks(job)
            count += 1 if waiting is None else len(waiting)
        return count

    def submit_array(self, script: Path, spec: str) -> str:
        return self._submit_script(script, slurm_tags.array_token(script), array=spec)

    def tagged_jobs(self) -> list[slurm_tags.Tagged]:
        jobs = self._call("queue", self.api.Jobs.load)
        me, out = os.getuid(), []
        for job in jobs.values():
            comment = _text(getattr(job, "comment", None)) or ""
            if job.user_id == me and comment.startswith(slurm_tags.PREFIX + ":"):
                state = map_state(_text(job.state) or State.UNKNOWN)
                own = getattr(job, "array_id", None) or job.id
                out.append(slurm_tags.Tagged(str(own), state, comment))
        return out

    def orphans(self, home: Path, run_ids: list[str]) -> dict[str, str]:
        return slurm_tags.orphans(self, home, run_ids)

    def _submit_script(self, script: Path, tag: str, **extra: str) -> str:
        """The script submitted as sbatch would (its #SBATCH lines, sbatch's environment),
        with `extra` description attributes (an array's `array`) and the tag in its
        comment (slurm_tags: a lost answer is looked for, not retried blindly). The job
        id."""
        try:
            text = script.read_text()
            options = job_description(text, str(script))
        except (OSError, ValueError) as exc:
            raise SubmitError(str(exc)) from None
        env = clean_env()
        # What sbatch adds to the job's environment, so that jobs see the same.
        env.update(
            SLURM_SUBMIT_DIR=os.getcwd(),
            SLURM_SUBMIT_HOST=socket.gethostname(),
            SLURM_UMASK=f"0{_umask():03o}",
        )
        env.setdefault("SLURM_PRIO_PROCESS", str(os.getpriority(os.PRIO_PROCESS, 0)))
        options.setdefault("working_directory", os.getcwd())  # sbatch's default, or --chdir
        options.update(extra)
        options.pop("comment", None)  # the tag's place (sbatch_extra may not set one)

        def send(tag: str) -> str:
            try:
                desc = self.api.JobSubmitDescription(
                    script=text, environment=env, **options, comment=tag
                )
            except (AttributeError, TypeError, ValueError) as exc:
                raise SubmitError(f"{script}: {exc}") from None
            try:
                return str(self._call("submit", desc.submit, tries=1))
            except ValueError as exc:  # pyslurm's own checks of the description
                raise SubmitError(f"{script}: {exc}") from None

        return slurm_tags.submit_tagged(self, send, tag)

    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        live = [j for j in job_ids if not (j in self._cache and self._cache[j].state in TERMINAL)]
        ok = True
        if live:
            seen: set[str] = set()
            try:
                with self._lock:
                    jobs = self.api.Jobs.load()
                self.controller_ok = True
                seen = self._take(jobs.values(), live, from_controller=True)
            except self.api.RPCError as exc:
                ok, self.controller_ok = False, False
                self.last_error = f"controller: {' '.join(str(exc).split())}"
            forgotten = [j for j in live if j not in seen]
            # The controller down: the database alone can answer (no config to ask first).
            if (
                forgotten
                and self.accounting is not False
                and (not self.controller_ok or self._has_accounting())
            ):
                ok &= self._from_database(forgotten)
            elif forgotten and self.controller_ok:
                # No slurmdbd to ask: the marker the job wrote as it ended decides
                # (last_word), as slurm_noacct does for the commands.
                for jid in forgotten:
                    self._cache.pop(jid, None)
        return self._answer(ok, job_ids)

    def _has_accounting(self) -> bool:
        """The profile's word, else the controller's: AccountingStorageType unset (as 25.11
        reports accounting_storage/none) or none means no slurmdbd (asked once)."""
        if self.accounting is None:
            config = self._config()
            if config is None:
                return True  # ask the database; its answer is the next clue
            self.accounting = has_accounting(config.accounting_storage_type)
        return self.accounting

    def last_word(self, row: dict[str, Any]) -> JobStatus | None:
        return slurm_noacct.last_word(row) if self.accounting is False else None

    def _from_database(self, job_ids: list[str]) -> bool:
        ids = sorted({int(j.split("_")[0]) for j in job_ids})
        try:
            with self._lock:
                jobs = self.api.db.Jobs.load(self.api.db.JobFilter(ids=ids))
        except (self.api.RPCError, ValueError) as exc:
            self.last_error = f"database: {' '.join(str(exc).split())}"
            return False
        self._take(jobs.values(), job_ids, from_controller=False)
        return True

    def _take(self, jobs, live: list[str], from_controller: bool) -> set[str]:
        wanted, seen = set(live), set()
        for job in jobs:
            for key in _keys(job, wanted):
                if key not in wanted:
                    continue
                seen.add(key)
                if key == str(job.id) or _waiting_tasks(job) is None:
                    # Its own record. (A waiting task shares its array's: that number
                    # would cancel the whole array.)
                    self._raw[key] = int(job.id)
                old = self._cache.get(key)
                if old is not None and old.state in TERMINAL:
                    continue
                new = self._status(key, job, from_controller)
                if old and old.reason and not new.reason and old.state == new.state:
                    new = replace(new, reason=old.reason)  # as the commands keep squeue's
                self._cache[key] = new
        return seen

    @staticmethod
    def _status(key: str, job, from_controller: bool) -> SlurmJob:
        raw = _text(job.state) or State.UNKNOWN
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
            _text(nodes),
            _reason(reason),
        )

    def cancel(self, job_ids: list[str]) -> None:
        tasks = []
        for jid in job_ids:
            raw = self._raw.get(jid)
            if raw is None and not jid.isdigit():
                tasks.append(jid)  # a task still waiting in its array: no number of its own
                continue
            self._call("cancel", lambda r=raw or int(jid): self.api.Job(r).cancel())
        if tasks:
            # pyslurm cancels by a job's number only (slurm_kill_job); one waiting task
            # of an array is cancelled by `ARRAY_TASK`, which only scancel takes
            # (slurm_kill_job2 is not in pyslurm's API).
            res = run_command(["scancel", *tasks], clean_env())
            if res.returncode != 0:
                raise SchedulerError(f"scancel: {' '.join(res.stderr.split())}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
