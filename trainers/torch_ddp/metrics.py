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

# A CPU's peak: the best of a few timed square matmuls, large enough that BLAS runs at its
# sustained rate (1,024: 2.1 GFLOP each, tens of milliseconds on a core) and small enough
# to cost a run well under a second.
CPU_PEAK_SIZE = 1024
CPU_PEAK_REPEATS = 5


def cpu_peak(precision: str, threads: int) -> tuple[float, str]:
    """This rank's measured matmul peak in TFLOPS (run by every rank at once, so each meets
    the contention its training steps meet), and how it was measured."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    n = CPU_PEAK_SIZE
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dtype)
    b = torch.randn(n, n, generator=gen).to(dtype)
    torch.mm(a, b)  # the first call sets BLAS up
    best = float("inf")
    for _ in range(CPU_PEAK_REPEATS):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
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
        "getrusage ru_maxrss: the rank process's peak resident set, the interpreter and "
        "its libraries included"
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
