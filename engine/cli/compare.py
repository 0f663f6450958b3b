"""`dlscale compare`: two experiments' points side by side (compare.py's statistics)."""

from __future__ import annotations

import json

import click

from .. import disturbed_reruns
from ..results.compare import side_by_side
from ..results.compare_table import comparison_table
from .console import echo, show
from .options import known_experiment, store_of


@click.command()
@click.argument("a", callback=known_experiment)
@click.argument("b", callback=known_experiment)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
)
@click.pass_context
def compare(ctx: click.Context, a: str, b: str, fmt: str) -> None:
    """Two experiments (from this site or imported) point by point: throughput with CI95,
    the ratio B/A with its interval, Welch's test, speedup, efficiency, env differences."""
    store = store_of(ctx)
    disturbed_reruns.refresh(store)
    data = side_by_side(store, a, b)
    if fmt == "json":
        echo(json.dumps(data, indent=2, allow_nan=False))
        return
    show(comparison_table(data))
