"""`dlscale env`, `dlscale doctor` and `dlscale data`: setting up the machine a study runs on
(framework environments, datasets), apart from running studies."""
from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                           TimeRemainingColumn, TransferSpeedColumn)

from . import datasets, envs, tables
from .console import err, out
from .errors import UserError
from .frameworks import FRAMEWORKS
from .store import default_home


@click.group()
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


def _home(ctx: click.Context) -> Path:
    return Path(ctx.obj["home"]) if ctx.obj["home"] else default_home()


@click.group()
def env() -> None:
    """Per-framework software environments (their pins conflict, so each has its own)."""


@env.command("create")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.option("--prefix", type=click.Path(file_okay=False), default=None,
              help="where to build the venv (default: DLSCALE_ENV_CACHE or DLSCALE_HOME, "
              "then envs/FRAMEWORK-RECIPE)")
@click.option("--with", "extras", multiple=True, type=click.Choice(list(envs.EXTRAS)),
              help="add an opt-in loader: dali (NVIDIA DALI, ~700 MB; pytorch-ddp, deepspeed, "
              "horovod-pytorch)")
@click.pass_context
def env_create(ctx: click.Context, framework: str, prefix: str | None,
               extras: tuple[str, ...]) -> None:
    """Build FRAMEWORK's pinned environment and record it, so planning finds it."""
    envs.create(framework, _home(ctx), Path(prefix) if prefix else None,
                say=lambda line: err.print(line, soft_wrap=True), extras=extras)


@env.command("list")
@click.pass_context
def env_list(ctx: click.Context) -> None:
    """Where each framework's trainer would run now (no imports: quick)."""
    home = _home(ctx)
    t = tables.Table(title="Framework environments", title_justify="left")
    for col in ("framework", "source", "python", "state"):
        t.add_column(col)
    for fw in FRAMEWORKS:
        st = envs.resolve(fw, home)
        source = st.source + "".join(f" +{e}" for e in st.extras)
        t.add_row(fw, source, st.python or "-", "ok" if st.ok else st.problem or "")
    out.print(t)


@env.command("remove")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.pass_context
def env_remove(ctx: click.Context, framework: str) -> None:
    """Forget FRAMEWORK's recorded environment (its folder is left: it may be shared)."""
    prefix = envs.remove(framework, _home(ctx))
    out.print(f"{framework}: forgot {prefix}" if prefix else f"{framework}: none recorded")


@click.command()
@click.option("--smoke/--no-smoke", default=False, help="also train 2 ranks for a few "
              "steps in each working environment (tens of seconds each)")
@click.argument("frameworks", nargs=-1, type=click.Choice(list(FRAMEWORKS)))
@click.pass_context
def doctor(ctx: click.Context, smoke: bool, frameworks: tuple[str, ...]) -> None:
    """Per framework: does its environment import, which versions, and (--smoke) does a
    2-rank run train. Exits 1 when a framework with a trainer cannot run."""
    home = _home(ctx)
    broken = 0
    # One plain line per framework: long paths and version lists stay whole and greppable.
    for fw in frameworks or tuple(FRAMEWORKS):
        if FRAMEWORKS[fw].trainer_module is None:
            out.print(f"{fw}: -- {FRAMEWORKS[fw].note}", soft_wrap=True)
            continue
        st = envs.resolve(fw, home, check=False)
        if st.python is None:
            problem, versions = st.problem, {}
        else:
            problem, versions = envs.probe(st.python, envs.recipe_for(fw, st.extras),
                                           full_import=True)
            if problem:
                problem += f"; rebuild with `{envs.create_command(fw, home, st.extras)}`"
        line = f"{fw}: " + (f"imports ok ({st.source}: {st.prefix or st.python}); "
                            + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
                            if not problem else f"NO: {problem}")
        if smoke and not problem:
            ok, said = envs.smoke(fw, home, st)
            line += f"; smoke: {said}"
            problem = None if ok else said
        broken += problem is not None
        out.print(line, soft_wrap=True)
    sys.exit(1 if broken else 0)
