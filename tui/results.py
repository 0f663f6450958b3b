"""The results screen: the study's table (throughput with CI95, speedup, efficiency beside
the efficiency model's prediction, images per joule, time-to-accuracy, the baseline named)
and a plotext chart, metric and model switched by keys. Numbers come from engine.analysis;
the chart text from engine.charts, as in the CLI. A number the engine could not give is "-",
and the selected row's line under the table says why."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Header
from textual.widgets.data_table import ColumnKey

from ..engine.results import charts, tables
from ..engine.session import Snapshot, State
from .dialogs import CompareScreen
from .errors import describe
from .messages import Compared, EngineFailed, ProjectionDrawn, ReportWritten, ResultsLoaded
from .screens import AppScreen
from .widgets import Banner, Plain, literal_cell

COLUMNS = (
    "model",
    "framework",
    "scale",
    "dev",
    "batch",
    "n",
    "images/s ± CI95",
    "speedup",
    "eff.",
    "pred. eff.",
    "images/J",
    "TTA s",
    "state",
)
# The columns whose "-" the engine explains (a result's `unmeasured`: field -> why).
EXPLAINED = {"pred. eff.": "predicted_efficiency", "images/J": "images_per_joule"}


def why_missing(r: dict[str, Any]) -> str:
    """Why this result's explained columns are empty, one clause each; "" when none is."""
    why = r.get("unmeasured") or {}
    return "; ".join(
        f"{col} -: {why[key]}"
        for col, key in EXPLAINED.items()
        if r.get(key) is None and why.get(key)
    )


# The metrics m steps through: the engine's charts, then the projection past the measured
# scales (`dlscale project`), drawn apart: its points are projected, not measured.
PROJECTED = "projected efficiency"
METRICS = (*charts.METRICS, PROJECTED)


class Chart(Widget):
    """A plotext chart drawn at whatever size the widget has, redrawn when that changes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.results: list[dict[str, Any]] = []
        self.metric: str = "speedup"
        self.model: str | None = None

    def show(self, results: list[dict[str, Any]], metric: str, model: str | None) -> None:
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
            # Cropped, never wrapped: a drawing for a wider widget stays a chart until the
            # redraw at this size comes.
            return Text.from_ansi(
                self.projected or "projecting past the measured scales...",
                no_wrap=True,
                overflow="crop",
            )
        return Text.from_ansi(
            charts.chart(
                self.results, self.metric, self.model, max(width, 30), max(height, 8), color=True
            )
        )


class ResultsScreen(AppScreen):
    BINDINGS = [
        Binding("m", "next_metric", "Metric"),
        Binding("o", "next_model", "Model"),
        Binding("r", "reload", "Reload", show=False),  # results reload as runs end
        Binding("w", "write_report", "Report"),
        Binding("c", "compare", "Compare"),
        Binding("e", "app.next_experiment", "Next exp.", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.results: list[dict[str, Any]] = []
        self.metric = "speedup"
        self.model: str | None = None
        self._completed: int | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
        yield Plain(id="why")
        yield Plain(id="baselines")
        yield Plain(id="held-out")
        yield Chart(id="chart")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#results", DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
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
        try:
            results = self.app.session.results(experiment)
            notes = self.app.session.notes(experiment)
        except Exception as exc:
            self.post_message(EngineFailed("results", describe(exc)))
            return
        self.post_message(ResultsLoaded(experiment, results, notes))

    def on_results_loaded(self, message: ResultsLoaded) -> None:
        if message.experiment != self.app.experiment:
            return
        self.results = message.results
        models = self.models()
        if self.model not in models:
            self.model = None
        table = self.query_one("#results", DataTable)
        table.clear()
        # tokens/s is not images/s: a declared framework's unit names the columns.
        per_s = tables.throughput_unit(self.results) if self.results else "images/s"
        for key, label in (
            ("images/s ± CI95", f"{per_s} ± CI95"),
            ("images/J", f"{per_s.removesuffix('/s')}/J"),
        ):
            table.columns[ColumnKey(key)].label = literal_cell(label)
        for r in self.results:
            # Cells as Text: DataTable reads a str as markup.
            table.add_row(
                *(
                    literal_cell(c)
                    for c in (
                        r["model"],
                        r["framework"],
                        f"{r['nodes']}x{r['ranks_per_node']}",
                        r["ranks"],
                        r["per_device_batch"],
                        f"{r['n']}/{r['repetitions']}",
                    )
                ),
                literal_cell(tables.throughput_text(r), "yellow" if r["noisy"] else ""),
                *(
                    literal_cell(c)
                    for c in (
                        tables.fmt(r["speedup"]),
                        tables.fmt(r["efficiency"]),
                        tables.fmt(r.get("predicted_efficiency")),
                        tables.fmt(r.get("images_per_joule"), 1),
                        tables.fmt(r["time_to_accuracy_s"], 1),
                        r["state"],
                    )
                ),
            )
        note = tables.baselines_note(self.results)
        slowed = tables.slowed_note(self.results)  # the "!" after a test-slowed number
        skipped = (f"\n{slowed}" if slowed else "") + "".join(f"\n{n}" for n in message.notes)
        where = message.experiment or "this store"
        self.query_one("#baselines", Plain).update(
            (
                (note + "\n" if note else "") + "* = noisy (CV > 5%)   pred. eff.: "
                "compute + allreduce model   m: metric   o: model"
                if self.results
                else f"no results for {where} yet: runs appear here as they complete"
            )
            + skipped
        )
        self.show_why(table.cursor_row)
        self.draw_chart()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_why(event.cursor_row)

    def show_why(self, row: int) -> None:
        """The selected result's step-time breakdown (why measured and predicted efficiency
        differ) and its reasons for its "-" cells; hidden when it has neither."""
        r = self.results[row] if 0 <= row < len(self.results) else None
        lines = [tables.breakdown_text(r), why_missing(r)] if r else []
        text = "\n".join(line for line in lines if line)
        box = self.query_one("#why", Plain)
        box.update(
            f"{r['framework']} {r['nodes']}x{r['ranks_per_node']}: {text}" if r and text else ""
        )
        box.display = bool(text)

    def models(self) -> list[str]:
        return sorted({r["model"] for r in self.results})

    def draw_chart(self) -> None:
        self.query_one(Chart).show(self.results, self.metric, self.model)

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
        try:
            text, checks = self.app.session.projection_chart(
                experiment, "efficiency", width, height
            )
        except Exception as exc:
            self.post_message(EngineFailed("projecting", describe(exc)))
            return
        self.post_message(ProjectionDrawn(experiment, text, checks))

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
        choices: list[str | None] = [None, *self.models()]
        self.model = choices[(choices.index(self.model) + 1) % len(choices)]
        self.draw_chart()

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
        self._compare(here, other)

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _compare(self, a: str, b: str) -> None:
        try:
            data = self.app.session.side_by_side(a, b)
        except Exception as exc:
            self.post_message(EngineFailed("comparing", describe(exc)))
            return
        self.post_message(Compared(data))

    def on_compared(self, message: Compared) -> None:
        message.stop()
        self.app.push_screen(CompareScreen(message.data))

    def action_write_report(self) -> None:
        self.notify("writing the report (tables, figures, MLLOG files)...")
        self._write_report(self.app.experiment)

    @work(thread=True, exclusive=True, group="report", exit_on_error=False)
    def _write_report(self, experiment: str | None) -> None:
        try:
            path = self.app.session.write_report(experiment)
        except Exception as exc:
            self.post_message(EngineFailed("report", describe(exc)))
            return
        self.post_message(ReportWritten(path.resolve()))

    def on_report_written(self, message: ReportWritten) -> None:
        message.stop()
        self.notify(f"report written: {message.path}", title="report", timeout=15)
