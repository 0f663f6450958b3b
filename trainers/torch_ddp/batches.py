"""What every loader of the PyTorch family hands the training loop: batches on the device,
normalised (CIFAR-10 augmented per image), the sampler that splits an epoch among ranks, and
the validation batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..common import data as common_data
from ..common.entry import TrainerError

Batch = tuple[torch.Tensor, torch.Tensor]


VAL_BATCH = 256  # evaluation batch of the 32x32 datasets (ImageNet: the training batch)


@dataclass
class Data:
    classes: int
    train_images: int
    steps_per_epoch: int
    epoch: Callable[[int], Iterator[Batch]]  # epoch number -> that epoch's batches
    val: Callable[[], Iterator[Batch]]  # this rank's part of the evaluation set
    versions: dict[str, Any] = field(default_factory=dict)
    pipeline: Any = None  # DALI's, when it reads: what it runs can be inspected
    eval_images: int | None = None  # the evaluation set's size (MLPerf's eval_samples)


class Normalise:
    """uint8 NCHW on any device -> normalised float on the run's device."""

    def __init__(self, mean, std, device: torch.device, channels_last: bool) -> None:
        self.device, self.channels_last = device, channels_last
        self.mean = torch.tensor(mean, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, 3, 1, 1) * 255

    def __call__(self, x: torch.Tensor, augment: bool = False) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True).float()
        if augment:
            x = augment_cifar(x)
        x = (x - self.mean) / self.std
        return self.channels_last_if_asked(x)

    def channels_last_if_asked(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def augment_cifar(x: torch.Tensor) -> torch.Tensor:
    """CIFAR-10's standard augmentation, drawn per image as DALI and the array trainers do:
    a horizontal flip with probability 1/2 and a 32x32 window at a random whole-pixel offset
    of the image padded by 4 (float NCHW, on the run's device)."""
    n, c = x.shape[:2]
    dev = x.device
    flip = torch.rand(n, device=dev) < 0.5
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
    padded = F.pad(x, (4, 4, 4, 4))
    oy, ox = torch.randint(0, 9, (2, n), device=dev)
    span = torch.arange(32, device=dev)
    rows = (oy[:, None] + span).view(n, 1, 32, 1)
    cols = (ox[:, None] + span).view(n, 1, 1, 32)
    return padded[
        torch.arange(n, device=dev).view(n, 1, 1, 1),
        torch.arange(c, device=dev).view(1, c, 1, 1),
        rows,
        cols,
    ]


def epoch_sampler(n: int, world: int, rank: int, seed: int):
    """Each rank a disjoint share of a fresh permutation every epoch; the last images that do
    not fill a share are left out, so every rank takes the same number of steps."""
    return torch.utils.data.DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )


def too_few_images(images: int, batch: int, world: int) -> TrainerError:
    """The error of a data set too small for one step of every rank."""
    return TrainerError(
        f"{images} training images are fewer than one global batch "
        f"({batch * world}); lower the per-device batch"
    )


def val_arrays(test: common_data.Split, world: int, rank: int, norm: Normalise):
    """This rank's share of an array evaluation set (every world-th image), as batches."""

    def val() -> Iterator[Batch]:
        part = slice(rank, None, world)
        images = torch.from_numpy(test.images[part])
        labels = torch.from_numpy(test.labels[part])
        for i in range(0, len(images), VAL_BATCH):
            yield norm(images[i : i + VAL_BATCH]), labels[i : i + VAL_BATCH].to(norm.device)

    return val
