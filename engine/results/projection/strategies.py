"""What a way of training moves over the network in one step, as the bytes of the
allreduce that would move as much: the scaling model (scaling_model.py) times allreduces
(commfit.py), and an all-gather or a reduce-scatter of S bytes moves half of what an
allreduce of S bytes moves (each is one half of a ring allreduce: (n-1)/n x S per rank).

- `ddp`: the gradient allreduced once a step (DDP, Horovod, ZeRO stages 0 to 2: ZeRO-2's
  reduce-scatter of the gradient and all-gather of the updated parameters are an
  allreduce's two halves).
- `fsdp`: the parameters all-gathered before the forward pass and again before the backward
  pass (once, where they are kept after forward: FSDP's reshard_after_forward = never), and
  the gradient reduce-scattered: (gathers x gathered bytes + reduced bytes) / 2 a parameter.
  FSDP's FULL_SHARD and ZeRO-3. With both in fp32 it is 1.5 times DDP's.

Tensor parallelism's activation allreduces stay inside the node and are in the measured
step already; the data-parallel traffic they leave is not modelled apart (said where it
applies)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class Traffic:
    """One step's collectives: the strategy, the dtype the gradient is reduced in, the
    dtype the parameters are gathered in, and how many all-gathers of them a step."""

    strategy: str = "ddp"
    reduced: str = "fp32"
    gathered: str = "fp32"
    gathers: int = 2

    def factor(self) -> float:
        """This step's bytes over a DDP allreduce of the same gradient (reduced bytes)."""
        if self.strategy == "ddp":
            return 1.0
        reduced, gathered = DTYPE_BYTES[self.reduced], DTYPE_BYTES[self.gathered]
        return (self.gathers * gathered + reduced) / (2 * reduced)

    def step_bytes(self, parameters: int) -> float:
        return parameters * DTYPE_BYTES[self.reduced] * self.factor()

    def words(self) -> str:
        if self.strategy == "ddp":
            return ""
        times = "twice" if self.gathers == 2 else "once"
        return (
            f"x {self.factor():.2f}: it all-gathers the parameters {times} ({self.gathered}) "
            f"and reduce-scatters the gradient ({self.reduced}) a step"
        )


def of_run(framework: str, training: str | dict[str, Any] | None, precision: str) -> Traffic:
    """A measured run's traffic, from its framework and its options (a run's `training`
    holds the options that differ from the framework's defaults)."""
    try:
        t = json.loads(training) if isinstance(training, str) else (training or {})
    except ValueError:
        t = {}
    options = t.get("options") if isinstance(t, dict) else None
    options = options if isinstance(options, dict) else {}
    low = precision if precision in DTYPE_BYTES else "fp32"
    if framework == "pytorch-fsdp":
        gathers = 1 if options.get("reshard_after_forward") == "never" else 2
        # FSDP's own mixed precision gathers in the run's precision and reduces in fp32
        return Traffic("fsdp", "fp32", low if options.get("mixed_precision") else "fp32", gathers)
    if framework == "deepspeed" and options.get("zero_stage") == 3:
        return Traffic("fsdp", low, low, 2)
    return Traffic()
