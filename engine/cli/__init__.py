"""`dlscale`: the command line over the engine. Bad input exits 2 with one clear message per
problem; failures of the world exit 1; neither prints a traceback."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from ...trainers.common.args import MODELS
from .. import study
from ..config.profile import load_profile
from ..config.spec import load_spec
from ..errors import DlscaleError, PlanError, SpecError
from ..launching.estimate import estimate
from ..launching.plan import plan as make_plan
from ..paths import RunPaths
from ..results import analysis, charts, mllog, tables
from ..results import report as reporting
from ..tracking import queue
from ..tracking.logs import follow, tail_lines
from ..tracking.monitor import sync
from ..tracking.store import ACTIVE, SUBMITTING, Store, damage_message, default_home
from .console import err, out, wait_with_progress
from .data import data
from .env import doctor, env
from .options import backend_for, experiment_option, home_callback, store_of
from .store import store as store_group

_chosen: dict[str, str | None] = {"home": None}  # for messages outside a command



def _store(ctx: click.Context) -> Store:
    return store_of(ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="DLSCALE_HOME", type=click.Path(), callback=home_callback,
              help="where the store and run folders live (default ~/.dlscale)")
@click.version_option(package_name="dlscale")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Measure how deep-learning training scales: frameworks x models x scales."""
    ctx.obj = {"home": home}
    _chosen["home"] = home


def _backend_options(f):
    f = click.option("--partition", default=None, help="partition of the profile "
                     "(default: the profile's default partition)")(f)
    f = click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
                     help="cluster profile TOML (needed with --backend slurm)")(f)
    return click.option("--backend", default=None, type=click.Choice(study.BACKENDS),
                        help="default: slurm with --profile, else local")(f)


@cli.command("plan")
@click.argument("spec", type=click.Path(dir_okay=False))
@_backend_options
@click.option("--include-planned", is_flag=True, help="also expand frameworks, datasets and "
              "loaders that cannot run yet, to see a study's whole matrix (nothing runs)")
@click.pass_context
def plan_cmd(ctx: click.Context, spec: str, backend: str | None, profile_path: str | None,
             partition: str | None, include_planned: bool) -> None:
    """Dry run: list the runs a spec makes, their count and the device-hours."""
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec, planning=include_planned)
    profile = load_profile(profile_path) if profile_path else None
    p = make_plan(loaded)
    store = _store(ctx)
    refusals = ""
    try:
        study.check_plan(loaded, p, backend, profile, partition, store.home)
    except PlanError as exc:
        if not include_planned:
            raise
        refusals = str(exc)  # the whole matrix is still shown; `run` would refuse these
    est = estimate(store, p.runs)
    t = tables.Table(title=f"Plan of {loaded.spec.experiment.name} ({loaded.path})",
                     title_justify="left")
    for col in ("run", "framework", "model", "dataset", "scale", "devices", "batch/dev",
                "precision", "rep", "state", "est. minutes"):
        t.add_column(col)
    known = {r["run_id"]: r["state"] for r in store.runs(loaded.spec.experiment.name)}
    for run in p.runs:
        secs = est.per_run.get(run.run_id)
        t.add_row(run.run_id, run.framework, run.model, run.dataset, run.scale,
                  str(run.devices), str(run.per_device_batch), run.precision,
                  str(run.repetition), known.get(run.run_id, "new"),
                  tables.fmt(secs / 60 if secs else None, 1))
    out.print(t)
    for model, dataset in p.skipped_pairs:
        out.print(f"skipped: {model} x {dataset} (the model does not take that data)")
    todo = [r for r in p.runs if known.get(r.run_id) != "COMPLETED"]
    out.print(f"{len(p.runs)} runs, {len(todo)} still to run, "
              f"{sum(r.devices for r in todo)} device-runs; {est.text(todo)}")
    if refusals:
        err.print("not runnable here yet (`dlscale run` refuses these):\n" + refusals,
                  soft_wrap=True)


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@_backend_options
@click.option("--wait/--no-wait", default=False, help="follow the runs to the end, then "
              "print the results table and speedup chart")
@click.pass_context
def run(ctx: click.Context, spec: str, backend: str | None, profile_path: str | None,
        partition: str | None, wait: bool) -> None:
    """Submit the runs of SPEC that have not completed yet."""
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec)
    profile = load_profile(profile_path) if profile_path else None
    store = _store(ctx)
    scheduler = study.make_scheduler(backend, store)
    report = study.submit(store, loaded, backend, profile, partition, scheduler)
    name = loaded.spec.experiment.name
    where = backend if backend == "local" else (
        f"{backend} via its commands, cluster {profile.profile.name}" if profile else backend)
    out.print(f"{name}: {len(report.submitted)} submitted, {len(report.resubmitted)} "
              f"resubmitted (failed or cancelled before), {len(report.completed)} completed "
              f"earlier (skipped), {len(report.active)} already queued or running "
              f"[backend: {where}]", soft_wrap=True)
    if backend == "slurm":
        out.print(study.pyslurm_status())
    for r, why in report.failed_to_submit:
        err.print(f"dlscale: not submitted: {r.label()}: {why}")
    if not wait:
        out.print("follow them with `dlscale status`; results with `dlscale results`")
        sys.exit(1 if report.failed_to_submit else 0)
    run_ids = [r.run_id for r in report.all_runs]
    try:
        wait_with_progress(store, scheduler, run_ids)
    except KeyboardInterrupt:
        live = [rid for rid in run_ids if store.run(rid)["state"] in ACTIVE]
        err.print(f"\nstopped waiting; {len(live)} run(s) still queued or running on the "
                  f"{backend} backend (they go on). Rerun the same command to wait again, "
                  "`dlscale cancel --experiment " + name + "` to stop them.")
        sys.exit(130)
    rows = analysis.results(store, name)
    out.print(tables.results_table(rows))
    out.print(tables.baselines_note(rows))
    click.echo(charts.chart(rows, "speedup", width=min(out.width, 100), color=out.is_terminal))
    failed = [rid for rid in run_ids if store.run(rid)["state"] != "COMPLETED"]
    if failed:
        err.print(f"dlscale: {len(failed)} of {len(run_ids)} runs did not complete; "
                  "`dlscale status` shows why")
        sys.exit(1)


@cli.command()
@experiment_option()
@click.option("--all", "show_all", is_flag=True, help="include completed runs")
@click.pass_context
def status(ctx: click.Context, experiment: str | None, show_all: bool) -> None:
    """Runs, their jobs and states (live ones first asked of the scheduler)."""
    store = _store(ctx)
    problems = study.refresh(store)
    every = queue.rows(store, experiment)
    rows = every if show_all else [q for q in every if q.state != "COMPLETED"] or every
    out.print(tables.status_table(rows))
    counts = queue.counts(every)
    out.print(", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no runs yet")
    for note in store.skipped_notes([q.run_id for q in every]):
        out.print(note, soft_wrap=True)
    for problem in problems:
        err.print(f"dlscale: controller unreachable or not answering ({problem}); "
                  "states shown as last seen", soft_wrap=True)


@cli.command()
@experiment_option()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.pass_context
def results(ctx: click.Context, experiment: str | None, fmt: str) -> None:
    """Throughput (mean ± CI95), speedup, efficiency and time-to-accuracy per point."""
    store = _store(ctx)
    study.refresh(store)
    rows = analysis.results(store, experiment)
    notes = analysis.notes(store, experiment)
    if fmt == "json":
        click.echo(tables.results_json(rows))
    elif fmt == "csv":
        click.echo(tables.results_csv(rows), nl=False)
    else:
        out.print(tables.results_table(rows))
        out.print(tables.baselines_note(rows))
    for note in notes:  # beside machine-readable output, not inside it
        (out if fmt == "table" else err).print(note, soft_wrap=True)


@cli.command()
@experiment_option()
@click.option("--metric", type=click.Choice(list(charts.METRICS)), default="speedup",
              show_default=True)
@click.option("--model", type=click.Choice(MODELS), default=None, help="only this model")
# Below 40x10 plotext has no room for the axes and the legend.
@click.option("--width", type=click.IntRange(40, 1000), default=None,
              help="columns (default: the terminal's, at most 100)")
@click.option("--height", type=click.IntRange(10, 200), default=22, show_default=True)
@click.pass_context
def chart(ctx: click.Context, experiment: str | None, metric: str, model: str | None,
          width: int | None, height: int) -> None:
    """A terminal chart of a metric against devices, with the ideal line."""
    store = _store(ctx)
    study.refresh(store)
    rows = analysis.results(store, experiment)
    click.echo(charts.chart(rows, metric, model, width or min(out.width, 100), height,
                            color=out.is_terminal))


@cli.command()
@click.argument("run_id")
@click.option("--follow", "-f", "follow_log", is_flag=True,
              help="keep printing new lines until the run ends")
@click.option("--lines", "-n", type=click.IntRange(1, 1_000_000), default=40, show_default=True)
@click.pass_context
def logs(ctx: click.Context, run_id: str, follow_log: bool, lines: int) -> None:
    """The log of a run (unique id prefixes work)."""
    store = _store(ctx)
    row = study.find_run(store, run_id)
    path = RunPaths.of(row).log
    if not follow_log:
        if not path.exists():
            raise DlscaleError(f"run {row['run_id']} has no log yet ({path}); state {row['state']}")
        for line in tail_lines(path, lines):
            click.echo(line)
        return
    scheduler = study.make_scheduler(row["backend"] or "local", store)
    last_check = [0.0]

    def finished() -> bool:
        if time.time() - last_check[0] < 2:
            return False
        last_check[0] = time.time()
        sync(store, scheduler)
        return store.run(row["run_id"])["state"] not in ACTIVE + ("PLANNED", SUBMITTING)
    try:
        for line in follow(path, lines, stop=finished):
            click.echo(line)
    except KeyboardInterrupt:
        pass


@cli.command()
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
        live = {j["run_id"] for j in store.live_jobs()}
        ids += [r["run_id"] for r in store.runs(experiment)
                if r["state"] in ACTIVE or r["run_id"] in live]
        if not ids:
            out.print(f"nothing to cancel: {experiment} has no queued or running runs")
            return
    if not ids:
        raise click.UsageError("name runs to cancel, or --experiment")
    done = study.cancel(store, ids)
    out.print(f"cancelled {len(done)} run(s)" + (f": {' '.join(done)}" if done else ""))


@cli.command()
@click.argument("run_ids", nargs=-1, required=True)
@click.pass_context
def resubmit(ctx: click.Context, run_ids: tuple[str, ...]) -> None:
    """Submit finished, failed or cancelled runs again, with the same job script."""
    store = _store(ctx)
    for rid, job_id in study.resubmit(store, [study.find_run(store, r)["run_id"] for r in run_ids]):
        out.print(f"run {rid}: job {job_id}")


@cli.command()
@click.argument("run_id", metavar="RUN")
@click.option("--wait/--no-wait", default=False,
              help="follow the new run to its end, then compare it with the original")
@click.pass_context
def rerun(ctx: click.Context, run_id: str, wait: bool) -> None:
    """Repeat a finished run exactly, from its record, as a new run to compare with it."""
    store = _store(ctx)
    original = study.find_run(store, run_id)
    new_id, job_id = study.rerun(store, original["run_id"])
    out.print(f"run {new_id} repeats run {original['run_id']}: job {job_id} "
              f"[backend: {original['backend']}]")
    if not wait:
        out.print("follow it with `dlscale status`; compare with `dlscale report`")
        return
    scheduler = study.make_scheduler(original["backend"], store)
    try:
        wait_with_progress(store, scheduler, [new_id])
    except KeyboardInterrupt:
        err.print(f"\nstopped waiting; run {new_id} goes on")
        sys.exit(130)
    row = next(r for r in analysis.reruns(store, original["experiment"]) if r["run_id"] == new_id)
    out.print(f"original {row['rerun_of']}: {tables.fmt(row['original_throughput'], 1)} "
              f"images/s; rerun {new_id}: {tables.fmt(row['rerun_throughput'], 1)} images/s; "
              f"rerun / original {tables.fmt(row['ratio'], 3)}")
    if row["state"] != "COMPLETED":
        err.print(f"dlscale: the rerun ended {row['state']}; `dlscale status` shows why")
        sys.exit(1)


@cli.command()
@experiment_option("which experiment (needed when the store holds more than one)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="folder for the report, its figures and exports (default report-NAME)")
@click.option("--format", "fmt", type=click.Choice(reporting.FORMATS), default="md",
              show_default=True, help="md: Markdown with PNG files; html: one self-contained page")
@click.option("--reference", type=click.Path(dir_okay=False), default=None,
              help="published numbers to set beside yours (default: reference.toml next to "
              "the experiment's spec, when there is one)")
@click.option("--force", is_flag=True,
              help="write into a folder that is not empty and holds no earlier report "
              "(nothing of yours there is removed or overwritten, even so)")
@click.pass_context
def report(ctx: click.Context, experiment: str | None, out_dir: str | None, fmt: str,
           reference: str | None, force: bool) -> None:
    """Write up an experiment: set-up, tables, figures, MLLOG exports."""
    store = _store(ctx)
    study.refresh(store)
    name = reporting.pick_experiment(store, experiment)["name"]
    made = reporting.build(store, name, out_dir or f"report-{name}", fmt, reference, force)
    out.print(f"report of {made.experiment}: {made.path} ({len(made.figures)} figures, "
              f"{len(made.tables)} tables, {len(made.mllogs)} MLLOG files)", soft_wrap=True)


@cli.group()
def export() -> None:
    """Stored runs in other formats."""


@export.command("mllog")
@click.argument("run_ids", nargs=-1, metavar="[RUN...]")
@experiment_option("every completed run of it")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write RUN.mllog files here (default: print one run to stdout)")
@click.pass_context
def export_mllog(ctx: click.Context, run_ids: tuple[str, ...], experiment: str | None,
                 out_dir: str | None) -> None:
    """A run's records as MLPerf-style `:::MLLOG {json}` lines."""
    store = _store(ctx)
    ids = [study.find_run(store, r)["run_id"] for r in run_ids]
    if experiment:
        ids += [r["run_id"] for r in store.runs(reporting.pick_experiment(
            store, experiment)["name"], states=("COMPLETED",))]
    if not ids:
        raise click.UsageError("name runs to export, or --experiment")
    if out_dir is None:
        if len(ids) > 1:
            raise click.UsageError(f"{len(ids)} runs: give --out DIR to write one file each")
        lines = mllog.lines(store, ids[0])
        if not lines:
            raise DlscaleError(f"run {ids[0]} has no records yet")
        click.echo("\n".join(lines))
        return
    written = mllog.write(store, ids, Path(out_dir))
    out.print(f"wrote {len(written)} MLLOG file(s) to {out_dir}" + (
        f"; {len(ids) - len(written)} run(s) had no records" if len(written) < len(ids) else ""))


# Commands of their own concern, each in its module.
for command in (data, env, doctor, store_group):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="dlscale", standalone_mode=False)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SpecError as exc:
        for problem in exc.problems:
            err.print(f"dlscale: error: {problem}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except DlscaleError as exc:
        for line in str(exc).splitlines():
            err.print(f"dlscale: error: {line}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug: say so in one line; DLSCALE_DEBUG=1 shows where
        # ...unless SQLite found a damaged page only now, when a query read it
        damage = damage_message(exc, Path(_chosen["home"] or default_home()))
        if damage is not None:
            err.print(f"dlscale: error: {damage}", markup=False, soft_wrap=True)
            sys.exit(1)
        if os.environ.get("DLSCALE_DEBUG"):
            raise
        err.print(f"dlscale: internal error: {type(exc).__name__}: {exc} "
                  "(set DLSCALE_DEBUG=1 for the traceback)", markup=False)
        sys.exit(1)
