"""Modal screens: help, a yes/no confirmation, and a file-path prompt."""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, ScreenResultType
from textual.widgets import Button, DataTable, Input, Label

from ..engine.results import compare_table
from ..engine.session import RunDetail, Session
from . import keys
from .columns import fit, widest
from .messages import Compared, DetailFound, ask
from .typeahead import Question
from .widgets import Plain, TextField, literal_cell, shown_path


class Dialog(ModalScreen[ScreenResultType]):
    """A modal screen that opens clear of toasts: Textual draws them over every screen, and
    at 80x24 two or three of them (submitted, sorted...) hid half of a question."""

    def on_screen_resume(self) -> None:
        self.app.clear_notifications()


class HelpScreen(Dialog[None]):
    """Every key (tui/keys.py makes the text from the bindings)."""

    BINDINGS = [Binding("escape,q,f1,question_mark", "dismiss", "Close", tooltip="close")]

    def __init__(self, text: Callable[[int], str]) -> None:
        super().__init__()
        self.text = text  # the help, wrapped to a width

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Plain(id="help-text")

    def on_mount(self) -> None:
        self.call_after_refresh(self.on_resize)

    def on_resize(self) -> None:
        box = self.query_one("#help", VerticalScroll)
        self.query_one("#help-text", Plain).update(self.text(max(30, box.size.width - 3)))

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class ConfirmScreen(Dialog[bool], Question):
    """A yes/no question whose yes does something (cancel, resubmit): No has the focus,
    and only keys typed once the question is on screen answer it (tui/typeahead.py)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm", classes="dialog"):
            yield Plain(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")
            yield Plain("", id="early", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def early_key(self, event: object) -> None:
        early = self.query_one("#early", Plain)
        early.update("keys typed before this question was shown are ignored: y yes, n or escape no")
        early.display = True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PathScreen(Dialog[str | None]):
    """Ask for a file path; returns it, or None when the user backs out."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with Vertical(id="path-dialog", classes="dialog"):
            yield Plain(self.title_text, classes="question")
            yield TextField(self.value, placeholder="path/to/spec.toml", id="path-input")
            yield Label("enter: ok   escape: cancel", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class DetailScreen(Dialog[str | None]):
    """One run in full: its whole reason, where its files are, its job and the versions
    its env record names. y copies the job id, Y the run id; l closes it on the run's log
    (dismissed with "log"); escape closes. Open at once (the keys typed after i are its),
    it reads the run from the store in a worker."""

    BINDINGS = [
        Binding("escape,q,i", "dismiss", "Close", tooltip="close the run's detail"),
        Binding("y", "copy('job')", "Copy job id", tooltip="copy the job id"),
        Binding("Y", "copy('run')", "Copy run id", tooltip="copy the run id"),
        Binding("l", "log", "Log", tooltip="close, and follow the run's log"),
    ]

    def __init__(self, session: Session, run_id: str) -> None:
        super().__init__()
        self.session, self.run_id = session, run_id
        self.detail: RunDetail | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail", classes="dialog"):
            yield Plain(f"run {self.run_id}: reading it...", id="detail-text")

    def on_mount(self) -> None:
        self._read(self.run_id)

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def _read(self, run_id: str) -> None:
        ask(self, "reading the run", lambda: self.session.run_detail(run_id), DetailFound)

    def on_detail_found(self, message: DetailFound) -> None:
        message.stop()
        self.detail = d = message.detail
        lines = [
            f"run {d.run_id}: {d.label}",
            f"state      {d.state}",
            f"job        {d.job_id or '-'} ({d.backend or 'not submitted'})",
            f"nodes      {d.nodes or '-'}",
            f"run folder {shown_path(d.run_dir)}",
            f"job script {shown_path(d.job_script) or '-'}",
            f"log        {shown_path(d.log)}",
        ]
        if d.versions:
            lines.append(
                "versions   " + ", ".join(f"{k} {v}" for k, v in sorted(d.versions.items()))
            )
        if d.reason:
            lines += ["", "reason:", d.reason]
        lines += ["", "y: copy the job id   Y: the run id   l: its log   escape: close"]
        self.query_one("#detail-text", Plain).update("\n".join(lines))

    def action_copy(self, what: str) -> None:
        d = self.detail
        value = (d.job_id if what == "job" else d.run_id) if d else None
        if value:
            self.app.copy_to_clipboard(value)
            self.app.notify(f"copied {what} id {value}")
        else:
            self.app.notify("this run has no job id yet (Y copies its run id)")

    def action_log(self) -> None:
        self.dismiss("log")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class TextScreen(Dialog[None]):
    """Text in full, scrolled with the arrows (a Results point: every number, its baseline,
    why any is missing); escape closes."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close", tooltip="close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="text", classes="dialog"):
            yield Plain(self.text + "\n\nescape: close")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


_SAME_NAMED = ("model", "framework", "batch/dev")  # said once when every row has the same
# The comparison's columns, the most important first: at 80 columns the ratio B/A and its
# interval are never cut, and the columns that do not fit go (the selected pair's are said
# under the table; enter shows the pair in full).
_COMPARE_PRIORITY = (
    "scale",
    "B/A [95% interval]",
    "model",
    "p (different?)",
    "A images/s ± CI95",
    "B images/s ± CI95",
    "n A / B",
    "framework",
    "batch/dev",
    "speedup A / B",
    "efficiency A / B",
    "env differences",
)


class CompareTable(DataTable):
    """The matched pairs: enter shows the selected one in full."""

    BINDINGS = [keys.enter_shows("the selected pair in full"), *keys.moves("pair")]


class CompareScreen(Dialog[None]):
    """Two experiments side by side (`dlscale compare A B`), the whole screen: each matched
    point's throughput with CI95, the ratio B/A with its interval, the test, speedup and
    efficiency of each and what differs in their environments; the points without a
    partner and the methods under it. Open at once (the keys typed after c are its), filled
    by its worker. Escape closes."""

    BINDINGS = [Binding("escape,q,c", "dismiss", "Close", tooltip="close the comparison")]

    def __init__(self, session: Session, a: str, b: str) -> None:
        super().__init__()
        self.session, self.a, self.b = session, a, b
        self.rows: list[list[str]] = []
        self.columns: list[int] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="compare"):
            yield Plain(f"comparing {self.a} with {self.b}...", id="compare-title")
            yield CompareTable(id="compare-table", zebra_stripes=True, cursor_type="row")
            yield Plain("", id="compare-pair")
            with VerticalScroll(id="compare-notes", can_focus=False):
                yield Plain("escape: close", id="compare-notes-text")

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self._compare(self.a, self.b)

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _compare(self, a: str, b: str) -> None:
        ask(self, "comparing", lambda: self.session.side_by_side(a, b), Compared)

    def on_compared(self, message: Compared) -> None:
        message.stop()
        data = message.data
        self.rows = rows = compare_table.comparison_rows(data)
        names = [c.heading for c in compare_table.COLUMNS]
        # A column with one value in every row goes, named in the title.
        same = {
            i: rows[0][i]
            for i, name in enumerate(names)
            if name in _SAME_NAMED and rows and all(r[i] == rows[0][i] for r in rows)
        }
        widths = {
            name: widest(name, (cells[i] for cells in rows))  # columns.py
            for i, name in enumerate(names)
            if i not in same
        }
        shown = set(fit(widths, _COMPARE_PRIORITY, max(20, self.app.size.width - 3)))
        self.columns = [i for i, name in enumerate(names) if name in shown]
        title = compare_table.title(data)
        if same:
            title += "\nall " + ", ".join(f"{names[i]} {v}" for i, v in same.items())
        self.query_one("#compare-title", Plain).update(title)
        notes = compare_table.comparison_notes(data)
        self.query_one("#compare-notes-text", Plain).update(
            "\n".join([*notes, "enter: a pair in full   escape: close"])
        )
        table = self.query_one(DataTable)
        for i in self.columns:
            table.add_column(names[i], key=names[i], width=widths[names[i]])
        for cells in rows:
            table.add_row(*(literal_cell(cells[i]) for i in self.columns))
        if not rows:
            self.query_one("#compare-pair", Plain).update("no point measured in both")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Under the table, the selected pair's cells that did not fit, one line."""
        if 0 <= event.cursor_row < len(self.rows):
            cells = self.rows[event.cursor_row]
            names = [c.heading for c in compare_table.COLUMNS]
            rest = [f"{names[i]} {c}" for i, c in enumerate(cells) if i not in self.columns and c]
            self.query_one("#compare-pair", Plain).update("; ".join(rest))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if 0 <= event.cursor_row < len(self.rows):
            names = [c.heading for c in compare_table.COLUMNS]
            cells = self.rows[event.cursor_row]
            width = max(len(n) for n in names)
            self.app.push_screen(
                TextScreen("\n".join(f"{n:<{width}}  {c}" for n, c in zip(names, cells)))
            )

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
