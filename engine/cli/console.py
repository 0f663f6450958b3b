"""Where the command line writes: stdout for what was asked, stderr for errors and progress."""

from __future__ import annotations

import sys

from rich.console import Console

from ..results.points import unit_and_axes
from ..runs import TERMINAL, State
from ..tracking.store import Store  # noqa: TC001

# Piped output (CI logs, `| less`) gets room for the wide tables instead of rich's 80 columns.
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)
err = Console(
    stderr=True, highlight=False, markup=False, width=None if sys.stderr.isatty() else 160
)


def wait_with_progress(store: Store, scheduler, run_ids: list[str]) -> None:
    """Follow runs to their end with a progress bar naming the run in hand (run --wait)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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

        def on_tick(tick, rows) -> None:
            done = sum(r["state"] in TERMINAL for r in rows)
            running = [r for r in rows if r["state"] == State.RUNNING]
            now = ""
            if running:
                r = running[0]
                last = store.records.last("interval", [r["run_id"]]).get(r["run_id"])
                now = (
                    f"{r['framework']} {r['model']} {r['nodes']}x{r['ranks_per_node']} "
                    f"#{r['repetition']}"
                    + (
                        f": step {last['step']}, {last['images_per_s']:.0f} {unit_and_axes(r)[0]}/s"
                        if last
                        else ": starting"
                    )
                )
            if not tick.reachable:
                now = f"controller unreachable, retrying: {tick.warning}"
            progress.update(task, completed=done, now=now)

        wait_until_done(store, scheduler, run_ids, on_tick)
