"""Following jobs through pyslurm: each poll asks the controller once for every job it holds
(`pyslurm.Jobs.load`), and the database (`pyslurm.db.Jobs.load`, filtered by id) only about
tracked jobs the controller has already forgotten or while it does not answer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ....errors import SchedulerError
from ....runs import TERMINAL
from ...base import JobStatus
from ..common import Runner, SlurmWatcher, clean_env, has_accounting, run_command, said
from .api import Controller
from .records import keys, status, waiting_tasks


@dataclass
class PyslurmWatcher(SlurmWatcher):
    """The same jobs, states, pending reasons and exit codes as the commands' watcher, without
    a process per call."""

    controller: Controller = field(default_factory=Controller)  # the backend's too
    controller_ok: bool = True
    runner: Runner = run_command  # scancel of a waiting array task (pyslurm cannot)
    _raw: dict[str, int] = field(default_factory=dict)  # tracked id -> Slurm's own

    def poll(self, job_ids: list[str]) -> dict[str, JobStatus]:
        live = self._live(job_ids)
        ok = True
        if live:
            seen: set[str] = set()
            try:
                with self.controller.lock:
                    jobs = self.controller.api.Jobs.load()
                self.controller_ok = True
                seen = self._take(jobs.values(), live, from_controller=True)
            except self.controller.api.RPCError as exc:
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
                # (last_word), as the commands' watcher does without accounting.
                for jid in forgotten:
                    self._cache.pop(jid, None)
        return self._answer(ok, job_ids)

    def _has_accounting(self) -> bool:
        """The profile's word, else the controller's: AccountingStorageType unset (as 25.11
        reports accounting_storage/none) or none means no slurmdbd (asked once)."""
        if self.accounting is None:
            config = self.controller.config()
            if config is None:
                return True  # ask the database; its answer is the next clue
            self.accounting = has_accounting(config.accounting_storage_type)
        return self.accounting

    def _from_database(self, job_ids: list[str]) -> bool:
        ids = sorted({int(j.split("_")[0]) for j in job_ids})
        try:
            with self.controller.lock:
                jobs = self.controller.api.db.Jobs.load(self.controller.api.db.JobFilter(ids=ids))
        except (self.controller.api.RPCError, ValueError) as exc:
            self.last_error = f"database: {' '.join(str(exc).split())}"
            return False
        self._take(jobs.values(), job_ids, from_controller=False)
        return True

    def _take(self, jobs, live: list[str], from_controller: bool) -> set[str]:
        wanted, seen = set(live), set()
        for job in jobs:
            for key in keys(job, wanted):
                if key not in wanted:
                    continue
                seen.add(key)
                if key == str(job.id) or waiting_tasks(job) is None:
                    # Its own record. (A waiting task shares its array's: that number
                    # would cancel the whole array.)
                    self._raw[key] = int(job.id)
                old = self._cache.get(key)
                if old is not None and old.state in TERMINAL:
                    continue
                new = status(key, job, from_controller)
                if old and old.reason and not new.reason and old.state == new.state:
                    new = replace(new, reason=old.reason)  # as the commands keep squeue's
                self._cache[key] = new
        return seen

    def cancel(self, job_ids: list[str]) -> None:
        tasks = []
        for jid in job_ids:
            raw = self._raw.get(jid)
            if raw is None and not jid.isdigit():
                tasks.append(jid)  # a task still waiting in its array: no number of its own
                continue
            self.controller.call(
                "cancel", lambda r=raw or int(jid): self.controller.api.Job(r).cancel()
            )
        if tasks:
            # pyslurm cancels by a job's number only (slurm_kill_job); one waiting task
            # of an array is cancelled by `ARRAY_TASK`, which only scancel takes
            # (slurm_kill_job2 is not in pyslurm's API).
            res = self.runner(["scancel", *tasks], clean_env())
            if res.returncode != 0:
                raise SchedulerError(said(res))
