"""The array datasets (synthetic, cifar10, digits) as the trainers without a loader of their
own feed them (TensorFlow, MXNet): numpy batches, the same shares and order on every rank as
the PyTorch family's DistributedSampler gives, CIFAR-10's augmentation per image, and the
evaluation over every rank's share of the test set. The framework only wraps the arrays."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import data as common_data
from .entry import TrainerError

EVAL_BATCH = 256


def augment_cifar(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """CIFAR-10's standard augmentation, drawn per image: a horizontal flip with probability
    1/2 and a 32x32 window at a random whole-pixel offset of the image padded by 4 (float
    NCHW in, float NCHW out)."""
    n = len(x)
    flip = rng.random(n) < 0.5
    x = x.copy()
    x[flip] = x[flip, :, :, ::-1]
    padded = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (32, 32), axis=(2, 3))
    oy, ox = rng.integers(0, 9, size=(2, n))
    return np.ascontiguousarray(windows[np.arange(n), :, oy, ox])  # N x C x 32 x 32


class ArrayData:
    """One rank's view of an array dataset. `channels_last`: NHWC batches (TensorFlow),
    else NCHW (MXNet)."""

    def __init__(self, args: Any, world: int, rank: int, channels_last: bool) -> None:
        self.args, self.world, self.rank = args, world, rank
        self.channels_last = channels_last
        self.shape = common_data.SHAPES[args.dataset]
        self.classes = self.shape.classes
        self.global_batch = args.per_device_batch * world
        self.train = self.test = None
        self.steps_per_epoch: int | None = None
        if args.dataset in common_data.SYNTHETIC:
            # Made once per rank: throughput measures compute and communication, not I/O.
            rng = np.random.default_rng(args.seed + rank)
            s = self.shape
            dims = (s.size, s.size, s.channels) if channels_last else (s.channels, s.size, s.size)
            self.x_syn = rng.standard_normal((args.per_device_batch, *dims), dtype=np.float32)
            self.y_syn = rng.integers(0, s.classes, args.per_device_batch)
            return
        self.train, self.test = common_data.load_real(args.dataset, args.data_dir, args.seed)
        self.steps_per_epoch = len(self.train.labels) // self.global_batch
        if self.steps_per_epoch == 0:
            raise TrainerError(
                f"{len(self.train.labels)} training images are fewer than one "
                f"global batch ({self.global_batch}); lower the per-device batch"
            )
        shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
        self.mean = np.array(common_data.CIFAR_MEAN, np.float32).reshape(shape) * 255
        self.std = np.array(common_data.CIFAR_STD, np.float32).reshape(shape) * 255

    @property
    def train_images(self) -> int | None:
        return None if self.train is None else len(self.train.labels)

    @property
    def eval_images(self) -> int | None:
        return None if self.test is None else len(self.test.labels)

    def prepare(
        self, images: np.ndarray, augment: bool, rng: np.random.Generator | None
    ) -> np.ndarray:
        """uint8 NCHW -> normalised float32 in this trainer's layout."""
        x = images.astype(np.float32)
        if augment:
            assert rng is not None
            x = augment_cifar(x, rng)
        if self.channels_last:
            x = x.transpose(0, 2, 3, 1)
        return (x - self.mean) / self.std

    def batches(self, wrap: Callable[[np.ndarray, np.ndarray], Any]) -> Iterator[Any]:
        """This rank's batches, wrapped by the framework; None ends an epoch. Every rank
        draws the same permutation per epoch and takes its share of each global batch."""
        if self.train is None:
            batch = wrap(self.x_syn, self.y_syn)
            while True:
                yield batch
        a, epoch = self.args, 0
        augment = a.dataset == "cifar10"  # digits: none, as in every framework's trainer
        while True:
            order = np.random.default_rng(a.seed + epoch).permutation(len(self.train.labels))
            mine = order[: self.steps_per_epoch * self.global_batch].reshape(
                self.steps_per_epoch, self.world, a.per_device_batch
            )[:, self.rank]
            rng = np.random.default_rng(a.seed + 1000 * epoch + self.rank)
            for idx in mine:
                yield wrap(
                    self.prepare(self.train.images[idx], augment, rng), self.train.labels[idx]
                )
            epoch += 1
            yield None

    def evaluate(
        self,
        predict: Callable[[np.ndarray], np.ndarray],
        all_sum: Callable[[np.ndarray], np.ndarray],
    ) -> float:
        """Top-1 over the whole test set: each rank scores every world-th image, the counts
        are summed over the ranks."""
        assert self.test is not None
        part = slice(self.rank, None, self.world)
        images, labels = self.test.images[part], self.test.labels[part]
        correct = 0
        for i in range(0, len(images), EVAL_BATCH):
            logits = predict(self.prepare(images[i : i + EVAL_BATCH], False, None))
            correct += int(np.sum(np.argmax(logits, 1) == labels[i : i + EVAL_BATCH]))
        total = all_sum(np.array([correct, len(labels)], np.float64))
        return float(total[0] / total[1])
