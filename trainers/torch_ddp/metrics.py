"""What the PyTorch family measures of a transformer run besides its throughput: the device's
peak for the run's precision (a GPU's from the table in common/mfu.py, a CPU's measured
here), the model FLOPs it achieved and its MFU, and each rank's peak memory."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from ..common import memory, mfu

if TYPE_CHECKING:
    from .train import TorchRun

# A CPU's peak: the best of a few timed square matmuls, each long enough for BLAS to run at
# its sustained rate (20 ms or more) and no longer than it must be: the size doubles from 256
# until one takes that long, up to 2,048. (A CPU without bf16 instructions emulates them: a
# bf16 1,024 x 1,024 matmul took 7.2 s here, against 0.07 s in fp32.)
CPU_PEAK_REPEATS = 5
CPU_PEAK_MIN_S = 0.02


def _timed_mm(a: torch.Tensor, b: torch.Tensor) -> float:
    t0 = time.perf_counter()
    torch.mm(a, b)
    return time.perf_counter() - t0


def cpu_peak(precision: str, threads: int) -> tuple[float, str]:
    """This rank's measured matmul peak in TFLOPS (run by every rank at once, so each meets
    the contention its training steps meet), and how it was measured."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    gen = torch.Generator().manual_seed(0)
    n = 256
    while True:
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        torch.mm(a, b)  # the first call at a size sets BLAS up
        if n >= 2048 or _timed_mm(a, b) >= CPU_PEAK_MIN_S:
            break
        n *= 2
    best = min(_timed_mm(a, b) for _ in range(CPU_PEAK_REPEATS))
    how = (
        f"measured: best of {CPU_PEAK_REPEATS} timed {n}x{n} {precision} matmuls "
        f"(torch.mm) on this rank's {threads} thread(s) at its start"
    )
    return 2 * n**3 / best / 1e12, how


class DevicePeak:
    """The run's device peak, settled at its start: looked up for a GPU, measured on a CPU
    (gathered from every rank: the mean is the job's per-device peak)."""

    def __init__(self, run: TorchRun) -> None:
        precision = run.precision
        if run.device.type == "cuda":
            name = torch.cuda.get_device_name(run.device)
            self.tflops, self.source = mfu.gpu_peak(name, precision)
            self.per_rank: list[Any] = [self.tflops]
            self.mmap_threshold = None
            torch.cuda.reset_peak_memory_stats(run.device)
            return
        # On a CPU the memory per rank is its resident set: freed buffers must leave it.
        self.mmap_threshold = memory.return_freed_memory()
        run.barrier()
        mine, self.source = cpu_peak(precision, run.ctx.args.threads)
        self.per_rank = run.gather(mine)
        self.tflops = sum(self.per_rank) / len(self.per_rank)


def peak_memory(run: TorchRun) -> tuple[int | None, str]:
    """This rank's peak memory in bytes, and what was read."""
    if run.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(run.device)), (
            "torch.cuda.max_memory_allocated: the most tensors held on the device at once"
        )
    return memory.peak_rss_bytes(), (
        "VmHWM: the rank process's peak resident set, the interpreter and its libraries included"
    )


def transformer_fields(
    run: TorchRun, peak: DevicePeak, tokens_per_s: float, flops_per_token: int
) -> dict[str, Any]:
    """The summary's transformer fields: tokens a second, achieved TFLOPS per device and
    MFU, and every rank's peak memory (a collective: every rank calls it)."""
    mine, source = peak_memory(run)
    per_rank = run.gather(mine)
    known = [m for m in per_rank if m is not None]
    return {
        "tokens_per_s": tokens_per_s,
        **mfu.utilisation(tokens_per_s, flops_per_token, run.ctx.world, peak.tflops, peak.source),
        "peak_tflops_per_rank": peak.per_rank,
        "peak_memory_bytes_per_rank": per_rank,
        "peak_memory_bytes": max(known) if known else None,
        "peak_memory_source": source,
    }
