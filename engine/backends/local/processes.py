"""The processes of a local job, known by more than their pid, and signals sent only to them.

A recorded pid names a process only for as long as that process lives: after it ends (the
worker killed, an OOM kill, a reboot) the number is handed to some other process, and a
signal sent to it, as root, can end anything. So a job's launcher is known by its pid, its
start time (/proc/PID/stat field 22, in clock ticks since boot) and the boot it started in;
and every process of the job (ranks in sessions of their own included) by a per-job token in
its environment, which every descendant inherits whatever launcher, group or session it is in.
Where /proc is missing (not Linux) nothing can be proven, and nothing is signalled.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

TOKEN_VAR = "DLSCALE_JOB_TOKEN"
PROC = Path("/proc")
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no process has a larger pid


def valid_pid(pid: object) -> TypeGuard[int]:
    """A number a process could have: a damaged store's pid (2^31, text, negative) names
    none, and is never passed to a system call (which would overflow, or mean a group)."""
    return type(pid) is int and 0 < pid <= PID_MAX


def new_token() -> str:
    return secrets.token_hex(16)


def _boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def process_mark(pid: int | None) -> str | None:
    """'BOOT_ID START_TICKS' of a live process; None when there is none (or no /proc)."""
    if not valid_pid(pid):
        return None
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm, field 2, may hold spaces and parentheses: count fields from the last ')'
    fields = stat.rpartition(")")[2].split()
    return f"{_boot_id()} {fields[19]}" if len(fields) > 19 else None


def _has_token(pid: int, token: str) -> bool:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's: not ours either way
        return False
    return f"{TOKEN_VAR}={token}".encode() in environ.split(b"\0")


def _is_launcher(pid: int, mark: str) -> bool:
    """The recorded launcher, still the leader of the group it was started in."""
    try:
        return process_mark(pid) == mark and os.getpgid(pid) == pid
    except OSError:
        return False


def _signal_if(pid: int, sig: int, ours: Callable[[int], bool], group: bool = False) -> bool:
    """Signal `pid` (or its group) if `ours(pid)` holds. The identity is checked after a
    pidfd is open: the pidfd names that one process, so a pid reused in between is never
    signalled. A group is signalled only through a verified leader that is alive: while it
    lives no other group can have its number (between the check and the signal it would
    have to end, be reaped and its number be handed out again)."""
    if not valid_pid(pid):
        return False
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, AttributeError, OSError):
        fd = None  # gone, or a kernel without pidfds: the check below still has to pass
    try:
        if not ours(pid):
            return False
        if group:
            os.killpg(pid, sig)
        elif fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def job_processes(token: str | None) -> list[int]:
    """Every live process carrying the job's token, this one excluded."""
    if not token:
        return []
    try:
        pids = [int(p) for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return []
    me = os.getpid()
    return [pid for pid in pids if pid != me and _has_token(pid, token)]


def signal_job(pid: int | None, mark: str | None, token: str | None, sig: int) -> int:
    """Send `sig` to the job's launcher group (if its leader is still the recorded one) and
    to every process carrying its token; return how many were signalled. A pid without a
    mark (a store from before marks were kept) is never signalled."""
    sent = 0
    if (
        valid_pid(pid)
        and mark
        and _signal_if(pid, sig, lambda p: _is_launcher(p, mark), group=True)
    ):
        sent += 1
    if token:
        for p in job_processes(token):
            sent += _signal_if(p, sig, lambda q: _has_token(q, token))
    return sent


def stop_leftovers(token: str | None) -> int:
    """SIGKILL what is left of a job once its launcher has ended; return how many."""
    return signal_job(None, None, token, signal.SIGKILL)
