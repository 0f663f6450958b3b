"""Does the trainer measure the model, or itself?

Compares the PyTorch DDP trainer's images/s with a bare hand-written loop of the same model,
batch, threads and optimizer on the same device (benchmarks/hand_loop.py: no DDP, no records,
no timing brackets), alternating the two
in one invocation so machine drift hits both alike; then the trainer's 2-rank weak-scaling
efficiency. Prints the numbers and the ratios, and appends them to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/trainer_overhead.py [--steps 60] [--rounds 3]

Targets (issue 2): trainer / bare >= 0.97; 2-rank efficiency >= 0.90 on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hand_loop import hand_loop  # noqa: E402  (benchmarks/ is not a package)
from record import append_row  # noqa: E402


def trainer(
    model_name: str, batch: int, steps: int, warmup: int, ranks: int, device: str, precision: str
) -> float:
    """The trainer as the local backend launches it (torchrun, DDP, gloo or NCCL, 1 thread
    per rank), on the hand loop's device and precision."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.jsonl"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={ranks}",
                "-m",
                "dlscale.trainers.torch_ddp",
                "--model",
                model_name,
                "--dataset",
                "synthetic-cifar",
                "--per-device-batch",
                str(batch),
                "--steps",
                str(steps),
                "--warmup-steps",
                str(warmup),
                "--device",
                device,
                "--precision",
                precision,
                "--output",
                str(out),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        summary = json.loads(out.read_text().splitlines()[-1])
        return float(summary["throughput"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="where both loops run (auto: cuda when present)",
    )
    ap.add_argument("--bare-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.device == "auto":
        import torch

        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    # fp32 on both: the comparison is of loops, not precisions (gpu.py compares bf16)
    precision = "fp32"
    if a.bare_only:  # run in its own process, like the trainer, so neither inherits state
        print(
            hand_loop(a.model, "synthetic-cifar", a.batch, a.steps, a.warmup, a.device, precision)
        )
        return
    bare_cmd = [
        sys.executable,
        __file__,
        "--bare-only",
        "--model",
        a.model,
        "--batch",
        str(a.batch),
        "--steps",
        str(a.steps),
        "--warmup",
        str(a.warmup),
        "--device",
        a.device,
    ]
    bare, one, two, pair = [], [], [], []
    ratios, effs, ceilings = [], [], []
    for r in range(a.rounds):
        # Each round measures all four back to back; ratios are taken within a round, so a
        # noisy neighbour that slows one round does not masquerade as overhead.
        bare.append(
            float(subprocess.run(bare_cmd, check=True, capture_output=True, text=True).stdout)
        )
        one.append(trainer(a.model, a.batch, a.steps, a.warmup, 1, a.device, precision))
        two.append(trainer(a.model, a.batch, a.steps, a.warmup, 2, a.device, precision))
        # Two independent bare loops at once: what 2 cores give with no communication at all,
        # the ceiling for any 2-rank efficiency on this machine.
        procs = [subprocess.Popen(bare_cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        pair.append(sum(float(p.communicate()[0]) for p in procs))
        ratios.append(one[-1] / bare[-1])
        effs.append(two[-1] / (2 * one[-1]))
        ceilings.append(pair[-1] / (2 * bare[-1]))
        print(
            f"round {r + 1}: bare {bare[-1]:6.1f}  trainer x1 {one[-1]:6.1f}  trainer x2 "
            f"{two[-1]:6.1f}  2 bare loops {pair[-1]:6.1f} images/s | trainer/bare "
            f"{ratios[-1]:.3f}  efficiency {effs[-1]:.3f}  ceiling {ceilings[-1]:.3f}",
            flush=True,
        )
    med = statistics.median
    ratio, eff, ceiling = med(ratios), med(effs), med(ceilings)
    print(
        f"\n{a.model}, batch {a.batch}/rank, {a.steps} timed steps, {a.rounds} rounds; "
        "medians of per-round ratios"
    )
    print(f"bare loop            {med(bare):8.1f} images/s")
    print(
        f"trainer, 1 rank      {med(one):8.1f} images/s   trainer/bare     = {ratio:.3f}  "
        "(target >= 0.97)"
    )
    print(
        f"trainer, 2 ranks     {med(two):8.1f} images/s   efficiency       = {eff:.3f}  "
        "(target >= 0.90)"
    )
    print(
        f"2 bare loops at once {med(pair):8.1f} images/s   hardware ceiling = {ceiling:.3f}  "
        "(2-rank efficiency with no communication)"
    )
    result = {
        "device": a.device,
        "model": a.model,
        "batch": a.batch,
        "steps": a.steps,
        "rounds": a.rounds,
        "bare": bare,
        "trainer_1": one,
        "trainer_2": two,
        "two_bare_loops": pair,
        "trainer_over_bare": ratio,
        "efficiency_2": eff,
        "ceiling_2": ceiling,
    }
    append_row("trainer_overhead", result)


if __name__ == "__main__":
    main()
