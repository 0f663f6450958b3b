"""The PyTorch family's device: which GPU a rank takes, the precision that really runs on it
(and its math modes), and a step timer that does not stall it."""
from __future__ import annotations

import os
from array import array
from typing import Any

import torch

from ..common.entry import TrainerError

# The dtype each precision computes convolutions and matmuls in: what the forward pass
# must show (checked by the GPU tier and recorded as compute_dtype).
COMPUTE_DTYPE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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
            "rank(s) per node")
    return local_rank


def resolve_precision(requested: str, cuda: bool,
                      capability: tuple[int, int] | None = None) -> str:
    """What `requested` means on this device. auto: bf16 where the GPU has bf16 tensor cores
    (compute capability 8.0 and newer), fp16 (with a loss scaler) below, fp32 on CPU. fp32
    means fp32: TF32 is its own choice (tf32), so a number never silently changes meaning."""
    if not cuda:
        if requested in ("fp16", "tf32"):
            raise TrainerError(f"precision {requested} needs a GPU; use bf16 or fp32 on CPU")
        return "fp32" if requested == "auto" else requested
    assert capability is not None
    ampere = capability >= (8, 0)
    if requested == "auto":
        return "bf16" if ampere else "fp16"
    if requested in ("bf16", "tf32") and not ampere:
        cc = f"{capability[0]}.{capability[1]}"
        raise TrainerError(f"precision {requested} needs compute capability 8.0 or newer (this "
                           f"GPU has {cc}: no {requested} tensor cores); use fp16 or fp32")
    return requested


def set_math_modes(precision: str) -> dict[str, bool]:
    """TF32 for matmuls and convolutions only when asked for; cuDNN autotuning on (warm-up
    hides its first steps). Returns what was set, for the params record."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    return {"tf32": tf32, "cudnn_benchmark": True}


class ComputeDtype:
    """The dtype the model's first convolution really computes in, seen once by a forward
    hook: what ran, not what was asked for."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seen: str | None = None
        conv = next((m for m in model.modules() if isinstance(m, torch.nn.Conv2d)), None)
        self._hook = conv.register_forward_hook(self._see) if conv is not None else None

    def _see(self, module, inputs, output) -> None:
        self.seen = str(output.dtype).removeprefix("torch.")
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


class CudaTimer:
    """Per-step times without stalling the GPU: a CUDA event before and after each timed
    step, turned into seconds at the loop's synchronised points (interval boundaries), so
    only the steps since the last interval hold events and a 90-epoch run keeps one float
    per step, not two events."""

    def __init__(self) -> None:
        self._pending: list[tuple[Any, Any]] = []
        self._times = array("d")

    @staticmethod
    def _event() -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def begin(self) -> None:
        self._pending.append((self._event(), None))

    def end(self) -> None:
        self._pending[-1] = (self._pending[-1][0], self._event())

    @property
    def pending(self) -> int:
        return len(self._pending)

    def collect(self) -> None:
        done = 0
        for a, b in self._pending:
            if not b.query():  # its step is still running: settled at the next point
                break
            self._times.append(a.elapsed_time(b) / 1000.0)
            done += 1
        del self._pending[:done]

    def times(self) -> list[float]:
        torch.cuda.synchronize()
        self.collect()
        return list(self._times)
