"""MXNet's device for one rank: the CPU, or its own GPU (mx.gpu of its local rank), the
precision that really runs there (fp32 with TF32 off, tf32, or fp16 with multi-precision
SGD: MXNet 1.9 has no bf16 on GPUs), and what its first convolution computed in."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.entry import TrainerError
from ..common.gpu import driver_shows_gpus, nvml_gpu, pick_gpu, resolve_precision
from ..common.launch_env import local_world_size

NO_BF16 = (
    "precision bf16: MXNet 1.9 has no bf16 kernels on GPUs; use fp16 (multi-precision SGD) or fp32"
)


@dataclass
class MxDevice:
    cuda: bool
    precision: str
    index: int | None = None  # among the GPUs this process sees
    name: str | None = None
    context: Any = None  # mx.cpu() or mx.gpu(index)

    @property
    def dtype(self) -> str:
        """What the network's parameters and inputs are cast to."""
        return "float16" if self.precision == "fp16" else "float32"


def before_import(args) -> tuple[bool, str]:
    """(on a GPU, the precision asked for), decided before MXNet is imported: cuBLAS and cuDNN
    read NVIDIA_TF32_OVERRIDE when they start, and on Ampere and newer they would compute
    fp32 convolutions in TF32 unless told not to."""
    on_gpu = args.device == "cuda" or (args.device == "auto" and driver_shows_gpus())
    if not on_gpu:
        precision = "fp32" if args.precision == "auto" else args.precision
        if precision != "fp32":
            raise TrainerError(
                f"precision {precision}: the MXNet trainer runs fp32 on CPU (fp16 and tf32 on GPUs)"
            )
        return False, precision
    if args.precision == "bf16":
        raise TrainerError(NO_BF16)
    precision = "fp16" if args.precision == "auto" else args.precision
    if precision == "fp32":
        os.environ["NVIDIA_TF32_OVERRIDE"] = "0"  # fp32 means fp32
    return True, precision


def capability(visible_index: int) -> tuple[int, int] | None:
    """The GPU's compute capability from NVML (MXNet 1.9 does not say); None where NVML
    cannot be read."""
    try:
        import pynvml  # noqa: PLC0415  (nvidia-ml-py: in every GPU environment)

        pynvml.nvmlInit()
        gpu = nvml_gpu(visible_index)
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{gpu.uuid}")
            if hasattr(gpu, "uuid")
            else pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        )
        return tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:  # no pynvml, no driver access: the precision check says so
        return None


def setup(mx, args, on_gpu: bool, precision: str, local_rank: int, srun_task: bool) -> MxDevice:
    """This rank's device once MXNet is imported."""
    if not on_gpu:
        return MxDevice(False, precision, context=mx.cpu())
    count = mx.context.num_gpus()
    if count == 0:
        if args.device == "auto" and precision == "fp32":
            return MxDevice(False, precision, context=mx.cpu())
        cuda_build = mx.runtime.Features().is_enabled("CUDA")
        why = (
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"
            if cuda_build
            else "this environment's MXNet is the CPU build; build the GPU "
            "one with `dlscale env create mxnet --gpu`"
        )
        raise TrainerError(f"--device {args.device}, but MXNet sees no GPU: {why}")
    index = pick_gpu(local_rank, local_world_size(), count, srun_task)
    if precision == "tf32":
        cc = capability(index)
        if cc is None:
            raise TrainerError(
                "precision tf32: this GPU's compute capability cannot be read "
                "(NVML); use fp16 or fp32"
            )
        resolve_precision("tf32", True, cc)  # refuses below 8.0
    return MxDevice(True, precision, index, f"cuda:{index}", mx.gpu(index))


def build_versions(mx) -> dict[str, str]:
    """The CUDA this MXNet was built with (its wheel's name says: mxnet-cu117 is 11.7), and
    whether cuDNN and NCCL are linked in (MXNet 1.9 reports no versions of them)."""
    features = mx.runtime.Features()
    if not features.is_enabled("CUDA"):
        return {}
    from importlib.metadata import distributions  # noqa: PLC0415

    names = ((d.metadata["Name"] or "").lower() for d in distributions())
    cuda = next(
        (f"{m[1]}.{m[2]}" for n in names if (m := re.fullmatch(r"mxnet-cu(\d+)(\d)", n))), "unknown"
    )
    return {
        "cuda": cuda,
        **{k.lower(): "linked in" for k in ("CUDNN", "NCCL") if features.is_enabled(k)},
    }


def gpu_name(device: MxDevice) -> str | None:
    if not device.cuda:
        return None
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        gpu = nvml_gpu(device.index)
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{gpu.uuid}")
            if hasattr(gpu, "uuid")
            else pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        )
        name = pynvml.nvmlDeviceGetName(handle)
        return name.decode() if isinstance(name, bytes) else name
    except Exception:
        return device.name


def first_conv(block) -> Any:
    from mxnet.gluon import nn  # noqa: PLC0415

    for child in block._children.values():
        if isinstance(child, nn.Conv2D):
            return child
        found = first_conv(child)
        if found is not None:
            return found
    return None


def compute_dtype(mx, net, device: MxDevice, size: int, channels: int) -> str:
    """The dtype the network's first convolution computes in, seen by running it once on
    an input as the network gets them."""
    conv = first_conv(net)
    x = mx.nd.zeros((1, channels, size, size), ctx=device.context, dtype=device.dtype)
    return np.dtype(conv(x).dtype).name
