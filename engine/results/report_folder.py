"""The folder a report goes into (`dlscale report --out`): what dlscale may remove there and
what it may write, so that a report never costs the user a file of their own.

A report lists every file it wrote in a manifest (MANIFEST, with each file's SHA-256). The
next report into the same folder removes only files that manifest lists, that are still
regular files (never a link) and whose content is still what dlscale wrote; everything
else there is the user's. A new report is first written into a hidden staging folder
inside --out, so that what it would write is known exactly before anything is moved
into place, and a refused or failed report changes nothing there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from ..errors import UserError

MANIFEST = ".dlscale-report.json"
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


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _listing(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class ReportFolder:
    """open() checks the folder and stages; write() and the stage's subfolders take the
    report's files; commit() moves them into place, removes the earlier report's stale
    files and writes the manifest; discard() (always, at the end) removes the stage."""

    def __init__(self, out: Path, ours: dict[str, str]) -> None:
        self.out = out
        self.ours = ours  # rel path -> digest: files of dlscale's earlier report
        self.stage = Path(tempfile.mkdtemp(dir=out, prefix=".dlscale-report-"))
        self.removed: list[str] = []

    @classmethod
    def open(cls, out: Path, force: bool = False) -> ReportFolder:
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: exists and is not a folder")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {out}: cannot make that folder ({exc.strerror})") from None
        for sub in SUBFOLDERS:
            path = out / sub
            if os.path.lexists(path) and not stat.S_ISDIR(os.lstat(path).st_mode):
                raise UserError(
                    f"--out {out}: {sub} is a link or a file, not a folder of "
                    f"dlscale's; a report writes nothing through it (move it "
                    "away, or choose another --out); nothing was written"
                )
        manifest = _read_manifest(out)
        if manifest is None and any(out.iterdir()) and not force:
            raise UserError(
                f"--out {out}: the folder is not empty and holds no report of "
                f"dlscale's ({MANIFEST}); choose a new or empty folder, or add "
                "--force to write into it (nothing of yours is removed or "
                "overwritten); nothing was written"
            )
        ours = {}
        for rel, digests in (manifest or {}).items():
            path = out / rel
            if _is_regular(path) and (digest := _digest(path)) in digests:
                ours[rel] = digest
        return cls(out, ours)

    def write(self, rel: str, text: str) -> Path:
        path = self.stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def subfolder(self, name: str) -> Path:
        path = self.stage / name
        path.mkdir(exist_ok=True)
        return path

    def commit(self) -> list[str]:
        """Move the staged files into --out; returns their names, relative to it."""
        staged = sorted(
            str(p.relative_to(self.stage)) for p in self.stage.rglob("*") if p.is_file()
        )
        assert all(_OURS.fullmatch(rel) for rel in staged), staged  # a bug, not the user's
        theirs = [rel for rel in staged if os.path.lexists(self.out / rel) and rel not in self.ours]
        if theirs:
            raise UserError(
                f"--out {self.out}: the report would overwrite {_listing(theirs)}, "
                "which dlscale's last report there did not write (or which changed "
                "since); move them away or choose another --out; nothing was "
                "written"
            )
        digests = {rel: _digest(self.stage / rel) for rel in staged}
        # Written first, so that a report interrupted while moving files still knows every
        # file of both reports as its own (either content is dlscale's).
        both = {rel: [d] for rel, d in self.ours.items()}
        for rel, d in digests.items():
            both.setdefault(rel, []).append(d)
        _write_manifest(self.out, both)
        for sub in SUBFOLDERS:
            if any(rel.startswith(sub + "/") for rel in staged):
                (self.out / sub).mkdir(exist_ok=True)
        for rel in staged:
            os.replace(self.stage / rel, self.out / rel)  # replaces a file of ours, no link
        for rel in sorted(set(self.ours) - set(staged)):
            if _is_regular(self.out / rel):
                (self.out / rel).unlink()
                self.removed.append(rel)
        _write_manifest(self.out, {rel: [d] for rel, d in digests.items()})
        return staged

    def discard(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)


def _read_manifest(out: Path) -> dict[str, list[str]] | None:
    """The earlier report's files as {rel path: [digests]}; None when there is none."""
    path = out / MANIFEST
    if not os.path.lexists(path):
        return None
    bad = UserError(
        f"--out {out}: {MANIFEST} is not a manifest dlscale wrote; move it away "
        "or choose another --out; nothing was written"
    )
    if not _is_regular(path):
        raise bad
    try:
        data = json.loads(path.read_text())
        files = data["files"]
        return {
            rel: [str(d) for d in digests] for rel, digests in files.items() if _OURS.fullmatch(rel)
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise bad from None


def _write_manifest(out: Path, files: dict[str, list[str]]) -> None:
    text = (
        json.dumps(
            {
                "about": "files dlscale report wrote here; the next report into this "
                "folder removes only these, and only if unchanged",
                "sha256": "of each file's content, as written",
                "files": dict(sorted(files.items())),
            },
            indent=1,
        )
        + "\n"
    )
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".dlscale-report-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from whoever reads the report
    os.replace(tmp, out / MANIFEST)  # replaces the manifest itself, never a link's target
