"""The Build screen's Submit button, and the submission it starts: one at a time, said when
it starts and when it ends, and never silent about a run it could not hand to the scheduler.

The screen decides whether its form may be submitted (checked, unchanged since, no field in
red); the button does the submitting. A submission can take minutes (sbatch retried while a
controller is slow); meanwhile the queue keeps refreshing and shows its runs as SUBMITTING,
a second ctrl+r says a submission is under way, and a failure, however it happens, arrives
as a notification while the queue shows the run as PLANNED with the reason it was not
submitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Button

from ..engine.session import Session
from .errors import describe
from .messages import SubmitFailed, Submitted

if TYPE_CHECKING:
    from .app import DlscaleApp

LABEL = "Submit (ctrl+r)"


class SubmitButton(Button):
    if TYPE_CHECKING:
        app: DlscaleApp  # type: ignore[assignment]

    def __init__(self, *, id: str) -> None:
        # Enabled by the first preview that finds the form submittable.
        super().__init__(LABEL, id=id, variant="primary", disabled=True)
        self.submitting = False

    def submit(self, data: dict[str, Any], path: str, saved: bool, runs: int) -> None:
        """Submit the form's `data` as the spec at `path` (written there first unless it is
        the file it was loaded from, `saved`), in a worker; `runs` is how many it plans."""
        self._busy(True)
        where = self.app.session.where
        ask = (
            f": asking the controller first (at most {self.app.session.reach_s:.0f} s)"
            if where.startswith("slurm")
            else "..."
        )
        self.notify(f"submitting {runs} run(s) to {where}{ask}")
        self._submit(data, path, saved)

    def _busy(self, busy: bool) -> None:
        self.submitting = busy
        self.disabled = busy
        self.label = "Submitting..." if busy else LABEL

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def _submit(self, data: dict[str, Any], path: str, saved: bool) -> None:
        name = (data.get("experiment") or {}).get("name")
        try:
            if not saved:  # unsaved choices: keep them beside the store
                Session.save_spec(data, path)
            report = self.app.session.submit(Session.load_spec(path))
        except Exception as exc:  # the engine released any run it claimed, with why
            self.post_message(SubmitFailed(describe(exc), name))
            return
        self.post_message(Submitted(report, path))

    def on_submit_failed(self, message: SubmitFailed) -> None:
        message.stop()
        self._busy(False)
        self.notify(message.problem, title="not submitted", severity="error", timeout=15)
        self._show_queue_of(message.name)

    def on_submitted(self, message: Submitted) -> None:
        message.stop()
        report, path = message.report, message.spec_path
        self._busy(False)
        name = report.all_runs[0].experiment if report.all_runs else None
        text = f"{report.sentence()} (spec: {path})"
        for run, why in report.failed_to_submit:
            text += f"\nnot submitted: {run.label()}: {why}"
        self.notify(
            text,
            title="not all submitted" if report.failed_to_submit else "submitted",
            severity="error" if report.failed_to_submit else "information",
            timeout=15 if report.failed_to_submit else 10,
        )
        self._show_queue_of(name)

    def _show_queue_of(self, name: str | None) -> None:
        # Also after a failure: the study's runs are in the store, shown with their reason.
        if name:
            self.app.experiment = name
        self.app.poll_now()
        self.app.action_show("queue")
