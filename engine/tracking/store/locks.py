"""Who may change the store, and when: two lock files in the home, held with flock(2).

- `store.lock`: every process with the store open holds it shared, for as long as it has
  the store open (a command, the TUI, the local worker); `store rebuild` holds it
  exclusively, since it replaces dlscale.db itself: a process that kept the old file open
  would write into the file kept aside, and its changes would be lost.
- `change.lock`: a change of many runs at once (`import`) holds it exclusively, so that
  two of them never interleave; the other waits, then refuses in one sentence. (A rebuild
  needs no more than its exclusive `store.lock`: an import holds `store.lock` shared.)

A lock holder writes its pid and what it does into the change lock, so the sentence of the
one that waits names it. flock is released by the kernel when its holder dies, so a killed
command never leaves a lock behind. Where the home's file system has no flock (some
network file systems), dlscale goes on without it, as SQLite does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ...errors import StoreError
from .health import BUSY_S

STORE_LOCK = "store.lock"
CHANGE_LOCK = "change.lock"
_POLL_S = 0.05
WAIT_S = BUSY_S  # how long one waits for another's lock before it refuses
# A file system that cannot lock at all: dlscale goes on unlocked (SQLite's own locks still
# serialise each transaction).
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


class Lock:
    """One flock held on a lock file of the home; released by `release` or when the
    process ends."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the file releases its flock
            self.fd = None

    def say(self, what: str) -> None:
        """Write who holds it (its pid and `what`), for the sentence of one that waits."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()} {what}\n".encode(), 0)

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _open(path: Path) -> int | None:
    """The lock file, made if absent; None where it cannot be (a read-only home: nothing
    there can change, so there is nothing to keep apart)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT):
            try:  # one that exists may still be read (and flock works on a read-only file)
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                return None
        if exc.errno == errno.ELOOP:
            raise StoreError(
                f"{path} is a link; dlscale makes its lock files only in its home: remove it"
            ) from None
        raise


def take(path: Path, exclusive: bool, wait_s: float) -> Lock | None:
    """The lock, waiting up to `wait_s` for it; None if another process holds it still.
    A file system without flock gives a lock that holds nothing."""
    fd = _open(path)
    if fd is None:
        return Lock(None)
    end = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return Lock(fd)
        except BlockingIOError:
            if time.monotonic() >= end:
                os.close(fd)
                return None
            time.sleep(_POLL_S)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_LOCKS:
                return Lock(None)
            raise


def holder(home: Path) -> str:
    """Who holds the change lock, as it wrote itself there ("pid 123: import"), or ""."""
    try:
        with open(home / CHANGE_LOCK, encoding="utf-8", errors="replace") as fh:
            pid, _, what = fh.read(200).strip().partition(" ")
    except OSError:
        return ""
    return f" (pid {pid}: {what})" if pid.isdigit() and what else ""


def _held(path: Path, exclusive: bool, wait_s: float | None, refusal: Callable[[str], str]) -> Lock:
    """The lock, or StoreError: `refusal(how long it waited)`, one sentence."""
    wait_s = WAIT_S if wait_s is None else wait_s
    lock = take(path, exclusive, wait_s)
    if lock is None:
        raise StoreError(refusal(f"waited {wait_s:g} s"))
    return lock


def using(home: Path, wait_s: float | None = None) -> Lock:
    """The store held open by this process (shared): what every Store takes. Refused in
    one sentence while a rebuild replaces the store for longer than `wait_s`."""
    return _held(
        home / STORE_LOCK,
        False,
        wait_s,
        lambda waited: (
            f"the store in {home} is being rebuilt by another dlscale command"
            f"{holder(home)}; it {waited}: try again when that has ended (nothing was changed)"
        ),
    )


def replacing(home: Path, wait_s: float | None = None) -> Lock:
    """The store held by this process alone (exclusive): `store rebuild`, which replaces
    dlscale.db. Refused in one sentence while any other process has the store open."""
    lock = _held(
        home / STORE_LOCK,
        True,
        wait_s,
        lambda waited: (
            f"the store in {home} is open in another dlscale process (a command, "
            f"dlscale-tui or the local worker); the rebuild {waited}: rebuild it once they "
            "have ended (nothing was changed)"
        ),
    )
    change = take(home / CHANGE_LOCK, exclusive=True, wait_s=0)
    if change is not None:  # nobody can hold it now; it only says who replaces the store
        change.say("store rebuild")
        change.release()
    return lock


@contextlib.contextmanager
def changing(home: Path, what: str, wait_s: float | None = None) -> Iterator[None]:
    """A change of many runs at once (`what`: "import"), one at a time per home: another
    one in progress is waited for up to `wait_s`, then refused in one sentence."""
    lock = _held(
        home / CHANGE_LOCK,
        True,
        wait_s,
        lambda waited: (
            f"another dlscale command is changing the store in {home}"
            f"{holder(home)}; {what} {waited} for it: try again when it has ended (nothing was "
            "changed)"
        ),
    )
    with lock:
        lock.say(what)
        yield
