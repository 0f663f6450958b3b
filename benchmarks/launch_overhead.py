"""What does starting a run cost, torchrun against dlscale's own spawner?

The local backend starts a PyTorch run's ranks with a launcher. torchrun imports torch in its
own process and sets up a rendezvous store before any rank starts; dlscale's spawner
(trainers/common/spawn.py) imports only the standard library and sets the same variables.
This times whole runs of the DDP trainer (launcher start to exit) at a few timed steps, both
launchers alternating in one invocation so machine drift hits both alike, at 1 and 2 ranks.
Prints medians and the ratio, and appends them to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/launch_overhead.py [--rounds 5] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row

HERE = Path(__file__).resolve().parent


def launcher_argv(launcher: str, ranks: int) -> list[str]:
    """The launcher's part of the command line, as each starts `ranks` ranks of a module."""
    if launcher == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={ranks}",
        ]
    return [
        sys.executable,
        "-m",
        "dlscale.trainers.common.spawn",
        "--ranks",
        str(ranks),
        "--",
        sys.executable,
    ]


def one_run(launcher: str, ranks: int, steps: int) -> float:
    """Seconds from the launcher's start to its exit, for one run of the DDP trainer."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            *launcher_argv(launcher, ranks),
            "-m",
            "dlscale.trainers.torch_ddp",
            "--model",
            "resnet20",
            "--dataset",
            "synthetic-cifar",
            "--per-device-batch",
            "64",
            "--steps",
            str(steps),
            "--warmup-steps",
            "1",
            "--device",
            "cpu",
            "--output",
            str(Path(tmp) / "metrics.jsonl"),
        ]
        start = time.monotonic()
        subprocess.run(
            argv, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    seconds: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for ranks in (1, 2):
            # Alternate which goes first, so neither always follows the other's cache warmth.
            order = ("torchrun", "spawn") if r % 2 == 0 else ("spawn", "torchrun")
            for launcher in order:
                seconds.setdefault(f"{launcher}_{ranks}", []).append(
                    one_run(launcher, ranks, a.steps)
                )
        print(
            f"round {r + 1}: "
            + "  ".join(f"{k} {v[-1]:5.2f} s" for k, v in sorted(seconds.items())),
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratios = {ranks: med[f"spawn_{ranks}"] / med[f"torchrun_{ranks}"] for ranks in (1, 2)}
    print(f"\nresnet20, batch 64/rank, {a.steps} timed steps, {a.rounds} rounds; medians")
    for ranks in (1, 2):
        print(
            f"{ranks} rank(s): torchrun {med[f'torchrun_{ranks}']:5.2f} s  spawn "
            f"{med[f'spawn_{ranks}']:5.2f} s  spawn/torchrun = {ratios[ranks]:.3f}  "
            f"(saves {med[f'torchrun_{ranks}'] - med[f'spawn_{ranks}']:.2f} s a run)"
        )
    result = {
        "steps": a.steps,
        "rounds": a.rounds,
        "seconds": seconds,
        "median_seconds": med,
        "spawn_over_torchrun": ratios,
    }
    append_row("launch_overhead", result)


if __name__ == "__main__":
    main()
