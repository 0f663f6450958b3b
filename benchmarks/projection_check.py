"""The projection (engine/results/projection.py) against published ResNet-50 scaling
figures, given only what a user would have: one measurement at the smallest scale and the
links' data-sheet figures. Prints projected against published throughput and appends the
rows to results.jsonl. Run: .venv/bin/python benchmarks/projection_check.py

Published inputs (read 2026-11-24):
- NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md
  (commit 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd), "Training performance results",
  pytorch-21.03 NGC container: 1 and 8 GPU throughputs on DGX A100 80GB and DGX-1 V100
  16GB/32GB, TF32/FP32 and mixed precision. The per-GPU batch is the script's default,
  256 (the tables do not state it: an assumption). The model gets the 1-GPU throughput and
  projects 8 GPUs in one node.
- Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour"
  (arXiv:1706.02677): 90 epochs of ImageNet (1,281,167 images) in 29 hours on 8 P100s
  (one server) and in 1 hour on 256 (32 servers), 32 images per GPU, "~90% scaling
  efficiency from 8 to 256 GPUs" (abstract). Both times include evaluation: the throughputs
  derived from them are lower bounds, alike at both scales. Network: one 50 Gbit/s Ethernet
  card per server (6.25 GB/s), NVLink within it (the paper's hardware section, as recalled:
  the pages readable here did not carry its text to re-check). The model gets the one-server
  throughput and projects 32 servers.
- Link figures (data sheets), one direction per GPU: NVLink 3 (A100) 300 GB/s, NVLink 2
  (V100) 150 GB/s, NVLink 1 (P100) 80 GB/s. Latency: none stated, taken as 0.
- The gradient: ResNet-50's 25,557,032 parameters, fp32 gradients (under AMP too: they have
  the parameters' dtype), in DDP's buckets (1 MiB first, then 25 MiB).
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

IMAGENET = 1_281_167
# (source, system, precision, base GPUs, GPUs per node, batch per GPU, base images/s,
#  target nodes, published images/s at the target, intra GB/s, inter GB/s)
PUBLISHED = [
    ("NVIDIA DLE", "DGX A100 80GB", "tf32", 1, 8, 256, 938, 1, 7248, 300.0, None),
    ("NVIDIA DLE", "DGX A100 80GB", "amp", 1, 8, 256, 2470, 1, 16621, 300.0, None),
    ("NVIDIA DLE", "DGX-1 V100 16GB", "fp32", 1, 8, 256, 367, 1, 2855, 150.0, None),
    ("NVIDIA DLE", "DGX-1 V100 16GB", "amp", 1, 8, 256, 1200, 1, 8322, 150.0, None),
    ("NVIDIA DLE", "DGX-1 V100 32GB", "fp32", 1, 8, 256, 356, 1, 2766, 150.0, None),
    ("NVIDIA DLE", "DGX-1 V100 32GB", "amp", 1, 8, 256, 1156, 1, 8056, 150.0, None),
    (
        "Goyal et al. 2017",
        "Big Basin, 8 P100, 50GbE",
        "fp32",
        8,
        8,
        32,
        90 * IMAGENET / (29 * 3600),
        32,
        90 * IMAGENET / 3600,
        80.0,
        6.25,
    ),
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
        f"{'source':18} {'system':25} {'prec':5} {'from':>5} {'to':>5} {'measured':>9} "
        f"{'projected':>10} {'published':>10} {'error':>7} {'proj eff':>8} {'pub eff':>8}"
    )
    for source, system, prec, g, per_node, batch, x_g, nodes, x_pub, intra, inter in PUBLISHED:
        links = {
            tier: commfit.Link(
                tier, 0.0, gbps, ((0.0, 0.0), (0.0, 0.0)), commfit.STATED, ("data sheet",)
            )
            for tier, gbps in ((commfit.INTRA, intra), (commfit.INTER, inter))
            if gbps
        }
        base = projection.Base(g, batch, projection.Mean(float(x_g), 0.0, 1), None, None)
        got = projection.project(base, None, links, buckets, nodes, per_node)
        x = got["throughput"].value
        n = nodes * per_node
        row = {
            "source": source,
            "system": system,
            "precision": prec,
            "from_gpus": g,
            "to_gpus": n,
            "measured_from": round(x_g, 1),
            "projected": round(x, 1),
            "published": round(x_pub, 1),
            "error": round(x / x_pub - 1, 4),
            # efficiency against the base scale's per-GPU throughput
            "projected_efficiency": round(x / n / (x_g / g), 4),
            "published_efficiency": round(x_pub / n / (x_g / g), 4),
        }
        rows.append(row)
        print(
            f"{source:18} {system:25} {prec:5} {g:5} {n:5} {x_g:9,.0f} {x:10,.0f} "
            f"{x_pub:10,.0f} {100 * row['error']:+6.1f}% {row['projected_efficiency']:8.3f} "
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
