"""The log tail: a job's log opened at its end, following new lines from a worker thread,
with pause, search (matches marked) and wrapping. Reading is the engine's (engine.logs);
this widget only shows."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input
from textual.worker import get_current_worker

from ..engine.io.text import signs
from ..engine.session import follow_chunks
from .logview import LogView
from .messages import LogLines
from .widgets import Plain, TextField, shown_path

TAIL_LINES = 500  # what opening a log shows at once, whatever its size
KEEP_LINES = 20_000  # what the view holds; older lines drop off the top


class LogTail(Vertical):
    """The log panel under the Queue's table; `f` gives it the whole screen (and back)."""

    ALLOW_MAXIMIZE = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.path: Path | None = None
        self.title = ""
        self.paused = False
        self.held: list[str] = []  # lines that arrived while paused
        self.matches: list[int] = []
        self.match_at = -1
        self._serial = 0  # which open() a LogLines message belongs to
        self.waiting = False  # the log file does not exist yet

    def compose(self) -> ComposeResult:
        yield Plain(id="log-status")
        yield LogView(max_lines=KEEP_LINES, id="log-lines")
        yield TextField(placeholder="search the log (enter: find, escape: close)", id="log-search")

    def opening(self, note: str) -> None:
        """Shown now, empty, saying `note`, until `open` is given the log."""
        self.close()
        self.title = ""
        self.query_one(LogView).clear()
        self._status(note)
        self.display = True

    def open(self, path: Path, title: str) -> None:
        self._serial += 1
        self.path, self.title = path, title
        self.paused, self.held, self.matches, self.match_at = False, [], [], -1
        self.waiting = False
        log = self.query_one(LogView)
        log.clear()
        log.mark("")
        log.auto_scroll = True
        self._status(f"{title}: {shown_path(path)}")
        self._follow(path, self._serial)

    def close(self) -> None:
        self._serial += 1
        self.workers.cancel_group(self, "log")
        self.path = None

    @work(thread=True, exclusive=True, group="log", exit_on_error=False)
    def _follow(self, path: Path, serial: int) -> None:
        worker = get_current_worker()
        first = True
        for chunk in follow_chunks(
            path, TAIL_LINES, interval=0.25, stop=lambda: worker.is_cancelled
        ):
            if worker.is_cancelled:
                return
            note = None
            if first and not chunk and not path.exists():
                where = shown_path(path)
                note = f"{self.title}: no log yet at {where} (the job has not started); waiting"
            first = False
            if chunk or note:  # control characters as their pictures (␛), as everywhere
                self.post_message(LogLines(serial, [signs(line) for line in chunk], note))

    def on_log_lines(self, message: LogLines) -> None:
        message.stop()
        if message.serial != self._serial:
            return  # lines of a log that was closed or replaced
        if message.note:
            self.waiting = True
            self._status(message.note)
        elif self.waiting and message.lines:
            self.waiting = False
            self._status(f"{self.title}: {shown_path(self.path)}")
        if self.paused:
            self.held.extend(message.lines)
            self._status(f"{self.title}: paused, {len(self.held)} new line(s) held (p resumes)")
            return
        self.query_one(LogView).write_lines(message.lines)

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        log = self.query_one(LogView)
        log.auto_scroll = not self.paused
        if self.paused:
            self._status(f"{self.title}: paused (p resumes)")
        else:
            if self.held:
                log.write_lines(self.held)
                self.held = []
            log.scroll_end(animate=False)
            self._status(f"{self.title}: following {shown_path(self.path)}")

    # --- search --------------------------------------------------------------------------

    def start_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.add_class("shown")
        box.focus()

    def end_search(self) -> bool:
        box = self.query_one("#log-search", Input)
        if not box.has_class("shown"):
            return False
        box.remove_class("shown")
        return True

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        event.stop()
        self.find(event.value)
        self.query_one(LogView).focus()

    def find(self, text: str) -> None:
        log = self.query_one(LogView)
        self.matches = log.find_lines(text)
        self.match_at = -1
        log.mark(text if self.matches else "")
        if not self.matches:
            self._status(f"{self.title}: {text!r} not found")
            return
        # Searching means reading: stop following so the view stays on the match.
        if not self.paused:
            self.toggle_pause()
        self.step(1)

    def step(self, direction: int) -> None:
        if not self.matches:
            return
        self.match_at = (self.match_at + direction) % len(self.matches)
        line = self.matches[self.match_at]
        log = self.query_one(LogView)
        log.mark(log.needle, current=line)
        log.show_line(line)
        text = log.lines[line]
        self._status(
            f"match {self.match_at + 1}/{len(self.matches)}, line {line + 1}: {text[:100]}"
        )

    def toggle_wrap(self) -> None:
        log = self.query_one(LogView)
        log.set_wrap(not log.wrap)
        self.notify(
            "long log lines wrap (w: cut them)" if log.wrap else "long log lines cut (w: wrap)"
        )

    def toggle_stamps(self) -> None:
        log = self.query_one(LogView)
        log.set_stamps(not log.stamps)
        self.notify(
            "each line after the time it was read (t: without)"
            if log.stamps
            else "log lines without times (t: with the time each was read)"
        )

    def _status(self, text: str) -> None:
        self.query_one("#log-status", Plain).update(text)
