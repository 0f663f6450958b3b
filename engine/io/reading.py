"""Reading files dlscale did not write itself (specs, profiles, references, bundles, a run's
log and records, a report's manifest) without trusting what they are: only a regular file
is read, never more than a bound, and neither opening nor reading one ever blocks.

A FIFO would hang a read for ever, `/dev/zero` would fill memory, a tape device rewinds
when opened, `/proc/kmsg` is a "regular" file whose read waits for the kernel, and a link
planted in a run folder would show another file's lines as the job's; each is refused
with an OSError that names the path and what it is, so every caller's `except OSError`
already handles it. Anything but a regular file is refused before it is opened.

JSON is read here too (`load_json`): bounded in size and in depth, as TOML is (tomlfile),
so a 100,000-deep value is a one-line refusal, not a RecursionError in whatever walks it.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ...trainers.common.records import nesting

# A spec, profile or reference is a few KiB; a thousand times that is a mistake.
TEXT_LIMIT = 4 << 20
# Tables and arrays nested deeper than this in a TOML file are refused: no field of a
# spec, profile or reference nests more than 4, and deep nesting costs recursion.
TOML_DEPTH = 32
# JSON dlscale reads (bundles' members, run.json, a report's manifest) nests 4 deep at most.
JSON_DEPTH = 32

_KINDS = (
    (stat.S_ISLNK, "a link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a file"),
)


def kind_of(mode: int) -> str:
    """What a stat mode is, in words ("a FIFO"): the words every refusal of a path uses."""
    return next((what for test, what in _KINDS if test(mode)), "something else")


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


class WouldBlock(OSError):
    def __init__(self, path: str | Path) -> None:
        super().__init__(
            errno.EAGAIN,
            f"{path} cannot be read without waiting (a kernel file such as "
            "/proc/kmsg?); dlscale reads only files that are all there",
        )

    def __str__(self) -> str:
        return str(self.strerror)


class _NeverWaits:
    """A file opened non-blocking, read as a file: a read that would wait (a file of the
    kernel's whose data comes later) is WouldBlock instead of a hang or a None."""

    def __init__(self, fh: BinaryIO, path: str | Path) -> None:
        self._fh, self._path = fh, path

    def read(self, n: int = -1) -> bytes:
        try:
            data = self._fh.read(n)
        except BlockingIOError:
            raise WouldBlock(self._path) from None
        if data is None:
            raise WouldBlock(self._path)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __iter__(self):
        return iter(self._fh)

    def __enter__(self) -> _NeverWaits:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


@functools.cache
def _kernels() -> frozenset[int]:
    """The devices of the kernel's own file systems: their "regular" files are made as they
    are read, and reading one can wait (/proc/kmsg) or take what it shows from others."""
    devs = set()
    for root in ("/proc", "/sys"):
        try:
            devs.add(os.stat(root).st_dev)
        except OSError:
            pass
    return frozenset(devs)


def _refuse_special(path: str | Path, follow: bool) -> None:
    """Anything but a regular file, refused before it is opened (opening a device can act)."""
    if "\0" in str(path):  # the OS takes no such name (a ValueError, were it asked)
        raise NotRegularFile(path, "a name holding a NUL character")
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(path, "a link loop") from None
        raise
    mode = st.st_mode
    if stat.S_ISREG(mode) and st.st_dev in _kernels():
        raise NotRegularFile(path, "a file of the kernel's (/proc, /sys)")
    if stat.S_ISLNK(mode):
        raise NotRegularFile(path, "a link")
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, kind_of(mode))


def open_regular(path: str | Path, follow: bool = True) -> BinaryIO:
    """Open a regular file to read, in binary. Never blocks: anything else is refused
    before it is opened, and a FIFO swapped in meanwhile is opened without waiting for a
    writer, then refused; reads never wait (WouldBlock). follow=False refuses a link as the
    last part of the path, and a link loop anywhere: a run's own files are never links."""
    _refuse_special(path, follow)
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
            raise NotRegularFile(path, kind_of(mode))
        # left non-blocking: a regular file on a disk reads as ever; one of the kernel's
        # that would wait (/proc/kmsg) says so instead
        return _NeverWaits(os.fdopen(fd, "rb"), path)  # type: ignore[return-value]
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


class JSONError(ValueError):
    """JSON that is not, or is past the bounds: a sentence without the path (the caller
    names the file)."""


def load_json(data: bytes | str, limit: int = TEXT_LIMIT, depth: int = JSON_DEPTH) -> Any:
    """JSON text parsed within bounds: at most `limit` bytes and `depth` levels of nesting
    (JSONError, a ValueError, past either, or when it is not JSON)."""
    if len(data) > limit:
        raise JSONError(f"larger than {limit >> 20} MiB")
    try:
        value = json.loads(data)
    except RecursionError:
        raise JSONError(f"nested over {depth} deep") from None
    except UnicodeDecodeError:
        raise JSONError("not UTF-8 text") from None
    except ValueError as exc:  # JSONDecodeError; an integer of over 4,300 digits
        raise JSONError(f"not JSON: {exc}") from None
    # Nesting needs a bracket each: text with no more of them than `depth` (a history's
    # line, a record) cannot pass it, and is not walked again (a fifth of a long read).
    if isinstance(data, str):
        brackets = data.count("{") + data.count("[")
    else:
        brackets = data.count(b"{") + data.count(b"[")
    if brackets > depth and nesting(value) > depth:
        raise JSONError(f"nested over {depth} deep")
    return value


def read_json(path: str | Path, limit: int = TEXT_LIMIT, follow: bool = True) -> Any:
    """A regular file's JSON, within the bounds (OSError for the file, JSONError for it)."""
    return load_json(read_bounded(path, limit, follow), limit)
