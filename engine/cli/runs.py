"""`dlscale plan|run|cancel|resubmit|rerun`: what a study submits and changes."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from .. import study
from ..backends.registry import BACKENDS, make_backend
from ..config.profile import load_profile
from ..config.spec import load_spec
from ..errors import PlanError
from ..io.text import printable
from ..launching.estimate import estimate
from ..launching.plan import plan
from ..results import analysis, charts, tables
from ..results.points import unit_and_axes
from ..runs import ACTIVE, State
from ..tracking import follow
from ..tracking.store import Store
from ..where import backend_for
from . import plan_view
from .console import colour, echo, err, out, show, wait_with_progress
from .options import InputPath, experiment_option, store_of


def _store(ctx: click.Context) -> Store:
    return store_of(ctx)


def backend_options(f):
    f = click.option(
        "--partition",
        default=None,
        help="partition of the profile (default: the profile's default partition)",
    )(f)
    f = click.option(
        "--profile",
        "profile_path",
        type=InputPath(dir_okay=False),
        default=None,
        help="cluster profile TOML (needed with --backend slurm)",
    )(f)
    return click.option(
        "--backend",
        default=None,
        type=click.Choice(BACKENDS),
        help="default: slurm with --profile, else local",
    )(f)


@click.command("plan")
@click.argument("spec", type=InputPath(dir_okay=False))
@backend_options
@click.option(
    "--include-planned",
    is_flag=True,
    help="show the whole matrix even where `run` "
    "would refuse it (missing environments, GPUs), the refusals beside it",
)
@click.option(
    "--all",
    "every_run",
    is_flag=True,
    help="one row per run instead of one per framework x model x scale",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: every run and the totals, for scripts",
)
@click.pass_context
def plan_cmd(
    ctx: click.Context,
    spec: str,
    backend: str | None,
    profile_path: str | None,
    partition: str | None,
    include_planned: bool,
    every_run: bool,
    fmt: str,
) -> None:
    """Dry run: the runs a spec makes, grouped, with their device-hours."""
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec)
    profile = load_profile(profile_path) if profile_path else None
    p = plan(loaded)
    store = _store(ctx)
    refusals = ""
    try:
        study.check_plan(
            loaded, p, make_backend(backend, store, profile, partition, connect=False), store.home
        )
    except PlanError as exc:
        if not include_planned:
            raise
        refusals = str(exc)  # the whole matrix is still shown; `run` would refuse these
    view = plan_view.PlanView(
        loaded,
        p,
        estimate(store, p.runs),
        {r["run_id"]: r["state"] for r in store.runs(loaded.spec.experiment.name)},
    )
    if fmt == "json":
        echo(view.json(refusals))
        return
    out.print(view.runs_table() if every_run else view.summary_table())
    for model, dataset in p.skipped_pairs:
        out.print(f"skipped: {model} x {dataset} (the model does not take that data)")
    for note in p.notes:
        out.print(note, soft_wrap=True)
    out.print(view.totals_line(), soft_wrap=True)
    if refusals:
        err.print(
            "not runnable here yet (`dlscale run` refuses these):\n" + refusals, soft_wrap=True
        )


@click.command()
@click.argument("spec", type=InputPath(dir_okay=False))
@backend_options
@click.option(
    "--wait/--no-wait",
    default=False,
    help="follow the runs to the end, then print the results table and speedup chart",
)
@click.option(
    "--if-busy",
    type=click.Choice(["go", "wait"]),
    default="go",
    show_default=True,
    help="local backend: when other work is using this machine's CPUs as the study starts "
    "(said in one line, with what), go on, or wait until it is quiet before submitting",
)
@click.pass_context
def run(
    ctx: click.Context,
    spec: str,
    backend: str | None,
    profile_path: str | None,
    partition: str | None,
    wait: bool,
    if_busy: str,
) -> None:
    """Submit the runs of SPEC that have not completed yet."""
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec)
    profile = load_profile(profile_path) if profile_path else None
    store = _store(ctx)
    target = make_backend(backend, store, profile, partition)
    if not _quiet_enough(target, if_busy):
        sys.exit(130)
    report = study.submit(store, loaded, target)
    name = loaded.spec.experiment.name
    where = target.describe() + (f" via {target.via}" if target.via else "")
    out.print(
        f"{name}: {report.sentence()}" + f" [backend: {where}]",
        soft_wrap=True,
    )
    if target.note:
        out.print(target.note, soft_wrap=True)
    for r, why in report.failed_to_submit:
        err.print(f"dlscale: not submitted: {r.label()}: {why}")
    if not wait:
        out.print("follow them with `dlscale status`; results with `dlscale results`")
        sys.exit(1 if report.failed_to_submit else 0)
    run_ids = [r.run_id for r in report.all_runs]
    try:
        wait_with_progress(store, target, run_ids)
    except KeyboardInterrupt:
        live = [rid for rid in run_ids if store.run(rid)["state"] in ACTIVE]
        err.print(
            f"\nstopped waiting; {len(live)} run(s) still queued or running on the "
            f"{backend} backend (they go on). Rerun the same command to wait again, "
            "`dlscale cancel --experiment " + name + "` to stop them."
        )
        sys.exit(130)
    rows = analysis.results(store, name)
    failed = [r for r in map(store.run, run_ids) if r["state"] != State.COMPLETED]
    if rows:
        show(tables.results_table(rows))
    empty = charts.nothing_to_draw(rows, "speedup")
    if empty is None:
        shown = colour()
        echo(charts.chart(rows, "speedup", width=min(out.width, 100), color=shown), styled=shown)
    elif len(failed) < len(run_ids):
        out.print(empty, soft_wrap=True)
    if failed:
        why = (
            f"dlscale: {len(failed)} of {len(run_ids)} runs did not complete; "
            "`dlscale status` shows why"
        )
        if len(failed) == len(run_ids):  # nothing to chart: the first reason says why here
            first = str(failed[0]["reason"] or "no reason recorded").split("\n", 1)[0]
            why = (
                f"dlscale: {len(failed)} of {len(run_ids)} runs did not complete, so there is "
                f"nothing to chart; run {failed[0]['run_id']}: {printable(first)}; `dlscale "
                "status` shows each run's reason"
            )
        err.print(why, soft_wrap=True)
        sys.exit(1)


# How often `run --if-busy wait` looks at the machine again while it is busy
LOOK_AGAIN_S = 4.0


def _quiet_enough(target: Any, if_busy: str) -> bool:
    """Say in one line what is using the machine, where the backend can look; with
    `wait`, look again every few seconds until it is quiet (False: interrupted)."""
    said = target.busy()
    if said is None:
        return True
    if if_busy == "go":
        out.print(
            f"{printable(said)}; going on (runs it disturbs are marked; `--if-busy wait` waits)",
            soft_wrap=True,
        )
        return True
    out.print(f"{printable(said)}; waiting for it to be quiet (ctrl+c stops)", soft_wrap=True)
    started = time.monotonic()
    try:
        while target.busy() is not None:
            time.sleep(LOOK_AGAIN_S)
    except KeyboardInterrupt:
        err.print("\nstopped waiting; nothing was submitted")
        return False
    out.print(f"quiet after {time.monotonic() - started:.0f} s; submitting", soft_wrap=True)
    return True


@click.command()
@click.argument("run_ids", nargs=-1, metavar="RUN|JOB...")
@experiment_option("every live run of this experiment")
@click.pass_context
def cancel(ctx: click.Context, run_ids: tuple[str, ...], experiment: str | None) -> None:
    """Cancel queued or running runs."""
    store = _store(ctx)
    ids = list(run_ids)
    if experiment:
        # Every run with a live job, whatever its row says (a duplicate job of a run that
        # completed under another job is live too).
        live = {j["run_id"] for j in store.jobs.live()}
        ids += [
            r["run_id"]
            for r in store.runs(experiment)
            if r["state"] in ACTIVE + (State.WAITING,) or r["run_id"] in live
        ]
        if not ids:
            out.print(f"nothing to cancel: {experiment} has no queued or running runs")
            return
    if not ids:
        raise click.UsageError("name runs to cancel, or --experiment")
    done = follow.cancel(store, ids)
    out.print(f"cancelled {len(done)} run(s)" + (f": {' '.join(done)}" if done else ""))
    # a run named that had no job left to cancel (its scheduler is asked first: a job may
    # have ended on its own since the last poll): what it is
    for rid in dict.fromkeys(follow.find_run(store, i)["run_id"] for i in ids):
        if rid not in done:
            out.print(f"not cancelled: run {rid} is {store.run(rid)['state']}, no job of it live")


@click.command()
@click.argument("run_ids", nargs=-1, required=True)
@click.pass_context
def resubmit(ctx: click.Context, run_ids: tuple[str, ...]) -> None:
    """Submit finished, failed or cancelled runs again, with the same job script."""
    store = _store(ctx)
    ids = [follow.find_run(store, r)["run_id"] for r in run_ids]
    for rid, job_id in study.resubmit(store, ids, lambda name: make_backend(name, store)):
        out.print(f"run {rid}: job {job_id}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--wait/--no-wait",
    default=False,
    help="follow the new run to its end, then compare it with the original",
)
@click.pass_context
def rerun(ctx: click.Context, run_id: str, wait: bool) -> None:
    """Repeat a finished run exactly, from its record, as a new run to compare with it."""
    store = _store(ctx)
    original = follow.find_run(store, run_id)
    new_id, job_id = study.rerun(store, original["run_id"], lambda name: make_backend(name, store))
    out.print(
        f"run {new_id} repeats run {original['run_id']}: job {job_id} "
        f"[backend: {original['backend']}]"
    )
    if not wait:
        out.print("follow it with `dlscale status`; compare with `dlscale report`")
        return
    try:
        # a rerun goes where its original went (study.rerun refuses one never submitted)
        wait_with_progress(store, make_backend(str(original["backend"]), store), [new_id])
    except KeyboardInterrupt:
        err.print(f"\nstopped waiting; run {new_id} goes on")
        sys.exit(130)
    row = next(r for r in analysis.reruns(store, original["experiment"]) if r["run_id"] == new_id)
    per_s = f"{unit_and_axes(original)[0]}/s"
    out.print(
        f"original {row['rerun_of']}: {tables.fmt(row['original_throughput'], 1)} "
        f"{per_s}; rerun {new_id}: {tables.fmt(row['rerun_throughput'], 1)} {per_s}; "
        f"rerun / original {tables.fmt(row['ratio'], 3)}"
    )
    if row["state"] != State.COMPLETED:
        err.print(f"dlscale: the rerun ended {row['state']}; `dlscale status` shows why")
        sys.exit(1)
