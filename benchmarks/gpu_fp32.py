"""Why is fp32 (TF32 off) so slow on a Hopper GPU? (issue 38)

ResNet-50 at batch 256 in fp32 with TF32 off did not finish 30 steps in 190 s on an H200,
where tf32 runs 3,150 images/s. This times every step of the trainer's own recipe (fused
SGD, cudnn.benchmark on, channels_last) and of the same step with one setting changed
(cuDNN autotuning off, NCHW), each in a fresh process under its own time limit, so the
first step (autotuning) and the steady steps are told apart. One step of each is profiled
after the timed ones: the kernels that take its time. Prints as it goes (a process stopped
at its limit still shows its steps) and appends the numbers to benchmarks/results.jsonl.

    python benchmarks/gpu_fp32.py [--batch 256] [--steps 8] [--limit 40]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from record import append_row

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # a checkout without install

# (label, channels_last, cudnn.benchmark, tf32): the trainer's fp32 first, tf32 as reference.
CONFIGS = (
    ("fp32 channels_last autotuned", True, True, False),
    ("fp32 channels_last heuristics", True, False, False),
    ("fp32 NCHW autotuned", False, True, False),
    ("fp32 NCHW heuristics", False, False, False),
    ("tf32 channels_last autotuned", True, True, True),
)


def one(channels_last: bool, benchmark: bool, tf32: bool, batch: int, steps: int) -> None:
    """In the child: print one JSON line per step ({"step": i, "s": seconds}), then the
    profiled step's top kernels ({"kernels": [[name, ms], ...]})."""
    import torch
    import torch.nn.functional as F

    from dlscale.trainers.torch_ddp.models import build

    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device("cuda")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = build("resnet50", 1000).to(dev, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    x = torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        print(json.dumps({"step": i, "s": time.perf_counter() - t0}), flush=True)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted(
        (
            (e.key, e.self_device_time_total / 1e3)
            for e in prof.key_averages()
            if e.self_device_time_total > 0
        ),
        key=lambda k: -k[1],
    )[:6]
    print(json.dumps({"kernels": kernels}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--limit", type=float, default=40.0, help="seconds per configuration")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        cl, bm, tf = (v == "1" for v in a.child)
        one(cl, bm, tf, a.batch, a.steps)
        return
    import torch

    if not torch.cuda.is_available():
        print("gpu_fp32.py: no CUDA device here; nothing measured")
        return
    from gpu import gpu_facts  # benchmarks/gpu.py

    facts = gpu_facts()
    print(f"{facts['gpu']}, torch {facts['torch']}, cuDNN {facts['cudnn']}", flush=True)
    rows = []
    for label, cl, bm, tf in CONFIGS:
        argv = [sys.executable, __file__, "--batch", str(a.batch), "--steps", str(a.steps)]
        argv += ["--child", *("1" if v else "0" for v in (cl, bm, tf))]
        started = time.perf_counter()
        lines: list[str] = []
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=a.limit)
            lines, finished = out.stdout.splitlines(), out.returncode == 0
            err = out.stderr.strip().splitlines()[-1:] if out.returncode else []
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            lines, finished, err = text.splitlines(), False, [f"stopped at {a.limit:.0f} s"]
        steps = [json.loads(x)["s"] for x in lines if x.startswith('{"step"')]
        kernels = next((json.loads(x)["kernels"] for x in lines if x.startswith('{"kern')), [])
        steady = sorted(steps[2:])[len(steps[2:]) // 2] if len(steps) > 2 else None
        row = {
            "config": label,
            "channels_last": cl,
            "cudnn_benchmark": bm,
            "tf32": tf,
            "finished": finished,
            "wall_s": time.perf_counter() - started,
            "step_s": steps,
            "steady_step_s": steady,
            "images_per_s": a.batch / steady if steady else None,
            "top_kernels_ms": kernels,
            "error": err[0] if err else None,
        }
        rows.append(row)
        first = f"{steps[0]:.2f}" if steps else "-"
        rate = f"{row['images_per_s']:.0f}" if steady else "-"
        print(
            f"{label:32s} steps done {len(steps)}/{a.steps}  first step {first} s  "
            f"steady {rate} images/s  wall {row['wall_s']:.0f} s  {row['error'] or ''}",
            flush=True,
        )
        for name, ms in kernels[:3]:
            print(f"    {ms:8.1f} ms  {name[:100]}", flush=True)
    append_row("gpu_fp32", {**facts, "batch": a.batch, "configs": rows})


if __name__ == "__main__":
    main()
