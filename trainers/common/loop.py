"""The timed training loop of trainers whose step returns when it is done (TensorFlow on CPU,
MXNet after waitall): warm-up excluded from timing, evaluation outside the timed segments,
interval records, stop at the target accuracy, and the summary record. Framework-free: the
trainer passes its own step, evaluation and barrier."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .entry import TrainerError
from .records import RecordWriter
from .schedule import LRPlan, step_time_stats


@dataclass
class Loop:
    """What the loop measured, for the summary record."""

    step: int = 0
    epoch: int = 0
    train_time: float = 0.0          # timed segments only: warm-up and evaluation excluded
    total_wall: float = 0.0
    loss: float = float("nan")
    best_top1: float | None = None
    tta: float | None = None
    times: list[float] = field(default_factory=list)  # per timed step, seconds

    def timed_steps(self, warmup_steps: int) -> int:
        return max(0, self.step - warmup_steps)


def run(args: Any, writer: RecordWriter, stream: Iterator[Any], *, total_steps: int,
        global_batch: int, plan: LRPlan, crash_at: int | None, barrier: Callable[[], None],
        evaluate: Callable[[], float] | None, set_lr: Callable[[float], None],
        step_fn: Callable[[Any, Any], Any], loss_of: Callable[[Any], float]) -> Loop:
    """Train from `stream` (batches; None marks an epoch's end). `set_lr` takes the step's
    learning rate (outside the timing); `step_fn(x, y)` runs one step and returns its loss
    handle; `loss_of` reads it (only on logging steps: reading can synchronise)."""
    out = Loop()
    interval_images = 0
    barrier()
    start_wall = time.perf_counter()
    seg_start = None
    interval_start = start_wall
    stop = False
    while not stop and not (args.steps and out.step >= total_steps):
        item = next(stream)
        if item is None:
            out.epoch += 1
            if evaluate is not None and out.epoch % args.eval_every == 0:
                barrier()
                timing = seg_start is not None
                if timing:
                    out.train_time += time.perf_counter() - seg_start
                top1 = evaluate()
                elapsed = time.perf_counter() - start_wall
                out.best_top1 = top1 if out.best_top1 is None else max(out.best_top1, top1)
                if out.tta is None and args.target_accuracy is not None and \
                        top1 >= args.target_accuracy:
                    out.tta, stop = elapsed, True
                writer.write("eval", step=out.step, epoch=out.epoch, top1=top1,
                             elapsed_s=elapsed)
                barrier()
                seg_start = time.perf_counter() if timing and not stop else None
                interval_start, interval_images = time.perf_counter(), 0
            if args.epochs and out.epoch >= args.epochs:
                break
            continue
        xb, yb = item
        if out.step == args.warmup_steps:
            barrier()
            seg_start = time.perf_counter()
        if crash_at is not None and out.step + 1 == crash_at:
            raise TrainerError(f"injected fault at step {crash_at}")
        set_lr(plan.lr(out.step))
        t0 = time.perf_counter()
        loss = step_fn(xb, yb)
        if seg_start is not None:
            out.times.append(time.perf_counter() - t0)
        out.step += 1
        interval_images += global_batch
        if out.step % args.log_every == 0 or out.step == total_steps:
            out.loss = loss_of(loss)
            if not math.isfinite(out.loss):
                raise TrainerError(f"loss became {out.loss} at step {out.step}; lower the lr")
            now = time.perf_counter()
            writer.write("interval", step=out.step, epoch=out.epoch,
                         images_per_s=interval_images / (now - interval_start), loss=out.loss,
                         lr=plan.lr(out.step - 1),
                         includes_warmup=out.step - args.log_every < args.warmup_steps)
            interval_start, interval_images = now, 0
    barrier()
    if seg_start is not None:
        out.train_time += time.perf_counter() - seg_start
    out.total_wall = time.perf_counter() - start_wall
    return out


def write_summary(writer: RecordWriter, args: Any, loop: Loop, global_batch: int, world: int,
                  digests: list[str]) -> float:
    """The summary record; returns the throughput (images/s over the timed steps)."""
    timed = loop.timed_steps(args.warmup_steps)
    throughput = (timed * global_batch / loop.train_time) if loop.train_time else 0.0
    writer.write("summary", status="completed", throughput=throughput,
                 throughput_per_device=throughput / world, timed_steps=timed,
                 warmup_steps=min(loop.step, args.warmup_steps), elapsed_s=loop.train_time,
                 total_wall_s=loop.total_wall, steps=loop.step, epochs_done=loop.epoch,
                 images_timed=timed * global_batch,
                 final_loss=loop.loss if math.isfinite(loop.loss) else None,
                 best_top1=loop.best_top1, target_accuracy=args.target_accuracy,
                 time_to_accuracy_s=loop.tta, reached_target=loop.tta is not None,
                 weights_digest_per_rank=digests, **step_time_stats(loop.times))
    return throughput
