"""JPEGs decoded on the GPU (`--loader nvjpeg`) against the native loader, on one GPU (issue 38).

Writes ImageNet-format folders of synthetic JPEGs here (photo-sized 500x375 images of smooth
colour fields with grain, about ImageNet's 110 KB at quality 90, and `dlscale data sample
imagenet`'s 320x240 digits, the folder benchmarks/loaders.py measured DALI on), then measures
images/s of
- each loader alone: an epoch's batches made on the GPU, after a first epoch not timed;
- the trainer with each loader: ResNet-50, bf16, channels_last, batch --batch.
Loaders alternate within each round, each in a fresh process. Prints the numbers and the
nvjpeg / native ratios and appends them, with the GPU, driver, torch and CUDA, to
benchmarks/results.jsonl.

    python benchmarks/gpu_loader.py [--rounds 2] [--workers 16] [--images 2560] [--batch 256]
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
from multiprocessing import Pool
from pathlib import Path

from record import append_row

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # a checkout without install


def _photo(job: tuple[str, int, int, int]) -> int:
    """One synthetic photo: a smooth random colour field with grain (JPEG's work grows
    with detail: flat images decode unrealistically fast)."""
    import numpy as np
    from PIL import Image

    path, seed, w, h = job
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (h // 25 + 2, w // 25 + 2, 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC))
    grain = rng.normal(0, 16, (h, w, 3))
    img = np.clip(field + grain, 0, 255).astype(np.uint8)
    Image.fromarray(img).save(path, quality=90)
    return os.path.getsize(path)


def write_photos(root: Path, images: int, classes: int = 16, size=(500, 375)) -> float:
    """An ImageNet-format folder of `images` training JPEGs (+2 a class for val); returns
    their mean size in KB."""
    jobs = []
    for split, per in (("train", images // classes), ("val", 2)):
        for c in range(classes):
            folder = root / split / f"class-{c:02d}"
            folder.mkdir(parents=True)
            jobs += [(str(folder / f"img_{i:05d}.JPEG"), len(jobs), *size) for i in range(per)]
    with Pool(os.cpu_count()) as pool:
        sizes = pool.map(_photo, jobs, chunksize=16)
    return statistics.mean(sizes) / 1024


def alone(data_dir: str, loader: str, batch: int, workers: int, epochs: int) -> float:
    """In a child: images/s of `epochs` epochs of the loader's batches, on the GPU."""
    import torch

    from dlscale.trainers.common.args import build_parser
    from dlscale.trainers.torch_ddp import loaders

    argv = ["--model", "resnet50", "--dataset", "imagenet", "--data-dir", data_dir]
    argv += ["--per-device-batch", str(batch), "--steps", "1", "--loader", loader]
    args = build_parser("bench").parse_args(argv + ["--loader-workers", str(workers)])
    dev = torch.device("cuda", 0)
    data = loaders.build(args, 1, 0, 0, dev, True, "pytorch-ddp")
    for _ in data.epoch(0):  # workers started, decoder and caches warm
        pass
    torch.cuda.synchronize()
    start, images = time.perf_counter(), 0
    for e in range(1, 1 + epochs):
        for x, _ in data.epoch(e):
            images += len(x)
    torch.cuda.synchronize()
    return images / (time.perf_counter() - start)


def trained(data_dir: str, loader: str, batch: int, workers: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.jsonl"
        argv = ["--model", "resnet50", "--dataset", "imagenet", "--data-dir", data_dir]
        argv += ["--per-device-batch", str(batch), "--steps", str(steps), "--warmup-steps", "5"]
        argv += ["--loader", loader, "--loader-workers", str(workers), "--device", "cuda"]
        argv += ["--precision", "bf16", "--memory-format", "channels_last", "--log-every", "5"]
        subprocess.run(
            [sys.executable, "-m", "dlscale.trainers.torch_ddp", *argv, "--output", str(out)],
            check=True,
            capture_output=True,
        )
        s = json.loads(out.read_text().splitlines()[-1])
        return {"throughput": s["throughput"], "data_wait_s": s.get("data_wait_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=16, help="native: decoding processes")
    ap.add_argument("--read-workers", type=int, default=4, help="nvjpeg: file readers")
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=25, help="trainer steps (5 of them warm-up)")
    ap.add_argument("--alone", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.alone:
        data_dir, loader, workers, epochs = a.alone
        print(json.dumps(alone(data_dir, loader, a.batch, int(workers), int(epochs))))
        return
    import torch

    if not torch.cuda.is_available():
        print("gpu_loader.py: no CUDA device here; nothing measured")
        return
    from gpu import gpu_facts  # benchmarks/gpu.py

    from dlscale.engine.datasets import write_imagenet_sample

    facts = gpu_facts()
    print(f"{facts['gpu']}, torch {facts['torch']}, {os.cpu_count()} cores", flush=True)
    tmp = tempfile.TemporaryDirectory()
    photos = Path(tmp.name) / "photos"
    kb = write_photos(photos, a.images)
    digits = write_imagenet_sample(Path(tmp.name) / "digits", classes=10, per_class=150)
    folders = {"photos 500x375": str(photos), "digits 320x240": str(digits.root)}
    print(f"folders: {a.images} photos of {kb:.0f} KB, 1500 digits 320x240", flush=True)
    workers = {"native": a.workers, "nvjpeg": a.read_workers}
    results: dict[str, list] = {}
    for r in range(a.rounds):
        order = ("native", "nvjpeg") if r % 2 == 0 else ("nvjpeg", "native")
        for name, folder in folders.items():
            for loader in order:
                argv = [sys.executable, __file__, "--batch", str(a.batch), "--alone", folder]
                argv += [loader, str(workers[loader]), str(a.epochs)]
                out = subprocess.run(argv, capture_output=True, text=True, check=True)
                rate = json.loads(out.stdout.strip().splitlines()[-1])
                results.setdefault(f"{name} {loader} alone", []).append(rate)
                print(f"round {r}: {name} {loader:6s} alone {rate:8.1f} images/s", flush=True)
        if r == 0:  # training: the photos only (one round: its steps are long)
            for loader in order:
                t = trained(str(photos), loader, a.batch, workers[loader], a.steps)
                results.setdefault(f"photos 500x375 {loader} trainer", []).append(t)
                print(
                    f"round {r}: photos {loader:6s} trainer {t['throughput']:8.1f} images/s, "
                    f"data wait {t['data_wait_s']}",
                    flush=True,
                )
    med = statistics.median
    print(f"\n1 GPU, native {a.workers} workers, nvjpeg {a.read_workers} readers (images/s):")
    for name in folders:
        n, g = med(results[f"{name} native alone"]), med(results[f"{name} nvjpeg alone"])
        print(f"  {name:15s} alone:   native {n:8.1f}  nvjpeg {g:8.1f}  nvjpeg/native {g / n:5.2f}")
    tn = results["photos 500x375 native trainer"][0]["throughput"]
    tg = results["photos 500x375 nvjpeg trainer"][0]["throughput"]
    print(f"  photos trainer: native {tn:8.1f}  nvjpeg {tg:8.1f}  nvjpeg/native {tg / tn:5.2f}")
    fields = {
        **facts,
        "workers": workers,
        "batch": a.batch,
        "images": a.images,
        "photo_kb": kb,
        "images_per_s": results,
    }
    append_row("gpu_loader", fields)


if __name__ == "__main__":
    main()
