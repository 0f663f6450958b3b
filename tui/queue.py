"""The queue screen: the study's jobs as a live table (tui/jobtable.py), a run's detail,
its log below the table, and cancel / resubmit with confirmation. Rows come from the app's
watcher: the screen watches the app's snapshot and shows each new one."""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header
from textual.worker import get_current_worker

from ..engine.session import QueueRow, State, run_label
from . import keys
from .dialogs import ConfirmScreen, DetailScreen
from .errors import describe
from .jobtable import QUEUE_COLUMNS, SORTS, UNSEEN, UNSEEN_WHY, JobTable
from .logtail import LogTail
from .logview import LogView
from .messages import EngineFailed, JobActed, LogFound
from .screens import AppScreen
from .widgets import Banner, Plain, StatusLine, TextField

SORT_HELP = "sort: running, pending, finished (newest first); by job id; by throughput"
SORT_WORDS = {
    "state": "state: running, then pending, then finished (newest first)",
    "job": "job id",
    "throughput": "throughput, the fastest first",
}
LISTED = 8  # the runs a question about several names, one a line; the rest are counted


def shown_rows(app) -> list[QueueRow]:
    """The study's rows as the Queue shows them: a job Slurm has not named yet as
    SUBMITTED, not yet seen by Slurm; and while a submission is under way, its runs the
    store does not hold yet, as SUBMITTING."""
    snap, submission = app.snapshot, app.submission
    rows: list[QueueRow] = []
    if snap is not None:  # the app keeps only its experiment's (on_queue_refreshed)
        rows = [
            replace(r, state=UNSEEN, reason=UNSEEN_WHY)
            if r.run_id in snap.unseen and r.state == State.PENDING
            else r
            for r in snap.rows
        ]
    if submission is not None and submission.experiment == app.experiment:
        if snap is not None and snap.experiment != app.experiment:
            rows = []  # the study left: its rows are not the submission's
        have = {r.run_id for r in rows}
        rows += [r for r in submission.rows if r.run_id not in have]
    return rows


def row_words(r: QueueRow) -> str:
    """A run in the words its row shows: job, what it measures, state."""
    axes = "".join(f" {n}={v}" for n, v in r.axes)
    return (
        f"job {r.job_id or '-'}: {r.framework} {r.model} {r.scale} batch "
        f"{r.per_device_batch}{axes} #{r.repetition} ({r.state})"
    )


class QueueScreen(AppScreen):
    # The tooltips are the help's and the command palette's words (tui/keys.py).
    BINDINGS = [
        Binding(
            "i",
            "detail",
            "Detail",
            show=False,
            tooltip="the selected run in full: reason, folders, job, versions",
        ),
        Binding(
            "l",
            "open_log",
            "Log",
            show=False,
            tooltip="the selected run's log at its tail, followed",
        ),
        Binding(
            "c",
            "cancel",
            "Cancel",
            tooltip="cancel the selected run, or the chosen ones (asks first)",
        ),
        Binding(
            "s",
            "resubmit",
            "Resubmit",
            tooltip="resubmit the selected run, or the chosen ones (asks first)",
        ),
        Binding(
            "space",
            "mark",
            "Choose",
            show=False,
            tooltip="choose the selected run too, or leave it out, and move to the next "
            "(c and s act on all chosen)",
        ),
        Binding("u", "unmark", "Clear chosen", show=False, tooltip="leave out every chosen run"),
        # With the log open, w Wrap takes o Sort's place in the footer (80 columns hold
        # one of them); o still sorts, by the hidden binding after it.
        Binding(
            "o",
            "sort",
            "Sort",
            tooltip=SORT_HELP,
        ),
        Binding("w", "wrap", "Wrap", tooltip="wrap the log's long lines, or cut them again"),
        Binding("o", "sort_beside_log", "Sort", show=False, tooltip=SORT_HELP),
        Binding(
            "slash",
            "search",
            "Find",
            tooltip="with a log open: search it; else filter the runs (words all in the row, "
            "-word: not in it, state:running: in that column)",
        ),
        Binding("p", "pause", "Pause", show=False, tooltip="pause or resume following the log"),
        Binding(
            "f",
            "full_log",
            "Full screen",
            show=False,
            tooltip="the selected run's log on the whole screen, or back (escape too)",
        ),
        Binding(
            "t",
            "stamps",
            "Times",
            show=False,
            tooltip="show the time each log line was read, or not",
        ),
        Binding("n", "next_match(1)", "Next", show=False, tooltip="the next match in the log"),
        Binding(
            "N", "next_match(-1)", "Previous", show=False, tooltip="the previous match in the log"
        ),
        Binding(
            "y",
            "copy_job",
            "Copy job id",
            show=False,
            tooltip="copy the job id (OSC 52: to your clipboard, over SSH too)",
        ),
        Binding("Y", "copy_run", "Copy run id", show=False, tooltip="copy the run id"),
        Binding(
            "v",
            "pager",
            "Log in $PAGER",
            show=False,
            tooltip="the selected run's log in your $PAGER",
        ),
        keys.NEXT_EXPERIMENT,
        Binding(
            "escape",
            "close",
            "Close",
            show=False,
            tooltip="close the search, the filter or the log",
        ),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        yield Plain(id="queue-summary")
        yield TextField(
            placeholder="filter: words, -word, state:running (enter: keep, escape: clear)",
            id="queue-filter",
        )
        yield JobTable(id="jobs")
        yield LogTail(id="log")
        yield StatusLine(classes="status")
        yield Footer(compact=True, show_command_palette=False)

    @property
    def marked(self) -> set[str]:
        """The runs chosen with space: c and s act on all of them."""
        return self.query_one(JobTable).marked

    def on_mount(self) -> None:
        self.query_one("#log").display = False
        self.query_one("#queue-summary", Plain).update("reading the queue...")
        self.rows: dict[str, QueueRow] = {}  # as shown, by run id
        self.watch(self.app, "snapshot", self.show_snapshot)
        self.watch(self.app, "submission", self.show_snapshot, init=False)
        # The table, not the filter field above it (hidden until /): keys are commands here.
        self.query_one(JobTable).focus()

    def show_snapshot(self, _: object = None) -> None:
        if not self.query(JobTable):
            return  # one that lands while the app quits and the screen goes
        rows = shown_rows(self.app)
        if self.app.snapshot is None and not rows:
            return  # no tick yet
        self.rows = {r.run_id: r for r in rows}
        self.query_one(JobTable).show_rows(rows)
        self._summarise()

    def _summarise(self) -> None:
        snap, submission = self.app.snapshot, self.app.submission
        if snap is None and submission is None:
            return
        table = self.query_one(JobTable)
        tally: dict[str, int] = {}
        for r in self.rows.values():
            tally[r.state] = tally.get(r.state, 0) + 1
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(tally.items()))
        exp = (snap.experiment if snap else self.app.experiment) or "all experiments"
        known = snap.experiments if snap else []
        more = f"  (e: {len(known)} experiments)" if len(known) > 1 else ""
        hint = (
            "enter: the run in full, l: its log"
            if self.rows
            else "no runs yet: build a study on the Build screen (F2)"
        )
        planned = tally.get(State.PLANNED, 0)
        if planned:  # stored but not handed to the scheduler: the reason column says why
            hint = (
                f"{planned} not submitted (the reason says why): ctrl+r on Build (F2) "
                "or `dlscale run SPEC` submits them"
            )
        named = {c: h for c, h in zip(QUEUE_COLUMNS, table.header)}
        same = [f"{named[k]} {v}" for k, v in table.constants.items() if v]
        if same:
            hint = f"all {', '.join(same)}; {hint}"
        if table.filter_text:
            hint = f"{table.row_count} shown matching {table.filter_text!r} (/ to change)"
        if self.marked:
            hint = f"{len(self.marked)} chosen (space): c and s act on them; {hint}"
        if submission is not None and submission.experiment == self.app.experiment:
            hint = submission.doing()
        # Two lines, each cut at the screen's edge: what the study is at, then how to read it.
        self.query_one("#queue-summary", Plain).update(
            f"{exp}: {counts or 'no runs'}{more}\n{hint}"
        )

    # --- a run's detail -----------------------------------------------------------------

    def action_detail(self) -> None:
        run_id = self.query_one(JobTable).selected_run()
        if run_id is None:
            return

        def closed(then: str | None) -> None:
            if then == "log":  # l in the detail: its log, below the table
                self._show_log(run_id)

        # Open now, filled by its worker: the keys typed after i are the detail's.
        self.app.push_screen(DetailScreen(self.app.session, run_id), closed)

    def action_copy_job(self) -> None:
        row = self.query_one(JobTable).selected_row()
        if row is None or not row.job_id:
            self.notify(
                "the selected run has no job id yet (Y copies its run id)", severity="warning"
            )
            return
        self.app.copy_to_clipboard(row.job_id)  # OSC 52: reaches the clipboard over SSH
        self.notify(f"copied job id {row.job_id} (Y: the run id, {row.run_id})")

    def action_copy_run(self) -> None:
        row = self.query_one(JobTable).selected_row()
        if row is not None:
            self.app.copy_to_clipboard(row.run_id)
            self.notify(f"copied run id {row.run_id}")

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
        self.action_detail()  # enter: the run in full, as k9s users expect

    def action_open_log(self) -> None:
        run_id = self.query_one(JobTable).selected_run()
        if run_id is not None:
            self._show_log(run_id)

    def _show_log(self, run_id: str) -> None:
        """The log panel at once (what `/` and escape do depends on it), filled once the
        worker has found the log."""
        self.query_one(LogTail).opening(f"run {run_id}: finding its log...")
        self.refresh_bindings()
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
        if log.display:  # not closed meanwhile
            log.open(message.path, message.title)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("sort", "wrap"):
            logs = self.query(LogTail)  # none before the screen is composed
            log_open = bool(logs) and logs.first().display
            return log_open if action == "wrap" else not log_open
        return True

    def action_wrap(self) -> None:
        self.query_one(LogTail).toggle_wrap()

    def action_full_log(self) -> None:
        """The log on the whole screen (follow, wrap, search and times as below the
        table), or back: one key in and out."""
        if self.maximized is not None:
            self.minimize()
            return
        log = self.query_one(LogTail)
        if not log.display:
            run_id = self.query_one(JobTable).selected_run()
            if run_id is None:
                return
            self._show_log(run_id)
        self.maximize(log, container=False)
        self.query_one(LogView).focus()

    def action_stamps(self) -> None:
        self.query_one(LogTail).toggle_stamps()

    def action_pause(self) -> None:
        log = self.query_one(LogTail)
        if log.path is not None:
            log.toggle_pause()

    def action_search(self) -> None:
        """`/` searches the open log; with no log open it filters the table, so the letters
        typed after it go into a field and never act as commands."""
        log = self.query_one(LogTail)
        if log.display:
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
        table.resort(reread=False)
        self.notify(f"sorted by {SORT_WORDS[table.sort_by]}")

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        table = self.query_one(JobTable)
        if event.column_key.value in SORTS:
            table.sort_by = str(event.column_key.value)
            table.resort(reread=False)

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
        every chosen run, each marked in the table's first column."""
        table = self.query_one(JobTable)
        run_id = table.selected_run()
        if run_id is None:
            return
        table.mark(run_id)
        table.move_cursor(row=min(table.get_row_index(run_id) + 1, table.row_count - 1))
        self._summarise()

    def action_unmark(self) -> None:
        self.query_one(JobTable).unmark_all()
        self._summarise()

    def _chosen(self) -> list[QueueRow]:
        table = self.query_one(JobTable)
        if self.marked:  # in the order the table shows them
            ids = sorted((r for r in self.marked if r in table.shown), key=table.get_row_index)
        else:
            row = table.selected_row()
            ids = [row.run_id] if row else []
        # as the store has them (a run shown SUBMITTED is PENDING there, and can be cancelled)
        actual = {r.run_id: r for r in (self.app.snapshot.rows if self.app.snapshot else [])}
        return [actual.get(i) or table.shown[i] for i in ids]

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
            question = (
                f"Cancel run {r.run_id} ({row_words(r)})?"
                if what == "cancel"
                else f"Resubmit run {r.run_id} ({row_words(r)}) with the same job script?"
            )
        else:  # every run the question is about, by the words its row shows
            question = f"{what.capitalize()} these {len(can)} runs?\n" + "\n".join(
                f"  {row_words(r)}" for r in can[:LISTED]
            )
            if len(can) > LISTED:
                question += f"\n  and {len(can) - LISTED} more"
        if skipped:
            question += f"\n({skipped} chosen run(s) cannot be: left as they are.)"

        def answered(yes: bool | None) -> None:
            if yes:  # said by the job ids the table shows (the run id where none is)
                self._act(
                    what, {r.run_id: f"job {r.job_id}" if r.job_id else r.run_id for r in can}
                )
                self.query_one(JobTable).unmark_all()
                self._summarise()

        self.app.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, group="act", exit_on_error=False)
    def _act(self, what: str, named: dict[str, str]) -> None:
        run_ids = list(named)
        try:
            if what == "cancel":
                done = self.app.session.cancel(run_ids)
                msg = (
                    f"cancelled {', '.join(named.get(r, r) for r in done)}"
                    if done
                    else f"{', '.join(named.values())}: not queued or running any more"
                )
            else:
                jobs = self.app.session.resubmit(run_ids)
                msg = "; ".join(
                    f"resubmitted {named.get(rid, rid)} as job {job}" for rid, job in jobs
                )
        except Exception as exc:
            self.post_message(EngineFailed(what, describe(exc)))
            return
        self.post_message(JobActed(msg))

    def on_job_acted(self, message: JobActed) -> None:
        message.stop()
        self.notify(message.message)
        self.app.poll_now()
