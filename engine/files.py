"""Reading files dlscale did not write itself (specs, profiles, references, a run's log and
records) without trusting what they are: only a regular file is read, never more than a
bound, and opening one never blocks.

A FIFO would hang a read for ever, `/dev/zero` would fill memory, and a link planted in a
run folder would show another file's lines as the job's; each is refused with an OSError
that names the path and what it is, so every caller's `except OSError` already handles it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

# A spec, profile or reference is a few KiB; a thousand times that is a mistake.
TEXT_LIMIT = 4 << 20
# Tables and arrays nested deeper than this in a TOML file are refused: no field of a
# spec, profile or reference nests more than 4, and deep nesting costs recursion.
TOML_DEPTH = 32

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """A path that is not a regular file (or a link where none is followed)."""

    def __init__(self, path: str | Path, what: str) -> None:
        super().__init__(errno.EINVAL, f"{path} is {what}, not a regular file")
        self.what = what

    def __str__(self) -> str:
        return str(self.strerror)


class FileTooLarge(OSError):
    def __init__(self, path: str | Path, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is larger than {limit >> 20} MiB")

    def __str__(self) -> str:
        return str(self.strerror)


def open_regular(path: str | Path, follow: bool = True) -> BinaryIO:
    """Open a regular file to read, in binary. Never blocks (a FIFO is opened without
    waiting for a writer, then refused). follow=False refuses a link as the last part of
    the path, and a link loop anywhere: a run's own files are never links."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            what = "a link" if not follow and os.path.islink(path) else "a link loop"
            raise NotRegularFile(path, what) from None
        if exc.errno == errno.ENXIO:  # a socket
            raise NotRegularFile(path, "a socket") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, next((w for test, w in _KINDS if test(mode)), "special"))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | Path, limit: int = TEXT_LIMIT, follow: bool = True) -> bytes:
    """A regular file's bytes, at most `limit` of them (FileTooLarge past that)."""
    with open_regular(path, follow) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data


def read_text(path: str | Path, limit: int = TEXT_LIMIT, follow: bool = True) -> str:
    """read_bounded as UTF-8 text (UnicodeDecodeError, a ValueError, when it is not)."""
    return read_bounded(path, limit, follow).decode("utf-8")
