"""Learning-rate rules and step-time statistics, identical in every framework's trainer."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Fractions of the post-warm-up steps at which the step schedule divides the lr by 10
# (ResNet's recipe at 30, 60 and 80 of 90 epochs, as fractions of any length).
STEP_MILESTONES = (0.3, 0.6, 0.8)
POLY_POWER = 2.0


@dataclass(frozen=True)
class LRPlan:
    """lr(step): a linear warm-up from the unscaled lr to the scaled one (Goyal et al. 2017),
    then, until `total_steps`: constant; step (divided by 10 at 30/60/80% of the rest);
    poly (polynomial decay to zero, power 2); cosine (half a cosine to zero)."""

    base_lr: float
    scaled_lr: float
    warmup_steps: int
    total_steps: int
    schedule: str  # one of args.LR_SCHEDULES

    def lr(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.base_lr + (self.scaled_lr - self.base_lr) * step / self.warmup_steps
        if self.schedule == "constant" or self.total_steps <= self.warmup_steps:
            return self.scaled_lr
        done = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        if self.schedule == "cosine":
            return 0.5 * self.scaled_lr * (1.0 + math.cos(math.pi * done))
        if self.schedule == "poly":
            return self.scaled_lr * (1.0 - done) ** POLY_POWER
        if self.schedule == "step":
            return self.scaled_lr * 0.1 ** sum(done >= m for m in STEP_MILESTONES)
        raise ValueError(f"unknown lr schedule {self.schedule!r}")


def scaled_lr(lr: float, base_batch: int, global_batch: int, rule: str) -> float:
    ratio = global_batch / base_batch
    if rule == "linear":
        return lr * ratio
    if rule == "sqrt":
        return lr * math.sqrt(ratio)
    return lr


def step_time_stats(times_s: list[float]) -> dict[str, float]:
    """Spread of the timed steps (seconds), so variance shows next to the throughput."""
    if not times_s:
        return {}
    ordered = sorted(times_s)
    mean = statistics.fmean(ordered)
    return {
        "step_time_mean_s": mean,
        "step_time_median_s": statistics.median(ordered),
        "step_time_p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "step_time_cv": (statistics.stdev(ordered) / mean) if len(ordered) > 1 and mean else 0.0,
    }
