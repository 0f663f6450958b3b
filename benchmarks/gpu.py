"""The PyTorch trainer on one GPU against a hand-written loop with identical settings.

ResNet-50 on synthetic ImageNet, batch 256, channels_last, bf16 (the DeepLearningExamples
recipe): the trainer and benchmarks/hand_loop.py alternate in one invocation, each in a fresh
process, so drift hits both alike; then the trainer in fp16 and with torch.compile. With
--cifar, ResNet-44 (the CCGRID 2020 model) at batch 128/256/512, where per-step overheads
show. Prints images/s and the ratios and appends them, with the GPU's name, driver, torch and
CUDA versions, to benchmarks/results.jsonl.

    python benchmarks/gpu.py [--rounds 3] [--steps 100] [--cifar]

Targets (issue 13): trainer / hand loop >= 0.97; >= 3,000 images/s in bf16 on one H100.
Without a CUDA device it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
            + (["--compile"] if compile else []),
            check=True,
            capture_output=True,
        )
        return json.loads(out.read_text().splitlines()[-1])


def hand(model: str, dataset: str, batch: int, steps: int, warmup: int, precision: str) -> float:
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
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


def compare(model: str, dataset: str, batch: int, a, label: str) -> dict:
    """Trainer against hand loop, alternating, bf16; ratios taken within each round."""
    hands, trainers, ratios = [], [], []
    for r in range(a.rounds):
        hands.append(hand(model, dataset, batch, a.steps, a.warmup, "bf16"))
        s = trainer(model, dataset, batch, a.steps, a.warmup, "bf16")
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
    ap.add_argument("--cifar", action="store_true", help="also ResNet-44 at 128/256/512")
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
    main_cmp = compare("resnet50", "synthetic-imagenet", a.batch, a, "resnet50 bf16")
    variants = {}
    for name, precision, comp in (("fp16", "fp16", False), ("bf16+compile", "bf16", True)):
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
    cifar = (
        [compare("resnet44", "synthetic-cifar", b, a, f"resnet44 b{b}") for b in (128, 256, 512)]
        if a.cifar
        else []
    )
    bf16 = med(main_cmp["trainer"])
    print(
        f"\nresnet50, synthetic ImageNet, batch {a.batch}, channels_last, {a.steps} timed "
        f"steps, {a.rounds} rounds"
    )
    print(f"hand loop bf16     {med(main_cmp['hand']):8.1f} images/s")
    print(
        f"trainer bf16       {bf16:8.1f} images/s   trainer/hand = "
        f"{main_cmp['trainer_over_hand']:.3f} (target >= 0.97); target >= 3000 images/s"
    )
    for name, runs in variants.items():
        print(f"trainer {name:<11}{med(runs):8.1f} images/s")
    for c in cifar:
        print(
            f"resnet44 b{c['batch']:<4} hand {med(c['hand']):8.1f}  trainer "
            f"{med(c['trainer']):8.1f} images/s  trainer/hand {c['trainer_over_hand']:.3f}"
        )
    result = {
        "benchmark": "gpu",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        **facts,
        "rounds": a.rounds,
        "steps": a.steps,
        "warmup": a.warmup,
        "resnet50": main_cmp,
        "variants": variants,
        "cifar": cifar,
    }
    with open(HERE / "results.jsonl", "a") as fh:
        fh.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
