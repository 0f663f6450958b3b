"""The one printer: where the command line writes, stdout for what was asked, stderr for
errors and progress, and every text it writes made printable on the way.

Names, paths, keys, values, records, Slurm's and the trainers' words reach the terminal
only through `out`, `err` and `echo`, which show every control character as its visible
escape (engine/io/text.py: `printable`). dlscale's own styling is the only escape sequence
written: rich renders it from styles, after the text was made printable, and a chart's
colours are the one styled text `echo` lets through. No other module of the command line
writes to stdout or stderr (tests/test_printer.py checks the source and the output).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import click
from rich.console import Console
from rich.segment import Segment
from rich.text import Text

from ..io.text import printable
from ..results.formatting import elapsed_text
from ..results.points import unit_and_axes
from ..results.table import Table, for_terminal, measured
from ..runs import TERMINAL, State, run_label
from ..tracking.store import Store  # noqa: TC001


class _Printable(Console):
    """rich's Console, every text segment made printable just before it is written; control
    segments (a progress bar's cursor moves) and styles are rich's own. Markup and emoji
    codes are off: a name holding `[red]` or `:x:` is shown as written."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # before rich's Text drops some controls (BEL, CR) unseen: shown, like the rest
        return super().render_str(printable(text, newlines=True), **kwargs)

    # rich's one step from segments to the string it writes (stable since rich 2; the
    # printer's tests fail if it stops being called)
    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            s if s.control else Segment(printable(s.text, newlines=True), s.style) for s in buffer
        )


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Piped output (CI logs, `| less`) gets room for the wide tables, not rich's 80 columns,
    # unless COLUMNS says how wide the reader is.
    width = None if stream.isatty() else _columns() or 160
    # NO_COLOR (no-color.org: set and not empty) means no escape sequences at all: rich's own
    # no_color keeps bold and italic, color_system None writes none
    system: Literal["auto"] | None = None if os.environ.get("NO_COLOR") else "auto"
    return _Printable(
        stderr=stderr, highlight=False, markup=False, emoji=False, width=width, color_system=system
    )


def _columns() -> int | None:
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and 20 <= int(text) <= 10_000 else None


out = _console(stderr=False)
err = _console(stderr=True)

_STYLE = re.compile(r"(\x1b\[[0-9;]*m)")  # SGR: colours and weights, nothing else


def echo(text: str, to_err: bool = False, nl: bool = True, styled: bool = False) -> None:
    """Text already laid out (a table, CSV, JSON, log lines) printed as it is, control
    characters shown visibly; `styled` keeps the colour codes dlscale's own chart drew."""
    if styled:
        shown = "".join(
            part if i % 2 else printable(part, newlines=True)
            for i, part in enumerate(_STYLE.split(text))
        )
    else:
        shown = printable(text, newlines=True)
    click.echo(shown, nl=nl, err=to_err, color=styled or None)


def show(table: Table, wide: bool = False, columns: Sequence[str] | None = None) -> None:
    """One of the table model's tables on stdout, fitted to the terminal's width (the least
    important columns left out first, and named; `wide`: every column), then its notes."""
    shown, left_out = for_terminal(table, out.width, columns, wide)
    if wide or columns:  # every column asked for, whole, however wide (lines may wrap)
        narrow = out.width
        out.width = max(narrow, measured(shown))
        try:
            out.print(shown)
        finally:
            out.width = narrow
    else:
        out.print(shown)
    for line in [*([left_out] if left_out else []), *table.notes]:
        out.print(line, soft_wrap=True)
    for line in table.alerts:
        out.print(line, soft_wrap=True, style="red")


def colour() -> bool:
    """Whether dlscale's own output may be coloured: a terminal, and no NO_COLOR."""
    return out.is_terminal and not out.no_color


def wait_with_progress(store: Store, scheduler, run_ids: list[str]) -> None:
    """Follow runs to their end with a progress bar naming the run in hand (run --wait)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..disturbed_reruns import after_sync, reruns_of
    from ..tracking.monitor import wait_until_done

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[now]}", markup=False),  # run names, Slurm's words: text
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task("runs", total=len(run_ids), now="")
        said: set[str] = set()
        start = time.monotonic()

        def on_tick(tick, rows) -> None:
            done = sum(r["state"] in TERMINAL for r in rows)
            if not err.is_terminal:  # a log or a pipe gets no bar: a line per run as it ends
                for r in rows:
                    if r["state"] in TERMINAL and r["run_id"] not in said:
                        said.add(r["run_id"])
                        spent = elapsed_text(time.monotonic() - start)
                        err.print(
                            f"{len(said)}/{len(rows)} {run_label(r)} {r['state']} ({spent})",
                            soft_wrap=True,
                        )
            running = [r for r in rows if r["state"] == State.RUNNING]
            now = ""
            if running:
                r = running[0]
                last = store.records.last("interval", [r["run_id"]]).get(r["run_id"])
                now = run_label(r) + (
                    f": step {last['step']}, {last['images_per_s']:.0f} {unit_and_axes(r)[0]}/s"
                    if last
                    else ": starting"
                )
            if tick.problem:  # a scheduler that did not answer, a worker that cannot run
                now = tick.problem
            progress.update(task, completed=done, now=now)

        wait_until_done(
            store, scheduler, run_ids, on_tick, after_sync(store, scheduler), reruns_of(store)
        )
