"""The one timed training loop every trainer runs: warm-up excluded from timing, evaluation
outside the timed segments, interval records, a stop at the target accuracy, and the summary
record. Framework-free: a trainer passes its own step, learning-rate setter, loss reader,
synchronisation and evaluation as `Hooks`, and its own step timer where the wall clock would
not see the device's work (CUDA events for torch on a GPU)."""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .entry import TrainerError
from .interference import GpuNeighbours, Window, run_pids
from .records import RecordWriter
from .schedule import LRPlan, step_time_stats
from .slowdown import Slowdown


class StepTimer(Protocol):
    def begin(self) -> None: ...
    def end(self) -> None: ...
    def collect(self) -> None: ...  # at a synchronised point: settle finished steps
    def times(self) -> list[float]: ...  # every timed step, seconds


class WallTimer:
    """Per-step wall time: right where a step returns when its work is done (CPU, and
    frameworks whose step waits for the device)."""

    def __init__(self) -> None:
        self._times = array("d")
        self._t0 = 0.0

    def begin(self) -> None:
        self._t0 = time.perf_counter()

    def end(self) -> None:
        self._times.append(time.perf_counter() - self._t0)

    def collect(self) -> None:
        pass

    def times(self) -> list[float]:
        return list(self._times)


@dataclass(frozen=True)
class Recipe:
    """What the loop needs from the run's recipe (the trainer's flags, resolved)."""

    total_steps: int
    global_batch: int
    warmup_steps: int
    log_every: int
    eval_every: int
    steps: int | None
    epochs: int | None
    target_accuracy: float | None
    plan: LRPlan
    crash_at: int | None = None
    # What throughput counts: images, or a transformer's tokens (`sample_units` a sequence),
    # written as params.unit the way a declared framework's unit is.
    unit: str = "images"
    sample_units: int = 1

    @property
    def units_per_step(self) -> int:
        return self.global_batch * self.sample_units

    @classmethod
    def from_args(
        cls,
        args: Any,
        *,
        total_steps: int,
        global_batch: int,
        plan: LRPlan,
        crash_at: int | None,
        unit: str = "images",
        sample_units: int = 1,
    ) -> Recipe:
        return cls(
            total_steps,
            global_batch,
            args.warmup_steps,
            args.log_every,
            args.eval_every,
            args.steps,
            args.epochs,
            args.target_accuracy,
            plan,
            crash_at,
            unit,
            sample_units,
        )


@dataclass
class Hooks:
    """The framework's part of a step. `step(x, y)` runs one training step and returns a
    loss handle; `loss_of` reads it (only on logging steps: reading can synchronise);
    `sync` waits for the device and the other ranks (it closes every timed segment)."""

    step: Callable[[Any, Any], Any]
    set_lr: Callable[[float], None]
    loss_of: Callable[[Any], float]
    sync: Callable[[], None]
    evaluate: Callable[[], float] | None = None
    timer: StepTimer = field(default_factory=WallTimer)
    progress: Callable[[str], None] | None = None  # one human line per interval (rank 0)
    meter: Any = None  # energy over the timed segments (common.energy.Meter): resume/pause


@dataclass
class Loop:
    """What the loop measured, for the summary record."""

    step: int = 0
    epoch: int = 0
    train_time: float = 0.0  # timed segments only: warm-up and evaluation excluded
    total_wall: float = 0.0
    loss: float = float("nan")
    best_top1: float | None = None
    tta: float | None = None
    times: list[float] = field(default_factory=list)  # per timed step, seconds
    data_wait: float = 0.0  # seconds the timed steps waited for their batch
    # what else the machine did over the timed segments, read at their edges only
    load: Window = field(default_factory=Window)

    def timed_steps(self, warmup_steps: int) -> int:
        return max(0, self.step - warmup_steps)


def run(recipe: Recipe, hooks: Hooks, writer: RecordWriter, stream: Iterator[Any]) -> Loop:
    """Train from `stream` (batches; None marks an epoch's end)."""
    r, out = recipe, Loop()
    opened = hooks.meter.nvml() if hooks.meter is not None else None
    if opened is not None:  # a GPU's other users, asked of the NVML its meter opened
        out.load.gpu = GpuNeighbours(*opened, run_pids)
    knob = Slowdown.from_environment()  # test only: slowdown.py
    interval_images = 0
    hooks.sync()
    start_wall = time.perf_counter()
    seg_start = None  # start of the current timed segment
    interval_start = start_wall
    stop = False
    while not stop and not (r.steps and out.step >= r.total_steps):
        fetch = time.perf_counter()
        item = next(stream)
        fetch = time.perf_counter() - fetch
        if item is None:  # an epoch ended
            out.epoch += 1
            if hooks.evaluate is not None and out.epoch % r.eval_every == 0:
                hooks.sync()
                timing = seg_start is not None
                if timing:
                    knob.pause()
                    out.train_time += time.perf_counter() - seg_start
                    _meter(hooks, "pause")
                    out.load.pause()
                eval_start = time.perf_counter()
                top1 = hooks.evaluate()
                elapsed = time.perf_counter() - start_wall
                eval_s = time.perf_counter() - eval_start  # MLPerf's eval_start..eval_stop
                out.best_top1 = top1 if out.best_top1 is None else max(out.best_top1, top1)
                if out.tta is None and r.target_accuracy is not None and top1 >= r.target_accuracy:
                    out.tta, stop = elapsed, True  # the run's question is answered (MLPerf)
                writer.write(
                    "eval",
                    step=out.step,
                    epoch=out.epoch,
                    top1=top1,
                    elapsed_s=elapsed,
                    eval_s=eval_s,
                )
                hooks.sync()
                seg_start = None
                if timing and not stop:
                    out.load.resume()  # read before the clock starts: its cost is not timed
                    seg_start = time.perf_counter()
                    knob.resume(seg_start)
                    _meter(hooks, "resume")
                interval_start, interval_images = time.perf_counter(), 0
            if r.epochs and out.epoch >= r.epochs:
                break
            continue
        xb, yb = item
        if out.step == r.warmup_steps:
            hooks.sync()
            out.load.resume()  # read before the clock starts (and read after it stops)
            seg_start = time.perf_counter()
            _meter(hooks, "resume")
        if r.crash_at is not None and out.step + 1 == r.crash_at:
            raise TrainerError(f"injected fault at step {r.crash_at}")
        hooks.set_lr(r.plan.lr(out.step))
        if seg_start is not None:
            out.data_wait += fetch
            hooks.timer.begin()
            knob.resume(seg_start)
        loss = hooks.step(xb, yb)
        if seg_start is not None:
            hooks.timer.end()
        out.step += 1
        interval_images += r.units_per_step
        if out.step % r.log_every == 0 or out.step == r.total_steps:
            out.loss = hooks.loss_of(loss)
            knob.settle(hooks.sync)
            if not math.isfinite(out.loss):
                raise TrainerError(
                    f"loss became {out.loss} at step {out.step}; lower the lr or use fp32"
                )
            hooks.timer.collect()
            now = time.perf_counter()
            rate = interval_images / (now - interval_start)
            writer.write(
                "interval",
                step=out.step,
                epoch=out.epoch,
                images_per_s=rate,
                loss=out.loss,
                lr=r.plan.lr(out.step - 1),
                includes_warmup=out.step - r.log_every < r.warmup_steps,
            )
            if hooks.progress is not None:
                hooks.progress(progress_line(r, out, rate))
            interval_start, interval_images = now, 0
    hooks.sync()
    knob.settle()
    if seg_start is not None:
        out.train_time += time.perf_counter() - seg_start
    _meter(hooks, "pause")
    out.load.pause()
    out.total_wall = time.perf_counter() - start_wall
    hooks.timer.collect()
    out.times = hooks.timer.times()
    return out


def _meter(hooks: Hooks, what: str) -> None:
    if hooks.meter is not None:
        getattr(hooks.meter, what)()


def progress_line(recipe: Recipe, loop: Loop, images_per_s: float) -> str:
    """`step 40/200 (20%), epoch 1, loss 2.1034, 312.4 images/s, ETA 0:00:21`: the ETA
    is the steps left at this interval's pace (evaluations not counted)."""
    done = loop.step / recipe.total_steps if recipe.total_steps else 0.0
    left_s = (
        (recipe.total_steps - loop.step) * recipe.units_per_step / images_per_s
        if images_per_s > 0
        else 0.0
    )
    m, s = divmod(int(round(left_s)), 60)
    return (
        f"step {loop.step}/{recipe.total_steps} ({100 * done:.0f}%), epoch {loop.epoch}, "
        f"loss {loop.loss:.4f}, {images_per_s:.1f} {recipe.unit}/s, "
        f"ETA {m // 60}:{m % 60:02d}:{s:02d}"
    )


def write_summary(
    writer: RecordWriter, recipe: Recipe, loop: Loop, world: int, digests: list[str], **extra: Any
) -> float:
    """The summary record; returns the throughput (images/s over the timed steps, or the
    recipe's own unit a second). `extra`: what the framework observed itself (the dtype its
    forward pass computed in...)."""
    timed = loop.timed_steps(recipe.warmup_steps)
    images = timed * recipe.units_per_step
    throughput = (images / loop.train_time) if loop.train_time else 0.0
    load = loop.load.record()
    if loop.load.seconds > 0:
        writer.write("interference", **load)
    rank_cpu = load["rank_cpu_s"]
    writer.write(
        "summary",
        status="completed",
        throughput=throughput,
        throughput_per_device=throughput / world,
        timed_steps=timed,
        warmup_steps=min(loop.step, recipe.warmup_steps),
        elapsed_s=loop.train_time,
        total_wall_s=loop.total_wall,
        steps=loop.step,
        epochs_done=loop.epoch,
        images_timed=images,
        final_loss=loop.loss if math.isfinite(loop.loss) else None,
        best_top1=loop.best_top1,
        target_accuracy=recipe.target_accuracy,
        time_to_accuracy_s=loop.tta,
        reached_target=loop.tta is not None,
        weights_digest_per_rank=digests,
        **step_time_stats(loop.times),
        data_wait_s=loop.data_wait / timed if timed else None,
        cpu_s_per_step=rank_cpu / timed if timed and isinstance(rank_cpu, float) else None,
        **Slowdown.from_environment().provenance,
        **extra,
    )
    return throughput
