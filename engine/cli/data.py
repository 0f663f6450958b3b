"""`dlscale data`: real datasets (fetch CIFAR-10, check an ImageNet folder, write a small
one), for the command line over engine/datasets.py."""

from __future__ import annotations

import click
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from .. import datasets
from ..errors import UserError
from .console import err, out
from .options import InputPath, OutputPath, md5_callback


@click.group()
def data() -> None:
    """Real datasets: fetch CIFAR-10, check an ImageNet folder, write a small one."""


@data.command("fetch")
@click.argument("dataset", type=click.Choice(sorted(datasets.SOURCES)))
@click.option(
    "--dir",
    "dest",
    type=OutputPath(folder=True, writable=False),
    default=".",
    show_default=True,
    help="where the dataset's folder goes",
)
@click.option(
    "--url",
    envvar="DLSCALE_CIFAR10_URL",
    default=None,
    help="download from here instead of the official address (a mirror)",
)
@click.option(
    "--md5",
    envvar="DLSCALE_CIFAR10_MD5",
    default=None,
    callback=md5_callback,
    help="expected MD5 of the archive at --url (default: the published one)",
)
@click.option(
    "--timeout",
    "deadline_s",
    type=click.IntRange(1, 7 * 24 * 3600),
    default=int(datasets.DEADLINE_S),
    show_default=True,
    help="give the download up after this many seconds in all (each read also gives up "
    f"after {datasets.READ_TIMEOUT_S} s without data)",
)
def data_fetch(dataset: str, dest: str, url: str | None, md5: str | None, deadline_s: int) -> None:
    """Download, verify (MD5) and unpack a dataset; prints the folder for training.data_dir."""
    source = datasets.SOURCES[dataset]
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=not err.is_terminal,
    ) as progress:
        task = progress.add_task(f"{dataset}", total=None)

        def on_progress(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        folder = datasets.fetch(source, dest, url, md5, on_progress, deadline_s)
    out.print(
        f'{dataset}: {folder}\nuse it as  training.data_dir = "{folder.resolve()}"', soft_wrap=True
    )


@data.command("check")
@click.argument("dataset", type=click.Choice(["imagenet"]))
@click.argument("root", type=InputPath())
@click.option(
    "--classes",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="class folders expected",
)
def data_check(dataset: str, root: str, classes: int) -> None:
    """Check a dataset folder's layout (ImageNet: train/ and val/ of class folders of JPEGs)."""
    check = datasets.check_imagenet(root, classes)
    for split in ("train", "val"):
        if split in check.classes:
            out.print(f"{split}: {check.classes[split]} classes, {check.images[split]} images")
    if check.problems:
        raise UserError.listing(check.problems, f"{check.root} is not a usable ImageNet folder:")
    out.print(f"{check.root}: layout OK")


@data.command("sample")
@click.argument("dataset", type=click.Choice(["imagenet"]))
@click.argument("dest", type=OutputPath(folder=True))
@click.option(
    "--classes",
    type=click.IntRange(1, 10),
    default=10,
    show_default=True,
    help="class folders, one per digit",
)
# The digits hold about 180 images a class; the sample checks what the two take together.
@click.option(
    "--per-class",
    type=click.IntRange(1, 1000),
    default=32,
    show_default=True,
    help="training images per class",
)
@click.option(
    "--val-per-class",
    type=click.IntRange(1, 1000),
    default=8,
    show_default=True,
    help="validation images per class",
)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
def data_sample(
    dataset: str, dest: str, classes: int, per_class: int, val_per_class: int, seed: int
) -> None:
    """Write a small ImageNet-format sample (real handwritten digits as 320x240 JPEGs,
    one class per digit) to try the ImageNet loaders without ImageNet."""
    check = datasets.write_imagenet_sample(dest, classes, per_class, val_per_class, seed)
    for split in ("train", "val"):
        out.print(f"{split}: {check.classes[split]} classes, {check.images[split]} images")
    out.print(
        f'{check.root}: written; use it as  training.data_dir = "{check.root.resolve()}"'
        f"  (check it with `dlscale data check imagenet {check.root} --classes {classes}`)",
        soft_wrap=True,
    )
