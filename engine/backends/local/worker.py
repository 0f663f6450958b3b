"""The local backend's worker: runs queued local jobs one at a time, then exits.

Started detached by LocalBackend; `python -m dlscale.engine.backends.local.worker HOME`.
Only one worker runs per store (an exclusive lock), so measurements never overlap.

Every job's launcher gets a parent-death signal and the job's token in its environment: a
worker killed outright takes the job down with it, and whatever of the job is left can be
told apart from the processes that merely inherited its numbers.

A worker that cannot run (the store or its disk full, read-only, locked) says why on the
pipe its starter gave it (`ok` once it has taken its first job or found none, else
`error: WHY`), since then it may have nowhere else to write: the starter
(starting.py) tells the front end, and the runs wait, pending, for the next
worker a command starts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from ....trainers.common import interference, slowdown
from ....trainers.common.lifeline import parent_watch
from ...errors import UserError
from ...paths import Layout, RunPaths, lay_out, own_folder
from ...runs import JobRow, State
from ...tracking.monitor import finalize_run
from ...tracking.store import Store
from ...tracking.store.health import fault_message
from .backend import DEFAULT_TIME_LIMIT, LOCK_NAME, settle_failed
from .processes import TOKEN_VAR, new_token, process_mark, stop_leftovers

INGEST_EVERY_S = 2.0
KILL_GRACE_S = 10.0


def _signal_launcher(proc: subprocess.Popen, sig: int) -> None:
    """Signal the launcher's group while the launcher is still our unreaped child: until
    this process reaps it, its pid (the group's number) cannot go to anyone else. (Asking
    Popen would not do: inside its own poll() it answers None once the child is reaped.)"""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        os.killpg(proc.pid, sig)
    except (ChildProcessError, ProcessLookupError, PermissionError):
        pass


def ambient() -> dict[str, str]:
    """The worker's environment as every job inherits it, less the test-only slowdown: a
    job is slowed only when it was submitted slowed (launch.local_env records it)."""
    return {k: v for k, v in os.environ.items() if k != slowdown.VARIABLE}


def pinned(payload: dict) -> tuple[list[int] | None, str]:
    """The CPUs to pin the job to (its spec's experiment.cpus), and what to say of them in
    its log; None: no pinning. "quiet" looks at the CPUs for half a second now, with the
    last job ended and the next not started: this worker's CPUs are idle in between."""
    chosen = payload.get("cpus")
    if not chosen:
        return None, ""
    allowed = os.sched_getaffinity(0)
    if isinstance(chosen, list):
        cpus = [c for c in chosen if c in allowed]
        return cpus or None, f"pinned to CPUs {_cpu_list(cpus)} (the spec's experiment.cpus)"
    need = min(len(allowed), int(payload.get("cpus_needed") or 1))
    cpus, shares = interference.quietest(need, 0.5, allowed)
    seen = ", ".join(f"cpu{c} {100 * v:.0f}%" for c, v in sorted(shares.items()))
    return cpus, (
        f"pinned to CPUs {_cpu_list(cpus)}, the quietest {need} of {len(allowed)} "
        f"(busy over the last half second: {seen or 'unreadable'})"
    )


def _cpu_list(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def _start(job: JobRow, payload: dict, log, cpus: list[int] | None) -> subprocess.Popen | str:
    """The launcher, in a session of its own, dying with this worker, pinned to `cpus`
    where given (its children inherit them); or why it could not start."""
    watch = parent_watch()

    def before() -> None:
        watch()
        if cpus:
            os.sched_setaffinity(0, cpus)

    try:
        return subprocess.Popen(
            payload["argv"],
            cwd=payload["run_dir"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**ambient(), **payload["env"], TOKEN_VAR: job["token"]},
            start_new_session=True,
            preexec_fn=before,
        )
    except OSError as exc:
        with contextlib.suppress(OSError):  # a disk too full for the line: said anyway
            log.write(f"dlscale: cannot start the job: {exc}\n".encode())
        return str(exc)


def make_folder(store: Store, job: JobRow, payload: dict) -> str | None:
    """The run's folder as its job starts: laid out here when it was submitted without
    one (Backend.folders_at_start). Returns why it cannot be made (a full disk, a file in
    its place), or None."""
    run_dir = Path(payload["run_dir"])
    try:
        if "layout" in payload:
            lay_out(store.run(job["run_id"]), "local", Layout(**payload["layout"]))
        else:
            own_folder(run_dir).mkdir(parents=True, exist_ok=True)
    except (OSError, UserError) as exc:  # a full disk; a link or a file in its place
        return f"cannot lay out the run's folder {run_dir}: {exc}"
    return None


def _run_job(store: Store, job: JobRow, stopping: dict) -> None:
    payload = json.loads(job["payload"])
    run_dir = Path(payload["run_dir"])
    why = make_folder(store, job, payload)
    if why is not None:
        store.jobs.update("local", job["job_id"], state=State.FAILED, ended=time.time(), reason=why)
        store.update_run(job["run_id"], state=State.FAILED, reason=why)  # it has no log to read
        return
    metrics = RunPaths(run_dir).metrics
    limit = payload.get("time_limit_s")
    with open(payload["log"], "ab", buffering=0) as raw:
        log = _Log(raw)
        log.say(
            f"dlscale: local job {job['job_id']} of run {job['run_id']} started "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}"
            + (f"; its time limit is {clock(limit)}" if limit else "")
        )
        cpus, said = pinned(payload)
        if said:
            log.say(f"dlscale: {said}")
        proc = _start(job, payload, raw, cpus)
        if isinstance(proc, str):
            store.jobs.update(
                "local",
                job["job_id"],
                state=State.FAILED,
                ended=time.time(),
                exit_code=127,
                reason=proc,
            )
            finalize_run(store, job["run_id"], State.FAILED)
            return
        # Recorded while it is our unreaped child, so the mark is this launcher's own.
        store.jobs.update("local", job["job_id"], pid=proc.pid, pid_mark=process_mark(proc.pid))
        started = time.monotonic()
        last_ingest, term_sent, cancelled, timed_out = 0.0, None, False, False
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.time()
            if now - last_ingest > INGEST_EVERY_S:  # partial results survive a killed run
                store.records.ingest(job["run_id"], metrics)
                last_ingest = now
                cancelled = (store.jobs.get("local", job["job_id"]) or {}).get(
                    "state"
                ) == State.CANCELLED
            # a hung trainer, or one stopped (SIGSTOP): it ends at its limit all the same
            timed_out = timed_out or bool(limit and time.monotonic() - started > limit)
            if term_sent is None and (cancelled or stopping.get("signal") or timed_out):
                _signal_launcher(proc, signal.SIGTERM)
                _signal_launcher(proc, signal.SIGCONT)  # a stopped one can act on it
                term_sent = now
            if term_sent and now - term_sent > KILL_GRACE_S:
                _signal_launcher(proc, signal.SIGKILL)
        rc = proc.returncode
        log.say(f"dlscale: job {job['job_id']} ended with exit code {rc}")
        # Ranks in sessions of their own are not in the launcher's group: none may go on.
        left = stop_leftovers(job["token"])
        if left:
            log.say(f"dlscale: stopped {left} process(es) of this job that outlived its launcher")
    row = store.jobs.get("local", job["job_id"])
    assert row is not None  # the worker's own job: nothing deletes it while it runs
    full = disk_full(run_dir, log.full) if rc != 0 else None
    if row["state"] == State.CANCELLED:
        finalize_run(store, job["run_id"], State.CANCELLED)
    elif term_sent and stopping.get("signal"):  # not a job that ended on its own meanwhile
        name = signal.Signals(stopping["signal"]).name
        settle_failed(
            store,
            row,
            f"the local worker was stopped by {name} (pid {os.getpid()}); "
            "this job's ranks were stopped",
            exit_code=rc,
        )
    elif timed_out:
        settle_failed(
            store,
            row,
            f"the run passed its time limit of {clock(limit)} and was stopped (the "
            "spec's experiment.time_limit; "
            f"{DEFAULT_TIME_LIMIT} where it sets none)",
            exit_code=rc,
            state=State.TIMEOUT,
        )
    elif full is not None:
        settle_failed(store, row, full, exit_code=rc)
    else:
        state, ended = (State.COMPLETED if rc == 0 else State.FAILED), time.time()
        # The run is settled before its job is seen to end: a watcher in another process
        # (`run --wait`, `status`) that saw the job end first would settle the run too, from
        # the records this settling is still writing (and see it FAILED meanwhile).
        store.jobs.update("local", job["job_id"], exit_code=rc)
        finalize_run(store, job["run_id"], state)
        store.jobs.update("local", job["job_id"], state=state, ended=ended)


class _Log:
    """The worker's own lines in a job's log. A disk too full to take them does not stop
    the worker: it is noted, and said as the run's reason (`disk_full`)."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.full: str | None = None

    def say(self, line: str) -> None:
        try:
            self.raw.write((line + "\n").encode())
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.full = self.full or f"{exc.strerror} writing {self.raw.name}"


FULL_BYTES = 1 << 20  # less free space than this where a run failed: the disk was full


def disk_full(run_dir: Path, seen: str | None) -> str | None:
    """Why a failed run failed, where the disk holding its folder was full: the worker's
    own write refused (`seen`), or under FULL_BYTES left when the job ended. (A trainer's
    own "No space left on device" reaches its reason from the log: logs.failure_reason.)"""
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if seen is None and free >= FULL_BYTES:
        return None
    said = seen or f"{free:,} bytes free on the file system of {run_dir} as the job ended"
    return f"the disk was full ({said})"


def clock(seconds: int | None) -> str:
    """A limit as H:MM:SS (UNLIMITED for none)."""
    if not seconds:
        return "UNLIMITED"
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class _Report:
    """The pipe to the process that started this worker: one line, then closed."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def say(self, line: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        except OSError:
            pass  # the starter did not wait for the answer
        finally:
            os.close(self.fd)
            self.fd = None


def main(home: str, report_fd: int | None = None) -> int:
    report = _Report(report_fd)
    try:
        code = _work(home, report)
    except Exception as exc:  # the store or its disk: why, where it can still be said
        fault = fault_message(exc, Path(home))
        why = fault or f"{type(exc).__name__}: {exc}"
        report.say(f"error: {why}")
        if fault is None:  # a bug: its traceback in the worker's log
            traceback.print_exc()
        print(f"dlscale: the local worker stopped: {why}", file=sys.stderr, flush=True)
        return 3
    report.say("ok")
    return code


def _work(home: str, report: _Report) -> int:
    store = Store(home)
    # the lock goes as this returns or raises: a worker that says why it stops is not
    # taken for one still running
    with open(Path(home) / LOCK_NAME, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another worker drains the queue
        return _drain(store, report)


def _drain(store: Store, report: _Report) -> int:
    # A worker stopped with SIGTERM takes its job down with it instead of orphaning it. The
    # handler only takes note: the loop signals the job, where it knows the launcher is
    # still its own child.
    stopping: dict = {}
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.update(signal=signum))
    while not stopping.get("signal"):
        job = store.jobs.claim_next(
            "local", nodes="localhost", worker_pid=os.getpid(), token=new_token()
        )
        report.say("ok")  # it can write: its first job is taken (or there was none)
        if job is None:
            break
        _run_job(store, job, stopping)
    return 143 if stopping.get("signal") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
