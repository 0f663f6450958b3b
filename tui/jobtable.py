"""The Queue's table of jobs: one row per run, updated in place every watcher tick (10,000
runs in milliseconds), its columns chosen by the room it has, its rows in the order that
needs watching first (running, then pending, then finished, newest first).

At 80 columns the key columns (state, job, scale, throughput, the reason) stay whole and the
least important go first; a column with one value in every row goes, its value named above
the table; a declared framework's own axes (`mode`) get a column, or two runs of one scale
would look the same. The chosen runs are marked in a column of their own, and the job and
its state stay put when the table scrolls sideways."""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.markup import escape
from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.timer import Timer
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from ..engine.io.text import signs
from ..engine.session import QUEUE_COLUMNS, QueueRow, State, queue_header
from . import keys
from .columns import GAP, fit, stretch_width
from .rowfilter import RowFilter
from .widgets import literal_cell

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
    "SUBMITTED": "italic yellow",
    State.WAITING: "yellow",
}  # for room in the queue: a later wave submits it

MARK = "mark"  # the chosen runs' column (space), before QUEUE_COLUMNS
MARKED = "●"
# The order columns are shown in, and the order they are given room in at 80 columns (the
# reason takes what is left); the first ones stay when the table scrolls sideways.
SHOWN: tuple[str, ...] = (
    MARK,
    "job",
    "state",
    "model",
    "framework",
    "axes",
    "scale",
    "batch",
    "rep",
)
SHOWN += ("nodes", "elapsed", "throughput", "reason")
PRIORITY: tuple[str, ...] = (
    MARK,
    "state",
    "job",
    "scale",
    "throughput",
    "reason",
    "model",
    "axes",
    "batch",
)
PRIORITY += ("framework", "rep", "elapsed", "nodes")
FROZEN = (MARK, "job", "state")
STRETCH = "reason"
LEAST = 8  # the reason's cells at least, `Runtime…`: enter shows it whole
# What `o` steps through: what needs watching first (the default), job id, throughput. (The
# order the runs were planned in read as random: local-57, local-7, local-22...)
SORTS = ("state", "job", "throughput")
SORT_SIGN = "▾"
_STATE = QUEUE_COLUMNS.index("state")
_REASON = QUEUE_COLUMNS.index(STRETCH)
_AT = {c: i for i, c in enumerate(QUEUE_COLUMNS)}
# Columns that go when every row has the same value in them (QueueRow's field for each).
_HIDEABLE = {
    "framework": "framework",
    "model": "model",
    "scale": "scale",
    "batch": "per_device_batch",
    "rep": "repetition",
    "axes": "axes",
    "nodes": "nodes",
    "elapsed": "elapsed_s",
}
# A job handed to Slurm that no answer of Slurm's has named yet: shown so, never PENDING
# (which only Slurm can say). A state of the screen's, not of the store's.
UNSEEN, UNSEEN_WHY = "SUBMITTED", "not yet seen by Slurm"
# What needs watching first: running, then waiting to run, then finished (newest first).
_RUNNING = (State.RUNNING, State.SUBMITTING)
_QUEUED = (State.PENDING, State.WAITING, State.PLANNED, UNSEEN)


def cell_markup(col: int, text: str, state: str) -> str:
    # Markup strings, escaped: DataTable reads a str as markup, and a pending reason may
    # hold brackets. Not rich Text objects: 11 per job, they weigh on memory and on every
    # pass of the garbage collector at 10,000 jobs.
    text = signs(text)  # a reason or a name may hold escape sequences
    style = STATE_STYLE.get(state) if col == _STATE else None
    if style:
        return f"[{style}]{escape(text)}[/]"
    if "[" not in text:
        return text  # nothing to read as a tag; a backslash shows as it is
    marked = escape(text)
    # escape() doubles a last backslash, lest it escape a tag after it; none comes here.
    return marked[:-1] if text.endswith("\\") and not text.endswith("\\\\") else marked


def job_order(text: str) -> tuple:
    """Job ids by their numbers: `12345_7` before `12345_10`, local-9 before local-10."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text))


def _newest_first(key: tuple) -> tuple:
    return tuple((a, -b, c) for a, b, c in key)


_GROUP_OF_CELL = {
    cell_markup(_STATE, s, s): 0 if s in _RUNNING else 1 if s in _QUEUED else 2
    for s in (*State, UNSEEN)
}


def throughput_order(text: str) -> tuple:
    """The fastest first, `-` last."""
    try:
        return (0, -float(text.replace(",", "")))
    except ValueError:
        return (1, 0.0)


# Past this many runs gone at once (another experiment shown), the table starts afresh:
# DataTable.remove_row renumbers every row below, so removing them one by one is quadratic.
_REFILL_AFTER = 100
# New rows added per frame: DataTable measures every cell of a new row when it is next
# idle (about 0.4 s per 1,000 rows on the 2-core VM), so a first fill of 10,000 jobs comes
# in frame by frame, the first screenful at once, and the keys keep working meanwhile.
ROWS_PER_FRAME = 1000
# Past this many runs a tick's changes are sorted at most every SORT_EVERY_S (order).
SORT_AT_ONCE = 2000
SORT_EVERY_S = 2.0


class JobTable(DataTable):
    """The jobs, updated in place: a refresh touches only the cells that changed, so
    10,000 jobs refresh in milliseconds and the cursor stays on the run the user chose.

    Column widths are the table's own, given to DataTable as fixed widths: each is the
    widest value seen so far (of every column, shown or not: they decide which fit) and
    grows before the row that needs it is drawn. Left to DataTable, a narrowing value
    makes it measure the whole column again (10,000 cells), and a widening one takes effect
    only when it is next idle, after rows may have been drawn, and kept, at the old width."""

    BINDINGS = [
        keys.enter_shows("the selected run in full: reason, folders, job, versions"),
        Binding("home", "first_row", "First", show=False, tooltip="the first run"),
        Binding("end", "last_row", "Last", show=False, tooltip="the last run"),
        *keys.moves("run", first="first_row", last="last_row"),
    ]

    def action_first_row(self) -> None:
        self.move_cursor(row=0)

    def action_last_row(self) -> None:
        self.move_cursor(row=self.row_count - 1)

    filter_text = ""  # the filter's words (tui/rowfilter.py); "" shows all
    sort_by: str = "state"  # one of SORTS

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.shown: dict[str, QueueRow] = {}  # what each row shows, by run id
        self.texts: dict[str, tuple[str, ...]] = {}  # and its cells' text
        self.made: dict[str, tuple[QueueRow, tuple[str, ...]]] = {}  # cells of rows not shown
        self.latest: list[QueueRow] = []  # the rows last asked for
        self.filling = False  # more of them to add in the next frames
        self.fill_asked = False  # the next frame's fill_more asked for
        self.constants: dict[str, str] = {}  # columns hidden: one value in every row
        self.header = queue_header([])  # as shown: the throughput column in the rows' unit
        self.widths = {c: cell_len(h) for c, h in zip(QUEUE_COLUMNS, self.header)}
        self.marked: set[str] = set()  # the runs chosen with space
        self.columns_shown: list[str] = []
        self.restore: str | None = None  # the run to put the cursor back on, once shown
        self.stale = True  # the columns to be chosen again (widths, constants, room)
        self.constants_of: int | None = None  # the row count constants were found for
        self.sort_timer: Timer | None = None
        self.room = 0
        self._job_keys: dict[str, tuple] = {}
        self._columns([c for c in SHOWN if c != MARK])

    # --- columns ----------------------------------------------------------------------

    def _heading(self, name: str) -> str:
        if name == MARK:
            return " "
        label = self.header[_AT[name]]
        return f"{label}{SORT_SIGN}" if name == self.sort_by else label

    def _columns(self, visible: list[str]) -> None:
        """Show these columns (in SHOWN's order), the rows drawn again."""
        self.columns_shown = [c for c in SHOWN if c in visible]
        self.clear(columns=True)
        self.shown, self.texts = {}, {}
        for name in self.columns_shown:
            label = literal_cell(self._heading(name))  # a unit or an axis name: never markup
            self.add_column(label, key=name, width=self._column_width(name))
        self.job_columns = {
            _AT[c]: self.columns[ColumnKey(c)] for c in self.columns_shown if c != MARK
        }
        self.fixed_columns = sum(1 for c in self.columns_shown[: len(FROZEN)] if c in FROZEN)

    def _room_widths(self) -> dict[str, int]:
        """Each column's width: its widest value, or its heading (and room for the sort
        sign where it can be sorted by)."""
        out = {
            c: max(self.widths[c], cell_len(self.header[_AT[c]]) + (c in SORTS))
            for c in QUEUE_COLUMNS
        }
        return {**out, MARK: 1}

    def _column_width(self, name: str) -> int:
        widths = self._room_widths()
        if name == STRETCH and self.room:
            return stretch_width(widths, self.columns_shown, name, self.room)
        return widths[name]

    def _room(self) -> int:
        # the vertical scrollbar's columns are kept free: a table that grows keeps its layout
        width = self.size.width or self.app.size.width
        return max(20, width - self.styles.scrollbar_size_vertical)

    def _choose(self) -> list[str]:
        widths = {c: w for c, w in self._room_widths().items() if c not in self.constants}
        if not self.marked:
            widths.pop(MARK)
        if not any(r.axes for r in self.latest):
            widths.pop("axes", None)
        return [c for c in SHOWN if c in fit(widths, PRIORITY, self._room(), STRETCH, LEAST)]

    def relayout(self) -> bool:
        """Choose the columns again for the room and the widths there are now; whether the
        table was laid out anew (its rows then come again)."""
        room, was = self._room(), self.room
        self.room = room
        visible = self._choose()
        if visible == self.columns_shown and room == was:
            # The same columns: kept (laying 10,000 rows out anew takes seconds). A column
            # that grew (job ids past local-999) takes its cells from the reason's.
            over = sum(c.width + GAP for c in self.columns.values()) - room
            reason = self.columns.get(ColumnKey(STRETCH))
            if over <= 0:
                return False
            if reason is not None and reason.width - over >= LEAST and self.row_count:
                reason.width -= over
                # one cell updated as it is: DataTable draws every row again at the new
                # width, and measures the table's width again (not the column's cells)
                row = self.coordinate_to_cell_key(Coordinate(0, 0)).row_key
                self.update_cell(row, STRETCH, self.get_cell(row, STRETCH), update_width=True)
                return False
        self._columns(visible)
        return True

    def on_resize(self) -> None:
        if self.is_mounted and self._room() != self.room and self.relayout():
            self.show_rows(self.latest)

    def _hide_constant_columns(self, rows: list[QueueRow], changed: list[QueueRow]) -> None:
        """A column with one value in every row (one framework, one batch...) says nothing
        row by row: it goes, and the summary line names its value; at 80 columns that is
        the room the state, the throughput and the reason need. Asked again of every row
        only when the runs shown are others, or a changed row breaks a column's one value
        (a tick of 10,000 runs then costs nothing here)."""
        same = (
            len(rows) == self.constants_of
            and all(r.run_id in self.shown for r in changed)  # no run new to the table
            and all(
                self.made[r.run_id][1][_AT[col]] == value
                for r in changed
                for col, value in self.constants.items()
            )
        )
        if changed or not same:  # a changed row may count other units (tokens/s)
            header = queue_header(rows)  # tokens/s is not images/s, `mode` not `axes`
            if header != self.header:
                self.header = header
                for c, h in zip(QUEUE_COLUMNS, header):
                    self.widths[c] = max(self.widths[c], cell_len(h))
                self.columns_shown = []  # labels change: lay out anew
        if not same:
            constants = {}
            if len(rows) > 1:
                first = rows[0].cells(signs)
                for col, attr in _HIDEABLE.items():
                    value = getattr(rows[0], attr)
                    if value is not None and all(getattr(r, attr) == value for r in rows):
                        constants[col] = first[_AT[col]]
            if constants != self.constants:
                self.stale = True
            self.constants = constants
            self.constants_of = len(rows)

    def _changed(self, rows: list[QueueRow]) -> list[QueueRow]:
        """The rows not shown as they are (new or changed), in order. The cells of those
        this frame shows (every changed row, the next ROWS_PER_FRAME new ones) are made now
        and kept for _show, the widths they need grown first (`stale`: lay out again); a
        first fill of 10,000 runs makes the rest as their frames come."""
        changed = []
        new = 0
        for r in rows:
            old = self.shown.get(r.run_id)
            if old is r or old == r:
                continue  # the engine kept the row (QueueReader): nothing to draw
            changed.append(r)
            if old is None:
                new += 1
                if new > ROWS_PER_FRAME:
                    continue
            made = self.made.get(r.run_id)
            if made is None or made[0] is not r:
                self._made(r)
        return changed

    def _made(self, r: QueueRow) -> tuple[str, ...]:
        texts = r.cells(signs)
        self.made[r.run_id] = (r, texts)
        for c, t in zip(QUEUE_COLUMNS, texts):
            width = cell_len(t)
            if width > self.widths[c]:
                self.widths[c] = width
                self.stale = True
        return texts

    # --- rows -------------------------------------------------------------------------

    def show_rows(self, rows: list[QueueRow]) -> None:
        self.latest = rows
        if self.filter_text:  # tui/rowfilter.py: every word somewhere, -word nowhere
            wanted = RowFilter.parse(self.filter_text, QUEUE_COLUMNS)
            rows = [r for r in rows if wanted.matches(r.cells(signs))]
        changed = self._changed(rows)
        self._hide_constant_columns(self.latest, changed)
        # the run the cursor is on stays under it, whatever moves (a first fill: the top)
        selected = self.selected_run() if self.shown else self.restore
        # (not while a first fill comes in frame by frame: a column that grew meanwhile is
        # widened in place, and the columns chosen again once every row is in)
        if not self.columns_shown or (self.stale and not self.filling):
            self.stale = False
            if self.relayout():
                changed = rows  # every row comes again, in the new columns
        if self._show(rows, changed):
            self.order(at_once=False)
        self._keep_cursor(selected)

    def resort(self, reread: bool = True) -> None:
        """Sort by `sort_by` now, the header's sign on the column sorted by. `reread`: the
        filter changed, so the rows are shown again first (those coming back take their
        place, not the end); o or a click on a heading changes only the order, and reading
        10,000 rows again was a third of the key's time."""
        for name in self.columns_shown:
            if name != MARK:
                self.columns[ColumnKey(name)].label = literal_cell(self._heading(name))
        selected = self.selected_run()
        if reread:
            self.show_rows(self.latest)
        self.order()
        self._keep_cursor(selected)

    def _keep_cursor(self, run_id: str | None) -> None:
        """Put the cursor back on this run (not shown yet: once it is)."""
        self.restore = None
        if run_id is None:
            return
        if run_id not in self.shown:
            self.restore = run_id  # a later frame of the fill brings it
        elif self.get_row_index(run_id) != self.cursor_row:
            self.move_cursor(row=self.get_row_index(run_id))

    def order(self, at_once: bool = True) -> None:
        """Sort the rows as asked. A tick's changes in a big table (past SORT_AT_ONCE runs)
        are sorted at most once every SORT_EVERY_S: each sort takes tens of milliseconds
        there, and a row whose state changed shows it at once, in its old place meanwhile."""
        by = self.sort_by
        if by not in self.columns_shown:
            return  # one value in every row: nothing to sort by
        if not at_once and self.row_count > SORT_AT_ONCE:
            if self.sort_timer is None:
                self.sort_timer = self.set_timer(SORT_EVERY_S, self._sort_later)
            return
        if self.sort_timer is not None:  # sorted now: the one that waited has nothing to do
            self.sort_timer.stop()
            self.sort_timer = None
        job = self._job_key
        if by == "state":

            def key(cells):
                group = _GROUP_OF_CELL.get(cells[0], 2)
                return (group, _newest_first(job(cells[1])) if group == 2 else job(cells[1]))

            self.sort("state", "job", key=key)
        elif by == "job":
            self.sort("job", key=job)
        else:
            self.sort(by, "job", key=lambda c: (throughput_order(c[0]), job(c[1])))

    def _job_key(self, text: str) -> tuple:
        """job_order, once per job id: every sort orders by it (10,000 of them a key)."""
        key = self._job_keys.get(text)
        if key is None:
            key = self._job_keys[text] = job_order(text)
        return key

    def _sort_later(self) -> None:
        self.sort_timer = None
        selected = self.selected_run()
        self.order()
        self._keep_cursor(selected)

    def _show(self, rows: list[QueueRow], changed: list[QueueRow]) -> bool:
        """Bring the table to these rows (`changed`: those not shown as they are);
        whether the order may have changed (a row added, removed, or moved to another
        state, job or throughput)."""
        wanted = {r.run_id for r in rows}
        gone = [k for k in self.shown if k not in wanted]
        for run_id in [k for k in self.made if k not in wanted]:
            del self.made[run_id]  # of another experiment, or filtered out
        if len(gone) > _REFILL_AFTER:
            self.clear()
            self.shown, self.texts = {}, {}
        else:
            for run_id in gone:
                self.remove_row(run_id)
                del self.shown[run_id], self.texts[run_id]
        added, more = 0, False
        moved = bool(gone)
        ordered = {_AT[c] for c in ("state", "job", "throughput")}
        for r in changed:
            old = self.shown.get(r.run_id)
            if old is r or old == r:
                continue  # the engine kept the row (QueueReader): nothing to draw
            if old is None and added == ROWS_PER_FRAME:
                more = True
                if not self.fill_asked:  # the rest after this frame, from the latest rows
                    self.fill_asked = True
                    self.call_after_refresh(self.fill_more)
                break
            added += old is None
            self.shown[r.run_id] = r
            was = self.texts.get(r.run_id, ())
            made = self.made.pop(r.run_id, None)
            texts = self.texts[r.run_id] = made[1] if made and made[0] is r else self._made(r)
            self.made.pop(r.run_id, None)
            if old is None:
                moved = True
                self._widen(self.job_columns, texts)
                self.add_row(*self._cells(r, texts), key=r.run_id)
                continue
            cols = [i for i in self.job_columns if texts[i] != was[i]]
            if old.state != r.state and _STATE not in cols:
                cols.append(_STATE)  # same words, another colour
            moved = moved or bool(ordered.intersection(cols))
            wider = self._widen(cols, texts)
            for i in cols:
                # update_width only where the column just grew: DataTable then recomputes
                # the table's scrollable width, measuring this one cell (none is wider).
                self.update_cell(
                    r.run_id,
                    QUEUE_COLUMNS[i],
                    self._cell(i, texts[i], r.state),
                    update_width=i in wider,
                )
        self.filling = more  # rows still to come, a frame at a time
        return moved

    def _cells(self, r: QueueRow, texts: tuple[str, ...]) -> list[str | Text]:
        return [
            (MARKED if r.run_id in self.marked else "")
            if c == MARK
            else self._cell(_AT[c], texts[_AT[c]], r.state)
            for c in self.columns_shown
        ]

    def _cell(self, i: int, text: str, state: str) -> str | Text:
        """A cell's markup; a reason as Text cut to its column with `…` where it is drawn
        (the column may widen; enter shows the reason whole). One Text a run at most: a
        reason is empty while a run goes well."""
        if i == _REASON and text:
            return Text(signs(text), no_wrap=True, overflow="ellipsis", end="")
        return cell_markup(i, text, state)

    def fill_more(self) -> None:
        self.fill_asked = False
        self.show_rows(self.latest)

    def _widen(self, indexes, texts: tuple[str, ...]) -> set[int]:
        """Grow the columns these cells do not fit (the reason as far as the room goes);
        return which grew."""
        grew = set()
        for i in indexes:
            width = cell_len(texts[i])
            column = self.job_columns.get(i)
            if column is None or width <= column.width:
                continue
            if i == _REASON:
                others = sum(c.width + GAP for c in self.columns.values() if c is not column)
                width = min(width, self.room - others - GAP)
                if width <= column.width:
                    continue
            column.width = width
            grew.add(i)
        return grew

    # --- the runs chosen, the run selected -------------------------------------------

    def mark(self, run_id: str) -> bool:
        """Choose the run, or leave it out again; whether it is chosen now."""
        chosen = run_id not in self.marked
        (self.marked.add if chosen else self.marked.discard)(run_id)
        if MARK not in self.columns_shown or not self.marked:
            self.columns_shown = []  # the mark column comes, or goes
            self.show_rows(self.latest)
        elif run_id in self.shown:
            self.update_cell(run_id, MARK, MARKED if chosen else "")
        return chosen

    def unmark_all(self) -> None:
        if self.marked:
            self.marked.clear()
            self.columns_shown = []
            self.show_rows(self.latest)

    def selected_row(self) -> QueueRow | None:
        run_id = self.selected_run()
        return self.shown.get(run_id) if run_id else None

    def selected_run(self) -> str | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return key.value
