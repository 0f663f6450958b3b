"""`dlscale project`: the scaling curve past the measured scales (results/projection.py),
from the store or from figures the user states (results/stated.py), as a table and a
chart, or JSON; every row says whether it was measured, stated or projected, and every
input where it came from."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..errors import NotFoundError, UserError
from ..runs import per_second
from ..tracking import follow as following
from .console import out
from .options import experiment_option, store_of

GBPS = click.FloatRange(min=0, min_open=True, max=100_000)


def _only_experiment(names: list[str], home: str) -> str:
    if len(names) == 1:
        return names[0]
    if not names:
        raise NotFoundError(f"the store ({home}) has no experiments yet")
    raise UserError(
        f"the store holds {len(names)} experiments; name one with --experiment: " + ", ".join(names)
    )


def _interval(v: dict[str, float] | None, digits: int) -> str:
    if v is None:
        return "-"
    if v["ci95_low"] == v["value"] == v["ci95_high"]:  # a stated figure: no interval
        return f"{v['value']:,.{digits}f}"
    return f"{v['value']:,.{digits}f} [{v['ci95_low']:,.{digits}f}, {v['ci95_high']:,.{digits}f}]"


def _table(fam: dict[str, Any]) -> Table:
    t = Table(title=f"{fam['experiment']}: {fam['family']}", title_justify="left")
    for name, justify in (
        ("scale", "right"),
        ("devices", "right"),
        ("measured/projected", "left"),
        ("global batch", "right"),
        (f"{per_second([fam.get('unit')])} [95%]", "right"),
        ("speedup [95%]", "right"),
        ("efficiency [95%]", "right"),
        ("link", "left"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in fam["rows"]:
        stated_link = r["kind"] == "projected" and r.get("stated")
        t.add_row(
            f"{r['nodes']}x{r['ranks_per_node']}",
            str(r["ranks"]),
            "projected (stated link)" if stated_link else r["kind"],
            f"{r['global_batch']:g}" if "global_batch" in r else "-",
            _interval(r.get("throughput"), 1) if "why" not in r else r["why"],
            _interval(r.get("speedup"), 2),
            _interval(r.get("efficiency"), 2),
            r.get("link", "-") if r["kind"] == "projected" else "-",
        )
    return t


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
    from ..results import calibration, stated

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
    from ..results import stated

    ms = kw["overhead_ms"]
    return {
        stated.JITTER: kw["jitter_cv"],
        stated.OVERHEAD: None if ms is None else ms / 1e3,
        stated.OVERLAP: kw["overlap"],
    }


def _cli_links(kw: dict[str, Any]) -> dict:
    """The links stated on the command line (they take a profile's place)."""
    from ..results import stated

    return stated.links(
        stated.Figures(
            {},
            intra_gbps=kw["intra_gbps"],
            inter_gbps=kw["inter_gbps"],
            nics_per_node=kw["nics_per_node"],
            latency_us=kw["latency_us"],
        )
    )


def _print(fams: list[dict[str, Any]], metric: str) -> None:
    from ..results import charts, projected, projection
    from ..results.report_projection import held_out_line, link_line

    for fam in fams:
        out.print(_table(fam))
        if fam.get("why"):
            out.print(f"not projected: {fam['why']}", soft_wrap=True)
        for line in fam.get("inputs") or []:
            out.print(Text(f"input: {line}"), soft_wrap=True)
        for lk in (fam.get("links") or {}).values():
            out.print(Text(link_line(lk)), soft_wrap=True)
        for note in fam.get("notes") or []:
            out.print(Text(f"note: {note}", style="bold"), soft_wrap=True)
        if (top := projection.largest(fam)) is not None:
            out.print(Text(projected.terms_said(top)), soft_wrap=True)
        if fam.get("experiment") != "stated figures":
            line, missed = held_out_line(fam)
            out.print(Text(line, style="bold red") if missed else Text(line), soft_wrap=True)
    for note in fams[0]["skipped"] if fams else []:  # sweep entries left out of the fit
        out.print(f"left out of the fit: {note}", soft_wrap=True)
    out.print(
        "projected rows: the base's step (the largest measured single-node point, or the "
        "figure stated) plus, at each scale, the wait for the slowest rank, the small-batch "
        "overhead and the hierarchical allreduce not hidden behind compute; [95%] intervals "
        "from the inputs' spread and the model's error calibrated on published scaling "
        "(docs/measuring.md).",
        soft_wrap=True,
    )
    click.echo(
        charts.projection_chart(
            projection.chart_series(fams, metric), metric, min(out.width, 100), 22, out.is_terminal
        )
    )


@click.command()
@experiment_option()
@click.option(
    "--to",
    "to",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="project up to this many nodes (default: the partition's size, from the cluster "
    "profile the runs kept; with stated figures, 1)",
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
    type=click.Path(dir_okay=False),
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

    from ..results import projection

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
        fams = [projection.from_figures(fig, to, per_node)]
    else:
        store = store_of(ctx)
        following.refresh(store)
        name = kw["experiment"] or _only_experiment(store.experiment_names(), str(store.home))
        to, _, links = projection.how_far(store, name, to, kw["profile_path"])
        if to is None:
            raise UserError(
                "give --to NODES: the runs of experiment "
                f"{name} kept no cluster profile to read the partition's size from"
            )
        links = {**links, **_cli_links(kw)}
        fams = projection.projections(store, name, to, links, per_node, _stated_terms(kw))
    if kw["fmt"] == "json":
        click.echo(json.dumps(fams, indent=2))
        return
    _print(fams, kw["metric"])
