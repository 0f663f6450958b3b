"""Where a GPU step's time goes in the PyTorch trainer: its main() run in this process under
torch.profiler, after warm-up. Prints the kernels and host calls that take the most time,
the host synchronisations per timed step (cudaStreamSynchronize, cudaDeviceSynchronize,
device-to-host copies, event waits) and the share of GPU time in kernels that use Tensor
Cores (names holding gemm/mma/xmma/cutlass/sm90), so a shortfall against the hand loop or a
target can be traced to its cause. Writes the tables to --out when given.

    python benchmarks/gpu_profile.py [--precision bf16] [--batch 256] [--steps 30] [--out F]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
TENSOR_CORE = ("gemm", "mma", "xmma", "cutlass", "sm90", "hmma", "wgmma")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--dataset", default="synthetic-imagenet")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        print("gpu_profile.py: no CUDA device here; nothing profiled")
        return
    from dlscale.trainers.torch_ddp.train import main as trainer_main

    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "--model", a.model, "--dataset", a.dataset, "--per-device-batch", str(a.batch),
            "--steps", str(a.steps), "--warmup-steps", str(a.warmup), "--device", "cuda",
            "--precision", a.precision, "--log-every", str(max(10, a.steps // 3)),
            "--output", str(Path(tmp) / "metrics.jsonl"),
        ]  # fmt: skip
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            rc = trainer_main(argv)
    if rc:
        sys.exit(rc)
    events = prof.key_averages()
    lines = [
        events.table(sort_by="self_cuda_time_total", row_limit=25),
        events.table(sort_by="self_cpu_time_total", row_limit=15),
    ]
    total_steps = a.steps + a.warmup
    syncs = {e.key: e.count for e in events if e.key in SYNCS}
    dtoh = sum(e.count for e in events if "DtoH" in e.key or "Device -> Pageable" in e.key)
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    gpu_us = sum(e.self_device_time_total for e in kernels)
    tc_us = sum(
        e.self_device_time_total for e in kernels if any(t in e.key.lower() for t in TENSOR_CORE)
    )
    lines.append(
        f"{a.model} {a.precision} batch {a.batch}, {total_steps} steps profiled (warm-up "
        f"included): host synchronisations {syncs or 'none'} "
        f"({sum(syncs.values()) / total_steps:.2f} per step), device-to-host copies {dtoh} "
        f"({dtoh / total_steps:.2f} per step); GPU time {gpu_us / 1e6:.2f} s, "
        f"{tc_us / max(gpu_us, 1):.0%} of it in Tensor-Core kernels by name"
    )
    text = "\n\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
