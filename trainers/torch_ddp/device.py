"""The PyTorch family's device: which GPU a rank takes and the precision that really runs on
it (common.gpu, shared with the other trainers), its math modes, and a step timer that does
not stall it."""

from __future__ import annotations

from array import array
from typing import Any

import torch

# Shared with the TensorFlow and MXNet trainers (framework-free): re-exported here.
from ..common.gpu import COMPUTE_DTYPE, pick_gpu, resolve_precision  # noqa: F401


def set_math_modes(precision: str) -> dict[str, bool]:
    """TF32 for matmuls and convolutions only when asked for; cuDNN autotuning on (warm-up
    hides its first steps), except in fp32: on an H200 (cuDNN 9.19) autotuning ResNet-50's
    fp32 convolutions outlasted 190 s, where cuDNN's heuristics start at once and run 973
    images/s (benchmarks/gpu_fp32.py, docs/gpu.md). Returns what was set, for the params
    record."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    autotune = precision != "fp32"
    torch.backends.cudnn.benchmark = autotune
    return {"tf32": tf32, "cudnn_benchmark": autotune}


class ComputeDtype:
    """The dtype the model's first convolution really computes in, seen once by a forward
    hook: what ran, not what was asked for. A compiled model gets no hook (removing one from
    inside the compiled forward breaks its graph and compiles it twice): its first
    convolution is run once on one image of the first batch, eagerly, under the same
    autocast (`see_first`)."""

    def __init__(self, model: torch.nn.Module, compiled: bool = False) -> None:
        self.seen: str | None = None
        # the first convolution; a transformer's first linear layer
        self._conv = next((m for m in model.modules() if isinstance(m, torch.nn.Conv2d)), None)
        if self._conv is None:
            self._conv = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
        self._hook = None
        if self._conv is not None and not compiled:
            self._hook = self._conv.register_forward_hook(self._see)

    def see_first(self, x: torch.Tensor, autocast) -> None:
        """For a compiled model, before its first step: the first convolution on x[:1]."""
        if self.seen is not None or self._conv is None or self._hook is not None:
            return
        if not isinstance(self._conv, torch.nn.Conv2d):
            return  # a transformer's input is token ids, not its first layer's input
        with torch.no_grad(), autocast():
            self.seen = str(self._conv(x[:1]).dtype).removeprefix("torch.")

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
