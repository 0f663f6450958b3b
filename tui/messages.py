"""Every message a worker posts back to the UI: small, typed, one per kind of news."""
from __future__ import annotations

from typing import Any

from textual.message import Message

from ..engine.session import Preview, Snapshot


class QueueRefreshed(Message):
    """A watcher tick: the current experiment's rows and whether the scheduler answered."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        super().__init__()


class EngineFailed(Message):
    """An engine call failed; `what` says which ("refresh", "submit"...), `message` why."""

    def __init__(self, what: str, message: str) -> None:
        self.what, self.message = what, message
        super().__init__()


class PreviewReady(Message):
    def __init__(self, preview: Preview, serial: int) -> None:
        self.preview, self.serial = preview, serial
        super().__init__()


class ResultsLoaded(Message):
    def __init__(self, experiment: str | None, results: list[dict[str, Any]],
                 notes: list[str] | None = None) -> None:
        self.experiment, self.results, self.notes = experiment, results, notes or []
        super().__init__()


class LogLines(Message):
    """New lines of the followed log; `note` replaces the tail's status line when given."""

    def __init__(self, serial: int, lines: list[str], note: str | None = None) -> None:
        self.serial, self.lines, self.note = serial, lines, note
        super().__init__()
