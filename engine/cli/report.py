"""`dlscale report|export`: an experiment written up, stored runs in other formats."""

from __future__ import annotations

import click

from .. import disturbed_reruns
from ..errors import DlscaleError
from ..io.outputs import OutputFolder
from ..results.report import document, mllog
from ..runs import State
from ..tracking import follow
from ..tracking.store import Store
from .bundles import export_bundle
from .console import echo, out
from .options import InputPath, OutputPath, experiment_option, known_experiment, store_of


def _store(ctx: click.Context) -> Store:
    return store_of(ctx)


@click.command()
@click.option(
    "--experiment",
    "-e",
    "experiments",
    multiple=True,
    callback=lambda ctx, p, v: tuple(known_experiment(ctx, p, e) for e in v),
    help="which experiment (needed when the store holds more than one); give it again "
    "to report several side by side (a site column, figures overlaid)",
)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(folder=True),
    default=None,
    help="folder for the report, its figures and exports (default report-NAME)",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(document.FORMATS),
    default="md",
    show_default=True,
    help="md: Markdown with PNG files; html: one self-contained page",
)
@click.option(
    "--reference",
    type=InputPath(dir_okay=False),
    default=None,
    help="published numbers to set beside yours (default: reference.toml next to "
    "the experiment's spec, when there is one)",
)
@click.option(
    "--profile",
    "profile_path",
    type=InputPath(dir_okay=False),
    default=None,
    help="a cluster profile: its [interconnect] states the links the projection section "
    "uses where the benchmark measured none, its partition how far it projects (default: "
    "the profile the runs kept)",
)
@click.option(
    "--force",
    is_flag=True,
    help="write into a folder that is not empty and holds no earlier report "
    "(nothing of yours there is removed or overwritten, even so)",
)
@click.pass_context
def report(
    ctx: click.Context,
    experiments: tuple[str, ...],
    out_dir: str | None,
    fmt: str,
    reference: str | None,
    profile_path: str | None,
    force: bool,
) -> None:
    """Write up an experiment: set-up, tables, figures, MLLOG exports."""
    store = _store(ctx)
    disturbed_reruns.refresh(store)
    names = [store.pick_experiment(e) for e in experiments or [None]]
    default = f"report-{'-'.join(names)}"
    made = document.build(store, names, out_dir or default, fmt, reference, force, profile_path)
    out.print(
        f"report of {made.experiment}: {made.path} ({len(made.figures)} figures, "
        f"{len(made.tables)} tables, {len(made.mllogs)} MLLOG files)",
        soft_wrap=True,
    )


@click.group()
def export() -> None:
    """Stored runs in other formats."""


@export.command("mllog")
@click.argument("run_ids", nargs=-1, metavar="[RUN...]")
@experiment_option("every completed run of it")
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(folder=True),
    default=None,
    help="write RUN.mllog files here (default: print one run to stdout)",
)
@click.pass_context
def export_mllog(
    ctx: click.Context, run_ids: tuple[str, ...], experiment: str | None, out_dir: str | None
) -> None:
    """A run's records as MLPerf-style `:::MLLOG {json}` lines."""
    store = _store(ctx)
    ids = [follow.find_run(store, r)["run_id"] for r in run_ids]
    if experiment:
        ids += [
            r["run_id"]
            for r in store.runs(store.pick_experiment(experiment), states=(State.COMPLETED,))
        ]
    if not ids:
        raise click.UsageError("name runs to export, or --experiment")
    if out_dir is None:
        if len(ids) > 1:
            raise click.UsageError(f"{len(ids)} runs: give --out DIR to write one file each")
        lines = mllog.lines(store, ids[0])
        if not lines:
            raise DlscaleError(f"run {ids[0]} has no records yet")
        echo("\n".join(lines))
        return
    with OutputFolder.open(out_dir, "--out") as folder:
        written = mllog.write(store, ids, folder)
    out.print(
        f"wrote {len(written)} MLLOG file(s) to {out_dir}"
        + (f"; {len(ids) - len(written)} run(s) had no records" if len(written) < len(ids) else "")
    )


export.add_command(export_bundle)
