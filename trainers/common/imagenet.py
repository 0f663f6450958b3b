"""ImageNet as folders (`train/<class>/*.JPEG`, `val/<class>/*.JPEG`): the layout check that
`dlscale data check imagenet` prints and every trainer runs before reading, the file lists
both loaders read, and the standard transforms written with Pillow and numpy (torchvision
is not used: its wheel pulls a CUDA torch).

Framework-free (standard library, numpy, Pillow only where images are decoded), so the
engine and every trainer share it without importing each other.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .data import DataError

JPEG_MAGIC = b"\xff\xd8\xff"
IMAGE_SUFFIXES = (".jpeg", ".jpg")
SPLITS = ("train", "val")
# Per-channel mean/std in 0..1 units (the values every ImageNet recipe normalises with).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP = 224  # training and evaluation input size
RESIZE = 256  # evaluation: shorter side resized to this, then the centre CROP taken


@dataclass
class LayoutCheck:
    root: Path
    classes: dict[str, int] = field(default_factory=dict)  # split -> class folders
    images: dict[str, int] = field(default_factory=dict)  # split -> image files
    problems: list[str] = field(default_factory=list)
    # split -> sorted (path, class folder) pairs, for the readers
    files: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def _examples(names: list[str], most: int = 5) -> str:
    shown = ", ".join(sorted(names)[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_layout(root: str | Path, expect_classes: int | None = 1000) -> LayoutCheck:
    """Check ImageNet as folders: train/ and val/, each with one folder of JPEGs per class
    (the layout torchvision's ImageFolder and DALI's file reader take). `expect_classes`
    None takes any number of classes, as long as train/ and val/ name the same ones."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: not a folder (expected an ImageNet root with train/ and val/)")
    check = LayoutCheck(root)
    per_split: dict[str, set[str]] = {}
    for split in SPLITS:
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
                "(for val: by the devkit's ground-truth labels)"
            )
        names = {e.name for e in class_dirs}
        per_split[split] = names
        check.classes[split] = len(names)
        if expect_classes is not None and len(names) != expect_classes:
            check.problems.append(f"{base}: {len(names)} class folders, expected {expect_classes}")
        elif not names:
            check.problems.append(f"{base}: no class folders")
        empty, not_images, not_jpeg, files = [], [], [], []
        for d in sorted(class_dirs, key=lambda e: e.name):
            images = []
            for e in os.scandir(d.path):
                if e.name.lower().endswith(IMAGE_SUFFIXES):
                    images.append(e)
                elif e.is_file():
                    not_images.append(f"{d.name}/{e.name}")
            if not images:
                empty.append(d.name)
                continue
            # One file per class is opened: enough to catch a class of PNGs or of
            # truncated downloads without reading 1.28 million files.
            with open(images[0].path, "rb") as fh:
                if fh.read(3) != JPEG_MAGIC:
                    not_jpeg.append(f"{d.name}/{images[0].name}")
            files.extend((e.path, d.name) for e in sorted(images, key=lambda e: e.name))
        check.images[split] = len(files)
        check.files[split] = files
        for names_, what in (
            (empty, "class folder(s) hold no JPEG"),
            (not_images, "file(s) are not .JPEG/.jpg"),
            (not_jpeg, "file(s) named .JPEG but not JPEG data"),
        ):
            if names_:
                check.problems.append(f"{base}: {len(names_)} {what}: {_examples(names_)}")
    if "train" in per_split and "val" in per_split:
        for has, lacks in (("train", "val"), ("val", "train")):
            missing = sorted(per_split[has] - per_split[lacks])
            if missing:
                check.problems.append(
                    f"{root / lacks}: lacks {len(missing)} class(es) that "
                    f"{has}/ has: {_examples(missing)}"
                )
    return check


@dataclass
class Folders:
    """What a trainer reads: class names (label = index in this sorted list, as
    ImageFolder and DALI's file reader number them) and each split's (path, label) pairs."""

    classes: list[str]
    train: list[tuple[str, int]]
    val: list[tuple[str, int]]


def read_folders(root: str | None) -> Folders:
    """The layout check, then the file lists; DataError naming every problem."""
    if not root:
        raise DataError(
            "dataset 'imagenet' needs --data-dir (the folder holding train/ and "
            "val/; `dlscale data sample imagenet DIR` writes a small one)"
        )
    check = check_layout(root, expect_classes=None)
    if check.problems:
        raise DataError(
            f"{check.root} is not a usable ImageNet folder (`dlscale data check "
            "imagenet` says the same): " + "; ".join(check.problems)
        )
    classes = sorted({name for _, name in check.files["train"]})
    index = {name: i for i, name in enumerate(classes)}
    return Folders(
        classes, *[[(path, index[name]) for path, name in check.files[split]] for split in SPLITS]
    )


# --- transforms (torchvision's RandomResizedCrop, flip, Resize + CenterCrop) -------------


def resized_crop_box(
    width: int, height: int, rng: random.Random, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: a crop of 8-100% of the area with an
    aspect ratio in 3/4..4/3, ten tries, else the centre crop clamped to the ratio."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top, left = rng.randint(0, height - h), rng.randint(0, width - w)
            return left, top, left + w, top + h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        w, h = int(round(height * ratio[1])), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def load_rgb(path: str):
    """Decode a JPEG to RGB (ImageNet holds some greyscale and CMYK files)."""
    from PIL import Image  # noqa: PLC0415  (only the readers decode)

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except OSError as exc:
        raise DataError(f"{path}: cannot decode ({exc})") from None


def train_transform(path: str, rng: random.Random, size: int = CROP) -> np.ndarray:
    """Random-resized crop to size x size, then a horizontal flip half the time; HWC uint8."""
    from PIL import Image  # noqa: PLC0415

    img = load_rgb(path)
    box = resized_crop_box(img.width, img.height, rng)
    # resize(box=...) crops and resamples in one pass, as torchvision's crop + resize does
    out = img.resize((size, size), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.array(out, dtype=np.uint8)  # a writable copy: torch shares its memory


def eval_transform(path: str, resize: int = RESIZE, size: int = CROP) -> np.ndarray:
    """Shorter side to `resize`, then the centre size x size; HWC uint8."""
    from PIL import Image  # noqa: PLC0415

    img = load_rgb(path)
    scale = resize / min(img.width, img.height)
    w, h = max(size, round(img.width * scale)), max(size, round(img.height * scale))
    img = img.resize((w, h), Image.BILINEAR)
    left, top = (w - size) // 2, (h - size) // 2
    return np.array(img.crop((left, top, left + size, top + size)), dtype=np.uint8)
