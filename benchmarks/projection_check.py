"""The projection (engine/results/projection.py) against published ResNet-50 scaling tables,
given only what a user would have: one measurement at the smallest scale and the link's
data-sheet figure. Prints a table of projected against published throughput and appends it
to results.jsonl. Run: .venv/bin/python benchmarks/projection_check.py

Published inputs (read 2026-11-24):
- NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md
  (commit 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd), "Training performance results",
  pytorch-21.03 NGC container: 1 and 8 GPU throughputs on DGX A100 80GB and DGX-1 V100
  16GB/32GB, TF32/FP32 and mixed precision. The per-GPU batch is the script's default,
  256 (the tables do not state it: an assumption).
- Link figures (data sheets): NVLink 3 on A100, 600 GB/s per GPU both directions together
  (300 GB/s each way); NVLink 2 on V100, 300 GB/s (150 GB/s each way). Latency: none stated,
  taken as 0.
- The gradient: ResNet-50 v1.5's 25,557,032 parameters, fp32 gradients (also under AMP:
  they have the parameters' dtype), in DDP's buckets (1 MiB first, then 25 MiB).
No breakdown is published, so no overlap is assumed (all of the allreduce exposed), as
dlscale does for a point without a step-time breakdown.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from dlscale.engine.results import commfit, projection
from dlscale.trainers.common import comm

OUT = Path(__file__).resolve().parent / "results.jsonl"
PARAMETERS = 25_557_032  # torchvision resnet50 (v1.5 has the same parameters)
BATCH = 256

# (system, precision, 1-GPU images/s, published 8-GPU images/s, stated GB/s one way)
PUBLISHED = [
    ("DGX A100 80GB", "tf32", 938, 7248, 300.0),
    ("DGX A100 80GB", "amp", 2470, 16621, 300.0),
    ("DGX-1 V100 16GB", "fp32", 367, 2855, 150.0),
    ("DGX-1 V100 16GB", "amp", 1200, 8322, 150.0),
    ("DGX-1 V100 32GB", "fp32", 356, 2766, 150.0),
    ("DGX-1 V100 32GB", "amp", 1156, 8056, 150.0),
]


def gradient_buckets() -> list[int]:
    """DDP's buckets for ResNet-50's gradient, from torchvision's parameter sizes (the
    order backward produces them) where torch is installed, else one bucket per 25 MiB."""
    try:
        from dlscale.trainers.torch_ddp.comm import gradient_elements
        from dlscale.trainers.torch_ddp.models import build

        sizes = [4 * n for n in gradient_elements(build("resnet50", 1000))]
    except ImportError:
        sizes = [4 * PARAMETERS]
    return comm.buckets(sizes, [comm.DDP_FIRST_BUCKET_BYTES, comm.DDP_BUCKET_BYTES])


def main() -> None:
    buckets = gradient_buckets()
    rows = []
    print(f"ResNet-50 gradient: {sum(buckets) / 1e6:.1f} MB in {len(buckets)} DDP buckets")
    print(
        f"{'system':18} {'precision':9} {'1 GPU':>7} {'projected 8':>12} {'published 8':>12} "
        f"{'error':>7} {'proj eff':>8} {'pub eff':>8}"
    )
    for system, precision, one, eight, gbps in PUBLISHED:
        base = projection.Base(1, BATCH, projection.Mean(float(one), 0.0, 1), None, 0.0)
        link = commfit.Link(
            commfit.INTRA, 0.0, gbps, ((0.0, 0.0), (0.0, 0.0)), commfit.STATED, ("data sheet",)
        )
        got = projection.project(
            base, projection.Mean(float(one), 0.0, 1), {commfit.INTRA: link}, buckets, 1, 8
        )
        x = got["throughput"].value
        row = {
            "system": system,
            "precision": precision,
            "one_gpu": one,
            "projected_8": round(x, 1),
            "published_8": eight,
            "error": round(x / eight - 1, 4),
            "projected_efficiency": round(x / one / 8, 4),
            "published_efficiency": round(eight / one / 8, 4),
        }
        rows.append(row)
        print(
            f"{system:18} {precision:9} {one:7,} {x:12,.0f} {eight:12,} "
            f"{100 * row['error']:+6.1f}% {row['projected_efficiency']:8.3f} "
            f"{row['published_efficiency']:8.3f}"
        )
    with OUT.open("a") as fh:
        fh.write(
            json.dumps(
                {
                    "benchmark": "projection_check",
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                    "gradient_bytes": sum(buckets),
                    "rows": rows,
                }
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
