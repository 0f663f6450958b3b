"""The one writer: every file dlscale writes outside its store goes through here (reports,
bundles, JUnit, MLLOG, figures, specs saved from the TUI, fetched and sampled data).

Its promises, for every such file:
- only a regular file is written, and never through a link: a link, a FIFO, a device, a
  socket or a folder where the file goes is refused, and left as it was;
- the file is written under a temporary name in its own folder, opened by descriptor, and
  renamed into place when whole, so a reader never sees half of it; what is in its place
  is looked at again just before (a link swapped in meanwhile is refused, never followed);
- on any error (a full disk, a read-only folder, Ctrl-C) the temporary file is removed;
- a refusal or a failure is an `OutputError`: one sentence naming the option, the path and
  why, exit status 2, nothing written.

A file that grows (`check --history`, lines appended) keeps the same rules but the
rename: each line is one write, a missing final newline is repaired first, and what a
failed append added is cut off again.

A folder dlscale writes into (report --out, export mllog --out, data fetch --dir) is an
`OutputFolder`: opened once, refusing a link in its place, and written only by descriptor.
`check_file` and `check_folder` are the same rules asked before any work is done, for the
command line's options (engine/cli/options.py: OutputPath).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import UserError
from .reading import kind_of
from .text import printable

PART = ".part"  # the ending of every temporary file the writer makes


class OutputError(UserError):
    """An output refused or not written: one sentence, exit status 2, nothing left."""

    @classmethod
    def of(cls, option: str, path: str | Path, exc: OSError) -> OutputError:
        """The sentence for a write that failed (a full disk, a read-only folder)."""
        return _failed(option, path, exc)


def _named(option: str, path: str | Path) -> str:
    return f"{option} {printable(str(path))}" if option else printable(str(path))


def _link_note(path: str | Path, dir_fd: int | None = None, name: str | None = None) -> str:
    try:
        target = os.readlink(name if name is not None else path, dir_fd=dir_fd)
    except OSError:
        return ""
    return f" to {printable(target)}"


def _refuse_kind(
    option: str, path: str | Path, mode: int, target: str = "", want: str = "a regular file"
) -> OutputError:
    return OutputError(
        f"{_named(option, path)} is {kind_of(mode)}{target}, not {want}: dlscale writes nothing "
        "through a link or over anything else; nothing was written"
    )


def _failed(option: str, path: str | Path, exc: OSError) -> OutputError:
    why = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        why = "the disk is full"
    return OutputError(f"{_named(option, path)}: cannot be written ({why}); nothing was written")


# --- checks before any work ----------------------------------------------------------


def _writable_folder(option: str, path: Path, folder: Path) -> None:
    """`folder` (where `path` goes) exists as a folder and can be written."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        raise OutputError(
            f"{_named(option, path)}: its folder {printable(str(folder))} does not exist; "
            "nothing was written"
        ) from None
    except OSError as exc:
        raise _failed(option, path, exc) from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(
            f"{_named(option, path)}: {printable(str(folder))} is not a folder; nothing was written"
        )
    if not os.access(folder, os.W_OK):  # EROFS too: access(2) knows a read-only mount
        raise OutputError(
            f"{_named(option, path)}: its folder {printable(str(folder))} cannot be written "
            "(read-only, or not yours); nothing was written"
        )


def _mode(option: str, path: Path) -> int | None:
    """What is at `path` (its lstat mode), or None where nothing is."""
    if "\0" in str(path):  # the OS takes no such name (a ValueError, were it asked)
        raise OutputError(
            f"{_named(option, path)}: a name holding a NUL character; nothing was written"
        )
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _failed(option, path, exc) from None


def check_file(path: str | Path, option: str = "", replace: bool = True) -> Path:
    """An output file's path, checked as the writer will: absent or a regular file (only
    when `replace`), never a link or anything else, in a folder that can be written."""
    path = Path(path)
    mode = _mode(option, path)
    if mode is not None:
        if not stat.S_ISREG(mode):
            raise _refuse_kind(option, path, mode, _link_note(path) if stat.S_ISLNK(mode) else "")
        if not replace:
            raise OutputError(
                f"{_named(option, path)}: already exists; name a new file (nothing is overwritten)"
            )
    _writable_folder(option, path, path.parent)
    return path


def check_folder(path: str | Path, option: str = "", writable: bool = True) -> Path:
    """An output folder's path: a folder (never a link to one) or absent, where the first
    folder that exists on the way to it can be written (unless not `writable`: what is
    there, only)."""
    path = Path(path)
    mode = _mode(option, path)
    if mode is not None and not stat.S_ISDIR(mode):
        note = _link_note(path) if stat.S_ISLNK(mode) else ""
        raise _refuse_kind(option, path, mode, note, "a folder")
    if not writable:
        return path
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if existing == path:
        if not os.access(path, os.W_OK):
            raise OutputError(
                f"{_named(option, path)}: cannot be written (read-only, or not yours); "
                "nothing was written"
            )
        return path
    _writable_folder(option, path, existing)
    return path


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same device and inode where both exist (a
    hard link, a link, `./x` and `x`), else the same resolved path (neither made yet)."""
    with contextlib.suppress(OSError, ValueError):
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    return os.path.realpath(a) == os.path.realpath(b)


# The store's own files in its home: no output goes over them or into its run folders.
STORE_FILES = ("dlscale.db", "dlscale.db-wal", "dlscale.db-shm", "dlscale.db-journal")
STORE_FOLDERS = ("runs", "specs")


def check_apart(
    path: str | Path, option: str, others: list[tuple[str, Path, bool]], home: Path | None
) -> None:
    """An output is none of its command's inputs, nor another of its outputs, nor part of
    the store: `others` are (option, path, read) of the command's other paths, `home` the
    store's. `check --junit` named at the history, the spec or the baseline would
    overwrite the file it was given to read."""
    path = Path(path)
    for name, other, read in others:
        if _same(path, other):
            what = "reads" if read else "also writes"
            raise OutputError(
                f"{_named(option, path)} is the file {_named(name, other)} names, which this "
                f"command {what}: dlscale writes no output over its own inputs or outputs; "
                "name another file (nothing was written)"
            )
    if home is None:
        return
    real = Path(os.path.realpath(path))
    for name in STORE_FILES:
        if _same(path, home / name):
            break
    else:
        folders = [Path(os.path.realpath(home / f)) for f in STORE_FOLDERS]
        if not any(real == f or f in real.parents for f in folders):
            return
    raise OutputError(
        f"{_named(option, path)} is part of the store in {printable(str(home))} (its database "
        "or its run folders): dlscale writes no output there; name another place (nothing "
        "was written)"
    )


# --- writing -------------------------------------------------------------------------


class OutputFolder:
    """A folder dlscale writes files into, opened once by descriptor: its files are written
    by `writing` and `write`, never by resolving its path again."""

    def __init__(self, path: Path, fd: int, option: str = "", made: list[Path] | None = None):
        self.path, self.fd, self.option = path, fd, option
        self.made = made or []  # the folders open() made, deepest first

    @classmethod
    def open(
        cls, path: str | Path, option: str = "", make: bool = True, follow: bool = False
    ) -> OutputFolder:
        """Open (`make`: make first, with its parents) the folder; a link (unless `follow`:
        the folder of a file the user named), a file or anything else in its place is
        refused (OutputError)."""
        path = Path(path)
        if not follow:
            check_folder(path, option)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        made = []
        if make:
            missing = path
            while not os.path.lexists(missing) and missing != missing.parent:
                made.append(missing)
                missing = missing.parent
        try:
            if make:
                path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                mode = os.lstat(path).st_mode
                raise _refuse_kind(option, path, mode, want="a folder") from None
            raise _failed(option, path, exc) from None
        return cls(path, fd, option, made)

    @classmethod
    def at(cls, path: Path, fd: int, option: str = "") -> OutputFolder:
        """A folder already open (a report's staging folder): `fd` stays the caller's."""
        return cls(path, os.dup(fd), option)

    def close(self, failed: bool = False) -> None:
        """Close it; when the work `failed`, the folders open() made go again if nothing
        was left in them (rmdir takes only an empty folder)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for folder in self.made if failed else []:
            try:
                os.rmdir(folder)
            except OSError:
                break

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(failed=kind is not None)

    def _check(self, name: str, replace: bool) -> None:
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        where = self.path / name
        if not stat.S_ISREG(mode):
            note = _link_note(where, self.fd, name) if stat.S_ISLNK(mode) else ""
            raise _refuse_kind(self.option, where, mode, note)
        if not replace:
            raise OutputError(
                f"{_named(self.option, where)}: already exists; name a new file (nothing is "
                "overwritten)"
            )

    @contextlib.contextmanager
    def writing(self, name: str, replace: bool = True) -> Iterator[BinaryIO]:
        """A binary file to write `name` through: a temporary file in this folder, renamed
        to `name` once the block ends without an error, removed when it raises."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a file name")  # a bug: callers name files
        where = self.path / name
        self._check(name, replace)
        tmp = f".{name[:64]}.{os.getpid()}.{secrets.token_hex(4)}{PART}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o666, dir_fd=self.fd)
        except OSError as exc:
            raise _failed(self.option, where, exc) from None
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh  # type: ignore[misc]
                fh.flush()
                os.fsync(fh.fileno())
            self._check(name, replace)  # what is there now: a link swapped in is refused
            if replace:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:  # fails if the name was taken meanwhile: never overwrites
                os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
                os.unlink(tmp, dir_fd=self.fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            if isinstance(exc, OSError) and not isinstance(exc, OutputError):
                if exc.errno == errno.EEXIST and not replace:
                    raise OutputError(
                        f"{_named(self.option, where)}: already exists; name a new file "
                        "(nothing is overwritten)"
                    ) from None
                if exc.errno in (errno.EISDIR, errno.ENOTDIR):  # a folder there now
                    mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
                    raise _refuse_kind(self.option, where, mode) from None
                raise _failed(self.option, where, exc) from None
            raise

    def write(self, name: str, data: bytes | str, replace: bool = True) -> Path:
        with self.writing(name, replace) as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        return self.path / name

    def append(self, name: str, lines: list[str]) -> Path:
        """Lines added to the end of `name` (made if absent), each with one write (O_APPEND:
        two writers at once interleave lines, not bytes), then synced to the disk; a
        regular file only, never through a link. A last line without its newline (a file
        cut short, or edited by hand) is ended first, so no line is glued to it. On an
        error (a full disk, at the write or at the sync) what this call added is cut off
        again, and a file it made is removed: the lines are all there, or none is."""
        where = self.path / name
        self._check(name, replace=True)
        existed = os.path.lexists(where)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(name, flags | os.O_CLOEXEC, 0o666, dir_fd=self.fd)
        except OSError as exc:  # ELOOP: a link swapped in; ENXIO: a FIFO no one reads
            raise _failed(self.option, where, exc) from None
        start = None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse_kind(self.option, where, st.st_mode)
            start = st.st_size
            if start and lines and os.pread(fd, 1, start - 1) != b"\n":
                lines = ["\n" + lines[0], *lines[1:]]
            for line in lines:
                data = line.encode()
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except BaseException as exc:
            if start is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                    if not existed:
                        os.unlink(name, dir_fd=self.fd)
            if isinstance(exc, OSError) and not isinstance(exc, OutputError):
                raise _failed(self.option, where, exc) from None
            raise
        finally:
            os.close(fd)
        return where

    def place_folder(self, src: str | Path, name: str) -> Path:
        """Rename a folder made elsewhere on the same disk (a download unpacked, a sample
        written) to `name` in this folder, where nothing is yet (or an empty folder)."""
        where = self.path / name
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISDIR(mode):
            raise _refuse_kind(self.option, where, mode, want="a folder")
        try:
            os.rename(src, name, dst_dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise OutputError(
                    f"{_named(self.option, where)}: exists and is not empty; name a new "
                    "folder (nothing was written)"
                ) from None
            raise _failed(self.option, where, exc) from None
        return where


@contextlib.contextmanager
def writing(path: str | Path, option: str = "", replace: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write `path` through (OutputFolder.writing in its folder, which
    must exist)."""
    path = Path(path)
    check_file(path, option, replace)
    folder = OutputFolder.open(path.parent, option, make=False, follow=True)
    try:
        with folder.writing(path.name, replace) as fh:
            yield fh
    finally:
        folder.close()


def write_file(path: str | Path, data: bytes | str, option: str = "", replace: bool = True) -> Path:
    """Write `data` to `path` whole, as `writing` does; returns the path."""
    with writing(path, option, replace) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def append_lines(path: str | Path, lines: list[str], option: str = "") -> Path:
    """Add `lines` to the end of the file `path` (OutputFolder.append in its folder)."""
    path = Path(path)
    check_file(path, option)
    with OutputFolder.open(path.parent, option, make=False, follow=True) as folder:
        return folder.append(path.name, lines)
