"""Slurm through its commands: the default backend, because it works at every site.

Its watcher spares the controller: one `sacct` call per poll for all live jobs (slurmdbd answers it,
not slurmctld), `squeue` only every few polls for pending reasons, terminal states cached
and never asked again, and a few failed polls tolerated before the controller is reported
unreachable. Every command goes through one injectable runner.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import ControllerUnreachable, SchedulerError, SubmitError
from ...runs import TERMINAL
from ..base import JobStatus
from . import tags
from .common import (
    CommandResult,
    Runner,
    SlurmWatcher,
    accounting_disabled,
    clean_env,
    has_accounting,
    run_command,
    said,
    transient,
    user_name,
)
from .jobs import SlurmJobs
from .no_accounting import NoAccounting
from .parsing import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    TAGGED_FORMAT,
    ParseError,
    SlurmJob,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
    parse_tagged,
    site_limit,
)


@dataclass
class SlurmCLI(SlurmJobs):
    """Slurm through its commands: sbatch submits, and its watcher (CommandsWatcher) follows
    with sacct, squeue and scancel."""

    squeue_every: int = 3  # the watcher's: polls between squeue calls (pending reasons)
    via: str = "Slurm's commands"
    _config: str | None = None  # `scontrol show config`, once answered

    def __post_init__(self, accounting: bool | None) -> None:
        self.watcher: CommandsWatcher = CommandsWatcher(
            max_failures=self.max_failures,
            accounting=self.first_accounting(accounting),
            runner=self.runner,
            retries=self.retries,
            sleep=self.sleep,
            squeue_every=self.squeue_every,
        )

    def check_reachable(self, within_s: float) -> None:
        res = self.runner(["scontrol", "ping"], timeout=within_s)
        answer = " ".join((res.stdout + " " + res.stderr).split())
        if res.returncode != 0 or " is UP" not in res.stdout:
            raise ControllerUnreachable(
                f"the Slurm controller did not answer `scontrol ping` within {within_s:.0f} s"
                + (f": {answer}" if answer else "")
            )

    def submit_script(self, script: Path, tag: str, array: str | None = None) -> str:
        """`sbatch --parsable --comment=TAG [--array SPEC] SCRIPT`, once."""
        args = [*(["--array", array] if array else []), str(script)]
        res = self.runner(["sbatch", "--parsable", f"--comment={tag}", *args], env=clean_env())
        if res.returncode != 0:
            if transient(res):
                raise ControllerUnreachable(said(res))
            raise SubmitError(said(res))
        try:
            return parse_sbatch(res.stdout)
        except ParseError as exc:
            raise SubmitError(str(exc)) from None

    def submitted(self, job_id: str) -> None:
        self.watcher.submitted(job_id)

    # --- what arrays and tags ask of Slurm (SlurmJobs' abstract methods) ----------------

    def _site_config(self, name: str) -> str | None:
        """A value of the controller's configuration (asked once; None where unsaid)."""
        if self._config is None:
            res = self.runner(["scontrol", "show", "config"])
            if res.returncode != 0:
                return None
            self._config = res.stdout
        m = re.search(rf"^{name}\s*=\s*(.*?)\s*$", self._config, re.MULTILINE)
        return m[1] if m else None

    def site_max_array_size(self) -> int | None:
        return site_limit(self._site_config("MaxArraySize"))

    def site_accounting(self) -> bool | None:
        storage = self._site_config("AccountingStorageType")
        return None if self._config is None else has_accounting(storage)

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
        limits = (site_limit(v) for v in res.stdout.split())
        return min((n for n in limits if n is not None), default=None)

    def queued_tasks(self) -> int:
        res = self.runner(["squeue", "--noheader", "--array", "--user", user_name(), "--format=%i"])
        if res.returncode != 0:
            raise ControllerUnreachable(said(res))
        return sum(1 for line in res.stdout.splitlines() if line.strip())

    def tagged_jobs(self) -> list[tags.Tagged]:
        res = user_jobs(self.runner, TAGGED_FORMAT)
        if res.returncode != 0:
            raise ControllerUnreachable(said(res))
        return [tags.Tagged(*row) for row in parse_tagged(res.stdout)]


def user_jobs(runner: Runner, fmt: str) -> CommandResult:
    """squeue of this user's jobs in every state it still knows, in format `fmt`."""
    return runner(
        ["squeue", "--noheader", "--states=all", "--user", user_name(), f"--format={fmt}"]
    )


@dataclass
class CommandsWatcher(SlurmWatcher):
    """Following jobs through Slurm's commands: sacct and squeue, or the controller alone
    where there is no accounting (no_accounting); scancel."""

    runner: Runner = run_command
    retries: int = 3  # scancel attempts on transient errors
    sleep: Callable[[float], None] = time.sleep
    squeue_every: int = 3  # polls between squeue calls (pending reasons, liveness)
    controller_ok: bool = True
    _polls: int = 0
    _need_squeue: bool = True

    def __post_init__(self) -> None:
        self.no_accounting = NoAccounting(self.runner)

    def submitted(self, job_id: str) -> None:
        """Known PENDING until sacct or squeue says more (sacct may not know it yet)."""
        super().submitted(job_id)
        self._need_squeue = True  # a fresh job: learn its pending reason soon

    def _retrying(self, argv: list[str], env: dict[str, str] | None = None) -> CommandResult:
        delay = 1.0
        for attempt in range(self.retries):
            res = self.runner(argv, env=env)
            if res.returncode == 0 or not transient(res):
                return res
            if attempt < self.retries - 1:
                self.sleep(delay)
                delay *= 2
        return res

    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """One sacct call for every job not known to be finished; squeue every few polls."""
        if self.accounting is False:
            return self._without_accounting(job_ids)
        self._polls += 1
        live = self._live(job_ids)
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
            elif accounting_disabled(res.stderr):
                self.accounting = False  # no slurmdbd here: follow without it from now on
                return self._without_accounting(job_ids)
            else:
                ok = False
                self.last_error = said(res, whole=False)
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

    def _without_accounting(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """One `scontrol show job` for every job not known to be finished (no_accounting);
        a job the controller has forgotten is left to its last word."""
        live = self._live(job_ids)
        ok = True
        if live:
            found, why = self.no_accounting.ask()
            if found is None:
                ok, self.last_error = False, why
            else:
                for jid in live:
                    if jid in found:
                        self._cache[jid] = found[jid]
                    elif jid in self._cache:
                        del self._cache[jid]  # forgotten by the controller: last_word decides
        return self._answer(ok, job_ids)

    def _squeue(self, job_ids: list[str]) -> bool:
        # By user, not by id list: squeue fails the whole call if one id is already purged.
        res = user_jobs(self.runner, SQUEUE_FORMAT)
        if res.returncode != 0:
            self.controller_ok = False
            self.last_error = said(res, whole=False)
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
            raise SchedulerError(said(res))
        self._need_squeue = True
