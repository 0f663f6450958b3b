"""The folder a report goes into (`dlscale report --out`): what dlscale may remove there and
what it may write, so that a report never costs the user a file of their own.

A report lists every file it wrote in a manifest (MANIFEST, with each file's SHA-256). The
next report into the same folder removes only files that manifest lists, that are still
regular files (never a link) and whose content is still what dlscale wrote; everything
else there is the user's. A new report is first written into a hidden staging folder
inside --out, so that what it would write is known exactly before anything is moved
into place, and a refused or failed report changes nothing there.

Nothing is written through a link, even one swapped in while the report renders: --out is
opened once, and its subfolders are opened without following links (O_NOFOLLOW) when the
files are moved in, every move and removal by directory descriptor (os.replace and unlink
with dir_fd), so a path is never resolved again. The staging folder is locked (flock) for
as long as its report lives and holds a marker file: one left by a report that was killed
(unlocked, marked) is dlscale's and the next report removes it; so is an unlocked, empty
one named as mkdtemp names a stage, left by a report killed before it marked it (rmdir
takes only an empty folder).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...errors import UserError
from ...io.outputs import OutputFolder
from ...io.reading import load_json

MANIFEST = ".dlscale-report.json"
STAGE_PREFIX = ".dlscale-report-"
_STAGE_MARK = ".dlscale-stage"  # inside a staging folder: it is dlscale's
_STAGE_NAME = re.compile(re.escape(STAGE_PREFIX) + r"[a-z0-9_]{8}")  # tempfile.mkdtemp's names
SUBFOLDERS = ("figures", "mllog")
# The only names a report writes. A manifest is a file in the user's folder that anyone
# can edit: an entry outside these shapes (`../x`, `notes.txt`) is never acted on.
_OURS = re.compile(
    r"(report\.(md|html)|results\.(csv|json)|reruns\.json|reference\.json|projection\.json|"
    r"figures/[A-Za-z0-9_.-]+\.png|mllog/[A-Za-z0-9_.-]+\.mllog)"
)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _is_regular(path: Path | str, dir_fd: int | None = None) -> bool:
    try:
        return stat.S_ISREG(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _digest_at(dir_fd: int, name: str) -> str | None:
    """The digest of a regular file in a folder opened as dir_fd, never through a link."""
    try:
        # O_NONBLOCK: a FIFO in a file's place is not waited on
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """A folder's descriptor, refusing a link in its place (OSError ELOOP / ENOTDIR)."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def _remove_leftover_stages(out_fd: int) -> None:
    """Staging folders of reports that were killed: marked as dlscale's and no longer
    locked by a live report. Anything else of that name is left alone."""
    for name in os.listdir(out_fd):
        if not name.startswith(STAGE_PREFIX) or name == MANIFEST:
            continue
        try:
            fd = _open_dir(name, out_fd)
        except OSError:
            continue  # not a folder (or a link): not ours to judge
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live report's
            if _is_regular(_STAGE_MARK, fd):
                _rmtree_at(fd)
            elif not _STAGE_NAME.fullmatch(name):
                continue
            # Unmarked but named as mkdtemp names a stage: a report killed between making
            # its stage and marking it left it empty; rmdir takes only an empty folder.
            os.rmdir(name, dir_fd=out_fd)
        except OSError:
            pass  # leave it; it blocks nothing
        finally:
            os.close(fd)


def _rmtree_at(fd: int) -> None:
    """Empty the folder open as fd, never following a link (a link is removed itself)."""
    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = _open_dir(name, fd)
            try:
                _rmtree_at(sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)


def _make_stage(out: Path, out_fd: int) -> tuple[Path, int]:
    """A new staging folder, locked (held while this report lives) and marked. Another
    report's cleanup may take it while it is still empty and unlocked: then make another."""
    for _ in range(100):
        name = Path(tempfile.mkdtemp(dir=f"/proc/self/fd/{out_fd}", prefix=STAGE_PREFIX)).name
        try:
            fd = _open_dir(name, out_fd)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.close(os.open(_STAGE_MARK, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        except FileNotFoundError:  # removed between mkdtemp and the lock
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return out / name, fd
    raise UserError(f"--out {out}: could not make a staging folder there; nothing was written")


def _listing(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class ReportFolder:
    """open() checks the folder and stages; write() and the stage's subfolders take the
    report's files; commit() moves them into place, removes the earlier report's stale
    files and writes the manifest; discard() (always, at the end) removes the stage."""

    def __init__(self, output: OutputFolder, ours: dict[str, str]) -> None:
        self.output = output  # --out as it was opened: never resolved by path again
        self.out, self.out_fd = output.path, output.fd
        self.committed = False
        self.ours = ours  # rel path -> digest: files of dlscale's earlier report
        self.stage, self.stage_fd = _make_stage(self.out, self.out_fd)
        self.removed: list[str] = []

    @classmethod
    def open(cls, out: Path, force: bool = False) -> ReportFolder:
        # the one writer's folder: made if need be, a link or anything else in its place
        # refused, opened once
        output = OutputFolder.open(out, "--out")
        try:
            return cls._open(output, force)
        except BaseException:
            output.close(failed=True)
            raise

    @classmethod
    def _open(cls, output: OutputFolder, force: bool) -> ReportFolder:
        out, out_fd = output.path, output.fd
        for sub in SUBFOLDERS:
            _check_subfolder(out, out_fd, sub)
        _remove_leftover_stages(out_fd)
        manifest = _read_manifest(out, out_fd)
        if manifest is None and os.listdir(out_fd) and not force:
            raise UserError(
                f"--out {out}: the folder is not empty and holds no report of "
                f"dlscale's ({MANIFEST}); choose a new or empty folder, or add "
                "--force to write into it (nothing of yours is removed or "
                "overwritten); nothing was written"
            )
        ours = {}
        for rel, digests in (manifest or {}).items():
            if (digest := _digest_rel(out_fd, rel)) in digests:
                ours[rel] = digest
        return cls(output, ours)

    def write(self, rel: str, text: str) -> Path:
        """A file of the report into the stage, by the one writer, through no link (the
        stage is dlscale's, but it sits in a folder the user writes to)."""
        sub, _, name = rel.rpartition("/")
        with self.subfolder(sub) if sub else OutputFolder.at(self.stage, self.stage_fd) as f:
            return f.write(name, text)

    def subfolder(self, name: str) -> OutputFolder:
        """A subfolder of the stage (made here, never a link), for the one writer; the
        caller closes it."""
        return OutputFolder(self.stage / name, self._stage_subfolder(name), "--out")

    def _stage_subfolder(self, name: str) -> int:
        try:
            os.mkdir(name, 0o755, dir_fd=self.stage_fd)
        except FileExistsError:
            pass
        try:
            return _open_dir(name, self.stage_fd)
        except OSError:
            raise UserError(self._stage_changed()) from None

    def _stage_changed(self, sub: str = "") -> str:
        return (
            f"--out {self.out}: the report's staging folder {self.stage.name} was changed "
            "while the report was written; nothing was moved into place"
        )

    def commit(self) -> list[str]:
        """Move the staged files into --out; returns their names, relative to it."""
        fds: dict[str, int] = {}  # "" (--out), a subfolder's name: its descriptor
        try:
            staged = self._commit(fds)
            self.committed = True
            return staged
        finally:
            for sub, fd in fds.items():
                if sub:
                    os.close(fd)

    def _commit(self, fds: dict[str, int]) -> list[str]:
        staged_fds = _open_subfolders(self.stage_fd, self._stage_changed)
        try:
            staged = sorted(
                f"{sub}/{name}" if sub else name
                for sub, fd in staged_fds.items()
                for name in os.listdir(fd)
                if name != _STAGE_MARK and _is_regular(name, fd)
            )
            assert all(_OURS.fullmatch(rel) for rel in staged), staged  # a bug, not the user's
            # --out's own, opened now without following a link
            fds.update(
                _open_subfolders(
                    self.out_fd,
                    lambda sub: (
                        f"--out {self.out}: {sub} became a link or a file while the report "
                        "was written; a report writes nothing through it; nothing was moved "
                        "into place"
                    ),
                )
            )
            theirs = [rel for rel in staged if rel not in self.ours and _lexists_rel(fds, rel)]
            if theirs:
                raise UserError(
                    f"--out {self.out}: the report would overwrite {_listing(theirs)}, "
                    "which dlscale's last report there did not write (or which changed "
                    "since); move them away or choose another --out; nothing was "
                    "written"
                )
            digests = {rel: _digest_rel(staged_fds, rel) or "" for rel in staged}
            # Written first, so that a report interrupted while moving files still knows
            # every file of both reports as its own (either content is dlscale's).
            both = {rel: [d] for rel, d in self.ours.items()}
            for rel, d in digests.items():
                both.setdefault(rel, []).append(d)
            self._write_manifest(both)
            for sub in SUBFOLDERS:
                if sub not in fds and any(rel.startswith(sub + "/") for rel in staged):
                    os.mkdir(sub, dir_fd=self.out_fd)
                    fds[sub] = _open_dir(sub, self.out_fd)
            for rel in staged:
                sub, _, name = rel.rpartition("/")
                # replaces a file of ours, or a link itself: never what a link points at
                os.replace(name, name, src_dir_fd=staged_fds[sub], dst_dir_fd=fds[sub])
            for rel in sorted(set(self.ours) - set(staged)):
                sub, _, name = rel.rpartition("/")
                if sub in fds and _digest_at(fds[sub], name) == self.ours[rel]:
                    os.unlink(name, dir_fd=fds[sub])
                    self.removed.append(rel)
            self._write_manifest({rel: [d] for rel, d in digests.items()})
            return staged
        finally:
            for sub, fd in staged_fds.items():
                if sub:
                    os.close(fd)

    def _write_manifest(self, files: dict[str, list[str]]) -> None:
        """Written in the stage, then renamed over the manifest (never a link's target)."""
        text = (
            json.dumps(
                {
                    "about": "files dlscale report wrote here; the next report into this "
                    "folder removes only these, and only if unchanged",
                    "sha256": "of each file's content, as written",
                    "files": dict(sorted(files.items())),
                },
                indent=1,
                allow_nan=False,
            )
            + "\n"
        )
        with OutputFolder.at(self.out, self.out_fd, "--out") as out:
            out.write(MANIFEST, text)

    def discard(self) -> None:
        try:
            _rmtree_at(self.stage_fd)
            os.rmdir(self.stage.name, dir_fd=self.out_fd)
        except OSError:
            pass  # a leftover the next report removes
        finally:
            os.close(self.stage_fd)  # the lock goes with it
            self.output.close(failed=not self.committed)  # a folder it made, if empty


def _open_subfolders(dir_fd: int, why: Callable[[str], str]) -> dict[str, int]:
    """{"": dir_fd, SUB: its descriptor} for the SUBFOLDERS that exist there; UserError(why
    of that subfolder) where one is a link or a file."""
    fds = {"": dir_fd}
    for sub in SUBFOLDERS:
        try:
            fds[sub] = _open_dir(sub, dir_fd)
        except FileNotFoundError:
            pass
        except OSError:
            for opened in list(fds.values())[1:]:
                os.close(opened)
            raise UserError(why(sub)) from None
    return fds


def _check_subfolder(out: Path, out_fd: int, sub: str) -> None:
    try:
        st = os.stat(sub, dir_fd=out_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(
            f"--out {out}: {sub} is a link or a file, not a folder of "
            f"dlscale's; a report writes nothing through it (move it "
            "away, or choose another --out); nothing was written"
        )


def _digest_rel(fds: int | dict[str, int], rel: str) -> str | None:
    """The digest of --out's (or the stage's) file `rel`, through no link at any step."""
    sub, _, name = rel.rpartition("/")
    if isinstance(fds, dict):
        return _digest_at(fds[sub], name) if sub in fds else None
    if not sub:
        return _digest_at(fds, name)
    try:
        fd = _open_dir(sub, fds)
    except OSError:
        return None
    try:
        return _digest_at(fd, name)
    finally:
        os.close(fd)


def _lexists_rel(fds: dict[str, int], rel: str) -> bool:
    sub, _, name = rel.rpartition("/")
    if sub not in fds:
        return False
    try:
        os.stat(name, dir_fd=fds[sub], follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _read_manifest(out: Path, out_fd: int) -> dict[str, list[str]] | None:
    """The earlier report's files as {rel path: [digests]}; None when there is none."""
    try:
        os.stat(MANIFEST, dir_fd=out_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    bad = UserError(
        f"--out {out}: {MANIFEST} is not a manifest dlscale wrote; move it away "
        "or choose another --out; nothing was written"
    )
    try:
        fd = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=out_fd)
    except OSError:
        raise bad from None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise bad
            data = load_json(fh.read((1 << 24) + 1), 1 << 24)  # bounded (engine/io/reading.py)
        files = data["files"]
        return {
            rel: [str(d) for d in digests] for rel, digests in files.items() if _OURS.fullmatch(rel)
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise bad from None
