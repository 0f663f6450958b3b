"""`dlscale export bundle|import`: an experiment's results carried to another store."""

from __future__ import annotations

import click

from ..results import bundles
from .console import out
from .options import InputPath, OutputPath, experiment_option, store_of


@click.command("bundle")
@experiment_option("the experiment to bundle (needed when the store holds more than one)")
@click.option(
    "--out",
    "out_file",
    type=OutputPath(replace=False),
    required=True,
    help="the bundle to write (a new .tar.gz file)",
)
@click.option(
    "--site",
    default=None,
    help="where the runs were measured (default: the cluster profile's name, or this "
    "host's name for the local backend)",
)
@click.pass_context
def export_bundle(
    ctx: click.Context, experiment: str | None, out_file: str, site: str | None
) -> None:
    """An experiment's finished runs in one file: records, env, spec, job scripts, log
    tails and a manifest with checksums, for `dlscale import` elsewhere."""
    store = store_of(ctx)
    name = store.pick_experiment(experiment)
    path, written, left = bundles.export(store, name, out_file, site)
    out.print(
        f"wrote {path}: {written} finished run(s) of {name}"
        + (f"; {left} queued or running run(s) left out" if left else ""),
        soft_wrap=True,
    )


@click.command("import")
@click.argument("bundle", type=InputPath(dir_okay=False))
@click.pass_context
def import_cmd(ctx: click.Context, bundle: str) -> None:
    """Add a bundle from `dlscale export bundle` to this store, under NAME@SITE: all of
    it, or nothing if any part fails its checks. Importing it again changes nothing."""
    done = bundles.import_bundle(store_of(ctx), bundle)
    out.print(
        f"{done.experiment}: {len(done.added)} run(s) added, {len(done.updated)} updated, "
        f"{len(done.unchanged)} unchanged",
        soft_wrap=True,
    )
