"""Is my sharding correct? The loss curves of runs that differ only in how they distribute
the model, compared step by step. Standard library only.

With the same seed, model, data, global batch and precision, DDP, FSDP (with or without
tensor parallelism, resharding, activation checkpointing) and DeepSpeed ZeRO 0-3 compute the
same step up to the order of floating-point sums: their logged losses (the global batch's,
torch_ddp/trainer.py) agree within TOLERANCE. A strategy whose curve leaves that band drops
or double-counts a gradient, or shards something wrongly.

`python -m dlscale.trainers.common.loss_agreement A/metrics.jsonl B/metrics.jsonl ...`
prints each run's curve against the first one's and exits 0 when all agree, 1 when one does
not, 2 when the runs cannot be compared (different steps, data or batch)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

# Relative to the loss, at every logged step: fp32 runs here agree to 1e-5 over tens of
# steps (sums in another order); mixed precision rounds each matmul to 8 bits of mantissa.
TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "bf16": 3e-2, "fp16": 1e-2}
# What must match for two runs to be comparable at all.
SAME = ("model", "dataset", "global_batch", "seed", "precision", "lr", "lr_base_batch")


@dataclass
class Curve:
    name: str
    setup: dict
    losses: dict[int, float]  # step -> loss


def read_curve(path: str | Path) -> Curve:
    setup: dict = {}
    losses: dict[int, float] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("kind") == "params":
            setup = record
        elif record.get("kind") == "interval" and isinstance(record.get("loss"), (int, float)):
            losses[int(record["step"])] = float(record["loss"])
    how = [f"{k}={setup[k]}" for k in ("zero_stage", "tensor_parallel") if k in setup]
    name = " ".join([f"{setup.get('framework', '?')} x{setup.get('world_size', '?')}", *how])
    return Curve(name, setup, losses)


def disagreement(reference: Curve, other: Curve) -> tuple[float, int | None, str | None]:
    """(the largest relative difference, at which step, why the two cannot be compared)."""
    for key in SAME:
        if reference.setup.get(key) != other.setup.get(key):
            return (
                0.0,
                None,
                (f"{key} differs ({reference.setup.get(key)!r} and {other.setup.get(key)!r})"),
            )
    steps = sorted(set(reference.losses) & set(other.losses))
    if not steps:
        return 0.0, None, "no logged step in common"
    worst, at = 0.0, None
    for s in steps:
        a, b = reference.losses[s], other.losses[s]
        rel = abs(a - b) / max(abs(a), 1e-12)
        if rel >= worst:
            worst, at = rel, s
    return worst, at, None


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if len(paths) < 2:
        print("usage: python -m dlscale.trainers.common.loss_agreement RUN.jsonl RUN.jsonl ...")
        return 2
    curves = [read_curve(p) for p in paths]
    reference = curves[0]
    tolerance = TOLERANCE.get(str(reference.setup.get("precision")), TOLERANCE["bf16"])
    status = 0
    for curve in curves[1:]:
        worst, at, problem = disagreement(reference, curve)
        if problem:
            print(f"{curve.name}: cannot be compared with {reference.name}: {problem}")
            status = max(status, 2)
            continue
        ok = worst <= tolerance
        status = status if ok else max(status, 1)
        print(
            f"{curve.name}: {'agrees with' if ok else 'DIFFERS from'} {reference.name}: "
            f"largest difference {worst:.2e} of the loss (step {at}), tolerance {tolerance:.0e}"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
