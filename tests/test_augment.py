"""CIFAR-10's augmentation is drawn per image in every loader (the PyTorch family's native
loader, the array trainers' numpy path, DALI), so "the same augmentation" holds: each image
of a batch is its source at its own one of the 81 whole-pixel crops of the 4-pixel-padded
image, flipped or not."""

import numpy as np
import pytest
import torch

from dlscale.trainers.common.arrays import augment_cifar as numpy_augment
from dlscale.trainers.torch_ddp.batches import augment_cifar as torch_augment

N = 64


def _sources() -> np.ndarray:
    """Images whose every pixel differs, so a crop and flip is identified exactly."""
    rng = np.random.default_rng(0)
    return rng.permutation(N * 3 * 32 * 32).reshape(N, 3, 32, 32).astype(np.float32) + 1


def _identify(src: np.ndarray, out: np.ndarray) -> tuple[int, int, bool] | None:
    padded = np.pad(src, ((0, 0), (4, 4), (4, 4)))
    for oy in range(9):
        for ox in range(9):
            crop = padded[:, oy : oy + 32, ox : ox + 32]
            for flip in (False, True):
                if np.array_equal(crop[:, :, ::-1] if flip else crop, out):
                    return oy, ox, flip
    return None


def _augmented(which: str, src: np.ndarray) -> np.ndarray:
    if which == "torch":
        torch.manual_seed(1)
        return torch_augment(torch.from_numpy(src)).numpy()
    # numpy's path flips before padding: the same transform as torch's
    return numpy_augment(src, np.random.default_rng(1))


@pytest.mark.parametrize("which", ["torch", "numpy"])
def test_each_image_gets_its_own_crop_and_flip(which):
    src = _sources()
    out = _augmented(which, src)
    assert out.shape == src.shape
    found = [_identify(src[i], out[i]) for i in range(N)]
    assert None not in found  # every image is one of its 162 crops-and-flips
    offsets = {(oy, ox) for oy, ox, _ in found}
    flips = sum(f for _, _, f in found)
    # one offset per batch would give a single (oy, ox) here
    assert len(offsets) > 20, offsets
    assert 10 < flips < N - 10


def test_the_native_cifar10_loader_augments_each_image_of_its_batches(tmp_path):
    """Through the loader a trainer builds, not only the function: every image of a batch,
    un-normalised, is its source at one of its crops and flips, and they differ."""
    from dlscale.trainers.common import data as cd
    from dlscale.trainers.common.args import build_parser
    from dlscale.trainers.torch_ddp import loaders
    from test_data import make_cifar

    make_cifar(tmp_path / "cifar", n=8)  # 40 training images
    args = build_parser("t").parse_args(
        [
            "--model",
            "resnet20",
            "--dataset",
            "cifar10",
            "--data-dir",
            str(tmp_path / "cifar"),
            "--per-device-batch",
            "8",
            "--steps",
            "1",
        ]
    )
    data = loaders.build(args, 1, 0, 0, torch.device("cpu"), False, "pytorch-ddp")
    train, _ = cd.load_real("cifar10", str(tmp_path / "cifar"), 0)
    mean = np.array(cd.CIFAR_MEAN, dtype=np.float32).reshape(3, 1, 1) * 255
    std = np.array(cd.CIFAR_STD, dtype=np.float32).reshape(3, 1, 1) * 255
    sources = train.images.astype(np.float32)
    found = []
    for x, _ in data.epoch(0):
        for img in x.numpy():
            raw = np.rint(img * std + mean)
            hits = [_identify(s, raw) for s in sources]
            found.append(next((h for h in hits if h is not None), None))
    assert found and None not in found
    assert len({(oy, ox) for oy, ox, _ in found}) > 1
