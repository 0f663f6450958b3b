"""What every trainer decides alike about NVIDIA GPUs, framework-free: whether the driver
shows any, which GPU a rank takes, which precision really runs on it, and the GPU's NVML
identity for the energy meter."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .entry import TrainerError

PROC_GPUS = Path("/proc/driver/nvidia/gpus")

# The dtype each precision computes convolutions and matmuls in: what the forward pass
# must show (checked by the GPU tier and recorded as compute_dtype).
COMPUTE_DTYPE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def driver_shows_gpus() -> bool:
    """Whether `--device auto` should look for a GPU: the NVIDIA driver lists one and
    CUDA_VISIBLE_DEVICES does not hide them all (no framework imported to ask)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        return any(PROC_GPUS.iterdir())
    except OSError:
        return False


def pick_gpu(local_rank: int, local_world: int, visible: int, srun_task: bool) -> int:
    """The CUDA index of this rank's GPU among the `visible` ones. A rank that is its own
    srun task under Slurm's per-task GPU binding (--gpus-per-task, --gpu-bind) sees one GPU,
    index 0; under torchrun, or a node-wide allocation, every rank sees all the node's GPUs
    and takes the one of its local rank. More ranks than GPUs is refused, never shared."""
    if visible == 0:
        raise TrainerError("no CUDA device is visible to this rank")
    if visible == 1 and srun_task:
        return 0
    if local_rank >= visible:
        raise TrainerError(
            f"local rank {local_rank} has no GPU of its own: this node shows {visible} GPU(s) "
            f"to {local_world} rank(s) (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); run at most {visible} "
            "rank(s) per node"
        )
    return local_rank


def resolve_precision(requested: str, cuda: bool, capability: tuple[int, int] | None = None) -> str:
    """What `requested` means on this device. auto: bf16 where the GPU has bf16 tensor cores
    (compute capability 8.0 and newer), fp16 (with a loss scaler) below, fp32 on CPU. fp32
    means fp32: TF32 is its own choice (tf32), so a number never silently changes meaning."""
    if not cuda:
        if requested in ("fp16", "tf32"):
            raise TrainerError(f"precision {requested} needs a GPU; use bf16 or fp32 on CPU")
        return "fp32" if requested == "auto" else requested
    assert capability is not None
    ampere = tuple(capability) >= (8, 0)
    if requested == "auto":
        return "bf16" if ampere else "fp16"
    if requested in ("bf16", "tf32") and not ampere:
        cc = f"{capability[0]}.{capability[1]}"
        raise TrainerError(
            f"precision {requested} needs compute capability 8.0 or newer (this "
            f"GPU has {cc}: no {requested} tensor cores); use fp16 or fp32"
        )
    return requested


def nvml_gpu(visible_index: int) -> Any:
    """The GPU a process sees as CUDA index `visible_index`, as the energy meter finds it in
    NVML (which numbers GPUs without CUDA_VISIBLE_DEVICES): by UUID where that variable
    names UUIDs, else by the index it maps to."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return SimpleNamespace(index=visible_index)
    entry = [x.strip() for x in listed.split(",")][visible_index]
    if entry.startswith("GPU-"):
        return SimpleNamespace(uuid=entry.removeprefix("GPU-"))
    return SimpleNamespace(index=int(entry) if entry.isdigit() else visible_index)
