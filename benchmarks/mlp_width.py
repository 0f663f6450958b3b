"""A user's own training script, as dlscale did not write it: a 4-layer MLP trained by
plain NumPy (one BLAS thread) on random data, printing a log line every LOG_EVERY steps that
a declared framework's log patterns read. benchmarks/check_rates.py's `mlp` kinds check it
against itself made wider, a change dlscale did not design (issue 51).

    mlp_width.py --width 1024 --steps 120 --warmup-steps 20 --batch 64 [--log-every 10]
"""

import argparse
import os

# one thread, as the check's other kinds run one rank of one thread (set before NumPy loads
# its BLAS, which reads these once)
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402

IN, OUT = 256, 10  # the input and output widths: the hidden width is what a change moves


def flops_per_sample(width: int) -> int:
    """Multiply-adds of one sample's forward pass (backward is twice that): the input
    layer, two hidden-to-hidden layers and the output layer."""
    return IN * width + 2 * width * width + width * OUT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--log-every", type=int, default=10)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    sizes = [IN, a.width, a.width, a.width, OUT]
    weights = [
        rng.standard_normal((m, n), dtype=np.float32) / np.sqrt(m) for m, n in zip(sizes, sizes[1:])
    ]
    x = rng.standard_normal((a.batch, IN), dtype=np.float32)
    y = rng.standard_normal((a.batch, OUT), dtype=np.float32)
    began = time.perf_counter()
    for step in range(1, a.warmup_steps + a.steps + 1):
        acts = [x]
        for w in weights[:-1]:
            acts.append(np.maximum(acts[-1] @ w, 0.0))
        out = acts[-1] @ weights[-1]
        grad = (out - y) / a.batch
        loss = float((grad * (out - y)).sum()) / 2
        for i in range(len(weights) - 1, -1, -1):
            back = grad @ weights[i].T
            weights[i] -= 1e-3 * (acts[i].T @ grad)
            grad = back * (acts[i] > 0)
        if step % a.log_every == 0:
            now = time.perf_counter()
            rate = a.log_every * a.batch / (now - began)
            tag = "warmup" if step <= a.warmup_steps else "step"
            print(f"{tag} {step} loss {loss:.4f} samples/s {rate:.1f}", flush=True)
            began = now


if __name__ == "__main__":
    main()
