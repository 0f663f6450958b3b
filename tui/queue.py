"""The queue screen: the study's jobs as a live table, the selected job's log below it, and
cancel / resubmit with confirmation. Rows come from the app's watcher: the screen watches
the app's snapshot and shows each new one."""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header
from textual.widgets.data_table import ColumnKey
from textual.worker import get_current_worker

from ..engine.session import QUEUE_COLUMNS, QueueRow, Snapshot, State, queue_header, run_label
from ..engine.text import printable
from .dialogs import ConfirmScreen, DetailScreen
from .errors import describe
from .logtail import LogTail
from .messages import DetailFound, EngineFailed, JobActed, LogFound
from .screens import AppScreen
from .widgets import Banner, Plain, TextField, literal_cell

STATE_STYLE: dict[str, str] = {  # by state; a State is its string
    State.PENDING: "yellow",
    State.RUNNING: "bold cyan",
    State.COMPLETED: "green",
    State.FAILED: "bold red",
    State.TIMEOUT: "red",
    State.NODE_FAIL: "red",
    State.CANCELLED: "magenta",
    State.PLANNED: "bold yellow",
    State.SUBMITTING: "italic yellow",
    State.WAITING: "yellow",
}  # for room in the queue: a later wave submits it


def cell_markup(col: int, text: str, state: str) -> str:
    # Markup strings, escaped: DataTable reads a str as markup, and a pending reason may
    # hold brackets. Not rich Text objects: 11 per job, they weigh on memory and on every
    # pass of the garbage collector at 10,000 jobs.
    text = printable(text)  # a reason or a name may hold escape sequences
    style = STATE_STYLE.get(state) if col == _STATE else None
    if style:
        return f"[{style}]{escape(text)}[/]"
    if "[" not in text:
        return text  # nothing to read as a tag; a backslash shows as it is
    marked = escape(text)
    # escape() doubles a last backslash, lest it escape a tag after it; none comes here.
    return marked[:-1] if text.endswith("\\") and not text.endswith("\\\\") else marked


_STATE = QUEUE_COLUMNS.index("state")
# Columns that go when every row has the same value in them (QueueRow's field for each).
_HIDEABLE = {
    QUEUE_COLUMNS.index(col): attr
    for col, attr in (
        ("framework", "framework"),
        ("model", "model"),
        ("scale", "scale"),
        ("batch", "per_device_batch"),
        ("rep", "repetition"),
        ("nodes", "nodes"),
    )
}
# Sorting by state puts what needs watching first.
_STATE_ORDER = (State.RUNNING, State.SUBMITTING, State.PENDING, State.WAITING, State.PLANNED)
_STATE_WORD = re.compile(r"[A-Z_]+")
SORTS = (None, "state", "job", "throughput")  # what `o` steps through


def sort_key(column: str, cell: object) -> tuple:
    """How a column's cell sorts: states by what needs watching, numbers as numbers (`-`
    last), job ids by their numbers (`12345_7` before `12345_10`)."""
    text = str(cell)
    if column == "state":
        word = _STATE_WORD.search(text.split("]", 1)[-1] if text.startswith("[") else text)
        state = word.group() if word else text
        return (_STATE_ORDER.index(state) if state in _STATE_ORDER else len(_STATE_ORDER), state)
    if column in ("throughput", "batch", "rep", "elapsed"):
        try:
            return (0, -float(text.split()[0].rstrip("s")))
        except (ValueError, IndexError):
            return (1, text)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text))


# Past this many runs gone at once (another experiment shown), the table starts afresh:
# DataTable.remove_row renumbers every row below, so removing them one by one is quadratic.
_REFILL_AFTER = 100
# New rows added per frame: DataTable measures every cell of a new row when it is next
# idle (about 0.4 s per 1,000 rows on the 2-core VM), so a first fill of 10,000 jobs comes
# in frame by frame, the first screenful at once, and the keys keep working meanwhile.
ROWS_PER_FRAME = 1000


class JobTable(DataTable):
    """The jobs, updated in place: a refresh touches only the cells that changed, so
    10,000 jobs refresh in milliseconds and the cursor stays where the user left it.

    Column widths are the table's own, given to DataTable as fixed widths: each is the
    widest value shown so far and grows before the row that needs it is drawn. Left to
    DataTable, a narrowing value makes it measure the whole column again (10,000 cells),
    and a widening one takes effect only when it is next idle, after rows may have been
    drawn, and kept, at the old width."""

    BINDINGS = [
        Binding("home", "first_row", "First", show=False),
        Binding("end", "last_row", "Last", show=False),
    ]

    def action_first_row(self) -> None:
        self.move_cursor(row=0)

    def action_last_row(self) -> None:
        self.move_cursor(row=self.row_count - 1)

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.shown: dict[str, QueueRow] = {}  # what each row shows, by run id
        self.texts: dict[str, tuple[str, ...]] = {}  # and its cells' text
        self.latest: list[QueueRow] = []  # the rows last asked for
        self.filling = False  # more of them to add next frame
        self.constants: dict[str, str] = {}  # columns hidden: one value in every row
        self.header = queue_header([])  # as shown: the throughput column in the rows' unit
        self._columns(list(range(len(QUEUE_COLUMNS))))

    def _columns(self, visible: list[int]) -> None:
        """Show these columns (indexes into QUEUE_COLUMNS), the rows drawn again."""
        self.columns_shown = visible
        self.clear(columns=True)
        self.shown, self.texts = {}, {}
        for i in visible:
            # the throughput's heading is a run's unit, as its store holds it: never markup
            label = literal_cell(self.header[i])
            self.add_column(label, key=QUEUE_COLUMNS[i], width=label.cell_len)
        self.job_columns = {i: self.columns[ColumnKey(QUEUE_COLUMNS[i])] for i in visible}

    def _hide_constant_columns(self, rows: list[QueueRow]) -> None:
        """A column with one value in every row (one framework, one batch...) says nothing
        row by row: it goes, and the summary line names its value; at 80 columns that is
        the room the state, the throughput and the reason need."""
        constants = {}
        if len(rows) > 1:
            for i, attr in _HIDEABLE.items():
                first = getattr(rows[0], attr)
                if first is not None and all(getattr(r, attr) == first for r in rows):
                    constants[i] = str(first)
        visible = [i for i in range(len(QUEUE_COLUMNS)) if i not in constants]
        self.constants = {QUEUE_COLUMNS[i]: v for i, v in constants.items()}
        header = queue_header(rows)  # tokens/s is not images/s
        if visible != self.columns_shown or header != self.header:
            self.header = header
            self._columns(visible)

    filter_text = ""  # rows whose cells hold this (any case) are shown; "" shows all
    sort_by: str | None = None  # a column of QUEUE_COLUMNS; None: the order runs were planned

    def show_rows(self, rows: list[QueueRow]) -> None:
        self.latest = rows
        self._hide_constant_columns(rows)
        if self.filter_text:
            needle = self.filter_text.lower()
            rows = [r for r in rows if any(needle in c.lower() for c in r.cells())]
        if self._show(rows):
            self.order()

    def resort(self) -> None:
        """Show the rows again in the order asked (or in the planned order: afresh)."""
        if self.sort_by is None:
            self.clear()
            self.shown, self.texts = {}, {}
        self.show_rows(self.latest)
        self.order()

    def order(self) -> None:
        by = self.sort_by
        if by is not None and by in self.constants:
            return  # one value: nothing to sort by
        if by is not None:  # ties in job order
            self.sort(
                by, "job", key=lambda cells: (sort_key(by, cells[0]), sort_key("job", cells[1]))
            )

    def _show(self, rows: list[QueueRow]) -> bool:
        """Bring the table to these rows; whether any row was added, removed or changed."""
        wanted = {r.run_id for r in rows}
        gone = [k for k in self.shown if k not in wanted]
        if len(gone) > _REFILL_AFTER:
            self.clear()
            self.shown, self.texts = {}, {}
        else:
            for run_id in gone:
                self.remove_row(run_id)
                del self.shown[run_id], self.texts[run_id]
        added = 0
        touched = bool(gone)
        for r in rows:
            old = self.shown.get(r.run_id)
            if old is r or old == r:
                continue  # the engine kept the row (QueueReader): nothing to draw
            touched = True
            if old is None and added == ROWS_PER_FRAME:
                if not self.filling:  # the rest after this frame, from the latest rows
                    self.filling = True
                    self.call_after_refresh(self.fill_more)
                break
            added += old is None
            self.shown[r.run_id] = r
            was = self.texts.get(r.run_id, ())
            texts = self.texts[r.run_id] = r.cells()
            if old is None:
                self._widen(self.columns_shown, texts)
                self.add_row(
                    *(cell_markup(i, texts[i], r.state) for i in self.columns_shown), key=r.run_id
                )
                continue
            changed = [i for i in self.columns_shown if texts[i] != was[i]]
            if old.state != r.state and _STATE not in changed:
                changed.append(_STATE)  # same words, another colour
            wider = self._widen(changed, texts)
            for i in changed:
                # update_width only where the column just grew: DataTable then recomputes
                # the table's scrollable width, measuring this one cell (none is wider).
                self.update_cell(
                    r.run_id,
                    QUEUE_COLUMNS[i],
                    cell_markup(i, texts[i], r.state),
                    update_width=i in wider,
                )
        return touched

    def fill_more(self) -> None:
        self.filling = False
        self.show_rows(self.latest)

    def selected_row(self) -> QueueRow | None:
        run_id = self.selected_run()
        return self.shown.get(run_id) if run_id else None

    def _widen(self, indexes, texts: tuple[str, ...]) -> set[int]:
        """Grow the columns these cells do not fit; return which grew."""
        grew = set()
        for i in indexes:
            width = cell_len(texts[i])
            column = self.job_columns.get(i)
            if column is not None and width > column.width:
                column.width = width
                grew.add(i)
        return grew

    def selected_run(self) -> str | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return key.value


class QueueScreen(AppScreen):
    BINDINGS = [
        Binding("enter", "open_log", "Log", show=False),
        Binding("i", "detail", "Detail"),
        Binding("c", "cancel", "Cancel"),
        Binding("s", "resubmit", "Resubmit"),
        Binding("space", "mark", "Mark", show=False),
        # With the log open, w Wrap takes o Sort's place in the footer (80 columns hold
        # one of them); o still sorts, by the hidden binding after it.
        Binding("o", "sort", "Sort"),
        Binding("w", "wrap", "Wrap"),
        Binding("o", "sort_beside_log", "Sort", show=False),
        Binding("slash", "search", "Find"),
        Binding("p", "pause", "Pause", show=False),
        Binding("n", "next_match(1)", "Next", show=False),
        Binding("N", "next_match(-1)", "Previous", show=False),
        Binding("y", "copy_job", "Copy job id", show=False),
        Binding("v", "pager", "Log in $PAGER", show=False),
        Binding("e", "app.next_experiment", "Next exp.", show=False),
        Binding("escape", "close", "Close", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: set[str] = set()  # runs chosen with space: c and s act on all of them

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        yield Plain(id="queue-summary")
        yield TextField(
            placeholder="filter the runs (enter: keep, escape: clear)", id="queue-filter"
        )
        yield JobTable(id="jobs")
        yield LogTail(id="log")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#log").display = False
        self.query_one("#queue-summary", Plain).update("reading the queue...")
        self.watch(self.app, "snapshot", self.show_snapshot)
        # The table, not the filter field above it (hidden until /): keys are commands here.
        self.query_one(JobTable).focus()

    def show_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None or not self.query(JobTable):
            return  # no tick yet, or one that lands while the app quits and the screen goes
        table = self.query_one(JobTable)
        table.show_rows(snap.rows)
        self._summarise()

    def _summarise(self) -> None:
        snap = self.app.snapshot
        if snap is None:
            return
        table = self.query_one(JobTable)
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(snap.counts.items()))
        exp = snap.experiment or "all experiments"
        more = f"  (e: {len(snap.experiments)} experiments)" if len(snap.experiments) > 1 else ""
        hint = (
            "  enter: log of the selected job"
            if snap.rows
            else "  no runs yet: build a study on the Build screen (F2)"
        )
        planned = snap.counts.get(State.PLANNED, 0)
        if planned:  # stored but not handed to the scheduler: the reason column says why
            hint = (
                f"  {planned} not submitted (reason on the right): ctrl+r on Build (F2) "
                "or `dlscale run SPEC` submits them"
            )
        if table.constants:
            hint = "  all " + ", ".join(f"{k} {v}" for k, v in table.constants.items()) + hint
        if table.filter_text:
            hint = f"  {table.row_count} shown matching {table.filter_text!r} (/ to change)"
        if self.marked:
            hint = f"  {len(self.marked)} chosen (space): c and s act on them" + hint
        self.query_one("#queue-summary", Plain).update(f"{exp}: {counts or 'no runs'}{more}{hint}")

    # --- a run's detail -----------------------------------------------------------------

    def action_detail(self) -> None:
        run_id = self.query_one(JobTable).selected_run()
        if run_id is not None:
            self._find_detail(run_id)

    @work(thread=True, exclusive=True, group="lookup", exit_on_error=False)
    def _find_detail(self, run_id: str) -> None:
        try:
            detail = self.app.session.run_detail(run_id)
        except Exception as exc:
            self.post_message(EngineFailed("reading the run", describe(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(DetailFound(detail))

    def on_detail_found(self, message: DetailFound) -> None:
        message.stop()
        self.app.push_screen(DetailScreen(message.detail))

    def action_copy_job(self) -> None:
        row = self.query_one(JobTable).selected_row()
        if row is None or not row.job_id:
            self.notify("the selected run has no job id yet", severity="warning")
            return
        self.app.copy_to_clipboard(row.job_id)  # OSC 52: reaches the clipboard over SSH
        self.notify(f"copied job id {row.job_id}")

    def action_pager(self) -> None:
        run_id = self.query_one(JobTable).selected_run()
        if run_id is None:
            return
        with self.app.suspend():  # the pager has the terminal until the user quits it
            status = self.app.session.page_log(run_id)
        if status == 127:
            self.notify("no pager could be started: set $PAGER", severity="error")

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
            self.post_message(EngineFailed("opening the log", describe(exc)))
            return
        title = f"{run_label(run)} (job {run['job_id'] or '-'})"
        if not get_current_worker().is_cancelled:  # another row was chosen meanwhile
            self.post_message(LogFound(path, title))

    def on_log_found(self, message: LogFound) -> None:
        message.stop()
        log = self.query_one(LogTail)
        log.display = True
        log.open(message.path, message.title)
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("sort", "wrap"):
            logs = self.query(LogTail)  # none before the screen is composed
            log_open = bool(logs) and logs.first().display
            return log_open if action == "wrap" else not log_open
        return True

    def action_wrap(self) -> None:
        self.query_one(LogTail).toggle_wrap()

    def action_pause(self) -> None:
        log = self.query_one(LogTail)
        if log.path is not None:
            log.toggle_pause()

    def action_search(self) -> None:
        """`/` searches the open log; with no log open it filters the table, so the letters
        typed after it go into a field and never act as commands."""
        log = self.query_one(LogTail)
        if log.path is not None and log.display:
            log.start_search()
            return
        box = self.query_one("#queue-filter", TextField)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: TextField.Changed) -> None:
        if event.input.id != "queue-filter":
            return
        table = self.query_one(JobTable)
        table.filter_text = event.value.strip()
        table.resort()  # rows coming back take their place, not the end
        self._summarise()

    def on_input_submitted(self, event: TextField.Submitted) -> None:
        if event.input.id == "queue-filter":
            event.stop()
            self.query_one(JobTable).focus()

    def action_sort_beside_log(self) -> None:
        self.action_sort()

    def action_sort(self) -> None:
        table = self.query_one(JobTable)
        table.sort_by = SORTS[(SORTS.index(table.sort_by) + 1) % len(SORTS)]
        table.resort()
        self.notify(f"sorted by {table.sort_by or 'the order the runs were planned'}")

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        table = self.query_one(JobTable)
        table.sort_by = str(event.column_key.value)
        table.resort()

    def action_next_match(self, direction: int) -> None:
        self.query_one(LogTail).step(direction)

    def action_close(self) -> None:
        log = self.query_one(LogTail)
        if log.end_search():
            self.query_one(JobTable).focus()
            return
        box = self.query_one("#queue-filter", TextField)
        if box.has_class("shown"):
            box.value = ""
            box.remove_class("shown")
            self.query_one(JobTable).focus()
            return
        if log.display:
            log.close()
            log.display = False
            self.query_one(JobTable).focus()
            self.refresh_bindings()

    # --- cancel / resubmit ---------------------------------------------------------------

    def action_cancel(self) -> None:
        self._confirm("cancel")

    def action_resubmit(self) -> None:
        self._confirm("resubmit")

    def action_mark(self) -> None:
        """Choose the selected run too (space again leaves it out): c and s then act on
        every chosen run."""
        table = self.query_one(JobTable)
        run_id = table.selected_run()
        if run_id is None:
            return
        self.marked ^= {run_id}
        table.move_cursor(row=min(table.cursor_row + 1, table.row_count - 1))
        self._summarise()

    def _chosen(self) -> list[QueueRow]:
        table = self.query_one(JobTable)
        if self.marked:
            return [table.shown[r] for r in self.marked if r in table.shown]
        row = table.selected_row()
        return [row] if row else []

    def _confirm(self, what: str) -> None:
        rows = self._chosen()
        if not rows:
            return
        why = [r.why_not_cancel() if what == "cancel" else r.why_not_resubmit() for r in rows]
        can = [r for r, w in zip(rows, why) if w is None]
        if not can:  # explained, not asked: nothing the question could do
            self.notify(next(w for w in why if w), severity="warning")
            return
        skipped = len(rows) - len(can)
        if len(can) == 1:
            r = can[0]
            label = f"{r.framework} {r.model} {r.scale} #{r.repetition}"
            question = (
                f"Cancel run {r.run_id} ({label}, job {r.job_id or '-'}, {r.state})?"
                if what == "cancel"
                else f"Resubmit run {r.run_id} ({label}, {r.state}) with the same job script?"
            )
        else:
            question = f"{what.capitalize()} these {len(can)} runs?"
        if skipped:
            question += f" ({skipped} chosen run(s) cannot be: left as they are.)"

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(what, [r.run_id for r in can])
                self.marked.clear()

        self.app.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, group="act", exit_on_error=False)
    def _act(self, what: str, run_ids: list[str]) -> None:
        try:
            if what == "cancel":
                done = self.app.session.cancel(run_ids)
                msg = (
                    f"cancelled {', '.join(done)}"
                    if done
                    else f"{', '.join(run_ids)}: not queued or running any more"
                )
            else:
                jobs = self.app.session.resubmit(run_ids)
                msg = "; ".join(f"resubmitted {rid} as job {job}" for rid, job in jobs)
        except Exception as exc:
            self.post_message(EngineFailed(what, describe(exc)))
            return
        self.post_message(JobActed(msg))

    def on_job_acted(self, message: JobActed) -> None:
        message.stop()
        self.notify(message.message)
        self.app.poll_now()
