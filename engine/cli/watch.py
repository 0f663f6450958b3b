"""`dlscale status|logs`: following a study's runs while they go. Light on imports: these
are the commands typed many times a day."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .. import disturbed_reruns
from ..backends.registry import make_backend
from ..errors import DlscaleError
from ..io.text import printable
from ..paths import RunPaths, own_folder
from ..results import tables
from ..runs import TERMINAL, UNFINISHED, State
from ..tracking import follow, queue
from ..tracking.logs import follow_lines, tail_lines
from ..tracking.monitor import sync
from ..tracking.store import Store
from .console import echo, err, out
from .options import experiment_option, store_of


def _store(ctx: click.Context) -> Store:
    return store_of(ctx)


@click.command()
@experiment_option()
@click.option("--all", "show_all", is_flag=True, help="include completed runs")
@click.pass_context
def status(ctx: click.Context, experiment: str | None, show_all: bool) -> None:
    """Runs, their jobs and states (live ones first asked of the scheduler)."""
    store = _store(ctx)
    problems = disturbed_reruns.refresh(store)
    every = queue.rows(store, experiment)
    # a completed run with a reason (counted though its job failed after its measurement,
    # or with records skipped) is shown too
    shown = [q for q in every if q.state != State.COMPLETED or q.reason]
    rows = every if show_all else shown
    if rows:
        echo(tables.status_table(rows, out.width))
    counts = queue.counts(every)
    said = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no runs yet"
    if len(rows) < len(every):  # as --help says: completed runs only with --all
        said += f" ({len(every) - len(rows)} completed not listed: --all lists them)"
    out.print(said)
    for note in store.records.skipped_notes([q.run_id for q in every] if experiment else None):
        out.print(note, soft_wrap=True)
    for problem in problems:  # a scheduler that did not answer, a worker that cannot run
        err.print(f"dlscale: {problem}", soft_wrap=True)


@click.command()
@click.argument("run_id")
@click.option(
    "--follow", "-f", "follow_log", is_flag=True, help="keep printing new lines until the run ends"
)
@click.option("--lines", "-n", type=click.IntRange(1, 1_000_000), default=40, show_default=True)
@click.pass_context
def logs(ctx: click.Context, run_id: str, follow_log: bool, lines: int) -> None:
    """The log of a run (unique id prefixes work)."""
    store = _store(ctx)
    row = follow.find_run(store, run_id)
    path = RunPaths(own_folder(Path(row["run_dir"] or ""))).log  # a link there: named, not read
    if not follow_log:
        if not path.exists():
            raise DlscaleError(f"run {row['run_id']} has no log yet ({path}); state {row['state']}")
        try:
            shown = tail_lines(path, lines)
        except OSError as exc:  # a link, a FIFO, a folder in the log's place
            raise DlscaleError(f"run {row['run_id']}: its log was not read: {exc}") from None
        for line in shown:
            echo(line)
        size = path.lstat().st_size
        if size > sum(len(line.encode()) + 1 for line in shown):  # more above what was shown
            sys.stdout.flush()
            err.print(
                f"dlscale: the last {len(shown)} lines of {path} ({size:,} bytes); "
                "--lines N for more, --follow to follow",
                soft_wrap=True,
            )
        _say_why(store, row["run_id"])
        return
    backend = make_backend(row["backend"] or "local", store)
    last_check = [0.0]

    def finished() -> bool:
        if time.time() - last_check[0] < 2:
            return False
        last_check[0] = time.time()
        sync(store, backend)
        return store.run(row["run_id"])["state"] not in UNFINISHED

    try:
        for line in follow_lines(path, lines, stop=finished):
            echo(line)
    except KeyboardInterrupt:
        return
    _say_why(store, row["run_id"])


def _say_why(store: Store, run_id: str) -> None:
    """Under a finished run's log, on stderr (the log alone goes to stdout): why it failed,
    or how its job ended after its measurement, in one line."""
    row = store.run(run_id)
    if row["state"] in TERMINAL and row["reason"]:
        first = printable(row["reason"].split("\n", 1)[0])
        sys.stdout.flush()  # the log's lines first, where both go to one terminal or file
        err.print(f"dlscale: run {run_id} {row['state']}: {first}", soft_wrap=True)
