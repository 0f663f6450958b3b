"""The Build screen's Submit button, and the submission it starts: one at a time, said step
by step while it runs, and never silent about a run it could not hand to the scheduler.

The screen decides whether its form may be submitted (checked, unchanged since, no field in
red); the button does the submitting. ctrl+r shows the Queue at once, the study's runs on it
as SUBMITTING before Slurm has said a word (the app's `submission`); the Queue says what the
submission is doing, each step (asking the controller, the cluster's limits, accounting,
the queue, sbatch) with its time so far and the most it may take (the profile's
command_timeout). A failure, however it happens, arrives as a notification, and the run
is PLANNED with the reason it was not submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from textual import work
from textual.timer import Timer
from textual.widgets import Button

from ..engine.session import LoadedSpec, QueueRow, Session, SubmitStep
from .errors import describe
from .messages import SubmitFailed, SubmitPlanned, Submitted

if TYPE_CHECKING:
    from .app import DlscaleApp

LABEL = "Submit (ctrl+r)"
STEPS_EVERY_S = 0.5  # how often the steps shown are brought up to date


@dataclass(frozen=True)
class Submission:
    """A submission under way, as the screens show it: the study, where it goes, the runs
    it will store (SUBMITTING until the store has them), what it has done and is doing."""

    experiment: str
    runs: int
    where: str
    rows: tuple[QueueRow, ...] = ()
    steps: tuple[SubmitStep, ...] = field(default_factory=tuple)

    def doing(self) -> str:
        """One line: what it is doing now, after what it did."""
        done = [str(s) for s in self.steps if s.done]
        now = [str(s) for s in self.steps if not s.done]
        said = f"submitting {self.runs} run(s) to {self.where}"
        if not self.steps:
            return f"{said}..."
        return (
            f"{said}: "
            + "; ".join(now or done[-1:])
            + (f" (before: {'; '.join(done)})" if now and done else "")
        )


class SubmitButton(Button):
    if TYPE_CHECKING:
        app: DlscaleApp  # type: ignore[assignment]

    def __init__(self, *, id: str) -> None:
        # Enabled by the first preview that finds the form submittable.
        super().__init__(LABEL, id=id, variant="primary", disabled=True)
        self.submitting = False
        self._ticker: Timer | None = None

    def submit(
        self, data: dict[str, Any], path: str, saved: bool, runs: int, loaded: LoadedSpec
    ) -> None:
        """Submit the form's `data` as the spec at `path` (written there first unless it is
        the file it was loaded from, `saved`), in a worker; `runs` is how many it plans,
        `loaded` the form as checked. The Queue is shown now, with the runs."""
        self._busy(True)
        name = loaded.spec.experiment.name
        self.app.submission = Submission(name, runs, self.app.session.where)
        self._ticker = self.set_interval(STEPS_EVERY_S, self._show_steps)
        self._submit(data, path, saved, loaded)
        self._show_queue_of(name)

    def _busy(self, busy: bool) -> None:
        self.submitting = busy
        self.disabled = busy
        self.label = "Submitting..." if busy else LABEL

    def _show_steps(self) -> None:
        now = self.app.submission
        if now is not None:  # the session's record of its commands: nothing is asked
            self.app.submission = replace(now, steps=tuple(self.app.session.submit_steps()))

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def _submit(self, data: dict[str, Any], path: str, saved: bool, loaded: LoadedSpec) -> None:
        name = loaded.spec.experiment.name
        try:
            self.post_message(SubmitPlanned(self.app.session.submitting_rows(loaded)))
            if not saved:  # unsaved choices: keep them beside the store
                Session.save_spec(data, path)
            report = self.app.session.submit(Session.load_spec(path))
        except Exception as exc:  # the engine released any run it claimed, with why
            self.post_message(SubmitFailed(describe(exc), name))
            return
        self.post_message(Submitted(report, path))

    def on_submit_planned(self, message: SubmitPlanned) -> None:
        message.stop()
        now = self.app.submission
        if now is not None:
            self.app.submission = replace(now, rows=tuple(message.rows))

    def _ended(self) -> None:
        self._busy(False)
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self.app.submission = None
        self.app.poll_now()  # its runs as the store has them now

    def on_submit_failed(self, message: SubmitFailed) -> None:
        message.stop()
        self._ended()
        self.notify(message.problem, title="not submitted", severity="error", timeout=15)

    def on_submitted(self, message: Submitted) -> None:
        message.stop()
        report, path = message.report, message.spec_path
        self._ended()
        text = f"{report.sentence()} (spec: {path})"
        for run, why in report.failed_to_submit:
            text += f"\nnot submitted: {run.label()}: {why}"
        self.notify(
            text,
            title="not all submitted" if report.failed_to_submit else "submitted",
            severity="error" if report.failed_to_submit else "information",
            timeout=15 if report.failed_to_submit else 10,
        )

    def _show_queue_of(self, name: str) -> None:
        self.app.experiment = name
        self.app.poll_now()
        self.app.action_show("queue")
