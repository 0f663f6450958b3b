"""The CPU time of a process and everything it started: user + system seconds, a measure
a busy machine does not move as it moves the wall clock (a step that waits for a core is
slower by the clock, not by its CPU time). What it cannot see: time spent waiting (for
I/O, for another rank, for a device), which costs no CPU.

Read from /proc (Linux): each process of the tree (found through its threads' `children`
files) adds its own utime + stime and its waited-for children's (cutime + cstime), so a
worker that exited and was reaped still counts, in its parent. Clock ticks (1/100 s)
are the resolution; a window of a few seconds reads to a fraction of a percent.

Standard library only: the trainers and the meter around a declared script use it.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _own_and_reaped(pid: int) -> float | None:
    """utime + stime + cutime + cstime of one process, in seconds; None once it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command's name is in parentheses and may hold spaces or ")": split after the last
    fields = text.rsplit(")", 1)[-1].split()
    try:  # fields 14 to 17 of proc(5), counted from 1, the name being field 2
        return sum(int(x) for x in fields[11:15]) / _TICK
    except (ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def available() -> str | None:
    """Why a process tree's CPU time cannot be read here (None: it can)."""
    if not (PROC / "self" / "stat").is_file():
        return "no /proc here: a process tree's CPU time is read from it (Linux)"
    if not any((PROC / "self" / "task").glob("*/children")):
        return "this kernel lists no process's children (/proc/PID/task/TID/children)"
    return None


def tree_seconds(pid: int | None = None) -> float | None:
    """User + system CPU seconds of `pid` (this process when None) and of every process
    below it, alive or reaped; None where /proc cannot say (then, for this process only,
    its own and its waited-for children's, from getrusage)."""
    root = os.getpid() if pid is None else pid
    if available() is not None:
        if pid is not None and pid != os.getpid():
            return None
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    total = 0.0
    for p in tree_pids(root):
        value = _own_and_reaped(p)
        if value is None:
            if p == root:
                return None
            continue
        total += value
    return total


def tree_pids(root: int) -> Iterator[int]:
    """The pids of `root`'s process tree, root first (children read once each is given)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        yield p
        todo += _children(p)


def _task_waits(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting on a run queue) of a process's live threads
    (/proc/PID/task/TID/schedstat, nanoseconds); None once it is gone."""
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return None
    ran = waited = 0.0
    for task in tasks:
        try:
            on, queued = (task / "schedstat").read_text().split()[:2]
            ran, waited = ran + int(on) / 1e9, waited + int(queued) / 1e9
        except (OSError, ValueError):
            continue
    return ran, waited


def tree_waits(pid: int | None = None) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of every live thread of `pid`'s process
    tree (this process when None): how long the run's threads wanted a CPU and did not get
    one. None where the kernel keeps no schedstat (CONFIG_SCHEDSTATS off)."""
    root = os.getpid() if pid is None else pid
    if not (PROC / str(root) / "schedstat").is_file():
        return None
    ran = waited = 0.0
    for p in tree_pids(root):
        got = _task_waits(p)
        if got is not None:
            ran, waited = ran + got[0], waited + got[1]
    return ran, waited
