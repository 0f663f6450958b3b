"""`dlscale project`: the scaling curve past the measured scales (results/projection.py),
as a table and a chart, or JSON; every row says whether it was measured or projected."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..errors import NotFoundError, UserError
from ..runs import per_second
from ..tracking import follow as following
from .console import colour, echo, out
from .options import InputPath, experiment_option, store_of


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
        kind = r["kind"] if not r.get("stated") else "projected (stated link)"
        t.add_row(
            f"{r['nodes']}x{r['ranks_per_node']}",
            str(r["ranks"]),
            kind,
            str(r.get("global_batch", "-")),
            _interval(r.get("throughput"), 1) if "why" not in r else r["why"],
            _interval(r.get("speedup"), 2),
            _interval(r.get("efficiency"), 2),
            "-"
            if r["kind"] == "measured"
            else ("stated, not measured" if r.get("stated") else "measured fit"),
        )
    return t


@click.command()
@experiment_option()
@click.option(
    "--to",
    "to",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="project up to this many nodes (default: the partition's size, from the cluster "
    "profile the runs kept)",
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
    "--metric",
    type=click.Choice(["efficiency", "speedup", "throughput"]),
    default="efficiency",
    show_default=True,
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.pass_context
def project(
    ctx: click.Context,
    experiment: str | None,
    to: int | None,
    profile_path: str | None,
    metric: str,
    fmt: str,
) -> None:
    """Project the scaling curve past the measured scales, with intervals and a held-out check."""
    import json

    from ..results import charts, projection
    from ..results.report_projection import held_out_line, link_line

    store = store_of(ctx)
    following.refresh(store)
    name = experiment or _only_experiment(store.experiment_names(), str(store.home))
    to, _, stated = projection.how_far(store, name, to, profile_path)
    if to is None:
        raise UserError(
            "give --to NODES: the runs of experiment "
            f"{name} kept no cluster profile to read the partition's size from"
        )
    fams = projection.projections(store, name, to, stated)
    if fmt == "json":
        echo(json.dumps(fams, indent=2))
        return
    for fam in fams:
        out.print(_table(fam))
        if fam.get("why"):
            out.print(f"not projected: {fam['why']}", soft_wrap=True)
        for lk in (fam.get("links") or {}).values():
            out.print(link_line(lk), soft_wrap=True)
        line, missed = held_out_line(fam)
        out.print(Text(line, style="bold red") if missed else Text(line), soft_wrap=True)
    for note in fams[0]["skipped"] if fams else []:  # sweep entries left out of the fit
        out.print(f"left out of the fit: {note}", soft_wrap=True)
    out.print(
        "projected rows: the largest measured single-node point plus the fitted allreduce "
        "at that scale, as much of it hidden as the breakdown measured; [95%] intervals "
        "from the repetitions' spread and the fit (docs/measuring.md).",
        soft_wrap=True,
    )
    shown = colour()
    echo(
        charts.projection_chart(
            projection.chart_series(fams, metric), metric, min(out.width, 100), 22, shown
        ),
        styled=shown,
    )
