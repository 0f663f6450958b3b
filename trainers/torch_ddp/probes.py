"""What the torch trainer measures besides its timed steps: the synthetic batches it makes on the
device, and the step-time breakdown (data wait, forward, backward, optimizer, exposed
communication) from interleaved steps without gradient synchronisation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from ..common import breakdown

if TYPE_CHECKING:
    from .train import TorchRun


def synthetic_batches(run: TorchRun, shape) -> Callable[[], Iterator[Any]]:
    """One batch made on the device once: throughput measures compute and communication."""
    args = run.ctx.args
    gen = torch.Generator(device="cpu").manual_seed(args.seed + run.ctx.rank)
    x = torch.randn(
        args.per_device_batch, shape.channels, shape.size, shape.size, generator=gen
    ).to(run.device)
    if run.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, shape.classes, (args.per_device_batch,), generator=gen).to(run.device)

    def batches() -> Iterator[Any]:
        while True:
            yield x, y

    return batches


def step_breakdown(run: TorchRun, net, opt, scaler, batch: list[Any], pairs: int) -> dict:
    """Forward, backward, optimizer, and the communication not hidden behind them (steps
    with and without DDP's gradient synchronisation), after the timed steps."""
    xb, yb = batch
    strategy, launch = run.strategy, run.ctx.launch

    def forward():
        strategy.zero_grad(opt)
        with run.autocast():
            return F.cross_entropy(net(xb), yb)

    def backward(loss):
        if scaler is not None:
            loss = scaler.scale(loss)
        strategy.backward(net, loss)

    def optimizer():
        strategy.optimizer_step(net, opt, scaler)

    local = strategy.no_sync(net, launch)
    phases = breakdown.Phases(
        forward,
        backward,
        optimizer,
        lambda: run.sync_device(),
        local,
        None
        if local
        else f"{strategy.framework} has no step without gradient synchronisation to compare with",
    )
    strategy.barrier(launch)
    return breakdown.measure(phases, pairs, launch.distributed)
