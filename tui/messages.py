"""Every message a worker posts back to the UI: small, typed, one per kind of news.

Workers run the engine in threads and report back one way only: the last thing a worker
does is post one of these (or EngineFailed), and a handler on the UI's side acts on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from textual.message import Message
from textual.message_pump import MessagePump

from ..engine.results.rows import ResultRow, SideBySide
from ..engine.session import FrameworkChoice, Preview, QueueRow, RunDetail, Snapshot
from .errors import describe

T = TypeVar("T")


@dataclass
class QueueRefreshed(Message):
    """A watcher tick: the current experiment's rows and whether the scheduler answered;
    `polled` False: the store's rows, read before the scheduler was asked."""

    snapshot: Snapshot
    polled: bool = True


@dataclass
class Polling(Message):
    """The backends a refresh is about to ask (the header names them before any answers)."""

    backends: tuple[str, ...]


@dataclass
class SiteLearned(Message):
    """The cluster said what it is (limits, accounting), once, at the app's start."""


@dataclass
class EngineFailed(Message):
    """An engine call failed; `what` says which ("refresh", "submit"...), `message` why."""

    what: str
    message: str


@dataclass
class PreviewReady(Message):
    """The run count and device-hours of the form as it was at `serial`."""

    preview: Preview
    serial: int


@dataclass
class FrameworksChecked(Message):
    """Whether each framework's environment works here, and why not."""

    choices: list[FrameworkChoice]


@dataclass
class ClusterChosen(Message):
    """The profile field's file was taken (`problem` None) or refused, with why;
    `changed` is False when it named the profile already in use."""

    problem: str | None = None
    changed: bool = True


@dataclass
class Submitted(Message):
    """A submission ended; `report` (engine.study.SubmitReport) says what became of each
    run, including any it could not hand to the scheduler."""

    report: Any
    spec_path: str


@dataclass
class SubmitPlanned(Message):
    """The runs a submission under way will store, as rows SUBMITTING (the Queue shows
    them before Slurm has answered)."""

    rows: list[QueueRow]


@dataclass
class SubmitFailed(Message):
    """A submission failed as a whole; `name` is the study's experiment, when it has one."""

    problem: str
    name: str | None


@dataclass
class ResultsLoaded(Message):
    experiment: str | None
    results: list[ResultRow]
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportWritten(Message):
    path: Path


@dataclass
class LogFound(Message):
    """Where the selected run's log is, and the title the log panel gives it."""

    path: Path
    title: str


@dataclass
class JobActed(Message):
    """A cancel or resubmit went through; `message` says what happened."""

    message: str


@dataclass
class LogLines(Message):
    """New lines of the followed log; `note` replaces the tail's status line when given."""

    serial: int
    lines: list[str]
    note: str | None = None


@dataclass
class DetailFound(Message):
    """One run's detail, for the queue's detail view."""

    detail: RunDetail


@dataclass
class StudyFound(Message):
    """The spec file of the study in use, for the Build screen to open."""

    path: str


@dataclass
class ProjectionDrawn(Message):
    """The study's projection past its measured scales, as chart text."""

    experiment: str | None
    chart: str
    checks: list[str]  # the held-out checks in words, "MISSED: ..." first


@dataclass
class Compared(Message):
    """Two experiments side by side (engine.results.compare.side_by_side)."""

    data: SideBySide


def ask(
    sender: MessagePump, what: str, call: Callable[[], T], reply: Callable[[T], Message | None]
) -> None:
    """A worker's one engine call: its answer posted as `reply(answer)` (None: nothing to
    say), or, where the engine raised, EngineFailed naming `what` failed and why, in one
    line (never a traceback). Every simple worker is this; those that post twice or check
    a cancellation between calls write it out."""
    try:
        answer = call()
    except Exception as exc:
        sender.post_message(EngineFailed(what, describe(exc)))
        return
    message = reply(answer)
    if message is not None:
        sender.post_message(message)
