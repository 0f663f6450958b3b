"""The results screen: the study's table (throughput with CI95, speedup, efficiency beside
the efficiency model's prediction, images per joule, time-to-accuracy), the selected point
explained under it, and a plotext chart of the selected point's model and batch, the metric
switched by a key. Numbers come from results.analysis (through the session); the chart
text from results.charts, as in the CLI. A number the engine could not give is "-", and
the line under the table says why. At 80x24 the chart is always on screen: the table takes
a few rows and scrolls, the columns that do not fit whole go (their values are said under
the table, and enter shows the point in full), and the baselines are the selected point's
alone."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Header

from ..engine.results import charts, disturbed, tables
from ..engine.results.rows import ResultRow
from ..engine.session import Snapshot, State
from . import keys
from .dialogs import CompareScreen, TextScreen
from .messages import ProjectionDrawn, ReportWritten, ResultsLoaded, ask
from .points import (
    Shown,
    baseline_words,
    batch_of,
    batch_words,
    in_full,
    left_out,
    point_words,
    shown,
    why_missing,
)
from .screens import AppScreen
from .widgets import Banner, Plain, StatusLine, literal_cell

# The metrics m steps through: the engine's charts, then the projection past the measured
# scales (`dlscale project`), drawn apart: its points are projected, not measured.
PROJECTED = "projected efficiency"
METRICS = (*charts.METRICS, PROJECTED)


def metric_words(metric: str) -> str:
    """What a chart shows, in the words of its axis (`time-to-accuracy`, not `tta`)."""
    label = charts.METRICS[metric][1] if metric in charts.METRICS else metric
    return label.split(" (")[0] if metric != "predicted" else "predicted efficiency"


class Chart(Widget):
    """A plotext chart drawn at whatever size the widget has, redrawn when that changes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.results: list[ResultRow] = []
        self.metric: str = "speedup"
        self.model: str | None = None

    def show(self, results: list[ResultRow], metric: str, model: str | None) -> None:
        self.results, self.metric, self.model = results, metric, model
        self.refresh()

    projected = ""  # the projection's chart text, drawn by a worker (it fits a model)
    projected_for = (0, 0)  # the size it was drawn for

    class Resized(Message):
        """The projection was drawn for another size (the held-out line under it took
        rows, and a scrollbar columns): it is drawn again."""

    def on_resize(self) -> None:
        if self.metric == PROJECTED and self.projected and self.fit() != self.projected_for:
            self.post_message(self.Resized())

    def fit(self) -> tuple[int, int]:
        """The size a chart is drawn at: this widget's, and no smaller than plotext needs."""
        return max(self.size.width, 30), max(self.size.height, 8)

    def render(self) -> Text:
        width, height = self.size
        if self.metric == PROJECTED:
            # A drawing cropped, never wrapped: drawn for a wider widget, it stays a chart
            # until the redraw at this size comes. Why there is none wraps, whole.
            drawing = "┌" in self.projected
            return Text.from_ansi(
                self.projected or "projecting past the measured scales...",
                no_wrap=drawing,
                overflow="crop" if drawing else "fold",
            )
        return Text.from_ansi(
            charts.chart(
                self.results, self.metric, self.model, max(width, 30), max(height, 8), color=True
            )
        )


class PointTable(DataTable):
    """The points: enter shows the selected one in full."""

    BINDINGS = [
        keys.enter_shows(
            "the selected point in full: every number, its baseline, why any is missing"
        ),
        *keys.moves("point"),
    ]


class ResultsScreen(AppScreen):
    # The tooltips are the help's and the command palette's words (tui/keys.py).
    BINDINGS = [
        Binding("m", "next_metric", "Metric", tooltip="the next chart: {metrics}"),
        Binding(
            "o",
            "next_model",
            "Model",
            tooltip="the next model: the chart and the cursor move to it",
        ),
        Binding(
            "b",
            "next_batch",
            "Batch",
            tooltip="the next batch size of this model: the chart and the cursor move to it",
        ),
        Binding(
            "r",
            "reload",
            "Reload",
            show=False,
            tooltip="read the results again (they reload as runs end)",
        ),
        Binding(
            "w",
            "write_report",
            "Report",
            show=False,
            tooltip="write the report (HTML, figures, MLLOG files) to ./report-NAME/",
        ),
        Binding(
            "c",
            "compare",
            "Compare",
            show=False,
            tooltip="this experiment beside the next one in the store (dlscale compare)",
        ),
        keys.NEXT_EXPERIMENT,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.results: list[ResultRow] = []
        self.notes: list[str] = []
        self.view = Shown(tables.results_table([]))
        self.metric = "speedup"
        self._completed: int | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        yield Plain(id="results-head")
        yield PointTable(id="results", cursor_type="row", zebra_stripes=True)
        yield Plain(id="why")
        yield Plain(id="picker")
        yield Plain(id="held-out")
        yield Chart(id="chart")
        yield StatusLine(classes="status")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.action_reload()
        self.watch(self.app, "snapshot", self.show_snapshot, init=False)
        self.watch(self.app, "experiment", self.experiment_changed, init=False)

    def on_screen_resume(self) -> None:
        self.action_reload()

    def show_snapshot(self, snap: Snapshot | None) -> None:
        """Reload when runs finish (new numbers), not on every tick."""
        if snap is None:
            return
        done = sum(snap.counts.get(s, 0) for s in (State.COMPLETED, State.FAILED, State.TIMEOUT))
        if done != self._completed:
            self._completed = done
            self.action_reload()

    def experiment_changed(self) -> None:
        if self.is_current:  # a hidden screen reloads when it is shown again
            self.action_reload()

    def action_reload(self) -> None:
        self._load(self.app.experiment)

    @work(thread=True, exclusive=True, group="results", exit_on_error=False)
    def _load(self, experiment: str | None) -> None:
        session = self.app.session
        ask(
            self,
            "results",
            lambda: (session.results(experiment), session.notes(experiment)),
            lambda answer: ResultsLoaded(experiment, *answer),
        )

    def on_results_loaded(self, message: ResultsLoaded) -> None:
        if message.experiment != self.app.experiment:
            return
        chosen = self.selected()
        self.results, self.notes = message.results, message.notes
        self.fill(keep=point_words(chosen) if chosen else None)

    def on_resize(self) -> None:
        if self.results and self._room() != self.room:
            chosen = self.selected()
            self.fill(keep=point_words(chosen) if chosen else None)

    room = 0

    def _room(self) -> int:
        return max(20, (self.size.width or self.app.size.width) - 1)  # a thin scrollbar

    def fill(self, keep: str | None = None) -> None:
        """The table anew: the columns that fit whole (a column with one value in every
        row named above it instead), the cursor on the point it was on."""
        table = self.query_one("#results", DataTable)
        table.clear(columns=True)
        self.room = self._room()
        view = self.view = shown(self.results, self.room)
        for i in view.shown:  # each column its width: tui/columns.py says why
            table.add_column(literal_cell(view.heading(i)), key=str(i), width=view.widths[i])
        table.fixed_columns = view.frozen
        for n, row in enumerate(view.table.rows):
            table.add_row(
                # Cells as Text: DataTable reads a str as markup. A noisy number (*) in yellow.
                *(
                    literal_cell(row[i], "yellow" if row[i].endswith(" *") else "")
                    for i in view.shown
                ),
                key=str(n),
            )
        at = next((i for i, r in enumerate(self.results) if point_words(r) == keep), 0)
        if self.results:
            table.move_cursor(row=at)
        self.head()
        self.show_point(at)

    def head(self) -> None:
        """The line above the table: the study's points, the columns with one value, the
        legend of what is marked, and where the rest is."""
        where = self.app.experiment or "this store"
        if not self.results:
            text = f"no results for {where} yet: runs appear here as they complete"
        else:
            measured = sum(1 for r in self.results if r["throughput"] is not None)
            parts = [f"{measured} of {len(self.results)} points measured"]
            same = [
                f"{self.view.heading(i)} {v}"
                for i, v in self.view.constants.items()
                if v not in ("", "-")  # nothing measured: nothing to name
            ]
            if same:
                parts.append("all " + ", ".join(same))
            if any(r["noisy"] for r in self.results):
                parts.append(f"* noisy (CV > {100 * tables.NOISY_CV:g}%)")
            if any(disturbed.counted_disturbed(r) for r in self.results):
                parts.append(disturbed.SHORT_LEGEND)
            slowed = tables.slowed_note(self.results)  # the "!" after a test-slowed number
            if slowed:
                parts.append(slowed)
            parts.append("enter: a point in full")
            text = "; ".join(parts)
        notes = f" ({len(self.notes)} notes: enter)" if self.notes else ""
        self.query_one("#results-head", Plain).update(text + notes)

    def selected(self) -> ResultRow | None:
        table = self.query_one("#results", DataTable)
        row = table.cursor_row
        return self.results[row] if self.results and 0 <= row < len(self.results) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_point(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        r = self.selected()
        if r is not None:  # enter: the point in full
            notes = ["", "notes:", *self.notes] if self.notes else []
            at = self.results.index(r)
            self.app.push_screen(TextScreen("\n".join([*in_full(r, self.view, at), *notes])))

    def show_point(self, row: int) -> None:
        """Under the table, the selected point: its baseline, then its cells that did not
        fit, its step-time breakdown and why a number is missing (each line cut at the
        screen's edge; enter shows it all). The chart shows its model and batch."""
        r = self.results[row] if 0 <= row < len(self.results) else None
        why = self.query_one("#why", Plain)
        why.display = r is not None
        if r is not None:
            more = [
                *left_out(self.view, row),
                disturbed.point_text(r),
                tables.breakdown_text(r),
                why_missing(r),
            ]
            why.update(
                f"{point_words(r)}: {baseline_words(r)}\n"
                + ("; ".join(m for m in more if m) or "enter: the point in full")
            )
        self.draw_chart()

    def draw_chart(self) -> None:
        r = self.selected()
        model, batch = (r["model"], batch_of(r)) if r else (None, None)
        shown = [
            x for x in self.results if r is None or (x["model"], batch_of(x)) == (model, batch)
        ]
        self.query_one(Chart).show(shown, self.metric, model)
        what = f"{model}, {batch_words(r)}" if r else "no point yet"
        self.query_one("#picker", Plain).update(
            f"{PROJECTED} of every series of the study (m: the next chart)"
            if self.metric == PROJECTED
            else f"{metric_words(self.metric)} of {what} (the selected row's; o: model, "
            "b: batch, m: the next chart)"
        )

    def action_next_metric(self) -> None:
        self.metric = METRICS[(METRICS.index(self.metric) + 1) % len(METRICS)]
        self.query_one("#held-out", Plain).display = False  # until the projection's come
        self.draw_chart()
        if self.metric == PROJECTED:
            self.reproject()

    def reproject(self) -> None:
        chart = self.query_one(Chart)
        chart.projected_for = chart.fit()
        self._project(self.app.experiment, *chart.projected_for)

    def on_chart_resized(self, message: Chart.Resized) -> None:
        message.stop()
        if self.metric == PROJECTED:
            self.reproject()

    @work(thread=True, exclusive=True, group="projection", exit_on_error=False)
    def _project(self, experiment: str | None, width: int, height: int) -> None:
        session = self.app.session
        ask(
            self,
            "projecting",
            lambda: session.projection_chart(experiment, "efficiency", width, height),
            lambda answer: ProjectionDrawn(experiment, *answer),
        )

    def on_projection_drawn(self, message: ProjectionDrawn) -> None:
        message.stop()
        if message.experiment == self.app.experiment:
            chart = self.query_one(Chart)
            chart.projected = message.chart
            chart.refresh()
            # The held-out check: a projection that missed its measured point says so in red.
            box = self.query_one("#held-out", Plain)
            box.update("\n".join(message.checks))
            box.set_class(any(c.startswith("MISSED") for c in message.checks), "missed")
            box.display = self.metric == PROJECTED and bool(message.checks)

    def action_next_model(self) -> None:
        self._step(lambda r: r["model"], keep_batch=True)

    def action_next_batch(self) -> None:
        self._step(batch_of, keep_batch=False)

    def _step(self, key, keep_batch: bool) -> None:
        """The cursor (and so the chart) to the first row of the next model, at the same
        batch where it has one; or to the next batch of this model."""
        r = self.selected()
        if r is None:
            return
        if keep_batch:
            values = sorted({key(x) for x in self.results})
            pool = self.results
        else:
            pool = [x for x in self.results if x["model"] == r["model"]]
            values = sorted({key(x) for x in pool})
        nxt = values[(values.index(key(r)) + 1) % len(values)]
        rows = [x for x in pool if key(x) == nxt]
        target = (
            next((x for x in rows if batch_of(x) == batch_of(r)), rows[0])
            if keep_batch
            else rows[0]
        )
        self.query_one("#results", DataTable).move_cursor(row=self.results.index(target))

    def action_compare(self) -> None:
        """This experiment beside the next one the store knows (imported ones included)."""
        names = self.app.snapshot.experiments if self.app.snapshot else []
        here = self.app.experiment
        others = [n for n in names if n != here]
        if not here or not others:
            self.notify("comparing needs two experiments in the store", severity="warning")
            return
        at = names.index(here) if here in names else -1
        other = next(n for n in names[at + 1 :] + names[: at + 1] if n != here)
        self.app.push_screen(CompareScreen(self.app.session, here, other))

    def action_write_report(self) -> None:
        self.notify("writing the report (tables, figures, MLLOG files)...")
        self._write_report(self.app.experiment)

    @work(thread=True, exclusive=True, group="report", exit_on_error=False)
    def _write_report(self, experiment: str | None) -> None:
        session = self.app.session
        ask(
            self,
            "report",
            lambda: session.write_report(experiment),
            lambda path: ReportWritten(path.resolve()),
        )

    def on_report_written(self, message: ReportWritten) -> None:
        message.stop()
        self.notify(f"report written: {message.path}", title="report", timeout=15)
