"""Does the test-only DLSCALE_TEST_SLOWDOWN slow a run by what it says, on a GPU too (issue
35)? Its wait is added at the loop's synchronised points for the timed time since the last
one, so asynchronous steps are stretched by their work, not by their launch.

The PyTorch trainer is run directly (through torchrun, as the local backend starts it),
alternating runs without and with the knob, ROUNDS of each; printed and appended to
results.jsonl: each pair's throughput ratio (slowed / plain) and their median, which
should be 1 - SLOWDOWN.

    .venv/bin/python benchmarks/slowdown_knob.py --device cuda --model resnet50 \
        --dataset synthetic-imagenet --batch 128 --steps 60      # on a GPU
    .venv/bin/python benchmarks/slowdown_knob.py                 # CPU, ResNet-20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row


def run(out: Path, a: argparse.Namespace, slowdown: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("DLSCALE_TEST_SLOWDOWN", None)
    if slowdown:
        env["DLSCALE_TEST_SLOWDOWN"] = str(slowdown)
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        "--nproc-per-node=1", "-m", "dlscale.trainers.torch_ddp", "--model", a.model,
        "--dataset", a.dataset, "--per-device-batch", str(a.batch), "--precision",
        a.precision, "--loader", "native", "--run-id", f"knob{time.time_ns()}",
        "--device", a.device, "--output", str(out), "--steps", str(a.steps),
        "--warmup-steps", str(a.warmup), "--log-every", str(a.steps),
    ]  # fmt: skip
    subprocess.run(argv, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    summary = next(r for r in recs if r.get("kind") == "summary")
    env_rec = next((r for r in recs if r.get("kind") == "env"), {})
    return {"throughput": summary["throughput"], "device": (env_rec.get("devices") or ["?"])[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic-cifar")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    ratios, device = [], "?"
    with tempfile.TemporaryDirectory(prefix="dlscale-knob-") as t:
        for i in range(a.rounds):
            order = (0.0, a.slowdown) if i % 2 == 0 else (a.slowdown, 0.0)
            got = {s: run(Path(t) / f"{i}-{s}.jsonl", a, s) for s in order}
            device = got[0.0]["device"]
            ratios.append(got[a.slowdown]["throughput"] / got[0.0]["throughput"])
            print(
                f"round {i + 1}: plain {got[0.0]['throughput']:,.1f}, slowed "
                f"{got[a.slowdown]['throughput']:,.1f} images/s: ratio {ratios[-1]:.3f} "
                f"(asked {1 - a.slowdown:.3f})",
                flush=True,
            )
    row = {
        "device": device,
        "model": a.model,
        "batch": a.batch,
        "precision": a.precision,
        "steps": a.steps,
        "slowdown": a.slowdown,
        "ratios": [round(r, 4) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "asked_ratio": 1 - a.slowdown,
    }
    if a.device == "cuda":  # the GPU, driver, torch and CUDA, as gpu.py's rows say them
        from gpu import gpu_facts

        row = {**gpu_facts(), **row}
    if not a.no_save:
        row = append_row("slowdown_knob", row)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
