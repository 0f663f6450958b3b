"""Getting real datasets into place: CIFAR-10 fetched and verified, ImageNet's layout checked.

A fetch never leaves a half-written dataset behind: the archive downloads to a hidden
temporary name in the target folder, is checked against its published MD5, is unpacked
into a hidden temporary folder (refusing any member that would land outside it), and only
then is renamed to its final name, which is what `training.data_dir` points at.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..trainers.common.data import DataError, read_cifar10
from .errors import DlscaleError, UserError


@dataclass(frozen=True)
class Source:
    name: str
    url: str
    md5: str
    folder: str               # the archive's one top-level folder, kept as the final name
    files: tuple[str, ...]    # what must be in it


CIFAR10 = Source(
    "cifar10", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "c58f30108f718f92721af3b95e74349a", "cifar-10-batches-py",
    tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"))
SOURCES = {CIFAR10.name: CIFAR10}

Progress = Callable[[int, int | None], None]  # (bytes so far, total bytes or None)


class FetchError(DlscaleError):
    """The download failed or did not match its checksum (exit status 1)."""


def _download(url: str, to: Path, on_progress: Progress) -> str:
    """Stream url into `to`; return the MD5 of what arrived."""
    md5 = hashlib.md5()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(to, "wb") as fh:
            total = resp.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            done = 0
            on_progress(0, total)
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
                md5.update(chunk)
                done += len(chunk)
                on_progress(done, total)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: the server answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(f"{url}: download failed: {reason}") from None
    return md5.hexdigest()


def _safe_members(tar: tarfile.TarFile, folder: str, archive: str) -> list[tarfile.TarInfo]:
    """Every member must be a plain file or folder under `folder`: no absolute paths, no
    `..`, no links or devices, so unpacking cannot write anywhere else."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith(("/", "\\")) or ".." in parts or not parts or parts[0] != folder:
            raise FetchError(f"{archive}: member {m.name!r} would land outside "
                             f"{folder}/; refusing to unpack this archive")
        if not (m.isfile() or m.isdir()):
            raise FetchError(f"{archive}: member {m.name!r} is a link or special file; "
                             "refusing to unpack this archive")
    return members


def fetch(source: Source, dest: str | Path, url: str | None = None, md5: str | None = None,
          on_progress: Progress = lambda done, total: None) -> Path:
    """Download, verify and unpack `source` into dest/<source.folder>; return that folder.
    Already there and complete: returned as it is, nothing downloaded."""
    url = url or source.url
    md5 = (md5 or source.md5).lower()
    scheme = urllib.parse.urlparse(url).scheme
    if scheme not in ("http", "https", "file"):
        raise UserError(f"--url {url!r}: only http, https and file URLs are allowed")
    dest = Path(dest).expanduser()
    final = dest / source.folder
    if final.is_dir() and all((final / f).is_file() for f in source.files):
        return final
    if final.exists():
        raise UserError(f"{final} exists but is not a complete {source.name} folder (it lacks "
                        f"{', '.join(f for f in source.files if not (final / f).is_file())}); "
                        "move it away and fetch again")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--dir {dest}: cannot make that folder ({exc.strerror})") from None
    fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=f".{source.name}-", suffix=".download")
    os.close(fd)
    archive = Path(tmp_name)
    unpack = None
    try:
        got = _download(url, archive, on_progress)
        if got != md5:
            raise FetchError(f"{url}: checksum mismatch: MD5 {got}, expected {md5}; the "
                             "download is corrupt or not the published archive (nothing kept)")
        unpack = Path(tempfile.mkdtemp(dir=dest, prefix=f".{source.name}-unpack-"))
        try:
            with tarfile.open(archive, "r:*") as tar:
                members = _safe_members(tar, source.folder, url)
                # filter="data" (Python's own guard) as a second line of defence
                tar.extractall(unpack, members=members, filter="data")
        except (tarfile.TarError, EOFError) as exc:
            raise FetchError(f"{url}: not a readable tar archive ({exc})") from None
        missing = [f for f in source.files if not (unpack / source.folder / f).is_file()]
        if missing:
            raise FetchError(f"{url}: the archive lacks {', '.join(missing)} under "
                             f"{source.folder}/")
        try:
            read_cifar10(str(unpack / source.folder))
        except DataError as exc:
            raise FetchError(f"{url}: unpacked, but not readable as {source.name}: {exc}") from None
        os.replace(unpack / source.folder, final)
    finally:
        archive.unlink(missing_ok=True)
        if unpack is not None:
            shutil.rmtree(unpack, ignore_errors=True)
    return final


# --- ImageNet's folder layout ------------------------------------------------------------

JPEG_MAGIC = b"\xff\xd8\xff"
IMAGE_SUFFIXES = (".jpeg", ".jpg")


@dataclass
class LayoutCheck:
    root: Path
    classes: dict[str, int] = field(default_factory=dict)   # split -> class folders
    images: dict[str, int] = field(default_factory=dict)    # split -> image files
    problems: list[str] = field(default_factory=list)


def _examples(names: list[str], most: int = 5) -> str:
    shown = ", ".join(sorted(names)[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_imagenet(root: str | Path, expect_classes: int = 1000) -> LayoutCheck:
    """Check ImageNet as folders: train/ and val/, each with one folder of JPEGs per class
    (the layout torchvision's ImageFolder and DALI's file reader take)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise UserError(f"{root}: not a folder (expected an ImageNet root with train/ and val/)")
    check = LayoutCheck(root)
    per_split: dict[str, set[str]] = {}
    for split in ("train", "val"):
        base = root / split
        if not base.is_dir():
            check.problems.append(f"{base}: missing (expected {split}/<class>/*.JPEG)")
            continue
        class_dirs, loose = [], []
        for entry in os.scandir(base):
            (class_dirs if entry.is_dir() else loose).append(entry)
        loose_images = [e.name for e in loose if e.name.lower().endswith(IMAGE_SUFFIXES)]
        if loose_images:
            check.problems.append(
                f"{base}: {len(loose_images)} image(s) lie directly in {split}/, not in class "
                f"folders (e.g. {_examples(loose_images, 2)}); sort them into {split}/<class>/ "
                "(for val: by the devkit's ground-truth labels)")
        names = {e.name for e in class_dirs}
        per_split[split] = names
        check.classes[split] = len(names)
        if len(names) != expect_classes:
            check.problems.append(f"{base}: {len(names)} class folders, expected "
                                  f"{expect_classes}")
        empty, not_images, not_jpeg, count = [], [], [], 0
        for d in sorted(class_dirs, key=lambda e: e.name):
            images = []
            for e in os.scandir(d.path):
                if e.name.lower().endswith(IMAGE_SUFFIXES):
                    images.append(e)
                elif e.is_file():
                    not_images.append(f"{d.name}/{e.name}")
            count += len(images)
            if not images:
                empty.append(d.name)
                continue
            # One file per class is opened: enough to catch a class of PNGs or of
            # truncated downloads without reading 1.28 million files.
            with open(images[0].path, "rb") as fh:
                if fh.read(3) != JPEG_MAGIC:
                    not_jpeg.append(f"{d.name}/{images[0].name}")
        check.images[split] = count
        for names_, what in ((empty, "class folder(s) hold no JPEG"),
                             (not_images, "file(s) are not .JPEG/.jpg"),
                             (not_jpeg, "file(s) named .JPEG but not JPEG data")):
            if names_:
                check.problems.append(f"{base}: {len(names_)} {what}: {_examples(names_)}")
    if "train" in per_split and "val" in per_split:
        for has, lacks in (("train", "val"), ("val", "train")):
            missing = sorted(per_split[has] - per_split[lacks])
            if missing:
                check.problems.append(f"{root / lacks}: lacks {len(missing)} class(es) that "
                                      f"{has}/ has: {_examples(missing)}")
    return check
