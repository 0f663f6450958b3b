"""Submitting the Build screen's study: one submission at a time, said when it starts and
when it ends, and never silent about a run it could not hand to the scheduler.

A submission can take minutes (sbatch retried while a controller is slow); meanwhile the
queue keeps refreshing and shows its runs as SUBMITTING, a second ctrl+r says a
submission is under way, and a failure, however it happens, arrives as a notification
while the queue shows the run as PLANNED with the reason it was not submitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Button, Input

from ..engine.session import Session
from .errors import describe
from .messages import SubmitFailed, Submitted
from .screens import AppScreen

if TYPE_CHECKING:
    from ..engine.session import Preview


class SubmitFromForm(AppScreen):
    """BuildScreen's base: submitting uses its form (read_form, preview, _spec_name)."""

    if TYPE_CHECKING:
        preview: Preview | None
        loaded_from: str | None
        submit_when_checked: bool

        @property
        def checking(self) -> bool: ...

        def read_form(self) -> tuple[dict[str, Any], dict[str, str]]: ...
        def _spec_name(self, data: dict[str, Any]) -> str: ...

    submitting = False

    def action_submit(self) -> None:
        if self.submitting:
            self.notify(
                "a submission is under way; the queue (F3) shows its runs as "
                "SUBMITTING, and a message says when it is done",
                severity="warning",
            )
            return
        if self.checking:  # the last keys are being checked: submit once they pass
            self.submit_when_checked = True
            return
        data, bad = self.read_form()
        p = self.preview
        if (
            bad
            or p is None
            or not p.ok
            or self.preview_stale(data)
            or self.query_one("#profile", Input).has_class("invalid")
        ):
            self.notify(
                "the study cannot be submitted yet: see the fields in red and the "
                "panel on the right",
                severity="error",
            )
            return
        self._submitting(True)
        where = self.app.session.where
        ask = (
            f": asking the controller first (at most {self.app.session.REACH_S:.0f} s)"
            if where.startswith("slurm")
            else "..."
        )
        self.notify(f"submitting {p.to_run} run(s) to {where}{ask}")
        self._submit(data)

    def _submitting(self, busy: bool) -> None:
        self.submitting = busy
        button = self.query_one("#submit", Button)
        button.disabled = busy
        button.label = "Submitting..." if busy else "Submit (ctrl+r)"

    def preview_stale(self, data: dict[str, Any]) -> bool:
        return (
            self.preview is None
            or self.preview.loaded is None
            or self.preview.loaded.spec.model_dump() != spec_dump(data)
        )

    @work(thread=True, exclusive=True, group="submit", exit_on_error=False)
    def _submit(self, data: dict[str, Any]) -> None:
        name = (data.get("experiment") or {}).get("name")
        try:
            path = self._spec_name(data)
            if path != self.loaded_from:  # unsaved choices: keep them beside the store
                Session.save_spec(data, path)
            report = self.app.session.submit(Session.load_spec(path))
        except Exception as exc:  # the engine released any run it claimed, with why
            self.post_message(SubmitFailed(describe(exc), name))
            return
        self.post_message(Submitted(report, path))

    def on_submit_failed(self, message: SubmitFailed) -> None:
        message.stop()
        self._submitting(False)
        self.notify(message.problem, title="not submitted", severity="error", timeout=15)
        self._show_queue_of(message.name)

    def on_submitted(self, message: Submitted) -> None:
        message.stop()
        report, path = message.report, message.spec_path
        self._submitting(False)
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


def spec_dump(data: dict[str, Any]) -> dict[str, Any] | None:
    loaded, _ = Session.check_spec(data)
    return loaded.spec.model_dump() if loaded else None
