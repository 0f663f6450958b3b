"""Starting the local worker, and hearing whether it can run.

A worker that cannot write (the store or its disk full, read-only, held locked) may have
nowhere to say why: it says it on a pipe its starter gave it (worker.py: `ok` once it has
taken its first job or found none, else `error: WHY`). A command that must answer at once
(`status`) waits for that line, at most WORKER_START_S; a worker this process started
without waiting (at a submission) is asked again, without waiting, by the next poll, so a
front end that polls (the TUI, `run --wait`) is never held up by a worker starting.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ...tracking.store.health import BUSY_S, fault_message, write_locked

WORKER_START_S = 5.0  # how long a command waits to hear whether a worker it started runs


class _Started:
    """A worker this process started, and the read end of its pipe."""

    def __init__(self, proc: subprocess.Popen, fd: int) -> None:
        self.proc, self.fd = proc, fd

    def answer(self, timeout: float) -> str | None:
        """Its line ("" when it closed the pipe unsaid), or None when none came in time."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return None
        data = b""
        while not data.endswith(b"\n") and len(data) < 4096:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace").strip()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def why(self, said: str | None, home: Path) -> str | None:
        """Why it cannot run, from what it said (or did not), or None."""
        if said and said.startswith("error: "):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(WORKER_START_S)  # gone, so the next poll starts another
            return said.removeprefix("error: ")
        if not said and self.proc.poll() not in (None, 0):
            log = home / "local-worker.log"
            return f"it ended at once (exit status {self.proc.returncode}; {log})"
        if said is None and write_locked(home):  # it waits (BUSY_S) for another's write
            return (
                f"the store {home / 'dlscale.db'} is locked by another process's write; the "
                f"worker waits for it (up to {BUSY_S} s a try)"
            )
        return None


_started: dict[Path, _Started] = {}  # by home: started without waiting, not yet heard
_lock = threading.Lock()


def ensure_worker(home: Path, alive: Callable[[], bool], wait: bool) -> str | None:
    """Start a worker for `home` unless one runs; with `wait`, return why it cannot run
    (or None). A worker this process started and has not heard from yet is asked without
    waiting, and no other is started meanwhile."""
    with _lock:
        started = _started.get(home)
        if started is not None:
            said = started.answer(0)
            if said is None and started.proc.poll() is None:
                return None  # still starting: it will say, at a later poll
            del _started[home]
            started.close()
            why = started.why(said, home)
            if why is not None:
                return why
        if alive():
            return None
        started_or_why = _start(home)
        if isinstance(started_or_why, str):
            return started_or_why
        if not wait:
            _started[home] = started_or_why
            return None
        try:
            return started_or_why.why(started_or_why.answer(WORKER_START_S), home)
        finally:
            started_or_why.close()


def _start(home: Path) -> _Started | str:
    """The worker, detached, its output to local-worker.log; or why it cannot start."""
    try:
        log = open(home / "local-worker.log", "ab")
    except OSError as exc:
        return fault_message(exc, home) or str(exc)
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlscale.engine.backends.local.worker", str(home)]
            + [str(write_fd)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=(write_fd,),
        )
    except OSError as exc:
        os.close(read_fd)
        return f"cannot start it: {exc}"
    finally:
        log.close()
        os.close(write_fd)
    return _Started(proc, read_fd)
