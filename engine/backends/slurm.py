"""Slurm through its commands: the default backend, because it works at every site.

Spares the controller: one `sacct` call per poll for all live jobs (slurmdbd answers it,
not slurmctld), `squeue` only every few polls for pending reasons, terminal states cached
and never asked again, and a few failed polls tolerated before the controller is reported
unreachable. Every command goes through one injectable runner.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import ControllerUnreachable, SchedulerError, SubmitError
from ..paths import RunPaths
from ..runs import TERMINAL, State
from ..tracking.store import Store
from . import slurm_arrays, slurm_noacct, slurm_tags
from .base import Backend, JobRequest, JobStatus
from .slurm_jobs import SlurmJobs
from .slurm_parse import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    TAGGED_FORMAT,
    ParseError,
    SlurmJob,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
    parse_tagged,
)

# Messages of a controller or database that is busy or restarting: worth a retry.
TRANSIENT = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Connection refused",
    "Resource temporarily unavailable",
    "Slurm backup controller in standby mode",
    "Zero Bytes were transmitted or received",
    "Connection reset",
)


def user_name() -> str:
    """Who the queue and the limits are asked about: this user."""
    return os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def __call__(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60
    ) -> CommandResult: ...


def run_command(
    argv: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> CommandResult:
    """The real runner: argv only, never a shell."""
    try:
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        return CommandResult(argv, 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(
            argv, 124, "", f"{argv[0]}: no answer in {timeout:.0f} s (Socket timed out)"
        )
    return CommandResult(argv, p.returncode, p.stdout, p.stderr)


def clean_env() -> dict[str, str]:
    """The environment for sbatch: SBATCH_* variables (from a user's shell or an enclosing
    job) would silently override the script's own #SBATCH lines."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass
class SlurmCLI(SlurmJobs, Backend):
    """Slurm through sbatch, sacct, squeue and scancel."""

    profile: Any = None  # where runs go (SlurmJobs): the cluster profile,
    partition: str | None = None  # its partition,
    home: Path | None = None  # and where `dlscale env create` recorded environments
    runner: Runner = run_command
    squeue_every: int = 3  # polls between squeue calls (pending reasons, liveness)
    max_failures: int = 3  # failed polls in a row before "unreachable"
    retries: int = 3  # sbatch/scancel attempts on transient errors
    sleep: Callable[[float], None] = time.sleep
    name: str = "slurm"
    via: str = "Slurm's commands"
    note: str | None = None
    _cache: dict[str, SlurmJob] = field(default_factory=dict)  # last known, terminal kept
    _polls: int = 0
    _failures: int = 0
    _need_squeue: bool = True
    controller_ok: bool = True
    last_poll_ok: bool = True  # False while failures are still being tolerated
    last_error: str | None = None
    throttle: int | None = None  # %N for job arrays: the spec's max_concurrent, if set
    accounting: bool | None = None  # None: the profile's, else learnt from sacct's answer
    wave_every: float = 5.0  # seconds between tries of the next wave
    _last_wave: float = -1e9
    limits: slurm_arrays.Limits | None = None  # the site's, once asked

    def __post_init__(self) -> None:
        if self.accounting is None and self.profile is not None:
            self.accounting = self.profile.profile.accounting

    def _retrying(self, argv: list[str], env: dict[str, str] | None = None) -> CommandResult:
        delay = 1.0
        for attempt in range(self.retries):
            res = self.runner(argv, env=env)
            if res.returncode == 0 or not any(t in res.stderr for t in TRANSIENT):
                return res
            if attempt < self.retries - 1:
                self.sleep(delay)
                delay *= 2
        return res

    def check_reachable(self, within_s: float) -> None:
        res = self.runner(["scontrol", "ping"], timeout=within_s)
        answer = " ".join((res.stdout + " " + res.stderr).split())
        if res.returncode != 0 or " is UP" not in res.stdout:
            raise ControllerUnreachable(
                f"the Slurm controller did not answer `scontrol ping` within {within_s:.0f} s"
                + (f": {answer}" if answer else "")
            )

    def submit(self, request: JobRequest) -> str:
        tag = slurm_tags.token(slurm_tags.home_of(request.run_dir), request.run_id)
        job_id = self.sbatch([str(RunPaths(request.run_dir).job_script)], tag)
        self.submitted(job_id)
        return job_id

    def submitted(self, job_id: str) -> None:
        """Known PENDING until sacct or squeue says more (sacct may not know it yet)."""
        self._cache[job_id] = SlurmJob(job_id, State.PENDING, "PENDING")

    def submit_many(self, requests: list[JobRequest]) -> list[str | Exception]:
        """Runs of one job shape as one job array, within the site's limits; the rest
        WAITING for a later wave (slurm_arrays)."""
        if not requests or (self.profile is not None and not self.profile.profile.arrays):
            return super().submit_many(requests)
        return slurm_arrays.submit_many(self, requests, self.profile, self.throttle)

    def next_wave(self, store: Store, experiment: str | None = None) -> int:
        # at most one try every few seconds: each asks the controller for the queue
        if time.monotonic() - self._last_wave < self.wave_every:
            return 0
        self._last_wave = time.monotonic()
        return slurm_arrays.next_wave(self, store, experiment)

    # --- what job arrays ask of the place (slurm_arrays.ArrayPlace) ------------------------

    def site_max_array_size(self) -> int | None:
        res = self.runner(["scontrol", "show", "config"])
        m = re.search(r"^MaxArraySize\s*=\s*(\d+)", res.stdout, re.MULTILINE)
        return int(m[1]) if res.returncode == 0 and m else None

    def site_max_submit_jobs(self) -> int | None:
        res = self.runner(
            [
                "sacctmgr",
                "--noheader",
                "--parsable2",
                "show",
                "assoc",
                f"user={user_name()}",
                "format=MaxSubmit",
            ]
        )
        if res.returncode != 0:  # no accounting: no association limits to read
            return None
        return min((int(v) for v in res.stdout.split() if v.isdigit()), default=None)

    def queued_tasks(self) -> int:
        res = self.runner(["squeue", "--noheader", "--array", "--user", user_name(), "--format=%i"])
        if res.returncode != 0:
            raise ControllerUnreachable(f"squeue: {' '.join(res.stderr.split())}")
        return sum(1 for line in res.stdout.splitlines() if line.strip())

    def submit_array(self, script: Path, spec: str) -> str:
        return self.sbatch(["--array", spec, str(script)], slurm_tags.array_token(script))

    def tagged_jobs(self) -> list[slurm_tags.Tagged]:
        res = self._user_jobs(TAGGED_FORMAT)
        if res.returncode != 0:
            raise ControllerUnreachable(f"squeue: {' '.join(res.stderr.split())}")
        return [slurm_tags.Tagged(*row) for row in parse_tagged(res.stdout)]

    def orphans(self, home: Path, run_ids: list[str]) -> dict[str, str]:
        return slurm_tags.orphans(self, home, run_ids)

    def last_word(self, row: dict[str, Any]) -> JobStatus | None:
        return slurm_noacct.last_word(row) if self.accounting is False else None

    def sbatch(self, args: list[str], tag: str) -> str:
        """`sbatch --parsable --comment=TAG ARGS`; the job id, also where sbatch's answer
        was lost and the job is found by its tag (slurm_tags). Raises SubmitError,
        ControllerUnreachable."""
        job_id = slurm_tags.submit_tagged(self, lambda t: self._sbatch_once(args, t), tag)
        self._need_squeue = True  # a fresh job: learn its pending reason soon
        return job_id

    def _sbatch_once(self, args: list[str], tag: str) -> str:
        res = self.runner(["sbatch", "--parsable", f"--comment={tag}", *args], env=clean_env())
        if res.returncode != 0:
            message = " ".join(res.stderr.split()) or f"sbatch exited {res.returncode}"
            if any(t in res.stderr for t in TRANSIENT):
                raise ControllerUnreachable(f"sbatch: {message}")
            raise SubmitError(message)
        try:
            return parse_sbatch(res.stdout)
        except ParseError as exc:
            raise SubmitError(str(exc)) from None

    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """One sacct call for every job not known to be finished; squeue every few polls."""
        if self.accounting is False:
            return slurm_noacct.poll(self, job_ids)
        self._polls += 1
        live = [j for j in job_ids if not (j in self._cache and self._cache[j].state in TERMINAL)]
        ok = True
        if live:
            res = self.runner(
                [
                    "sacct",
                    "--parsable2",
                    "--noheader",
                    "--jobs",
                    ",".join(live),
                    f"--format={SACCT_FIELDS}",
                ]
            )
            if res.returncode == 0:
                try:
                    found = parse_sacct(res.stdout)
                except ParseError as exc:
                    found, ok = {}, False
                    self.last_error = str(exc)
                wanted = set(live)  # a list here made a tick of 10,000 jobs take seconds
                for jid, job in found.items():
                    if jid in wanted:
                        old = self._cache.get(jid)
                        # sacct keeps no pending reason; squeue's stays until the state moves
                        if old and old.reason and not job.reason and old.state == job.state:
                            job = SlurmJob(
                                jid,
                                job.state,
                                job.slurm_state,
                                job.exit_code,
                                job.signal,
                                job.elapsed_s,
                                job.nodes,
                                old.reason,
                            )
                        self._cache[jid] = job
            elif slurm_noacct.disabled(res.stderr):
                self.accounting = False  # no slurmdbd here: follow without it from now on
                return slurm_noacct.poll(self, job_ids)
            else:
                ok = False
                self.last_error = f"sacct: {_first_line(res.stderr) or res.returncode}"
            still_live = [
                j
                for j in live
                if self._cache.get(j) is None or self._cache[j].state not in TERMINAL
            ]
            if still_live and (
                self._need_squeue or self._polls % self.squeue_every == 0 or not self.controller_ok
            ):
                ok &= self._squeue(still_live)
        return self._answer(ok, job_ids)

    def _user_jobs(self, fmt: str) -> CommandResult:
        """squeue of this user's jobs in every state it still knows, in format `fmt`."""
        return self.runner(
            ["squeue", "--noheader", "--states=all", "--user", user_name(), f"--format={fmt}"]
        )

    def _squeue(self, job_ids: list[str]) -> bool:
        # By user, not by id list: squeue fails the whole call if one id is already purged.
        res = self._user_jobs(SQUEUE_FORMAT)
        if res.returncode != 0:
            self.controller_ok = False
            self.last_error = f"squeue: {_first_line(res.stderr) or res.returncode}"
            return False
        self.controller_ok, self._need_squeue = True, False
        try:
            found = parse_squeue(res.stdout)
        except ParseError as exc:
            self.last_error = str(exc)
            return False
        for jid in job_ids:
            q = found.get(jid)
            if q is None:
                continue
            old = self._cache.get(jid)
            if old is None or old.state not in TERMINAL:
                # sacct lags the controller by seconds; squeue's state and reason are fresher
                self._cache[jid] = SlurmJob(
                    jid,
                    q.state,
                    q.slurm_state,
                    old.exit_code if old else None,
                    None,
                    q.elapsed_s,
                    q.nodes or (old.nodes if old else None),
                    q.reason,
                )
        return True

    def cancel(self, job_ids: list[str]) -> None:
        if not job_ids:
            return
        res = self._retrying(["scancel", *job_ids])
        if res.returncode != 0:
            raise SchedulerError(f"scancel: {' '.join(res.stderr.split())}")
        self._need_squeue = True
