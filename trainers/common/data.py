"""Datasets every trainer shares, as numpy arrays (each framework wraps them its own way).

- synthetic-cifar / synthetic-imagenet: shapes only; frameworks generate the tensors on the
  device once, so throughput measures compute and communication, not I/O.
- cifar10: the published "CIFAR-10 python version" (pickled dicts data_batch_1..5, test_batch).
- imagenet: class folders of JPEGs, read by the PyTorch family (common/imagenet.py), not
  held as arrays.
- digits: scikit-learn's bundled 8x8 handwritten digits (1,797 images, ships offline),
  upscaled to 32x32x3 so CIFAR ResNets train on real data for time-to-accuracy runs.
- alice: the built-in transformer's real text, a public-domain book shipped beside this
  module (corpus/README.md), one token per byte.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    channels: int
    size: int
    classes: int


SHAPES = {
    "synthetic-cifar": Shape(3, 32, 10),
    "cifar10": Shape(3, 32, 10),
    "digits": Shape(3, 32, 10),
    "synthetic-imagenet": Shape(3, 224, 1000),
    # Folders (common/imagenet.py): 224x224 crops; the classes are the folders found
    # (1,000 in ImageNet itself, fewer in a sample), counted by the trainer when it reads.
    "imagenet": Shape(3, 224, 1000),
}
SYNTHETIC = ("synthetic-cifar", "synthetic-imagenet")

CORPUS = Path(__file__).parent / "corpus" / "alice.txt"
CORPUS_SHA256 = "fe4fd37d799f62e8d00461e69dbd56885bc28ab61ec28bb9254d87aab97fdb8f"

# Per-channel mean/std in 0..1 units, for normalising uint8 images.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class DataError(RuntimeError):
    """A dataset that cannot be read: the message names the file and what is wrong."""


@dataclass
class Split:
    images: np.ndarray  # uint8, N x C x H x W
    labels: np.ndarray  # int64, N


def read_cifar10(data_dir: str) -> tuple[Split, Split]:
    """Read CIFAR-10's python pickles from `data_dir` (the extracted cifar-10-batches-py)."""

    def load(name: str) -> Split:
        path = os.path.join(data_dir, name)
        try:
            with open(path, "rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
        except FileNotFoundError:
            raise DataError(
                f"{path}: missing (expected CIFAR-10 python batches data_batch_1..5 and test_batch)"
            ) from None
        except (pickle.UnpicklingError, EOFError) as exc:
            raise DataError(f"{path}: not a CIFAR-10 pickle ({exc})") from None
        if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
            raise DataError(f"{path}: not a CIFAR-10 batch (needs b'data' and b'labels')")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DataError(f"{path}: data has shape {data.shape}, expected N x 3072")
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
        if len(labels) != len(data):
            raise DataError(f"{path}: {len(data)} images but {len(labels)} labels")
        return Split(data.reshape(-1, 3, 32, 32), labels)

    train = [load(f"data_batch_{i}") for i in range(1, 6)]
    return (
        Split(np.concatenate([s.images for s in train]), np.concatenate([s.labels for s in train])),
        load("test_batch"),
    )


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> tuple[Split, Split]:
    """scikit-learn's digits, 8x8 grey levels 0..16, as 32x32 RGB uint8, split per class."""
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:
        raise DataError(
            "dataset 'digits' needs scikit-learn in the trainer's environment "
            "(pip install scikit-learn)"
        ) from None
    bunch = sk_digits()
    images = (bunch.images * (255.0 / 16.0)).round().astype(np.uint8)
    images = np.kron(images, np.ones((4, 4), dtype=np.uint8))  # 8x8 -> 32x32, nearest
    images = np.repeat(images[:, None], 3, axis=1)
    labels = bunch.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test_mask = np.zeros(len(labels), dtype=bool)
    for cls in np.unique(labels):  # stratified so every class is in both splits
        idx = rng.permutation(np.flatnonzero(labels == cls))
        test_mask[idx[: int(round(len(idx) * test_fraction))]] = True
    return Split(images[~test_mask], labels[~test_mask]), Split(
        images[test_mask], labels[test_mask]
    )


def load_real(dataset: str, data_dir: str | None, seed: int = 0) -> tuple[Split, Split]:
    if dataset == "cifar10":
        if not data_dir:
            raise DataError("dataset 'cifar10' needs --data-dir (the cifar-10-batches-py folder)")
        return read_cifar10(data_dir)
    if dataset == "digits":
        return load_digits(seed)
    raise DataError(f"{dataset!r} is not an array dataset; array ones: cifar10, digits")


def corpus_tokens() -> tuple[np.ndarray, str]:
    """The corpus as tokens, one per byte (uint8, a 256-word vocabulary), and its digest
    (for the params record). A copy that is not the shipped text is refused: runs on it
    would not compare with anyone else's."""
    raw = CORPUS.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != CORPUS_SHA256:
        raise DataError(
            f"{CORPUS} is not the shipped text (SHA-256 {digest[:12]}..., expected "
            f"{CORPUS_SHA256[:12]}...); reinstall dlscale"
        )
    return np.frombuffer(raw, dtype=np.uint8), digest
