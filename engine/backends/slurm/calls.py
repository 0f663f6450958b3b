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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

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


def _popen(argv: list[str], env: dict[str, str] | None) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Signals that Python handles (ctrl+c's KeyboardInterrupt above all) held back for the
    block, then handled in the order they came. Python runs a handler between bytecodes of
    the main thread, and one that lands as Popen's fork returns raises before Popen keeps
    the child's pid: the child is lost, left running (240 and 271 of 300 interrupts timed
    at random in a command's first 4 ms, two runs). Other threads never run handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, FrameType | None]] = []
    handlers: dict[signal.Signals, Callable[[int, FrameType | None], Any]] = {}
    try:
        for sig in signal.valid_signals():
            handler = signal.getsignal(sig)
            if callable(handler):
                handlers[sig] = handler
                signal.signal(sig, lambda signum, frame: held.append((signum, frame)))
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for signum, frame in held:
            handlers[signal.Signals(signum)](signum, frame)


@contextmanager
def started(argv: list[str], env: dict[str, str] | None) -> Iterator[subprocess.Popen]:
    """The command started in a session of its own (argv only, never a shell), ended with
    all it started when the block is left however it is (an answer read, out of time,
    interrupted, even as it starts). Raises CommandFailed (127: not found, 126: cannot be
    run) if it cannot start."""
    p = None
    try:
        try:
            with _interrupts_held():
                p = _popen(argv, env)
        except FileNotFoundError:
            raise CommandFailed(CommandResult(argv, 127, "", "command not found")) from None
        except PermissionError as exc:
            failed = CommandResult(argv, 126, "", f"cannot be run: {exc.strerror}")
            raise CommandFailed(failed) from None
        yield p
    finally:
        if p is not None:
            _end(p)  # nothing if it has ended
            _reap(p)


class CommandFailed(Exception):
    """A command that could not be started; `result` says why, as its answer would."""

    def __init__(self, result: CommandResult) -> None:
        super().__init__(result.stderr)
        self.result = result


def finish(p: subprocess.Popen, argv: list[str], timeout: float) -> CommandResult:
    """Wait for the command's answer at most `timeout` seconds; out of time, it is ended
    (by `started`, as it is when the wait is interrupted)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return CommandResult(argv, TIMED_OUT, "", f"no answer in {timeout:.0f} s")
    return CommandResult(argv, p.returncode, out, err)


def run_command(
    argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> CommandResult:
    """The command line's runner: one command, at most `timeout` seconds (60 by default)."""
    try:
        with started(argv, env) as p:
            return finish(p, argv, DEFAULT_TIMEOUT_S if timeout is None else timeout)
    except CommandFailed as exc:
        return exc.result


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
        try:
            with started(argv, env) as p:
                with self._lock:  # close() ends what is registered: none may slip in after
                    if self._closed.is_set():
                        return CommandResult(argv, 125, "", CLOSED)
                    self._running[p.pid] = (os.path.basename(argv[0]), time.monotonic(), p)
                try:
                    res = finish(p, argv, within)
                finally:
                    with self._lock:
                        self._running.pop(p.pid, None)
        except CommandFailed as exc:
            return exc.result
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
