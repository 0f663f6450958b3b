"""TensorFlow's device for one rank, shared by the TensorFlow and Horovod + TensorFlow
trainers: its own GPU (or the CPU), set before TensorFlow starts its runtime; the precision
that really runs there (a Keras mixed-precision policy, TF32 on or off); the input pipeline
that feeds it; and what its first convolution really computed in."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.entry import TrainerError
from ..common.gpu import driver_shows_gpus, nvml_gpu, pick_gpu, resolve_precision
from ..common.launch_env import local_world_size

POLICY = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclass
class TfDevice:
    cuda: bool
    precision: str
    name: str | None = None  # the GPU's name, for the env record
    index: int | None = None  # among the GPUs this process sees
    capability: tuple[int, int] | None = None

    @property
    def tf32(self) -> bool:
        return self.precision == "tf32"

    def meter_gpu(self) -> Any:
        return nvml_gpu(self.index) if self.cuda else None


def wants_cuda(device: str) -> bool:
    """Decided before TensorFlow is imported (CPU ranks are pinned to their cores first)."""
    return device == "cuda" or (device == "auto" and driver_shows_gpus())


def cpu_precision(requested: str, framework: str) -> str:
    """fp32, or bf16 (Keras' mixed_bfloat16 runs on CPUs too); fp16 and TF32 need a GPU."""
    precision = resolve_precision(requested, False)
    if precision not in ("fp32", "bf16"):
        raise TrainerError(
            f"precision {precision}: the {framework} trainer runs fp32 or bf16 on CPU"
        )
    return precision


def setup(tf, args, local_rank: int, srun_task: bool, framework: str) -> TfDevice:
    """This rank's device, before any TensorFlow op: on a GPU only that GPU is visible to
    TensorFlow and its memory grows as needed (ranks never share one, and none takes every
    GPU's memory); TF32 is on only for precision tf32 (TensorFlow's default is on)."""
    if not wants_cuda(args.device):
        return TfDevice(False, cpu_precision(args.precision, framework))
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        if args.device == "auto":
            return TfDevice(False, cpu_precision(args.precision, framework))
        why = (
            "this environment's TensorFlow is a CPU build; build the GPU one with "
            f"`dlscale env create {framework} --gpu`"
            if not tf.test.is_built_with_cuda()
            else f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"
        )
        raise TrainerError(f"--device cuda, but TensorFlow sees no GPU: {why}")
    index = pick_gpu(local_rank, local_world_size(), len(gpus), srun_task)
    mine = gpus[index]
    tf.config.set_visible_devices([mine], "GPU")
    tf.config.experimental.set_memory_growth(mine, True)
    details = tf.config.experimental.get_device_details(mine)
    capability = tuple(details.get("compute_capability") or (0, 0))
    precision = resolve_precision(args.precision, True, capability)
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    return TfDevice(True, precision, details.get("device_name", mine.name), index, capability)


def set_policy(keras, precision: str) -> None:
    """Keras' global policy, before the model is built: layers compute in bf16/fp16 and keep
    their variables in float32."""
    keras.mixed_precision.set_global_policy(POLICY.get(precision, "float32"))


def compute_dtype(tf, keras, model) -> str:
    """The dtype the model's first convolution computes in, seen by running it once."""
    conv = next(layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D))
    shape = [1, *conv.input_shape[1:]]
    return conv(tf.zeros(shape)).dtype.name


def versions(tf) -> dict[str, Any]:
    """CUDA and cuDNN as this TensorFlow was built with (none for a CPU build)."""
    info = tf.sysconfig.get_build_info()
    if not info.get("is_cuda_build"):
        return {}
    return {"cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version")}


def pipeline(tf, data, per_device_batch: int, cuda: bool, threads: int = 1) -> Iterator[Any]:
    """The batches the shared loop takes (None ends an epoch). Synthetic data is one batch
    made once on the device. On a GPU, real data goes through tf.data, from the arrays'
    generator with prefetch, so the next batches are prepared while the GPU computes. On a
    CPU the rank's one core would prepare them instead of computing: tf.data's generator
    and prefetch thread cost ResNet-20 on digits 59% of its images/s there (1 rank, 1
    thread: benchmarks/tf_input.py), so CPU ranks take the arrays directly, as before."""

    def constants(x, y):
        if not cuda:
            return tf.constant(x), tf.constant(y, dtype=tf.int64)
        with tf.device("/GPU:0"):  # copied once, not before every step
            return tf.identity(tf.constant(x)), tf.identity(tf.constant(y, dtype=tf.int64))

    if data.train is None or not cuda:
        yield from data.batches(constants)
        return
    source = data.batches(lambda x, y: (x.astype(np.float32, copy=False), y.astype(np.int64)))
    first = next(source)
    spec = (
        tf.TensorSpec((per_device_batch, *first[0].shape[1:]), tf.float32),
        tf.TensorSpec((per_device_batch,), tf.int64),
    )
    options = tf.data.Options()
    options.threading.private_threadpool_size = max(1, threads)

    def epoch(head):
        """This epoch's batches, from the shared stream, up to its end marker."""

        def gen():
            if head is not None:
                yield head
            for item in source:
                if item is None:
                    return
                yield item

        return (
            tf.data.Dataset.from_generator(gen, output_signature=spec)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(options)
        )

    head = first
    while True:
        yield from epoch(head)
        head = None
        yield None
