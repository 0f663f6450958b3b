"""`--loader nvjpeg` without a GPU: everything but nvJPEG itself (Pillow decodes instead), so
the epoch's shares, the crop and flip rule, the resize, the prefetch thread and the refusals
are held on every machine; tests/gpu runs nvJPEG itself.

The crop and flip are the native loader's: the same box rule drawn in the same order, and a
resize that lands within a few levels of Pillow's."""

import random
import threading
import time

import numpy as np
import pytest
import torch
from test_loaders import args_for, sample  # noqa: F401

from conftest import HANG_S, dlscale
from dlscale.trainers.common import imagenet
from dlscale.trainers.common.entry import TrainerError
from dlscale.trainers.common.imagenet import read_folders
from dlscale.trainers.torch_ddp import gpu_jpeg, loaders
from dlscale.trainers.torch_ddp.batches import Normalise

CPU = torch.device("cpu")


def pillow(datas):
    return [gpu_jpeg.pillow_decode(d) for d in datas]


def identity_norm():
    """Normalise that leaves 0..255 values as they are (mean 0, std 1/255 in 0..1 units)."""
    return Normalise((0, 0, 0), (1 / 255,) * 3, CPU, channels_last=False)


def test_crop_and_flip_match_the_native_transform(sample):
    folders = read_folders(str(sample))
    augment = gpu_jpeg.Augment(identity_norm(), random.Random(0))
    native_rng = random.Random(0)
    diffs = []
    for path, _ in folders.train[:12]:
        with open(path, "rb") as fh:
            data = torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8)
        ours = augment([gpu_jpeg.pillow_decode(data)])[0].permute(1, 2, 0).numpy()
        theirs = imagenet.train_transform(path, native_rng).astype(np.float32)
        assert ours.shape == theirs.shape == (224, 224, 3)
        diffs.append(np.abs(ours - theirs).mean())
    # Same boxes and flips (a wrong box or flip differs by tens of levels); the two
    # antialiased bilinear resizes round differently by a level or so.
    assert max(diffs) < 3.0, diffs


def test_epochs_have_the_native_loaders_steps_shares_and_labels(sample):
    folders = read_folders(str(sample))
    norm = Normalise(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD, CPU, False)
    shares = []
    for rank in range(2):
        args = args_for("imagenet", "nvjpeg", batch=4, data_dir=sample)
        native = loaders.build(
            args_for("imagenet", batch=4, data_dir=sample), 2, rank, rank, CPU, False, "x"
        )
        data = gpu_jpeg.folders(args, folders, 2, rank, CPU, norm, native.val, decode=pillow)
        assert data.steps_per_epoch == native.steps_per_epoch == 48 // 2 // 4
        labels = []
        for x, y in data.epoch(0):
            assert x.shape == (4, 3, 224, 224) and x.dtype == torch.float32
            assert abs(float(x.mean())) < 3  # normalised, not 0..255
            labels += y.tolist()
        native_labels = [label for _, y in native.epoch(0) for label in y.tolist()]
        assert sorted(labels) == sorted(native_labels)  # the same share, in its own order
        shares.append(labels)
    assert len(shares[0]) == len(shares[1]) == 24


def test_an_epoch_left_early_stops_its_thread(sample):
    folders = read_folders(str(sample))
    norm = Normalise(imagenet.IMAGENET_MEAN, imagenet.IMAGENET_STD, CPU, False)
    args = args_for("imagenet", "nvjpeg", batch=2, data_dir=sample)
    before = threading.active_count()
    data = gpu_jpeg.folders(args, folders, 1, 0, CPU, norm, lambda: iter(()), decode=pillow)
    it = data.epoch(0)
    next(it)
    it.close()
    deadline = time.monotonic() + HANG_S
    while threading.active_count() > before and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    assert threading.active_count() <= before


def test_a_decode_error_reaches_the_training_thread(sample):
    folders = read_folders(str(sample))
    norm = identity_norm()
    args = args_for("imagenet", "nvjpeg", batch=2, data_dir=sample)

    def broken(datas):
        raise TrainerError("a training image cannot be decoded (test)")

    data = gpu_jpeg.folders(args, folders, 1, 0, CPU, norm, lambda: iter(()), decode=broken)
    with pytest.raises(TrainerError, match="cannot be decoded"):
        next(data.epoch(0))


def test_the_trainer_refuses_nvjpeg_without_a_gpu_or_on_arrays(sample):
    folders = read_folders(str(sample))
    args = args_for("imagenet", "nvjpeg", data_dir=sample)
    with pytest.raises(TrainerError, match="decodes on an NVIDIA GPU"):
        gpu_jpeg.folders(args, folders, 1, 0, CPU, identity_norm(), lambda: iter(()))
    with pytest.raises(TrainerError, match="decodes JPEG folders"):
        loaders.build(args_for("digits", "nvjpeg"), 1, 0, 0, CPU, False, "pytorch-ddp")


SPEC = """\
[experiment]
name = "jpeg"
frameworks = ["pytorch-ddp"]
models = ["{model}"]
datasets = ["{dataset}"]
loaders = ["nvjpeg"]
scales = ["1x1"]
per_device_batch = [4]
repetitions = 1
[training]
steps = 2
warmup_steps = 1
data_dir = "{data_dir}"
"""


def test_planning_refuses_nvjpeg_on_arrays_and_on_a_machine_without_gpus(
    tmp_path, home, sample, monkeypatch
):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    arrays = tmp_path / "arrays.toml"
    arrays.write_text(SPEC.format(model="resnet20", dataset="digits", data_dir=tmp_path))
    out = dlscale("plan", str(arrays), home=home)
    assert out.returncode == 2
    assert "loader 'nvjpeg' decodes JPEG folders (dataset imagenet)" in out.stderr
    folder = tmp_path / "folder.toml"
    folder.write_text(SPEC.format(model="resnet50", dataset="imagenet", data_dir=sample))
    out = dlscale("run", str(folder), "--backend", "local", home=home)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nvjpeg decodes on an NVIDIA GPU, and these runs have none" in out.stderr
    assert "Traceback" not in out.stderr
