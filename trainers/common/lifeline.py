"""A rank never outlives the process that started it.

torchrun starts every rank in a session of its own, horovodrun behind middlemen, MXNet's
roles beside their worker: a signal to the launcher's group does not reach them, so a killed
launcher (or local worker, or time limit) would leave ranks training and writing records
after their run has ended. Linux's parent-death signal (prctl PR_SET_PDEATHSIG) ends a
process when its parent does, whatever group it is in; under srun the parent is slurmstepd,
which outlives its tasks, so there it changes nothing.
"""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


def _load_prctl():
    # Resolved once, at import, so the preexec_fn use (between fork and exec, in a child of a
    # process that may have threads) never has to dlopen anything.
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return None


_prctl = _load_prctl()


def die_with_parent(parent: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """Ask for `sig` when the parent ends; False where the platform has no such signal.

    `parent` is the pid the caller knows it was started by (a preexec_fn passes the
    launcher's own pid); without it, the parent seen just before the request. A parent that
    ended before the request would never send the signal: the check after it closes that
    race, and this process then ends as the signal would have ended it."""
    expected = os.getppid() if parent is None else parent
    if _prctl is None or _prctl(PR_SET_PDEATHSIG, int(sig)) != 0:
        return False
    if os.getppid() != expected:
        os.kill(os.getpid(), sig)
    return True


def parent_watch(sig: int = signal.SIGKILL):
    """A preexec_fn for Popen: the child dies with the process starting it now."""
    parent = os.getpid()
    return lambda: die_with_parent(parent, sig)
