"""`dlscale results|chart`: what a study measured. (`report` and `export` are in report.py:
they need matplotlib, which these two must not wait for.)"""

from __future__ import annotations

import click

from .. import disturbed_reruns
from ..results import analysis, charts, tables
from ..results.table import Table
from ..tracking.store import Store
from .console import colour, echo, err, out, show
from .options import experiment_option, store_of, stored


def _store(ctx: click.Context) -> Store:
    return store_of(ctx)


@click.command()
@experiment_option()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--wide", is_flag=True, help="every column, however wide (else those that fit the terminal)"
)
@click.option(
    "--columns",
    default=None,
    metavar="A,B,...",
    help="only these columns of the results table, in this order (its headings)",
)
@click.pass_context
def results(
    ctx: click.Context, experiment: str | None, fmt: str, wide: bool, columns: str | None
) -> None:
    """Throughput (mean ± CI95), speedup, efficiency and time-to-accuracy per point."""
    store = _store(ctx)
    disturbed_reruns.refresh(store)
    rows = analysis.results(store, experiment)
    notes = analysis.notes(store, experiment)
    if fmt == "json":
        echo(tables.results_json(rows))
    elif fmt == "csv":
        echo(tables.results_csv(rows), nl=False)
    elif not rows:
        out.print("no results yet: `dlscale run SPEC` measures a study", soft_wrap=True)
    else:
        table = tables.results_table(rows, notes)
        wanted = _columns(table, columns) if columns else None
        show(table, wide, wanted)
        efficiency = tables.efficiency_table(rows)
        if efficiency is not None and wanted is None:
            show(efficiency, wide)
        return
    for note in notes:  # beside machine-readable output, not inside it
        err.print(note, soft_wrap=True)


def _columns(table: Table, given: str) -> list[str]:
    """--columns' headings, each one of the table's (its full or short heading)."""
    have = [c.heading for c in table.columns] + [c.narrow for c in table.columns]
    wanted = [c.strip() for c in given.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in have]
    if unknown or not wanted:
        raise click.BadParameter(
            f"{', '.join(unknown) or given!r}: the columns are "
            + ", ".join(c.heading for c in table.columns),
            param_hint="--columns",
        )
    return wanted


@click.command()
@experiment_option()
@click.option(
    "--metric", type=click.Choice(list(charts.METRICS)), default="speedup", show_default=True
)
@click.option(
    "--model",
    default=None,
    callback=stored("model"),
    help="only this model (one the store's runs have, a declared framework's too)",
)
# Below 40x10 plotext has no room for the axes and the legend.
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help="columns (default: the terminal's, at most 100)",
)
@click.option("--height", type=click.IntRange(10, 200), default=22, show_default=True)
@click.pass_context
def chart(
    ctx: click.Context,
    experiment: str | None,
    metric: str,
    model: str | None,
    width: int | None,
    height: int,
) -> None:
    """A terminal chart of a metric against devices, with the ideal line."""
    store = _store(ctx)
    disturbed_reruns.refresh(store)
    rows = analysis.results(store, experiment)
    empty = charts.nothing_to_draw(rows, metric, model)
    if empty is not None:  # a sentence, not an empty box
        out.print(empty, soft_wrap=True)
        return
    shown = colour()
    echo(
        charts.chart(rows, metric, model, width or min(out.width, 100), height, color=shown),
        styled=shown,
    )
