"""Slurm's commands as child processes that never hold dlscale up.

A busy cluster's slurmdbd or controller can leave `sacct`, `squeue` or `sacctmgr` without an
answer for minutes. Each command here runs in a process group of its own and is ended by its
own pid (the group it leads: it and what it started, nothing else) when its time is up, when
the caller is interrupted (ctrl+c in `dlscale run --wait` or `status`), or when a front end
closes (`Calls.close`, as `dlscale-tui` quits). A front end's `Calls` also says what is in
flight and since when, so it can say what it waits on ("sacct: no answer for 23 s").

Messages name no command: the caller, which knows which command it ran, does (`squeue: no
answer in 10 s`, never `squeue: squeue: ...`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 60.0  # a command line's: `dlscale status` may wait on a slow database
CLOSED = "not asked: dlscale is closing"
TIMED_OUT = 124  # the return code of a command ended for taking longer than its time


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def _end(p: subprocess.Popen) -> None:
    """End the command and whatever it started, by the group its own pid leads."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(p: subprocess.Popen) -> None:
    p.wait()
    for pipe in (p.stdout, p.stderr):
        if pipe is not None:
            pipe.close()


def start(argv: list[str], env: dict[str, str] | None) -> subprocess.Popen | CommandResult:
    """The command started in a session of its own (argv only, never a shell), or why not."""
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        return CommandResult(argv, 127, "", "command not found")
    except PermissionError as exc:
        return CommandResult(argv, 126, "", f"cannot be run: {exc.strerror}")


def finish(p: subprocess.Popen, argv: list[str], timeout: float) -> CommandResult:
    """Wait for the command's answer at most `timeout` seconds; interrupted (ctrl+c) or
    out of time, it is ended and nothing of it is left running."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end(p)
        _reap(p)
        return CommandResult(argv, TIMED_OUT, "", f"no answer in {timeout:.0f} s")
    except BaseException:  # KeyboardInterrupt above all: the user is leaving
        _end(p)
        _reap(p)
        raise
    return CommandResult(argv, p.returncode, out, err)


def run_command(
    argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> CommandResult:
    """The command line's runner: one command, at most `timeout` seconds (60 by default)."""
    p = start(argv, env)
    if isinstance(p, CommandResult):
        return p
    return finish(p, argv, DEFAULT_TIMEOUT_S if timeout is None else timeout)


@dataclass(frozen=True)
class Waiting:
    """A command in flight: which, and how long it has gone without an answer."""

    command: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.command}: no answer for {self.seconds:.0f} s"


@dataclass
class Step:
    """A command run while `Calls.recording`: which (`scontrol ping`, `sbatch`), since when
    (time.monotonic), how long it may take, and once it ended, when and whether it
    succeeded."""

    command: str
    started: float
    timeout: float
    ended: float | None = None
    ok: bool | None = None


def command_words(argv: list[str]) -> str:
    """A command as a step names it: its program, and scontrol's subcommand."""
    name = os.path.basename(argv[0]) if argv else ""
    return f"{name} {argv[1]}" if name == "scontrol" and len(argv) > 1 else name


class Calls:
    """A front end's runner: every Slurm command it runs, each at most `timeout` seconds
    (the profile's `command_timeout`), known while in flight, all ended at once by
    `close()`, after which none starts. `sleep` is a pause between retries that `close()`
    cuts short. Safe from any thread."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, float, subprocess.Popen]] = {}
        self._closed = threading.Event()
        self._thread = threading.local()  # the steps the calling thread records, if any

    @contextmanager
    def recording(self) -> Iterator[list[Step]]:
        """Every command the calling thread runs meanwhile, as a Step in the list given
        (appended as it starts, completed as it ends): another thread reads it to say
        what a submission is doing."""
        steps: list[Step] = []
        self._thread.steps = steps
        try:
            yield steps
        finally:
            self._thread.steps = None

    def __call__(
        self, argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
    ) -> CommandResult:
        if self._closed.is_set():
            return CommandResult(argv, 125, "", CLOSED)
        within = self.timeout if timeout is None else min(timeout, self.timeout)
        steps = getattr(self._thread, "steps", None)
        step = Step(command_words(argv), time.monotonic(), within)
        if steps is not None:
            steps.append(step)
        res = self._run(argv, env, within)
        step.ended, step.ok = time.monotonic(), res.returncode == 0
        return res

    def _run(self, argv: list[str], env: dict[str, str] | None, within: float) -> CommandResult:
        p = start(argv, env)
        if isinstance(p, CommandResult):
            return p
        with self._lock:  # close() ends what is registered: nothing may slip in after it
            if self._closed.is_set():
                _end(p)
                _reap(p)
                return CommandResult(argv, 125, "", CLOSED)
            self._running[p.pid] = (os.path.basename(argv[0]), time.monotonic(), p)
        try:
            res = finish(p, argv, within)
        finally:
            with self._lock:
                self._running.pop(p.pid, None)
        if self._closed.is_set():
            return CommandResult(argv, 125, "", CLOSED)
        return res

    def waiting(self, now: float | None = None) -> list[Waiting]:
        """The commands in flight, the longest waiting first."""
        now = time.monotonic() if now is None else now
        with self._lock:
            found = [Waiting(name, now - since) for name, since, _ in self._running.values()]
        return sorted(found, key=lambda w: -w.seconds)

    def sleep(self, seconds: float) -> None:
        self._closed.wait(seconds)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """End every command in flight (by its own pid) and start none from now on."""
        with self._lock:
            self._closed.set()
            running = [p for _, _, p in self._running.values()]
        for p in running:
            _end(p)
