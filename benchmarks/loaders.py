"""What does DALI buy over the native loader here?

At 1 rank, on the digits (CIFAR-format arrays) and on an ImageNet-format sample (JPEG
folders, `dlscale data sample imagenet`), measures images/s of
- each loader alone: iterating its batches (decode, augment, normalise, collate), no model;
- the PyTorch DDP trainer with each loader: ResNet-20 on digits, ResNet-50 on the sample.
Native and DALI alternate within each round so machine drift hits both alike. Prints the
numbers and the DALI / native ratios and appends them to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/loaders.py [--rounds 3] [--workers 1] [--train-steps 10]

Runs in the environment `dlscale env create pytorch-ddp --with dali` recorded (DLSCALE_HOME,
or --home); the measuring is done by that environment's python, as trainers are run.
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
DATASETS = {"digits": ("resnet20", 32), "imagenet": ("resnet50", 8)}


def loader_alone(
    dataset: str, data_dir: str, loader: str, batch: int, workers: int, epochs: int
) -> float:
    """images/s of the loader's epochs after its first (pipeline start and worker spawn
    excluded, as warm-up is from training throughput)."""
    import torch

    from dlscale.trainers.common.args import build_parser
    from dlscale.trainers.torch_ddp import loaders

    torch.set_num_threads(1)
    args = build_parser("bench").parse_args(
        [
            "--model",
            DATASETS[dataset][0],
            "--dataset",
            dataset,
            "--data-dir",
            data_dir,
            "--per-device-batch",
            str(batch),
            "--steps",
            "1",
            "--loader",
            loader,
            "--loader-workers",
            str(workers),
        ]
    )
    data = loaders.build(args, 1, 0, 0, torch.device("cpu"), False, "pytorch-ddp")
    for _ in data.epoch(0):
        pass
    start, images = time.perf_counter(), 0
    for e in range(1, 1 + epochs):
        for _, y in data.epoch(e):
            images += len(y)
    return images / (time.perf_counter() - start)


def trainer(
    python: str,
    env: dict[str, str],
    dataset: str,
    data_dir: str,
    loader: str,
    batch: int,
    workers: int,
    steps: int,
) -> float:
    """The trainer at 1 rank as the local backend starts it; its summary throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.jsonl"
        subprocess.run(
            [
                python,
                "-m",
                "dlscale.trainers.torch_ddp",
                "--model",
                DATASETS[dataset][0],
                "--dataset",
                dataset,
                "--data-dir",
                data_dir,
                "--per-device-batch",
                str(batch),
                "--steps",
                str(steps),
                "--warmup-steps",
                "2",
                "--loader",
                loader,
                "--loader-workers",
                str(workers),
                "--output",
                str(out),
            ],
            check=True,
            capture_output=True,
            env={**env, "OMP_NUM_THREADS": "1"},
        )
        return json.loads(out.read_text().splitlines()[-1])["throughput"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=1, help="native workers / DALI threads")
    p.add_argument("--train-steps", type=int, default=10, help="timed trainer steps")
    p.add_argument(
        "--sample",
        default=None,
        help="ImageNet-format folder (default: a "
        "fresh `dlscale data sample imagenet`, 10 classes x 32 + 8)",
    )
    p.add_argument("--home", default=None)
    p.add_argument("--measure", nargs=6, help=argparse.SUPPRESS)  # run inside the env
    a = p.parse_args()
    if a.measure:
        dataset, data_dir, loader, batch, workers, epochs = a.measure
        print(
            json.dumps(
                loader_alone(dataset, data_dir, loader, int(batch), int(workers), int(epochs))
            )
        )
        return

    sys.path.insert(0, str(HERE.parent))
    from dlscale.engine.datasets import write_imagenet_sample
    from dlscale.engine.launching import envs
    from dlscale.engine.tracking.store import default_home

    home = Path(a.home) if a.home else default_home()
    status = envs.resolve("pytorch-ddp", home)
    if "dali" not in status.extras or not status.ok:
        sys.exit(
            f"loaders.py: no pytorch-ddp environment with DALI in {home}; build one with "
            f"`{envs.create_command('pytorch-ddp', home, ('dali',))}`"
        )
    env = {**os.environ, **envs.launch_env(status, home)}
    tmp = tempfile.TemporaryDirectory()
    sample = a.sample or str(write_imagenet_sample(Path(tmp.name) / "sample").root)
    results: dict[str, dict[str, list[float]]] = {}
    for r in range(a.rounds):
        for dataset, (_, batch) in DATASETS.items():
            for loader in ("native", "dali") if r % 2 == 0 else ("dali", "native"):
                epochs = 3 if dataset == "imagenet" else 20
                out = subprocess.run(
                    [
                        status.python,
                        __file__,
                        "--measure",
                        dataset,
                        sample,
                        loader,
                        str(batch),
                        str(a.workers),
                        str(epochs),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**env, "OMP_NUM_THREADS": "1"},
                )
                alone = json.loads(out.stdout.strip().splitlines()[-1])
                trained = trainer(
                    status.python, env, dataset, sample, loader, batch, a.workers, a.train_steps
                )
                results.setdefault(f"{dataset} {loader} alone", []).append(alone)
                results.setdefault(f"{dataset} {loader} trainer", []).append(trained)
                print(
                    f"round {r}: {dataset:8s} {loader:6s} loader alone {alone:8.1f} images/s,"
                    f" trainer {trained:7.1f} images/s",
                    flush=True,
                )
    print(
        f"\n1 rank, {a.workers} loader worker(s)/thread(s), median of {a.rounds} rounds (images/s):"
    )
    for dataset in DATASETS:
        for what in ("alone", "trainer"):
            n = statistics.median(results[f"{dataset} native {what}"])
            d = statistics.median(results[f"{dataset} dali {what}"])
            print(
                f"  {dataset:8s} {what:7s}: native {n:8.1f}  dali {d:8.1f}  "
                f"dali/native {d / n:5.2f}"
            )
    fields = {
        "workers": a.workers,
        "rounds": a.rounds,
        "train_steps": a.train_steps,
        "batch": {d: b for d, (_, b) in DATASETS.items()},
        "versions": status.versions,
        "images_per_s": results,
    }
    append_row("loaders", fields)


if __name__ == "__main__":
    main()
