"""Widgets every screen shares: the banner that says the controller is not answering."""

from __future__ import annotations

from textual.widgets import Static


class Banner(Static):
    """Hidden while the scheduler answers; a red line saying what is wrong when it does not."""

    def on_mount(self) -> None:
        self.watch(self.app, "warning", self._show, init=True)

    def _show(self, warning: str | None) -> None:
        self.set_class(bool(warning), "shown")
        self.update(warning or "")
