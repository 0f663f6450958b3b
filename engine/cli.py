"""`dlscale`: the command line over the engine. Bad input exits 2 with one clear message per
problem; failures of the world exit 1; neither prints a traceback."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)

from . import analysis, charts, cli_env, datasets, mllog, queue, report as reporting, study, tables
from .errors import DlscaleError, PlanError, SpecError, UserError
from .estimate import estimate
from .logs import follow, tail_lines
from .monitor import sync, wait_until_done
from .plan import plan as make_plan
from .profile import load_profile
from .spec import load_spec
from .store import ACTIVE, TERMINAL, Store

# Piped output (CI logs, `| less`) gets room for the wide tables instead of rich's 80 columns.
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, markup=False, width=None if sys.stderr.isatty() else 160)


def _store(ctx: click.Context) -> Store:
    return Store(ctx.obj["home"])


def _refresh(store: Store) -> list[str]:
    """Bring the store up to date with every backend that has live jobs; returns what went
    wrong (a one-shot command reports a failed poll at once: it has no later poll)."""
    problems = []
    for backend in study.backends_in_use(store):
        tick = sync(store, study.make_scheduler(backend, store))
        if tick.warning or not tick.reachable:
            problems.append(f"{backend}: {tick.warning or 'did not answer'}")
    return problems


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="DLSCALE_HOME", type=click.Path(file_okay=False),
              help="where the store and run folders live (default ~/.dlscale)")
@click.version_option(package_name="dlscale")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Measure how deep-learning training scales: frameworks x models x scales."""
    ctx.obj = {"home": home}


def _backend_options(f):
    f = click.option("--partition", default=None, help="partition of the profile "
                     "(default: the profile's default partition)")(f)
    f = click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
                     help="cluster profile TOML (needed with --backend slurm)")(f)
    return click.option("--backend", default="local", show_default=True,
                        type=click.Choice(study.BACKENDS))(f)


@cli.command("plan")
@click.argument("spec", type=click.Path(dir_okay=False))
@_backend_options
@click.option("--include-planned", is_flag=True, help="also expand frameworks, datasets and "
              "loaders that cannot run yet, to see a study's whole matrix (nothing runs)")
@click.pass_context
def plan_cmd(ctx: click.Context, spec: str, backend: str, profile_path: str | None,
             partition: str | None, include_planned: bool) -> None:
    """Dry run: list the runs a spec makes, their count and the device-hours."""
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
def run(ctx: click.Context, spec: str, backend: str, profile_path: str | None,
        partition: str | None, wait: bool) -> None:
    """Submit the runs of SPEC that have not completed yet."""
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
        _wait_with_progress(store, scheduler, run_ids)
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


def _wait_with_progress(store: Store, scheduler, run_ids: list[str]) -> None:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[now]}"), console=err,
                  transient=False) as progress:
        task = progress.add_task("runs", total=len(run_ids), now="")

        def on_tick(tick, rows) -> None:
            done = sum(r["state"] in TERMINAL for r in rows)
            running = [r for r in rows if r["state"] == "RUNNING"]
            now = ""
            if running:
                r = running[0]
                last = store.last_records("interval", [r["run_id"]]).get(r["run_id"])
                now = (f"{r['framework']} {r['model']} {r['nodes']}x{r['ranks_per_node']} "
                       f"#{r['repetition']}" + (f": step {last['step']}, "
                                                f"{last['images_per_s']:.0f} images/s"
                                                if last else ": starting"))
            if not tick.reachable:
                now = f"controller unreachable, retrying: {tick.warning}"
            progress.update(task, completed=done, now=now)
        wait_until_done(store, scheduler, run_ids, on_tick)


@cli.command()
@click.option("--experiment", "-e", default=None)
@click.option("--all", "show_all", is_flag=True, help="include completed runs")
@click.pass_context
def status(ctx: click.Context, experiment: str | None, show_all: bool) -> None:
    """Runs, their jobs and states (live ones first asked of the scheduler)."""
    store = _store(ctx)
    problems = _refresh(store)
    every = queue.rows(store, experiment)
    rows = every if show_all else [q for q in every if q.state != "COMPLETED"] or every
    out.print(tables.status_table(rows))
    counts = queue.counts(every)
    out.print(", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no runs yet")
    for problem in problems:
        err.print(f"dlscale: controller unreachable or not answering ({problem}); "
                  "states shown as last seen", soft_wrap=True)


@cli.command()
@click.option("--experiment", "-e", default=None)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.pass_context
def results(ctx: click.Context, experiment: str | None, fmt: str) -> None:
    """Throughput (mean ± CI95), speedup, efficiency and time-to-accuracy per point."""
    store = _store(ctx)
    _refresh(store)
    rows = analysis.results(store, experiment)
    if fmt == "json":
        click.echo(tables.results_json(rows))
    elif fmt == "csv":
        click.echo(tables.results_csv(rows), nl=False)
    else:
        out.print(tables.results_table(rows))
        out.print(tables.baselines_note(rows))


@cli.command()
@click.option("--experiment", "-e", default=None)
@click.option("--metric", type=click.Choice(list(charts.METRICS)), default="speedup",
              show_default=True)
@click.option("--model", default=None, help="only this model")
@click.option("--width", type=int, default=None)
@click.option("--height", type=int, default=22)
@click.pass_context
def chart(ctx: click.Context, experiment: str | None, metric: str, model: str | None,
          width: int | None, height: int) -> None:
    """A terminal chart of a metric against devices, with the ideal line."""
    store = _store(ctx)
    _refresh(store)
    rows = analysis.results(store, experiment)
    click.echo(charts.chart(rows, metric, model, width or min(out.width, 100), height,
                            color=out.is_terminal))


@cli.command()
@click.argument("run_id")
@click.option("--follow", "-f", "follow_log", is_flag=True,
              help="keep printing new lines until the run ends")
@click.option("--lines", "-n", default=40, show_default=True)
@click.pass_context
def logs(ctx: click.Context, run_id: str, follow_log: bool, lines: int) -> None:
    """The log of a run (unique id prefixes work)."""
    store = _store(ctx)
    row = study.find_run(store, run_id)
    path = Path(row["run_dir"]) / "run.log"
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
        return store.run(row["run_id"])["state"] not in ACTIVE + ("PLANNED",)
    try:
        for line in follow(path, lines, stop=finished):
            click.echo(line)
    except KeyboardInterrupt:
        pass


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="RUN|JOB...")
@click.option("--experiment", "-e", default=None, help="every live run of this experiment")
@click.pass_context
def cancel(ctx: click.Context, run_ids: tuple[str, ...], experiment: str | None) -> None:
    """Cancel queued or running runs."""
    store = _store(ctx)
    ids = list(run_ids)
    if experiment:
        ids += [r["run_id"] for r in store.runs(experiment, states=ACTIVE)]
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
        _wait_with_progress(store, scheduler, [new_id])
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
@click.option("--experiment", "-e", default=None,
              help="which experiment (needed when the store holds more than one)")
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
    _refresh(store)
    name = reporting.pick_experiment(store, experiment)["name"]
    made = reporting.build(store, name, out_dir or f"report-{name}", fmt, reference, force)
    out.print(f"report of {made.experiment}: {made.path} ({len(made.figures)} figures, "
              f"{len(made.tables)} tables, {len(made.mllogs)} MLLOG files)", soft_wrap=True)


@cli.group()
def export() -> None:
    """Stored runs in other formats."""


@export.command("mllog")
@click.argument("run_ids", nargs=-1, metavar="[RUN...]")
@click.option("--experiment", "-e", default=None, help="every completed run of it")
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


@cli.group()
def data() -> None:
    """Real datasets: fetch CIFAR-10, check an ImageNet folder, write a small one."""


@data.command("fetch")
@click.argument("dataset", type=click.Choice(sorted(datasets.SOURCES)))
@click.option("--dir", "dest", type=click.Path(file_okay=False), default=".", show_default=True,
              help="where the dataset's folder goes")
@click.option("--url", envvar="DLSCALE_CIFAR10_URL", default=None,
              help="download from here instead of the official address (a mirror)")
@click.option("--md5", envvar="DLSCALE_CIFAR10_MD5", default=None,
              help="expected MD5 of the archive at --url (default: the published one)")
def data_fetch(dataset: str, dest: str, url: str | None, md5: str | None) -> None:
    """Download, verify (MD5) and unpack a dataset; prints the folder for training.data_dir."""
    source = datasets.SOURCES[dataset]
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                  transient=not err.is_terminal) as progress:
        task = progress.add_task(f"{dataset}", total=None)

        def on_progress(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)
        folder = datasets.fetch(source, dest, url, md5, on_progress)
    out.print(f"{dataset}: {folder}\nuse it as  training.data_dir = \"{folder.resolve()}\"",
              soft_wrap=True)


@data.command("check")
@click.argument("dataset", type=click.Choice(["imagenet"]))
@click.argument("root", type=click.Path())
@click.option("--classes", default=1000, show_default=True, help="class folders expected")
def data_check(dataset: str, root: str, classes: int) -> None:
    """Check a dataset folder's layout (ImageNet: train/ and val/ of class folders of JPEGs)."""
    check = datasets.check_imagenet(root, classes)
    for split in ("train", "val"):
        if split in check.classes:
            out.print(f"{split}: {check.classes[split]} classes, {check.images[split]} images")
    if check.problems:
        raise UserError(f"{check.root} is not a usable ImageNet folder:\n" + "\n".join(
            f"  {p}" for p in check.problems))
    out.print(f"{check.root}: layout OK")


@data.command("sample")
@click.argument("dataset", type=click.Choice(["imagenet"]))
@click.argument("dest", type=click.Path())
@click.option("--classes", default=10, show_default=True, help="class folders (1 to 10)")
@click.option("--per-class", default=32, show_default=True, help="training images per class")
@click.option("--val-per-class", default=8, show_default=True,
              help="validation images per class")
@click.option("--seed", default=0, show_default=True)
def data_sample(dataset: str, dest: str, classes: int, per_class: int, val_per_class: int,
                seed: int) -> None:
    """Write a small ImageNet-format sample (real handwritten digits as 320x240 JPEGs,
    one class per digit) to try the ImageNet loaders without ImageNet."""
    check = datasets.write_imagenet_sample(dest, classes, per_class, val_per_class, seed)
    for split in ("train", "val"):
        out.print(f"{split}: {check.classes[split]} classes, {check.images[split]} images")
    out.print(f"{check.root}: written; use it as  training.data_dir = \"{check.root.resolve()}\""
              f"  (check it with `dlscale data check imagenet {check.root} --classes {classes}`)",
              soft_wrap=True)


# `dlscale env ...` and `dlscale doctor` live in cli_env.
cli.add_command(cli_env.env)
cli.add_command(cli_env.doctor)


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
        if os.environ.get("DLSCALE_DEBUG"):
            raise
        err.print(f"dlscale: internal error: {type(exc).__name__}: {exc} "
                  "(set DLSCALE_DEBUG=1 for the traceback)", markup=False)
        sys.exit(1)
