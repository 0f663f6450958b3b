"""`--loader nvjpeg`: ImageNet folders decoded on the GPU by nvJPEG, through torchvision's
`decode_jpeg(..., device="cuda")`, with what a CUDA PyTorch image already has (DALI's CUDA
wheel is hundreds of MB).

The loader's workers only read the files' bytes; the GPU decodes a whole batch at once and
then takes the same random-resized crop and flip as the native loader (the same box rule,
`imagenet.resized_crop_box`, drawn per image in the same order), resized with antialiased
bilinear interpolation. A thread prepares the next batch on a CUDA stream of its own while
the current step runs, so decoding overlaps training as DALI's prefetch does. Evaluation
reads through the native path, as for DALI, so accuracies compare exactly.
"""

from __future__ import annotations

import contextlib
import io
import queue
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..common import imagenet
from ..common.entry import TrainerError
from .batches import Batch, Data, Normalise, epoch_sampler, too_few_images

Decode = Callable[[list[torch.Tensor]], list[torch.Tensor]]  # JPEG bytes -> uint8 CHW RGB

PREFETCH = 2  # batches prepared ahead of the step that takes them


class _Bytes(torch.utils.data.Dataset):
    """Each sample's file as a uint8 tensor of its bytes, and its label: all a worker does."""

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[i]
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise TrainerError(f"{path}: cannot read ({exc.strerror})") from None
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), label


def _collate(items: list[tuple[torch.Tensor, int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [data for data, _ in items], torch.tensor([label for _, label in items])


def pillow_decode(data: torch.Tensor) -> torch.Tensor:
    """One JPEG decoded on the CPU by Pillow (what nvJPEG refuses: CMYK and a few others)."""
    from PIL import Image  # noqa: PLC0415

    try:
        with Image.open(io.BytesIO(data.numpy().tobytes())) as img:
            rgb = np.array(img.convert("RGB"), dtype=np.uint8)
    except OSError as exc:
        raise TrainerError(f"a training image cannot be decoded ({exc})") from None
    return torch.from_numpy(rgb).permute(2, 0, 1)


def nvjpeg_decoder(device: torch.device) -> tuple[Decode, dict[str, str]]:
    """torchvision's batched nvJPEG decode on `device`; an image it refuses is decoded by
    Pillow instead, one at a time. Also the versions to record."""
    try:
        import torchvision  # noqa: PLC0415  (only --loader nvjpeg needs it)
        from torchvision.io import ImageReadMode, decode_jpeg  # noqa: PLC0415
    except (ImportError, RuntimeError) as exc:  # RuntimeError: a torchvision of another torch
        raise TrainerError(
            f"--loader nvjpeg needs torchvision built for this torch ({exc}); install the "
            "torchvision release that matches torch in the run's environment"
        ) from None

    def decode(datas: list[torch.Tensor]) -> list[torch.Tensor]:
        try:
            return list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=device))
        except RuntimeError:
            out = []
            for d in datas:
                try:
                    out.append(decode_jpeg(d, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    out.append(pillow_decode(d).to(device))
            return out

    return decode, {"torchvision": torchvision.__version__, "decoder": "nvjpeg"}


class Augment:
    """A batch of decoded images (uint8 CHW of any size, on the device) -> the training
    batch: per image the random-resized crop's box and the flip, drawn as the native loader
    draws them, then crop, antialiased bilinear resize, flip and normalisation."""

    def __init__(self, norm: Normalise, rng: random.Random, size: int = imagenet.CROP) -> None:
        self.norm, self.rng, self.size = norm, rng, size

    def __call__(self, images: list[torch.Tensor]) -> torch.Tensor:
        dev = self.norm.device
        out = torch.empty(len(images), 3, self.size, self.size, device=dev)
        flips = []
        for i, img in enumerate(images):
            h, w = img.shape[-2:]
            left, top, right, bottom = imagenet.resized_crop_box(w, h, self.rng)
            crop = img[:, top:bottom, left:right].unsqueeze(0).to(dev).float()
            out[i] = F.interpolate(
                crop, size=(self.size, self.size), mode="bilinear", antialias=True
            )[0]
            flips.append(self.rng.random() < 0.5)
        flip = torch.tensor(flips, device=dev).view(-1, 1, 1, 1)
        out = torch.where(flip, out.flip(3), out).round_().clamp_(0, 255)
        return self.norm(out)


class _Prefetch:
    """Batches made ahead on a side CUDA stream by one thread, handed over in order; the
    taker's stream waits for each batch's event, so nothing is read before it is written.
    Closing it (the epoch left early) stops the thread."""

    def __init__(self, make: Iterator[Batch], device: torch.device) -> None:
        self.make, self.device = make, device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.q: queue.Queue = queue.Queue(PREFETCH)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._fill, daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        try:
            with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
                for x, y in self.make:
                    event = None
                    if self.cuda:
                        event = torch.cuda.Event()
                        event.record(self.stream)
                    if not self._put((x, y, event)):
                        return
            self._put(None)
        except BaseException as exc:  # raised again in the training thread
            self._put(exc)

    def __iter__(self) -> Iterator[Batch]:
        try:
            while True:
                item = self.q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                x, y, event = item
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)
                    # made on the side stream, used on this one: not freed before it is done
                    x.record_stream(current)
                    y.record_stream(current)
                yield x, y
        finally:
            self.stop.set()


def folders(
    args,
    folders: imagenet.Folders,
    world: int,
    rank: int,
    device: torch.device,
    norm: Normalise,
    val: Callable[[], Iterator[Batch]],
    decode: Decode | None = None,
) -> Data:
    """The training data of --loader nvjpeg. `decode` replaces nvJPEG (tests on a CPU use
    Pillow's decoder: the rest of the path is the same)."""
    versions: dict[str, str] = {}
    if decode is None:
        if device.type != "cuda":
            raise TrainerError("--loader nvjpeg decodes on an NVIDIA GPU; this run has none")
        decode, versions = nvjpeg_decoder(device)
    ds = _Bytes(folders.train)
    sampler = epoch_sampler(len(ds), world, rank, args.seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.per_device_batch,
        sampler=sampler,
        drop_last=True,
        num_workers=args.loader_workers,
        collate_fn=_collate,
        persistent_workers=args.loader_workers > 0,
    )
    if len(loader) == 0:
        raise too_few_images(len(ds), args.per_device_batch, world)
    augment = Augment(norm, random.Random(args.seed * 7919 + rank))

    def made(e: int) -> Iterator[Batch]:
        sampler.set_epoch(e)
        for datas, labels in loader:
            yield augment(decode(datas)), labels.to(device, non_blocking=True)

    def epoch(e: int) -> Iterator[Batch]:
        return iter(_Prefetch(made(e), device))

    return Data(
        len(folders.classes),
        len(ds),
        len(loader),
        epoch,
        val,
        versions,
        eval_images=len(folders.val),
    )
