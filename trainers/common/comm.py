"""The communication benchmark, framework-free: which allreduces one training step makes (the
gradient in the framework's own buckets), how they are timed, and what is recorded, with
nccl-tests' definitions of bandwidth (doc/PERFORMANCE.md there):

    algbw = S / t                  S: bytes allreduced, t: seconds
    busbw = algbw * 2 (n - 1) / n  n: ranks; comparable with the link's peak whatever n is

GB/s is 10^9 bytes a second, as nccl-tests print it. A trainer passes one round (every
bucket's allreduce, issued as its framework issues them, then waited for) and a barrier;
each round is timed alone after a barrier, so a late rank's start is not counted as
communication, and the slowest rank sets each round's time, as in the throughput. Standard
library only: it runs in every framework's environment.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

MIB = 1024 * 1024
# torch DDP: bucket_cap_mb=25 (MiB), and a first bucket of dist._DEFAULT_FIRST_BUCKET_BYTES
# (1 MiB) so the last layers' gradients start travelling early.
DDP_BUCKET_BYTES = 25 * MIB
DDP_FIRST_BUCKET_BYTES = 1 * MIB
# Horovod 0.28: tensors are fused up to HOROVOD_FUSION_THRESHOLD, 128 MiB by default.
HOROVOD_FUSION_BYTES = 128 * MIB
# DeepSpeed: zero_optimization.reduce_bucket_size, 5e8 elements by default.
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
WARMUP_ROUNDS = 5
ROUNDS = 30
# The message-size sweep (one allreduce of one buffer per size): enough sizes to fit a
# latency and a bandwidth per tier (engine/results/commfit.py), few rounds each so the
# sweep costs about what the step's benchmark does.
SWEEP_POINTS = 8
SWEEP_WARMUP = 2
SWEEP_ROUNDS = 10
SWEEP_SPAN = 64  # the smallest size is at most the whole gradient / this, so latency shows


@dataclass(frozen=True)
class CommPlan:
    """One step's gradient communication: the allreduces (bytes each, in the order they are
    issued), the framework's bucket limit, and who forms the buckets."""

    sizes: list[int]
    bucket_bytes: int
    element_bytes: int = 4
    fused_by: str = "framework"  # "framework": the sizes are what it fuses, issued as such;
    # "library": each gradient is issued alone and the library (Horovod) fuses them

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    @property
    def fused(self) -> list[int]:
        """The buckets that travel: as issued, or as the library fuses them (up to its
        threshold, in the order issued)."""
        if self.fused_by == "library":
            return buckets(self.sizes, [self.bucket_bytes])
        return self.sizes


def buckets(tensor_bytes: list[int], limits: list[int]) -> list[int]:
    """The bucket sizes that tensors fill in the order given (gradients in the order backward
    produces them: the model's parameters reversed). A bucket closes once it holds at least
    its limit: the first bucket's limit is limits[0], every later one's limits[-1] (the
    rule of DDP's reducer; a tensor is never split)."""
    out, current = [], 0
    for size in tensor_bytes:
        current += size
        if current >= limits[min(len(out), len(limits) - 1)]:
            out.append(current)
            current = 0
    if current:
        out.append(current)
    return out


def algbw_gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def busbw_gbps(algbw: float, ranks: int) -> float:
    """nccl-tests' allreduce bus bandwidth: each rank sends and receives 2(n-1)/n of the
    data, so this is what every link carried."""
    return algbw * 2 * (ranks - 1) / ranks


def time_rounds(
    one_round: Callable[[], None],
    barrier: Callable[[], None],
    sync_device: Callable[[], None],
    warmup: int = WARMUP_ROUNDS,
    rounds: int = ROUNDS,
) -> list[float]:
    """Seconds of each timed round on this rank (warm-up rounds run first, untimed: they
    set up connections and buffers)."""
    for _ in range(warmup):
        one_round()
        sync_device()
    times = []
    for _ in range(rounds):
        barrier()
        t0 = time.perf_counter()
        one_round()
        sync_device()
        times.append(time.perf_counter() - t0)
    return times


def sweep_sizes(plan: CommPlan, points: int = SWEEP_POINTS) -> list[int]:
    """Message sizes from one bucket (the smallest that travels, or the whole gradient /
    SWEEP_SPAN where that is larger) to the whole gradient, evenly spaced on a log scale,
    whole elements each."""
    total = plan.total_bytes
    if total <= 0:
        return []
    smallest = min([*plan.fused, total // SWEEP_SPAN] or [total])
    low = max(plan.element_bytes, smallest)
    out = []
    for i in range(points):
        size = round(low * (total / low) ** (i / max(points - 1, 1)))
        size -= size % plan.element_bytes
        if size >= plan.element_bytes and size not in out:
            out.append(size)
    return out


def sweep_entry(per_rank: list[list[float]], nbytes: int) -> dict:
    """One size of the sweep: the median over rounds of the slowest rank's time."""
    t = statistics.median(max(ts) for ts in zip(*per_rank))
    alg = algbw_gbps(nbytes, t)
    return {
        "bytes": nbytes,
        "time_s": t,
        "algbw_gbps": alg,
        "busbw_gbps": busbw_gbps(alg, len(per_rank)),
        "rounds": len(per_rank[0]),
    }


def record_fields(
    per_rank: list[list[float]],
    plan: CommPlan,
    backend: str,
    warmup: int = WARMUP_ROUNDS,
    sweep: list[dict] | None = None,
) -> dict:
    """The comm record's fields from every rank's round times (and the sweep's entries)."""
    slowest = [max(ts) for ts in zip(*per_rank)]
    t = statistics.median(slowest)
    ranks = len(per_rank)
    alg = algbw_gbps(plan.total_bytes, t)
    ordered = sorted(slowest)
    return {
        "collective": "allreduce",
        "backend": backend,
        "world_size": ranks,
        "comm_bytes": plan.total_bytes,
        "buckets": plan.fused,
        "bucket_bytes": plan.bucket_bytes,
        "fused_by": plan.fused_by,
        "element_bytes": plan.element_bytes,
        "warmup_rounds": warmup,
        "repetitions": len(slowest),
        "comm_time_s": t,
        "comm_time_p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "comm_time_cv": (
            statistics.stdev(slowest) / statistics.fmean(slowest)
            if len(slowest) > 1 and statistics.fmean(slowest)
            else None
        ),
        "comm_algbw_gbps": alg,
        "comm_busbw_gbps": busbw_gbps(alg, ranks),
        "elapsed_s": sum(slowest) + sum(e["time_s"] * e["rounds"] for e in sweep or []),
        "sweep": sweep or [],
    }


def progress_line(fields: dict) -> str:
    """The run log's closing line of a comm benchmark."""
    return (
        f"allreduce of {fields['comm_bytes'] / 1e6:.2f} MB in {len(fields['buckets'])} "
        f"bucket(s) over {fields['backend']} x{fields['world_size']}: "
        f"{fields['comm_time_s'] * 1e3:.2f} ms (median of {fields['repetitions']}), "
        f"algbw {fields['comm_algbw_gbps']:.3f} GB/s, busbw "
        f"{fields['comm_busbw_gbps']:.3f} GB/s"
    )
