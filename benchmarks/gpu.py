"""The PyTorch trainer on one GPU against a hand-written loop with identical settings.

ResNet-50 on synthetic ImageNet, batch 256, channels_last (the DeepLearningExamples recipe),
in each of --precisions (default bf16, tf32, fp32): the trainer and benchmarks/hand_loop.py
alternate in one invocation, each in a fresh process, so drift hits both alike. --variants
adds the trainer in fp16 and bf16 with torch.compile. With --cifar, ResNet-44 (the CCGRID
2020 model) in bf16 at batch 128/256/512, where per-step overheads show. Prints images/s and
the ratios and appends them, with the GPU's name, driver, torch and CUDA versions, to
benchmarks/results.jsonl.

    python benchmarks/gpu.py [--rounds 3] [--steps 100] [--precisions bf16,tf32,fp32]
                             [--variants] [--cifar] [--cifar-rounds N]

Targets (issues 13, 28): trainer / hand loop >= 0.97 in every precision; >= 3,000 images/s
in bf16 on one H100.
Without a CUDA device it says so and measures nothing.
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

HERE = Path(__file__).resolve().parent


def gpu_facts() -> dict[str, str | None]:
    import torch

    driver = None
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            .stdout.strip()
            .splitlines()[0]
        )
    except (OSError, IndexError, subprocess.TimeoutExpired):
        pass
    return {
        "gpu": torch.cuda.get_device_name(0),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
    }


def trainer(
    model: str,
    dataset: str,
    batch: int,
    steps: int,
    warmup: int,
    precision: str,
    compile: bool = False,
    mode: str = "default",
    env: dict[str, str] | None = None,
) -> dict:
    """One rank of the trainer as the local backend starts it; its summary record."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.jsonl"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dlscale.trainers.torch_ddp",
                "--model",
                model,
                "--dataset",
                dataset,
                "--per-device-batch",
                str(batch),
                "--steps",
                str(steps),
                "--warmup-steps",
                str(warmup),
                "--device",
                "cuda",
                "--precision",
                precision,
                "--memory-format",
                "channels_last",
                "--log-every",
                str(max(10, steps // 4)),
                "--output",
                str(out),
            ]
            + (["--compile", "--compile-mode", mode] if compile else []),
            check=True,
            stdout=subprocess.DEVNULL,  # its stderr (compile logs, a traceback) to the log
            env={**os.environ, **(env or {})},
        )
        return json.loads(out.read_text().splitlines()[-1])


def hand(
    model: str,
    dataset: str,
    batch: int,
    steps: int,
    warmup: int,
    precision: str,
    compile: bool = False,
    mode: str = "default",
) -> float:
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "hand_loop.py"),
            "--model",
            model,
            "--dataset",
            dataset,
            "--batch",
            str(batch),
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
            "--device",
            "cuda",
            "--precision",
            precision,
            "--channels-last",
        ]
        + (["--compile", "--compile-mode", mode] if compile else []),
        check=True,
        stdout=subprocess.PIPE,  # its stderr (compile logs, a traceback) to the log
        text=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


def compare(
    model: str,
    dataset: str,
    batch: int,
    a,
    label: str,
    precision: str,
    rounds: int,
    mode: str | None = None,
) -> dict:
    """Trainer against hand loop, alternating; ratios taken within each round. `mode`: both
    under torch.compile in that mode (None: eager)."""
    hands, trainers, ratios = [], [], []
    comp = {"compile": mode is not None, "mode": mode or "default"}
    for r in range(rounds):
        # where a round is, when one runs past its stage's limit (a compile that never ends)
        print(f"{label} round {r + 1}: hand loop, then trainer ({time.strftime('%T')})", flush=True)
        hands.append(hand(model, dataset, batch, a.steps, a.warmup, precision, **comp))
        s = trainer(model, dataset, batch, a.steps, a.warmup, precision, **comp)
        trainers.append(s["throughput"])
        ratios.append(trainers[-1] / hands[-1])
        print(
            f"{label} round {r + 1}: hand loop {hands[-1]:8.1f}  trainer {trainers[-1]:8.1f} "
            f"images/s  trainer/hand {ratios[-1]:.3f}  (computed in {s.get('compute_dtype')})",
            flush=True,
        )
    return {
        "model": model,
        "dataset": dataset,
        "batch": batch,
        "precision": precision,
        "compile_mode": mode,
        "compute_dtype": s.get("compute_dtype"),
        "hand": hands,
        "trainer": trainers,
        "trainer_over_hand": statistics.median(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precisions", default="bf16,tf32,fp32", help="comma-separated")
    ap.add_argument("--variants", action="store_true", help="also fp16, and bf16 compiled")
    ap.add_argument(
        "--compile-modes",
        default="",
        help="comma-separated torch.compile modes (default, reduce-overhead...): ResNet-50 "
        "in bf16, the compiled trainer against the hand loop compiled in the same mode",
    )
    ap.add_argument("--cifar", action="store_true", help="also ResNet-44 at 128/256/512")
    ap.add_argument("--cifar-rounds", type=int, default=None, help="default: --rounds")
    ap.add_argument(
        "--slowdown",
        type=float,
        default=0.0,
        help="check the test knob DLSCALE_TEST_SLOWDOWN at this fraction: ResNet-44, batch "
        "128, bf16 (short asynchronous steps), with and without it, alternating",
    )
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu.py: no CUDA device here; nothing measured")
        return
    facts = gpu_facts()
    print(
        f"{facts['gpu']}, driver {facts['driver']}, torch {facts['torch']}, "
        f"CUDA {facts['cuda']}, cuDNN {facts['cudnn']}",
        flush=True,
    )
    med = statistics.median
    precisions = [p for p in a.precisions.split(",") if p]  # "" for none
    resnet50 = {
        p: compare("resnet50", "synthetic-imagenet", a.batch, a, f"resnet50 {p}", p, a.rounds)
        for p in precisions
    }
    compiled = {
        m: compare(
            "resnet50",
            "synthetic-imagenet",
            a.batch,
            a,
            f"resnet50 bf16 compiled {m}",
            "bf16",
            a.rounds,
            m,
        )
        for m in a.compile_modes.split(",")
        if m
    }
    variants = {}
    for name, precision, comp in (("fp16", "fp16", False), ("bf16+compile", "bf16", True)):
        if not a.variants:
            break
        runs = [
            trainer("resnet50", "synthetic-imagenet", a.batch, a.steps, a.warmup, precision, comp)[
                "throughput"
            ]
            for _ in range(a.rounds)
        ]
        variants[name] = runs
        print(
            f"resnet50 trainer {name}: {med(runs):8.1f} images/s (median of {a.rounds})", flush=True
        )
    knob = []
    for r in range(a.rounds if a.slowdown else 0):
        pair = []
        for value in (0.0, a.slowdown) if r % 2 == 0 else (a.slowdown, 0.0):
            env = {"DLSCALE_TEST_SLOWDOWN": str(value)} if value else {}
            s = trainer("resnet44", "synthetic-cifar", 128, a.steps, a.warmup, "bf16", env=env)
            pair.append((value, s["throughput"]))
        plain = next(t for v, t in pair if not v)
        slowed = next(t for v, t in pair if v)
        knob.append({"plain": plain, "slowed": slowed, "slowed_over_plain": slowed / plain})
        print(
            f"slowdown knob {a.slowdown:.2f} round {r + 1}: plain {plain:8.1f}  slowed "
            f"{slowed:8.1f} images/s  slowed/plain {slowed / plain:.3f} (asked "
            f"{1 - a.slowdown:.3f})",
            flush=True,
        )
    cifar_rounds = a.cifar_rounds or a.rounds
    cifar = (
        [
            compare("resnet44", "synthetic-cifar", b, a, f"resnet44 b{b}", "bf16", cifar_rounds)
            for b in (128, 256, 512)
        ]
        if a.cifar
        else []
    )
    print(
        f"\nresnet50, synthetic ImageNet, batch {a.batch}, channels_last, {a.steps} timed "
        f"steps, {a.rounds} rounds (target: trainer/hand >= 0.97; bf16 >= 3000 images/s)"
    )
    for p, c in resnet50.items():
        print(
            f"resnet50 {p:<5} hand {med(c['hand']):8.1f}  trainer {med(c['trainer']):8.1f} "
            f"images/s  trainer/hand {c['trainer_over_hand']:.3f}  (computed in "
            f"{c['compute_dtype']})"
        )
    for m, c in compiled.items():
        print(
            f"resnet50 bf16 compiled ({m}) hand {med(c['hand']):8.1f}  trainer "
            f"{med(c['trainer']):8.1f} images/s  trainer/hand {c['trainer_over_hand']:.3f}"
        )
    for name, runs in variants.items():
        print(f"trainer {name:<11}{med(runs):8.1f} images/s")
    for c in cifar:
        print(
            f"resnet44 b{c['batch']:<4} hand {med(c['hand']):8.1f}  trainer "
            f"{med(c['trainer']):8.1f} images/s  trainer/hand {c['trainer_over_hand']:.3f}"
        )
    result = {
        **facts,
        "rounds": a.rounds,
        "steps": a.steps,
        "warmup": a.warmup,
        "batch": a.batch,
        "resnet50": resnet50,
        "compiled": compiled,
        "slowdown_knob": {"asked": a.slowdown, "rounds": knob} if knob else None,
        "variants": variants,
        "cifar": cifar,
    }
    append_row("gpu", result)


if __name__ == "__main__":
    main()
