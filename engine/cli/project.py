"""`dlscale project`: the scaling curve past the measured scales (results/projection.py),
as a table and a chart, or JSON; every row says whether it was measured or projected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..errors import NotFoundError, UserError
from ..paths import RunPaths
from ..tracking import follow as following
from .console import out
from .options import experiment_option, store_of


def _kept_profile(runs: list[dict[str, Any]]) -> Path | None:
    """The cluster profile a Slurm run kept beside its job script."""
    for r in runs:
        path = RunPaths(Path(r["run_dir"] or "")).profile
        if path.is_file():
            return path
    return None


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
        ("images/s [95%]", "right"),
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


def held_out_text(held: dict[str, Any] | None) -> Text:
    if held is None:
        return Text("held-out check: fewer than 3 scales measured, nothing to hold out")
    scale = f"{held['nodes']}x{held['ranks_per_node']}"
    if "why" in held:
        return Text(f"held-out check at {scale}: not possible: {held['why']}")
    x = held["projected_throughput"]
    line = (
        f"held-out check: {scale} projected from {', '.join(held['from'])}: "
        f"{x['value']:,.1f} images/s [{x['ci95_low']:,.1f}, {x['ci95_high']:,.1f}], "
        f"measured {held['measured_throughput']:,.1f}: error {100 * held['error']:+.1f}%"
    )
    if held["outside_interval"]:
        return Text(line + " - OUTSIDE its interval", style="bold red")
    return Text(line + " (within its interval)")


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
    type=click.Path(dir_okay=False),
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

    from ..config.profile import load_profile
    from ..results import charts, commfit, projection

    store = store_of(ctx)
    following.refresh(store)
    name = experiment or _only_experiment(store.experiment_names(), str(store.home))
    kept = _kept_profile(store.runs(name))
    path = Path(profile_path) if profile_path else kept
    loaded = load_profile(path) if path is not None else None
    if to is None:
        if loaded is None:
            raise UserError(
                "give --to NODES: the runs of experiment "
                f"{name} kept no cluster profile to read the partition's size from"
            )
        to = loaded.profile.partition(None).nodes
    stated = commfit.stated(loaded.profile.interconnect, str(path)) if loaded else {}
    fams = projection.projections(store, name, to, stated)
    if fmt == "json":
        click.echo(json.dumps(fams, indent=2))
        return
    for fam in fams:
        out.print(_table(fam))
        if fam.get("why"):
            out.print(f"not projected: {fam['why']}", soft_wrap=True)
        for tier, lk in (fam.get("links") or {}).items():
            lo, hi = lk["bandwidth_ci95_gbps"]
            out.print(
                f"{tier} link ({lk['source']}): bandwidth {lk['bandwidth_gbps']:,.3f} GB/s "
                f"[{lo:,.3f}, {'-' if hi is None else f'{hi:,.3f}'}], latency "
                f"{lk['latency_us']:,.1f} us, from {', '.join(lk['inputs'])}"
                + (f"; {lk['note']}" if lk["note"] else ""),
                soft_wrap=True,
            )
        out.print(held_out_text(fam["held_out"]), soft_wrap=True)
    out.print(
        "projected rows: the largest measured single-node point plus the fitted allreduce "
        "at that scale, as much of it hidden as the breakdown measured; [95%] intervals "
        "from the repetitions' spread and the fit (docs/measuring.md).",
        soft_wrap=True,
    )
    click.echo(
        charts.projection_chart(
            projection.chart_series(fams, metric), metric, min(out.width, 100), 22, out.is_terminal
        )
    )
