"""`dlscale project`: the scaling curve past the measured scales (results/projection/project.py),
from the store or from figures the user states (results/projection/stated.py), as a table and a
chart, or JSON; every row says whether it was measured, stated or projected, and every
input where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .. import disturbed_reruns
from ..config.quantities import (
    BANDWIDTH,
    BATCH,
    GLOBAL_BATCH,
    JITTER_CV,
    LATENCY,
    OVERHEAD_MS,
    OVERLAP,
    THROUGHPUT,
    read,
)
from ..errors import UserError
from .console import colour, echo, out, show
from .options import InputPath, experiment_option, store_of

if TYPE_CHECKING:
    from ..results.projection.project import Projection


def _pairs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict:
    """--throughput BATCH=X, each a per-device batch and the throughput of one device at it;
    a batch stated twice is a contradiction, refused naming both."""
    got: dict[int, float] = {}
    said: dict[int, str] = {}
    form = "BATCH=THROUGHPUT: a per-device batch and one device's samples a second at it"
    for item in value:
        batch, eq, x = item.partition("=")
        if not eq:
            raise click.BadParameter(f"{item!r} is not {form}, e.g. 256=2470", ctx, param)
        for text, quantity in ((batch, BATCH), (x, THROUGHPUT)):
            problem = quantity.problem(read(text))
            if problem is not None:
                raise click.BadParameter(
                    f"{item!r}: {text!r} is {problem}; {quantity.rule()} (give {form})",
                    ctx,
                    param,
                )
        b, v = BATCH.value(read(batch)), THROUGHPUT.value(read(x))
        if b in got and got[b] != v:
            raise click.BadParameter(
                f"{said[b]!r} and {item!r} state two throughputs for batch {b}: give one",
                ctx,
                param,
            )
        got[b], said[b] = v, item
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
    if kw["model"] is not None and kw["parameters"] is not None:
        raise UserError(
            f"--model {kw['model']} and --parameters {kw['parameters']} both state the "
            "gradient: give one"
        )
    if kw["scaling"] == "strong" and kw["global_batch"] is None:
        raise UserError("--scaling strong needs --global-batch B (the batch of all devices)")
    if kw["scaling"] == "strong" and kw["batch"] is not None:
        raise UserError(
            f"--batch {kw['batch']} is weak scaling's per-device batch, and --scaling strong "
            f"splits --global-batch {kw['global_batch']} over the devices: drop --batch"
        )
    if kw["scaling"] == "weak" and kw["global_batch"] is not None:
        raise UserError(
            f"--global-batch {kw['global_batch']} is strong scaling's, and the scaling is "
            "weak (each device keeps its batch): give --scaling strong, or --batch instead"
        )
    _falling(kw["throughput"])
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


# A larger batch does the same work a sample with less overhead a step: one device's
# throughput does not fall as its batch grows, beyond a measurement's noise and a cache's
# spill. Falling more than this far, the figures are not of one device and one model.
FALL = 2.0


def _falling(throughput: dict[int, float]) -> None:
    ordered = sorted(throughput.items())
    for i, (small, x) in enumerate(ordered):
        for big, y in ordered[i + 1 :]:
            if x > FALL * y:
                raise UserError(
                    f"--throughput {small}={x:g} and {big}={y:g}: one device's throughput "
                    f"falls {x / y:,.3g}x as its batch grows, which no step of a fixed overhead "
                    "and a cost a sample does; check that both are one device's samples a "
                    "second, of one model"
                )


# What only stated figures take: a projection from the store reads each from its runs.
_STATED_ONLY = (
    "measured_on",
    "model",
    "parameters",
    "gradient_dtype",
    "scaling",
    "global_batch",
    "batch",
    "accumulation",
    "unit",
)


def _given(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """The options among `names` the user gave (not left at their defaults), as flags."""
    from click.core import ParameterSource

    return [
        p.opts[0]
        for p in ctx.command.params
        if p.name in names
        and ctx.get_parameter_source(p.name or "") not in (ParameterSource.DEFAULT, None)
    ]


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
@click.option(
    "--intra-gbps", type=BANDWIDTH.option(), default=None, help="device links in a node, GB/s"
)
@click.option(
    "--inter-gbps", type=BANDWIDTH.option(), default=None, help="one NIC's bandwidth, GB/s"
)
@click.option(
    "--nics-per-node", type=click.IntRange(1, 64), default=1, show_default=True, help="NICs a node"
)
@click.option("--latency-us", type=LATENCY.option(), default=None, help="a message's latency, us")
@click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak", show_default=True)
@click.option(
    "--global-batch",
    type=GLOBAL_BATCH.option(),
    default=None,
    help="strong scaling's batch of all devices",
)
@click.option(
    "--batch",
    type=BATCH.option(),
    default=None,
    help="weak scaling's per-device batch (default: the first --throughput's)",
)
@click.option("--accumulation", type=click.IntRange(1, 1_000_000), default=1, show_default=True)
@click.option(
    "--unit",
    default=None,
    help="what the throughput counts (default: the --model's own, images for an image "
    "model; else samples)",
)
@click.option(
    "--jitter-cv", type=JITTER_CV.option(), default=None, help="state a rank's step jitter"
)
@click.option(
    "--overhead-ms",
    type=OVERHEAD_MS.option(),
    default=None,
    help="state the overhead per step the batch does not shrink, ms",
)
@click.option(
    "--overlap",
    type=OVERLAP.option(),
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
        if kw["profile_path"] is not None:
            raise UserError(
                "--profile's links are read for a projection from the store; with "
                "--throughput, state them: --intra-gbps, --inter-gbps, --latency-us"
            )
        fig = _stated_figures(kw)
        per_node = per_node or fig.measured_on
        if per_node < fig.measured_on:
            raise UserError(
                f"--measured-on {fig.measured_on} devices of one node, and --devices-per-node "
                f"{per_node}: the figures come from a node larger than those projected; give "
                f"--devices-per-node {fig.measured_on} or more"
            )
        to = to or 1
        if to == 1 and per_node <= fig.measured_on:
            raise UserError(
                "nothing to project: give --to NODES, or --devices-per-node above --measured-on"
            )
        shown = project.of_figures(fig, to, per_node)
    else:
        ignored = _given(ctx, _STATED_ONLY)
        if ignored:
            raise UserError(
                f"{', '.join(ignored)}: stated figures, which go with --throughput; a "
                "projection from the store reads them from its runs: drop them, or give "
                "--throughput"
            )
        store = store_of(ctx)
        disturbed_reruns.refresh(store)
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
