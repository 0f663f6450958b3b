"""`dlscale store`: looking after the store itself, apart from the studies in it."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import capped
from ..runs import State
from ..tracking.store import default_home, from_folders
from .console import out


@click.group()
def store() -> None:
    """The store (DLSCALE_HOME/dlscale.db): rebuild it from the run folders."""


@store.command("rebuild")
@click.option(
    "--force",
    is_flag=True,
    help="rebuild even a store that opens and checks fine "
    "(its local queue and job history are lost; the file is kept aside)",
)
@click.pass_context
def rebuild(ctx: click.Context, force: bool) -> None:
    """Make a new store from the run folders under runs/, keeping the old file aside as
    dlscale.db.damaged-TIME: every run's records are in its folder."""
    home = Path(ctx.obj["home"]) if ctx.obj["home"] else default_home()
    done = from_folders.rebuild(home, force)
    for path in done.kept_aside:
        out.print(f"kept aside: {path}", soft_wrap=True)
    total = sum(done.runs.values())
    states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(done.runs.items()))
    out.print(
        f"recovered {total} run(s) of {len(done.experiments)} experiment(s) "
        f"({states or 'none'}), {done.records} records, {done.skipped_lines} skipped "
        f"line(s), into {home / 'dlscale.db'}",
        soft_wrap=True,
    )
    if done.guessed:
        out.print(
            f"{len(done.guessed)} run(s) had neither run.json nor their spec; placed "
            "from their params record under the experiment 'recovered': " + " ".join(done.guessed),
            soft_wrap=True,
        )
    lost = capped([f"not recovered: {p}" for p in done.unreadable], what="folder(s)")
    for line in lost + capped([f"note: {n}" for n in done.notes], what="note(s)"):
        out.print(line, soft_wrap=True)
    if any(s in done.runs for s in (State.RUNNING, State.FAILED, State.PLANNED)):
        out.print(
            "`dlscale status` shows each run; runs that had not finished can be run "
            "again with `dlscale run SPEC`",
            soft_wrap=True,
        )
