"""The PyTorch family's data loaders: the native one (torch DataLoader + DistributedSampler)
and NVIDIA DALI, over the array datasets (cifar10, digits) and ImageNet folders, and nvJPEG
on the GPU over ImageNet folders (gpu_jpeg.py).

Both give the training loop the same thing: per epoch, the same number of batches on every
rank, each an (images, labels) pair on the run's device, images normalised float NCHW
(channels-last when asked), labels int64. Evaluation (outside the timed steps) reads through
the native path for either loader, so accuracies compare exactly.

Augmentation is the same in both: CIFAR-10's 4-pixel-padded random crop and flip (digits:
none, as in every framework's trainer), ImageNet's random-resized crop to 224 and flip;
evaluation resizes to 256 and takes the centre 224.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..common import data as common_data
from ..common import imagenet
from ..common.args import FOLDER_LOADERS
from ..common.entry import TrainerError
from . import gpu_jpeg
from .batches import Batch, Data, Normalise, epoch_sampler, too_few_images, val_arrays


def build(
    args,
    world: int,
    rank: int,
    local_rank: int,
    device: torch.device,
    channels_last: bool,
    framework: str,
) -> Data:
    """The run's training and evaluation data through --loader (real datasets only)."""
    if args.dataset == "imagenet":
        folders = imagenet.read_folders(args.data_dir)
        norm = Normalise(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD, device, channels_last)
        if args.loader == "dali":
            return _dali_folders(args, folders, world, rank, local_rank, device, norm, framework)
        if args.loader == "nvjpeg":
            val = _val_folders(args, folders, world, rank, device, norm)
            return gpu_jpeg.folders(args, folders, world, rank, device, norm, val)
        return _native_folders(args, folders, world, rank, device, norm)
    if args.loader in FOLDER_LOADERS:
        raise TrainerError(
            f"--loader {args.loader} decodes JPEG folders (--dataset imagenet); "
            f"{args.dataset} is held as arrays: use --loader native or dali"
        )
    train, test = common_data.load_real(args.dataset, args.data_dir, args.seed)
    norm = Normalise(common_data.CIFAR_MEAN, common_data.CIFAR_STD, device, channels_last)
    if args.loader == "dali":
        return _dali_arrays(args, train, test, world, rank, local_rank, device, norm, framework)
    return _native_arrays(args, train, test, world, rank, device, norm)


# --- native ------------------------------------------------------------------------------


def _loader(dataset, batch: int, sampler, args, device: torch.device):
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        drop_last=sampler is not None,
        num_workers=args.loader_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.loader_workers > 0,
    )


def _native_arrays(args, train, test, world, rank, device, norm) -> Data:
    ds = torch.utils.data.TensorDataset(
        torch.from_numpy(train.images), torch.from_numpy(train.labels)
    )
    sampler = epoch_sampler(len(ds), world, rank, args.seed)
    loader = _loader(ds, args.per_device_batch, sampler, args, device)
    if len(loader) == 0:
        raise too_few_images(len(ds), args.per_device_batch, world)
    augment = args.dataset == "cifar10"

    def epoch(e: int) -> Iterator[Batch]:
        sampler.set_epoch(e)
        for xb, yb in loader:
            yield norm(xb, augment=augment), yb.to(device, non_blocking=True)

    return Data(
        common_data.SHAPES[args.dataset].classes,
        len(ds),
        len(loader),
        epoch,
        val_arrays(test, world, rank, norm),
        eval_images=len(test.labels),
    )


class _Folder(torch.utils.data.Dataset):
    """ImageNet-format images decoded with Pillow, transformed per sample (in the loader's
    worker processes when --loader-workers > 0), as uint8 CHW."""

    def __init__(self, samples: list[tuple[str, int]], train: bool, rank: int) -> None:
        self.samples, self.train, self.rank = samples, train, rank
        self.rng: random.Random | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        if self.train:
            if self.rng is None:  # per process: torch seeds each worker differently
                self.rng = random.Random(torch.initial_seed() * 7919 + self.rank)
            hwc = imagenet.train_transform(path, self.rng)
        else:
            hwc = imagenet.eval_transform(path)
        return torch.from_numpy(hwc).permute(2, 0, 1).contiguous(), label


def _native_folders(args, folders: imagenet.Folders, world, rank, device, norm) -> Data:
    ds = _Folder(folders.train, train=True, rank=rank)
    sampler = epoch_sampler(len(ds), world, rank, args.seed)
    loader = _loader(ds, args.per_device_batch, sampler, args, device)
    if len(loader) == 0:
        raise too_few_images(len(ds), args.per_device_batch, world)

    def epoch(e: int) -> Iterator[Batch]:
        sampler.set_epoch(e)
        for xb, yb in loader:
            yield norm(xb), yb.to(device, non_blocking=True)

    return Data(
        len(folders.classes),
        len(ds),
        len(loader),
        epoch,
        _val_folders(args, folders, world, rank, device, norm),
        eval_images=len(folders.val),
    )


def _val_folders(args, folders: imagenet.Folders, world, rank, device, norm):
    loader = _loader(
        _Folder(folders.val[rank::world], train=False, rank=rank),
        args.per_device_batch,
        None,
        args,
        device,
    )

    def val() -> Iterator[Batch]:
        for xb, yb in loader:
            yield norm(xb), yb.to(device, non_blocking=True)

    return val


# --- DALI --------------------------------------------------------------------------------


def _dali(framework: str):
    try:
        import nvidia.dali as dali  # noqa: PLC0415  (only --loader dali needs it)
        from nvidia.dali.plugin import pytorch as dali_torch  # noqa: PLC0415
    except ImportError as exc:
        raise TrainerError(
            f"--loader dali needs NVIDIA DALI in this environment ({exc}); "
            f"build one with `dlscale env create {framework} --with dali`"
        ) from None
    return dali, dali_torch


def _dali_common(args, local_rank: int, device: torch.device, seed: int) -> dict[str, Any]:
    """Pipeline settings. On CPU the pipeline has no device (device_id=None: CPU-only, no
    CUDA needed); on a GPU it runs on the rank's GPU. --loader-workers is its CPU threads."""
    return {
        "batch_size": args.per_device_batch,
        "num_threads": max(1, args.loader_workers),
        "device_id": local_rank if device.type == "cuda" else None,
        "seed": seed,
        "prefetch_queue_depth": 2,
    }


def _dali_iterator(dali_torch, pipe, norm: Normalise, **kw):
    pipe.build()
    it = dali_torch.DALIGenericIterator([pipe], ["x", "y"], auto_reset=True, **kw)

    def batches() -> Iterator[Batch]:
        for (out,) in it:
            # Already normalised float NCHW (on the GPU when the run is on one).
            x = norm.channels_last_if_asked(out["x"].to(norm.device, non_blocking=True))
            yield x, out["y"].reshape(-1).to(norm.device, non_blocking=True).long()

    return it, batches


def _dali_arrays(args, train, test, world, rank, local_rank, device, norm, framework) -> Data:
    """CIFAR-format arrays through DALI: an external source feeds each rank the very images
    the native loader's sampler gives it (same shares, same order, same steps), and DALI
    does the augmentation and normalisation."""
    dali, dali_torch = _dali(framework)
    from nvidia.dali import fn, types  # noqa: PLC0415

    batch = args.per_device_batch
    sampler = epoch_sampler(len(train.labels), world, rank, args.seed)
    steps = len(sampler) // batch
    if steps == 0:
        raise too_few_images(len(train.labels), batch, world)
    hwc = np.ascontiguousarray(train.images.transpose(0, 2, 3, 1))
    gpu = device.type == "cuda"

    class Source:
        """One batch per call; StopIteration ends DALI's epoch after `steps` batches."""

        def __init__(self) -> None:
            self.epoch, self.order = -1, np.zeros(0, dtype=np.int64)

        def __call__(self, info):
            if info.iteration >= steps:
                raise StopIteration
            if info.epoch_idx != self.epoch:
                sampler.set_epoch(info.epoch_idx)
                self.epoch, self.order = info.epoch_idx, np.fromiter(sampler, dtype=np.int64)
            idx = self.order[info.iteration * batch : (info.iteration + 1) * batch]
            return hwc[idx], train.labels[idx]

    mean = [m * 255 for m in common_data.CIFAR_MEAN]
    std = [s * 255 for s in common_data.CIFAR_STD]

    @dali.pipeline_def(**_dali_common(args, local_rank, device, args.seed + rank))
    def pipeline():
        images, labels = fn.external_source(
            source=Source(),
            num_outputs=2,
            batch=True,
            batch_info=True,
            layout=["HWC", ""],
            dtype=[types.UINT8, types.INT64],
        )
        if gpu:
            images, labels = images.gpu(), labels.gpu()
        crop: dict[str, Any] = {}
        if args.dataset == "cifar10":
            # Pad 4 on every side (a centred 40x40 window over 32x32, zeros outside), then a
            # 32x32 window at one of the 9x9 whole-pixel offsets, as the native path does.
            images = fn.crop(images, crop=(40, 40), out_of_bounds_policy="pad", fill_values=0)
            offsets = [i / 8 for i in range(9)]
            crop = {
                "crop": (32, 32),
                "crop_pos_x": fn.random.uniform(values=offsets),
                "crop_pos_y": fn.random.uniform(values=offsets),
                "mirror": fn.random.coin_flip(),
            }
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std, **crop
        )
        return images, labels

    pipe = pipeline()
    _, batches = _dali_iterator(dali_torch, pipe, norm)

    def epoch(e: int) -> Iterator[Batch]:
        return batches()  # DALI counts the epochs itself (BatchInfo.epoch_idx)

    return Data(
        common_data.SHAPES[args.dataset].classes,
        len(train.labels),
        steps,
        epoch,
        val_arrays(test, world, rank, norm),
        {"dali": dali.__version__},
        pipe,
        len(test.labels),
    )


def _dali_folders(
    args, folders: imagenet.Folders, world, rank, local_rank, device, norm, framework
) -> Data:
    """ImageNet folders through DALI's file reader, decoder and crop operators."""
    dali, dali_torch = _dali(framework)
    from nvidia.dali import fn, types  # noqa: PLC0415
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy  # noqa: PLC0415

    n = len(folders.train)
    # One permutation, the same on every rank, cut to a multiple of the ranks: equal shards,
    # so every rank takes floor(n / ranks / batch) steps an epoch, as the native sampler
    # gives (the few images left out stay the same ones every epoch here; the native
    # sampler leaves out different ones). Epoch 0 reads it in this order; after every epoch
    # the reader shuffles the whole list again with one seed for all ranks
    # (shuffle_after_epoch), DistributedSampler's semantics. random_shuffle would only mix
    # within a 1,024-image buffer of a list sorted by class.
    order = np.random.default_rng(args.seed).permutation(n)[: n - n % world]
    files = [folders.train[i][0] for i in order]
    labels = [folders.train[i][1] for i in order]
    steps = len(files) // world // args.per_device_batch
    if steps == 0:
        raise too_few_images(n, args.per_device_batch, world)
    gpu = device.type == "cuda"
    mean = [m * 255 for m in imagenet.IMAGENET_MEAN]
    std = [s * 255 for s in imagenet.IMAGENET_STD]

    @dali.pipeline_def(**_dali_common(args, local_rank, device, args.seed + rank))
    def pipeline():
        jpegs, label = fn.readers.file(
            files=files,
            labels=labels,
            shard_id=rank,
            num_shards=world,
            shuffle_after_epoch=True,
            shuffle_after_epoch_seed=args.seed,
            pad_last_batch=True,
            name="Reader",
        )
        # Only the random crop's region is decoded ("mixed": nvJPEG on the GPU, with
        # DALI's ResNet-50 example's memory paddings so buffers are not regrown for the
        # first large images; on CPU, libjpeg-turbo in DALI's threads), then resized.
        padding = (
            {"device_memory_padding": 211_025_920, "host_memory_padding": 140_544_512}
            if gpu
            else {}
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="mixed" if gpu else "cpu",
            output_type=types.RGB,
            random_area=(0.08, 1.0),
            random_aspect_ratio=(3 / 4, 4 / 3),
            num_attempts=100,
            **padding,
        )
        images = fn.resize(images, resize_x=imagenet.CROP, resize_y=imagenet.CROP)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=mean,
            std=std,
            mirror=fn.random.coin_flip(),
        )
        return images, (label.gpu() if gpu else label)

    # DROP: a last partial batch of the shard is read (padded) and dropped, so epochs end
    # together on every rank.
    pipe = pipeline()
    it, batches = _dali_iterator(
        dali_torch, pipe, norm, reader_name="Reader", last_batch_policy=LastBatchPolicy.DROP
    )
    if len(it) != steps:
        raise TrainerError(f"DALI plans {len(it)} steps an epoch, the native loader {steps}")

    def epoch(e: int) -> Iterator[Batch]:
        return batches()

    return Data(
        len(folders.classes),
        n,
        steps,
        epoch,
        _val_folders(args, folders, world, rank, device, norm),
        {"dali": dali.__version__},
        pipe,
        len(folders.val),
    )
