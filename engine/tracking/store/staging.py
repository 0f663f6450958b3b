"""A change of many run folders at once (an import), whole or not at all, whatever signal
ends the process that makes it.

The folders are written first under `runs/.staging/NAME.partial/`, where nothing that lists
runs looks (a run's folder is named by its 12-hex-digit id). One rename to `NAME.ready`
decides the change: before it, the change never happened (the next change removes what
was staged); after it, the change happens whole: its store rows (`plan.json`) are written
in one transaction, then each folder is renamed into `runs/` (a folder it replaces goes
to `.old/` inside the staging folder), then the staging folder goes. A process killed
anywhere after the decision leaves a `.ready` folder, which the next change (an import, a
rebuild) finishes first: the rows again (an import's transaction is idempotent), the
folders not yet moved, then the rest. A `store rebuild` finishes the moves and reads the
folders, so it never sees part of an import, nor an import that did not happen.

Only one change runs at a time per home (store_locks.py), so nothing here races another
change of the same folders.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...paths import own_folder

STAGING = ".staging"  # under runs/
PARTIAL, READY, GONE = ".partial", ".ready", ".gone"
PLAN = "plan.json"
OLD = ".old"
_RUN = re.compile(r"[0-9a-f]{12}")

Apply = Callable[[dict[str, Any]], None]  # writes a plan's rows to the store, idempotent


class Staged:
    """One change's staging folder."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def begin(cls, runs_dir: Path, what: str) -> Staged:
        root = runs_dir / STAGING
        root.mkdir(parents=True, exist_ok=True)
        own_folder(root)  # a link in its place is refused: nothing is written through it
        path = root / f"{what}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
        path.mkdir()
        return cls(path)

    @property
    def runs_dir(self) -> Path:
        return self.path.parent.parent

    def folder(self, run_id: str) -> Path:
        """Where run `run_id`'s folder is written before it is published."""
        return self.path / run_id

    def decide(self, plan: dict[str, Any]) -> None:
        """Write the rows the change makes, then the one rename after which it happens."""
        with open(self.path / PLAN, "w", encoding="utf-8") as fh:
            json.dump(plan, fh, allow_nan=False)
            fh.flush()
            os.fsync(fh.fileno())
        ready = self.path.with_name(self.path.name[: -len(PARTIAL)] + READY)
        os.rename(self.path, ready)
        self.path = ready

    def finish(self, apply: Apply | None) -> None:
        """The decided change carried out (again, if it was interrupted): its rows by
        `apply` (None: a rebuild, which reads the folders instead), its folders moved into
        place, its staging folder removed."""
        if apply is not None:
            with open(self.path / PLAN, encoding="utf-8") as fh:
                apply(json.load(fh))
        old = self.path / OLD
        for staged in sorted(self.path.iterdir()):
            if not (staged.is_dir() and _RUN.fullmatch(staged.name)):
                continue
            target = own_folder(self.runs_dir / staged.name)  # never through a link
            if target.exists():
                old.mkdir(exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(old / staged.name)  # a replaced folder moved aside before
                os.rename(target, old / staged.name)
            os.rename(staged, target)
        self.remove()

    def abandon(self) -> None:
        """The change not made: nothing of it stays."""
        self.remove()

    def remove(self) -> None:
        """The staging folder gone: first renamed to what no one finishes, so a process
        killed while removing it leaves nothing that could be taken for a decided change."""
        gone = self.path.with_name(self.path.name.rsplit(".", 1)[0] + GONE)
        if self.path != gone:
            os.rename(self.path, gone)
            self.path = gone
        shutil.rmtree(gone, ignore_errors=True)
        with contextlib.suppress(OSError):
            gone.parent.rmdir()  # the last change's: runs/ as it was before any


@contextlib.contextmanager
def whole() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while the block runs (a change's decided part:
    its rows committed and its folders moved, or a store swapped), then delivered as they
    would have been. SIGKILL cannot be held back: what it interrupts, `settle` finishes.
    Only the main thread can hold signals; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for held_signal, handler in before.items():
            signal.signal(held_signal, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(caught):
            os.kill(os.getpid(), signum)  # as it would have been: its handler, or the end


def settle(runs_dir: Path, apply: Apply | None) -> None:
    """What earlier changes left (killed part way): each decided one finished, every other
    removed. Called by the next change, holding the home's change lock."""
    root = own_folder(runs_dir / STAGING)
    try:
        found = sorted(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return
    for path in found:
        staged = Staged(path)
        if path.name.endswith(READY) and path.is_dir() and not path.is_symlink():
            staged.finish(apply)
        elif path.is_dir() and not path.is_symlink():
            staged.remove()
        else:
            with contextlib.suppress(OSError):
                path.unlink()
