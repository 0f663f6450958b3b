"""The queue screen: the study's jobs as a live table, the selected job's log below it, and
cancel / resubmit with confirmation. Rows come from the app's watcher (engine.session)."""
from __future__ import annotations

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.widgets.data_table import ColumnKey

from ..engine.session import Snapshot
from ..engine.tracking.queue import QUEUE_COLUMNS, QueueRow
from .dialogs import ConfirmScreen
from .errors import describe
from .logtail import LogTail
from .widgets import Banner

STATE_STYLE = {"PENDING": "yellow", "RUNNING": "bold cyan", "COMPLETED": "green",
               "FAILED": "bold red", "TIMEOUT": "red", "NODE_FAIL": "red",
               "CANCELLED": "magenta", "PLANNED": "bold yellow", "SUBMITTING": "italic yellow",
               "WAITING": "yellow"}  # for room in the queue: a later wave submits it


def row_cells(row: QueueRow) -> tuple[str, ...]:
    # Markup strings, escaped: DataTable reads a str as markup, and a pending reason may
    # hold brackets. Not rich Text objects: DataTable crops a Text cell in place when it
    # renders it narrower, and the cropped text then stays after the column widens.
    cells = [escape(c) for c in row.cells()]
    state = QUEUE_COLUMNS.index("state")
    style = STATE_STYLE.get(row.state)
    if style:
        cells[state] = f"[{style}]{cells[state]}[/]"
    return tuple(cells)


def cell_len(markup: str) -> int:
    return Text.from_markup(markup).cell_len


def _plain(markup: str) -> str:
    return Text.from_markup(markup).plain


class JobTable(DataTable):
    """The jobs, updated in place: a refresh touches only the cells that changed, so 1,000
    jobs refresh in milliseconds and the cursor stays where the user left it."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in QUEUE_COLUMNS:
            self.add_column(col, key=col)
        self.shown: dict[str, tuple] = {}

    def show_rows(self, rows: list[QueueRow]) -> None:
        wanted = {r.run_id for r in rows}
        for gone in [k for k in self.shown if k not in wanted]:
            self.remove_row(gone)
            del self.shown[gone]
        for r in rows:
            cells = row_cells(r)
            old = self.shown.get(r.run_id)
            if old is None:
                self.add_row(*cells, key=r.run_id)
            elif old != cells:
                for col, new, was in zip(QUEUE_COLUMNS, cells, old):
                    if new != was:
                        # Only a wider value resizes its column: Textual re-measures the
                        # whole column when a cell narrows, O(jobs) per cell (seconds at
                        # 1,000 jobs). Columns grow and never shrink.
                        wider = cell_len(new) > self.columns[ColumnKey(col)].content_width
                        self.update_cell(r.run_id, col, new, update_width=wider)
            self.shown[r.run_id] = cells

    async def _on_idle(self, event) -> None:
        # Textual 8.2.8 widens columns on idle but keeps row renders cached from before, so a
        # row drawn in between stays cropped to the old widths. Drop those renders whenever
        # the idle pass may have changed a width (rare: new rows or a wider value).
        resized = bool(self._updated_cells) or self._require_update_dimensions
        await super()._on_idle(event)
        if resized:
            self._clear_caches()
            self.refresh()

    def selected_run(self) -> str | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return key.value


class QueueScreen(Screen):
    BINDINGS = [
        Binding("enter", "open_log", "Log", show=False),
        Binding("c", "cancel", "Cancel"),
        Binding("s", "resubmit", "Resubmit"),
        Binding("p", "pause", "Pause"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next", show=False),
        Binding("N", "next_match(-1)", "Previous", show=False),
        Binding("e", "next_experiment", "Next exp."),
        Binding("escape", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        yield Static("", id="queue-summary", markup=False)
        yield JobTable(id="jobs")
        yield LogTail(id="log")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.app.views["queue"] = self
        self.query_one("#log").display = False
        if self.app.snapshot is not None:
            self.show_snapshot(self.app.snapshot)
        else:
            self.query_one("#queue-summary", Static).update("reading the queue...")

    def show_snapshot(self, snap: Snapshot) -> None:
        if not self.query(JobTable):
            return  # a refresh that lands while the app quits and the screen goes
        table = self.query_one(JobTable)
        table.show_rows(snap.rows)
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(snap.counts.items()))
        exp = snap.experiment or "all experiments"
        more = f"  (e: {len(snap.experiments)} experiments)" if len(snap.experiments) > 1 else ""
        hint = "  enter: log of the selected job" if snap.rows else \
            "  no runs yet: build a study on the Build screen (F2)"
        planned = snap.counts.get("PLANNED", 0)
        if planned:  # stored but not handed to the scheduler: the reason column says why
            hint = (f"  {planned} not submitted (reason on the right): ctrl+r on Build (F2) "
                    "or `dlscale run SPEC` submits them")
        self.query_one("#queue-summary", Static).update(
            f"{exp}: {counts or 'no runs'}{more}{hint}")

    # --- log ----------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_log()

    def action_open_log(self) -> None:
        run_id = self.query_one(JobTable).selected_run()
        if run_id is None:
            return
        self._open_log(run_id)

    @work(thread=True, exclusive=True, group="lookup", exit_on_error=False)
    def _open_log(self, run_id: str) -> None:
        try:
            path = self.app.session.log_path(run_id)
            run = self.app.session.run(run_id)
        except Exception as exc:
            self.app.call_from_thread(self.notify, describe(exc), severity="error",
                                      markup=False)
            return
        title = (f"{run['framework']} {run['model']} {run['nodes']}x{run['ranks_per_node']} "
                 f"#{run['repetition']} (job {run['job_id'] or '-'})")
        self.app.call_from_thread(self._show_log, path, title)

    def _show_log(self, path, title: str) -> None:
        log = self.query_one(LogTail)
        log.display = True
        log.open(path, title)

    def action_pause(self) -> None:
        log = self.query_one(LogTail)
        if log.path is not None:
            log.toggle_pause()

    def action_search(self) -> None:
        log = self.query_one(LogTail)
        if log.path is not None:
            log.start_search()

    def action_next_match(self, direction: int) -> None:
        self.query_one(LogTail).step(direction)

    def action_close(self) -> None:
        log = self.query_one(LogTail)
        if log.end_search():
            self.query_one(JobTable).focus()
            return
        if log.display:
            log.close()
            log.display = False
            self.query_one(JobTable).focus()

    def action_next_experiment(self) -> None:
        snap = self.app.snapshot
        names = snap.experiments if snap else []
        if len(names) < 2:
            return
        at = names.index(self.app.experiment) if self.app.experiment in names else -1
        self.app.experiment = names[(at + 1) % len(names)]

    # --- cancel / resubmit ---------------------------------------------------------------

    def action_cancel(self) -> None:
        self._confirm("cancel")

    def action_resubmit(self) -> None:
        self._confirm("resubmit")

    def _confirm(self, what: str) -> None:
        table = self.query_one(JobTable)
        run_id = table.selected_run()
        if run_id is None:
            return
        cells = table.shown[run_id]
        label = " ".join(_plain(c) for c in cells[1:6])
        question = (f"Cancel run {run_id} ({label}, job {_plain(cells[0])})?" if what == "cancel" else
                    f"Resubmit run {run_id} ({label}) with the same job script?")

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(what, run_id)
        self.app.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, group="act", exit_on_error=False)
    def _act(self, what: str, run_id: str) -> None:
        try:
            if what == "cancel":
                done = self.app.session.cancel([run_id])
                msg = f"cancelled {run_id}" if done else f"{run_id} was not queued or running"
            else:
                (rid, job), = self.app.session.resubmit([run_id])
                msg = f"resubmitted {rid} as job {job}"
        except Exception as exc:
            self.app.call_from_thread(self.notify, describe(exc), title=f"{what} failed",
                                      severity="error", timeout=10, markup=False)
            return
        self.app.call_from_thread(self.notify, msg, markup=False)
        self.app.call_from_thread(self.app.poll_now)
