"""Where a step's time goes, measured after the timed steps (they are never slowed by it):
pairs of steps with and without gradient synchronisation, interleaved so drift hits both,
each timed between device synchronisations. The difference is the communication that the
framework did not hide behind compute; the steps without synchronisation are the compute,
split into forward, backward and optimizer by a synchronisation between the phases.

Framework-free: a trainer passes its phases. The weights are past caring by then: the run's
numbers and its weights' digest are taken before the probe."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Phases:
    """One step's parts, for a trainer: `forward()` returns the loss, `backward(loss)`,
    `optimizer()`; `local` wraps a step in the framework's no-synchronisation context, or
    is None where the framework has none (then `why_not` says so); `sync` waits for the
    device."""

    forward: Callable[[], Any]
    backward: Callable[[Any], None]
    optimizer: Callable[[], None]
    sync: Callable[[], None]
    local: Callable[[], Any] | None
    why_not: str | None = None


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def pairs_for(timed_steps: int) -> int:
    """Enough pairs for a median, few enough to cost little: a quarter of the timed steps,
    2 to 10."""
    return max(2, min(10, timed_steps // 4))


def measure(p: Phases, pairs: int, distributed: bool) -> dict[str, Any]:
    """The summary's breakdown fields (seconds per step, medians over `pairs`)."""

    def full() -> None:
        p.backward(p.forward())
        p.optimizer()

    def local() -> None:
        assert p.local is not None
        with p.local():
            p.backward(p.forward())
        p.optimizer()

    def split() -> tuple[float, float, float]:
        with p.local() if p.local is not None else contextlib.nullcontext():
            p.sync()
            t0 = time.perf_counter()
            loss = p.forward()
            p.sync()
            t1 = time.perf_counter()
            p.backward(loss)
            p.sync()
            t2 = time.perf_counter()
        p.optimizer()
        p.sync()
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    fulls, locals_, parts = [], [], []
    for _ in range(pairs):
        fulls.append(_timed(full, p.sync))
        if p.local is not None or not distributed:
            locals_.append(_timed(local if p.local is not None else full, p.sync))
        parts.append(split())
    med = statistics.median
    step = med(fulls)
    out: dict[str, Any] = {
        "breakdown_pairs": pairs,
        "probe_step_s": step,
        "forward_s": med(x[0] for x in parts),
        "backward_s": med(x[1] for x in parts),
        "optimizer_s": med(x[2] for x in parts),
        "compute_time_s": None,
        "exposed_comm_s": None,
        "breakdown_unavailable": None,
    }
    if locals_:
        compute = med(locals_)
        out["compute_time_s"] = compute
        out["exposed_comm_s"] = max(0.0, step - compute) if distributed else 0.0
    else:
        out["breakdown_unavailable"] = p.why_not
    return out
