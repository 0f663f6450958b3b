"""PyTorch DistributedDataParallel trainer.

Runs under torchrun or plain srun (see common.launch_env), gloo on CPU and NCCL on GPU, and
writes the common metric records. Throughput counts timed steps only: warm-up steps are run
first and excluded, and timing brackets are closed by a device synchronisation and a barrier,
so the slowest rank sets the time.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import sys
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..common import data as common_data
from ..common.args import build_parser, fault_step, recipe_fields
from ..common.entry import TrainerError, dlscale_version, run_main
from ..common.launch_env import (LaunchEnv, bind_cpus, cpu_model, detect, local_world_size,
                                 node_name)
from ..common.records import RecordWriter
from ..common.schedule import LRPlan, scaled_lr, step_time_stats
from . import loaders
from .models import build, parameter_count

PROG = "dlscale-torch-ddp"
FRAMEWORK = "pytorch-ddp"


def _gather(obj: Any, launch: LaunchEnv) -> list[Any]:
    if not launch.distributed:
        return [obj]
    out: list[Any] = [None] * launch.world_size
    dist.all_gather_object(out, obj)
    return out


def _weights_digest(model: torch.nn.Module) -> str:
    """Hash of the trainable weights. BatchNorm running statistics are left out on purpose:
    each rank updates them from its own data, and DDP re-broadcasts them only at the next
    forward pass, so they legitimately differ after the last step."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class _Timer:
    """Per-step times without stalling the GPU: CUDA events there, perf_counter on CPU.
    Each timed step is bracketed on its own, so evaluations between steps add no gap."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pairs: list[list[Any]] = []

    def _now(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def begin(self) -> None:
        self.pairs.append([self._now()])

    def end(self) -> None:
        self.pairs[-1].append(self._now())

    def step_times(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000.0 for a, b in self.pairs]
        return [b - a for a, b in self.pairs]


class Distribution:
    """How ranks cooperate. This one is PyTorch DDP over torch.distributed; the DeepSpeed and
    Horovod trainers subclass it and reuse everything else (model, data, timing, records),
    so the frameworks differ in exactly these methods."""

    framework = FRAMEWORK
    prog = PROG

    def add_args(self, parser) -> None:
        """Flags of this framework alone (the shared ones are in common.args)."""

    def init(self, args, launch: LaunchEnv, device: torch.device) -> None:
        if launch.distributed:
            dist.init_process_group(
                backend="nccl" if device.type == "cuda" else "gloo", rank=launch.rank,
                world_size=launch.world_size, timeout=datetime.timedelta(minutes=10),
                **({"device_id": device} if device.type == "cuda" else {}))
            if dist.get_world_size() != launch.world_size:
                raise TrainerError(f"the process group has {dist.get_world_size()} ranks; "
                                   f"the launcher started {launch.world_size}")

    def wrap(self, model, opt, args, launch: LaunchEnv, device: torch.device):
        """(the module that runs forward, the optimizer to step)."""
        if not launch.distributed:
            return model, opt
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                       else None), opt

    def step(self, net, opt, loss, scaler) -> None:
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    def set_lr(self, opt, lr: float) -> None:
        for group in opt.param_groups:
            group["lr"] = lr

    # Collectives the shared loop needs, in this framework's own terms.
    def gather(self, obj: Any, launch: LaunchEnv) -> list[Any]:
        return _gather(obj, launch)

    def barrier(self, launch: LaunchEnv) -> None:
        if launch.distributed:
            dist.barrier()

    def all_reduce(self, t: torch.Tensor, launch: LaunchEnv) -> torch.Tensor:
        if launch.distributed:
            dist.all_reduce(t)
        return t

    def versions(self) -> dict[str, Any]:
        return {}

    def record(self, args, launch: LaunchEnv) -> dict[str, Any]:
        """Extra fields for the params record (this framework's own settings)."""
        return {"ddp": launch.distributed}

    def comm_backend(self, device: torch.device) -> str:
        return "nccl" if device.type == "cuda" else "gloo"

    def finish(self, launch: LaunchEnv) -> None:
        if launch.distributed and dist.is_initialized():
            dist.destroy_process_group()


def _sync(device: torch.device, launch: LaunchEnv, strategy: Distribution) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    strategy.barrier(launch)


def train(argv: list[str] | None = None, strategy: Distribution | None = None) -> int:
    strategy = strategy or Distribution()
    parser = build_parser(strategy.prog)
    strategy.add_args(parser)
    args = parser.parse_args(argv)
    launch = detect()
    crash_at = fault_step(args.inject_fault)

    if args.device == "cuda" and not torch.cuda.is_available():
        raise TrainerError("--device cuda but no CUDA device is visible")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", launch.local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    # Each rank owns its cores; more threads than cores makes ranks fight and hides scaling.
    cores = None
    # Inside a Slurm job binding is Slurm's (--cpu-bind, task/affinity): it knows the
    # allocation, while a rank only knows its own node's view.
    if not use_cuda and args.cpu_bind == "auto" and "SLURM_JOB_ID" not in os.environ:
        cores = bind_cpus(launch.local_rank, local_world_size(), args.threads)
    torch.set_num_threads(args.threads)

    precision = args.precision if args.precision != "auto" else ("bf16" if use_cuda else "fp32")
    if precision == "fp16" and not use_cuda:
        raise TrainerError("precision fp16 needs a GPU; use bf16 or fp32 on CPU")
    channels_last = args.memory_format == "channels_last" or (
        args.memory_format == "auto" and use_cuda)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if args.dataset in common_data.SYNTHETIC and args.epochs:
        raise TrainerError(f"{args.dataset} has no epochs; give --steps")
    if args.dataset in common_data.SYNTHETIC and args.loader != "native":
        raise TrainerError(f"--loader {args.loader} reads data, and {args.dataset} has none "
                           "(it is made on the device); use --loader native")

    # One rank needs no process group and no DDP: gradients are the same without them, and
    # the single-device baseline every speedup divides by should be the strongest one.
    launched_by = launch.launcher
    if launch.world_size == 1:
        launch = dataclasses.replace(launch, launcher="single")
    strategy.init(args, launch, device)
    writer = RecordWriter(args.output, enabled=launch.rank == 0)
    try:
        return _run(args, launch, launched_by, cores, device, precision, amp_dtype,
                    channels_last, crash_at, writer, strategy)
    finally:
        writer.close()
        strategy.finish(launch)


def _run(args, launch, launched_by, cores, device, precision, amp_dtype, channels_last,
         crash_at, writer, strategy: Distribution) -> int:
    world = launch.world_size
    shape = common_data.SHAPES[args.dataset]
    global_batch = args.per_device_batch * world

    # Data: synthetic tensors live on the device; real data goes through --loader.
    data = None
    if args.dataset in common_data.SYNTHETIC:
        gen = torch.Generator(device="cpu").manual_seed(args.seed + launch.rank)
        x_syn = torch.randn(args.per_device_batch, shape.channels, shape.size, shape.size,
                            generator=gen).to(device)
        if channels_last:
            x_syn = x_syn.contiguous(memory_format=torch.channels_last)
        y_syn = torch.randint(0, shape.classes, (args.per_device_batch,), generator=gen).to(device)
        steps_per_epoch = None
        total_steps = args.warmup_steps + args.steps
        classes = shape.classes
    else:
        data = loaders.build(args, world, launch.rank, launch.local_rank, device,
                             channels_last, strategy.framework)
        steps_per_epoch = data.steps_per_epoch
        total_steps = (steps_per_epoch * args.epochs if args.epochs
                       else args.warmup_steps + args.steps)
        classes = data.classes
    torch.manual_seed(args.seed)
    model = build(args.model, classes).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    n_params = parameter_count(model)

    lr_peak = scaled_lr(args.lr, args.lr_base_batch, global_batch, args.lr_scaling)
    warm_lr_steps = int(args.lr_warmup_epochs * (steps_per_epoch or 0))
    plan = LRPlan(args.lr, lr_peak, warm_lr_steps, total_steps, args.lr_schedule)

    opt = torch.optim.SGD(model.parameters(), lr=plan.lr(0), momentum=args.momentum,
                          weight_decay=args.weight_decay)
    wrapped, opt = strategy.wrap(model, opt, args, launch, device)
    net = torch.compile(wrapped) if args.compile else wrapped
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    writer.write("params", framework=strategy.framework, world_size=world,
                 global_batch=global_batch, parameters=n_params, precision=precision,
                 channels_last=channels_last, total_steps=total_steps,
                 steps_per_epoch=steps_per_epoch, lr_scaled=lr_peak, device=device.type,
                 classes=classes, train_images=data.train_images if data else None,
                 distributed=launch.distributed, **recipe_fields(args),
                 **strategy.record(args, launch))
    versions = {"torch": torch.__version__, "python": sys.version.split()[0],
                "numpy": np.__version__, "cuda": torch.version.cuda,
                "cudnn": (torch.backends.cudnn.version() if device.type == "cuda" else None),
                "nccl": (".".join(map(str, torch.cuda.nccl.version()))
                         if device.type == "cuda" else None), **strategy.versions(),
                **(data.versions if data else {})}
    devices = strategy.gather(torch.cuda.get_device_name(device) if device.type == "cuda"
                              else f"cpu: {cpu_model()} ({args.threads} thread(s))", launch)
    hosts = strategy.gather(node_name(), launch)
    writer.write("env", framework_versions=versions, hostnames=hosts, devices=devices,
                 world_size=world, dlscale_version=dlscale_version(), launcher=launched_by,
                 backend=strategy.comm_backend(device) if launch.distributed else None,
                 job_id=os.environ.get("SLURM_JOB_ID"),
                 nodes=sorted(set(hosts)), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                 cpu_affinity=strategy.gather(cores, launch))

    def evaluate() -> float:
        model.eval()
        correct = torch.zeros(2, device=device)
        with torch.no_grad(), torch.autocast(device.type, amp_dtype, enabled=amp_dtype is not None):
            for xb, yb in data.val():
                correct[0] += (model(xb).argmax(1) == yb).sum()
                correct[1] += len(yb)
        strategy.all_reduce(correct, launch)
        model.train()
        return float(correct[0] / correct[1])

    def batches():
        if data is None:
            while True:
                yield x_syn, y_syn
        epoch = 0
        while True:
            yield from data.epoch(epoch)
            epoch += 1
            yield None  # end of epoch marker

    model.train()
    timer = _Timer(device)
    step = 0
    train_time = 0.0  # timed (post-warm-up) training seconds, evaluations excluded
    tta = None
    best_top1 = None
    interval_images = 0
    loss_value = float("nan")
    _sync(device, launch, strategy)
    start_wall = time.perf_counter()
    seg_start = None  # start of the current timed segment
    interval_start = start_wall
    stream = batches()
    epoch = 0
    stop = False
    while not stop and not (args.steps and step >= total_steps):
        item = next(stream)
        if item is None:  # an epoch ended
            epoch += 1
            if data is not None and epoch % args.eval_every == 0:
                _sync(device, launch, strategy)
                timing = seg_start is not None
                if timing:
                    train_time += time.perf_counter() - seg_start
                top1 = evaluate()
                elapsed = time.perf_counter() - start_wall
                best_top1 = top1 if best_top1 is None else max(best_top1, top1)
                if (tta is None and args.target_accuracy is not None
                        and top1 >= args.target_accuracy):
                    tta = elapsed
                    stop = True  # the run's question is answered: MLPerf stops here too
                writer.write("eval", step=step, epoch=epoch, top1=top1, elapsed_s=elapsed)
                _sync(device, launch, strategy)
                seg_start = time.perf_counter() if timing and not stop else None
                interval_start, interval_images = time.perf_counter(), 0
            if args.epochs and epoch >= args.epochs:
                break
            continue
        xb, yb = item
        if step == args.warmup_steps:
            _sync(device, launch, strategy)
            seg_start = time.perf_counter()
        if seg_start is not None:
            timer.begin()
        if crash_at is not None and step + 1 == crash_at:
            raise TrainerError(f"injected fault at step {crash_at}")
        strategy.set_lr(opt, plan.lr(step))
        with torch.autocast(device.type, amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(net(xb), yb)
        strategy.step(net, opt, loss, scaler)
        step += 1
        if seg_start is not None:
            timer.end()
        interval_images += args.per_device_batch * world
        if step % args.log_every == 0 or step == total_steps:
            loss_value = float(loss.detach())  # synchronises: only at interval boundaries
            if not np.isfinite(loss_value):
                raise TrainerError(f"loss became {loss_value} at step {step}; "
                                   "lower the lr or use fp32")
            now = time.perf_counter()
            writer.write("interval", step=step, epoch=epoch, images_per_s=interval_images /
                         (now - interval_start), loss=loss_value, lr=plan.lr(step - 1),
                         includes_warmup=step - args.log_every < args.warmup_steps)
            interval_start, interval_images = now, 0

    _sync(device, launch, strategy)
    if seg_start is not None:
        train_time += time.perf_counter() - seg_start
    total_wall = time.perf_counter() - start_wall
    timed_steps = max(0, step - args.warmup_steps)
    times = timer.step_times()
    digests = strategy.gather(_weights_digest(model), launch)
    throughput = (timed_steps * args.per_device_batch * world / train_time) if train_time else 0.0
    writer.write("summary", status="completed", throughput=throughput,
                 throughput_per_device=throughput / world, timed_steps=timed_steps,
                 warmup_steps=min(step, args.warmup_steps), elapsed_s=train_time,
                 total_wall_s=total_wall, steps=step, epochs_done=epoch,
                 images_timed=timed_steps * args.per_device_batch * world,
                 final_loss=loss_value if np.isfinite(loss_value) else None,
                 best_top1=best_top1, target_accuracy=args.target_accuracy,
                 time_to_accuracy_s=tta, reached_target=tta is not None,
                 weights_digest_per_rank=digests, **step_time_stats(times))
    if launch.rank == 0:
        print(f"{strategy.prog}: {args.model} x{world} {throughput:.1f} images/s over {timed_steps} "
              f"timed steps" + (f", top-1 {best_top1:.3f}" if best_top1 is not None else "")
              + (f", time-to-accuracy {tta:.1f} s" if tta is not None else ""), flush=True)
    strategy.barrier(launch)
    return 0


def main(argv: list[str] | None = None, strategy: Distribution | None = None) -> int:
    return run_main(strategy.prog if strategy else PROG, lambda: train(argv, strategy))
