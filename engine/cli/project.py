"""`dlscale project`: the scaling curve past the measured scales (results/projection.py),
from the store or from figures the user states (results/stated.py), as a table and a
chart, or JSON; every row says whether it was measured, stated or projected, and every
input where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import UserError
from ..tracking import follow
from .console import colour, echo, out, show
from .options import InputPath, experiment_option, store_of

if TYPE_CHECKING:
    from ..results.projection.project import Projection

GBPS = click.FloatRange(min=0, min_open=True, max=100_000)


def _pairs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict:
    """--throughput BATCH=X, each a per-device batch and the throughput of one device at it."""
    got: dict[float, float] = {}
    for item in value:
        batch, _, x = item.partition("=")
        try:
            b, v = float(batch), float(x)
        except ValueError:
            b = v = float("nan")
        if not (0 < b < 1e9 and 0 < v < 1e15):
            raise click.BadParameter(
                f"{item!r} is not BATCH=THROUGHPUT (a per-device batch and one device's "
                "samples a second at it, both above zero), e.g. 256=2470",
                ctx,
                param,
            )
        got[b] = v
    return got


def _stated_figures(kw: dict[str, Any]) -> Any:
    from ..results.projection import calibration, stated

    if kw["model"] is None and kw["parameters"] is None:
        known = ", ".join(calibration.gradients())
        raise UserError(
            "--throughput projects from stated figures: give the gradient too, --model NAME "
            f"(one of {known}) or --parameters N (with --gradient-dtype)"
        )
    if kw["model"] is not None and stated.named_parameters(kw["model"]) is None:
        known = ", ".join(calibration.gradients())
        raise UserError(f"--model {kw['model']}: not a model dlscale knows the size of ({known})")
    if kw["scaling"] == "strong" and kw["global_batch"] is None:
        raise UserError("--scaling strong needs --global-batch B (the batch of all devices)")
    return stated.Figures(
        kw["throughput"],
        kw["measured_on"],
        kw["model"],
        kw["parameters"],
        kw["gradient_dtype"],
        kw["intra_gbps"],
        kw["inter_gbps"],
        kw["nics_per_node"],
        kw["latency_us"],
        kw["scaling"],
        kw["global_batch"],
        kw["batch"],
        kw["accumulation"],
        _stated_terms(kw),
        kw["unit"],
    )


def _stated_terms(kw: dict[str, Any]) -> dict[str, float | None]:
    from ..results.projection import stated

    ms = kw["overhead_ms"]
    return {
        stated.JITTER: kw["jitter_cv"],
        stated.OVERHEAD: None if ms is None else ms / 1e3,
        stated.OVERLAP: kw["overlap"],
    }


def _cli_links(kw: dict[str, Any]) -> dict:
    """The links stated on the command line (they take a profile's place)."""
    from ..results.projection import stated

    return stated.links(
        stated.Figures(
            {},
            intra_gbps=kw["intra_gbps"],
            inter_gbps=kw["inter_gbps"],
            nics_per_node=kw["nics_per_node"],
            latency_us=kw["latency_us"],
        )
    )


def _print(shown: Projection, metric: str) -> None:
    from ..results import charts
    from ..results.projection import project
    from ..results.projection.tables import projection_table

    table = projection_table(shown.families, shown.to, shown.to_from)
    if table is not None:
        show(table)
    shown_colour = colour()
    echo(
        charts.projection_chart(
            project.chart_series(shown.families, metric),
            metric,
            min(out.width, 100),
            22,
            shown_colour,
        ),
        styled=shown_colour,
    )


@click.command()
@experiment_option()
@click.option(
    "--to",
    "to",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="project up to this many nodes (default: the partition's size, from the cluster "
    "profile the runs kept, else 8 x the largest measured; with stated figures, 1)",
)
@click.option(
    "--devices-per-node",
    type=click.IntRange(1, 4096),
    default=None,
    help="devices a node at the projected scales, projected inside one node first "
    "(default: the base's)",
)
@click.option(
    "--profile",
    "profile_path",
    type=InputPath(dir_okay=False),
    default=None,
    help="a cluster profile whose [interconnect] states the links the benchmark did not "
    "measure (default: the profile the runs kept)",
)
@click.option(
    "--throughput",
    multiple=True,
    callback=_pairs,
    metavar="BATCH=X",
    help="stated figures, no store: one device's throughput X at per-device batch BATCH "
    "(again for more batches: the overhead per step is fitted from them)",
)
@click.option(
    "--measured-on",
    type=click.IntRange(1, 4096),
    default=1,
    show_default=True,
    help="devices of one node the --throughput figures were measured on",
)
@click.option("--model", default=None, help="the gradient: a model dlscale knows the size of")
@click.option(
    "--parameters", type=click.IntRange(1, 10**13), default=None, help="the gradient: parameters"
)
@click.option(
    "--gradient-dtype",
    type=click.Choice(["fp32", "fp16", "bf16"]),
    default="fp32",
    show_default=True,
    help="what the allreduce moves (mixed precision in PyTorch keeps fp32 gradients)",
)
@click.option("--intra-gbps", type=GBPS, default=None, help="device links in a node, GB/s")
@click.option("--inter-gbps", type=GBPS, default=None, help="one NIC's bandwidth, GB/s")
@click.option(
    "--nics-per-node", type=click.IntRange(1, 64), default=1, show_default=True, help="NICs a node"
)
@click.option(
    "--latency-us", type=click.FloatRange(0, 1e6), default=None, help="a message's latency, us"
)
@click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak", show_default=True)
@click.option(
    "--global-batch",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="strong scaling's batch of all devices",
)
@click.option(
    "--batch",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="weak scaling's per-device batch (default: the first --throughput's)",
)
@click.option("--accumulation", type=click.IntRange(1, 1_000_000), default=1, show_default=True)
@click.option("--unit", default="samples", show_default=True, help="what the throughput counts")
@click.option(
    "--jitter-cv", type=click.FloatRange(0, 10), default=None, help="state a rank's step jitter"
)
@click.option(
    "--overhead-ms",
    type=click.FloatRange(0, 1e6),
    default=None,
    help="state the overhead per step the batch does not shrink, ms",
)
@click.option(
    "--overlap",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="state the share of a step's compute the allreduce can hide behind",
)
@click.option(
    "--metric",
    type=click.Choice(["efficiency", "speedup", "throughput"]),
    default="efficiency",
    show_default=True,
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.pass_context
def project(ctx: click.Context, **kw: Any) -> None:
    """Project scaling past the measured scales, or from stated figures, with honest intervals.

    From the store: each point family from its largest measured single-node point, with a
    held-out check where 3+ scales were measured. From stated figures (--throughput, no
    store): one device's throughput at a batch, the gradient and the links. Intervals cover
    the model's own error, calibrated on published scaling (docs/measuring.md)."""
    import json

    from ..results.projection import project

    to, per_node = kw["to"], kw["devices_per_node"]
    if kw["throughput"]:
        if kw["experiment"] is not None:
            raise UserError("--throughput projects from stated figures, not the store: drop -e")
        fig = _stated_figures(kw)
        per_node = per_node or fig.measured_on
        to = to or 1
        if to == 1 and per_node <= fig.measured_on:
            raise UserError(
                "nothing to project: give --to NODES, or --devices-per-node above --measured-on"
            )
        shown = project.of_figures(fig, to, per_node)
    else:
        store = store_of(ctx)
        follow.refresh(store)
        name = store.pick_experiment(kw["experiment"])
        shown = project.of_study(
            store,
            name,
            to,
            kw["profile_path"],
            per_node,
            _cli_links(kw),
            _stated_terms(kw),
        )
    if kw["fmt"] == "json":
        echo(json.dumps(shown.families, indent=2, allow_nan=False))
        return
    _print(shown, kw["metric"])
