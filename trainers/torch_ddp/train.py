"""PyTorch DistributedDataParallel trainer.

Runs under torchrun or plain srun (see common.launch_env), gloo on CPU and NCCL on GPU, and
writes the common metric records. Throughput counts timed steps only: warm-up steps are run
first and excluded, and timing brackets are closed by a device synchronisation and a barrier,
so the slowest rank sets the time.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..common import comm as common_comm
from ..common import data as common_data
from ..common import loop as training_loop
from ..common.args import build_parser, recipe_fields
from ..common.context import Context, start
from ..common.entry import TrainerError, run_main
from ..common.launch_env import LaunchEnv, local_world_size
from . import comm as comm_benchmark
from . import loaders
from .device import ComputeDtype, CudaTimer, pick_gpu, resolve_precision, set_math_modes
from .models import build, parameter_count
from .probes import _breakdown, _synthetic

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
                backend="nccl" if device.type == "cuda" else "gloo",
                rank=launch.rank,
                world_size=launch.world_size,
                timeout=datetime.timedelta(minutes=10),
                **({"device_id": device} if device.type == "cuda" else {}),
            )
            if dist.get_world_size() != launch.world_size:
                raise TrainerError(
                    f"the process group has {dist.get_world_size()} ranks; "
                    f"the launcher started {launch.world_size}"
                )

    def wrap(self, model, opt, args, launch: LaunchEnv, device: torch.device, precision: str):
        """(the module that runs forward, the optimizer to step); `precision` is the one
        resolved for this device, which the framework's own mixed precision must follow."""
        if not launch.distributed:
            return model, opt
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        ), opt

    def step(self, net, opt, loss, scaler) -> None:
        self.zero_grad(opt)
        self.backward(net, scaler.scale(loss) if scaler is not None else loss)
        self.optimizer_step(net, opt, scaler)

    # A step's phases, apart for the step-time breakdown.
    def zero_grad(self, opt) -> None:
        opt.zero_grad(set_to_none=True)

    def backward(self, net, loss) -> None:
        loss.backward()

    def optimizer_step(self, net, opt, scaler) -> None:
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
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

    def no_sync(self, net, launch: LaunchEnv):
        """A context in which a step does not synchronise gradients (for the step-time
        breakdown), or None where the framework offers none."""
        if not launch.distributed:
            return contextlib.nullcontext
        return net.no_sync

    def comm_backend(self, device: torch.device) -> str:
        return "nccl" if device.type == "cuda" else "gloo"

    # The communication benchmark (torch_ddp/comm.py): one step's gradient allreduce.
    def comm_plan(self, grad_elements: list[int], args) -> common_comm.CommPlan:
        """DDP's buckets with its defaults (a 1 MiB first bucket, then 25 MiB), of fp32
        gradients whatever the autocast precision (they have the parameters' dtype)."""
        return common_comm.CommPlan(
            common_comm.buckets(
                [4 * n for n in grad_elements],
                [common_comm.DDP_FIRST_BUCKET_BYTES, common_comm.DDP_BUCKET_BYTES],
            ),
            common_comm.DDP_BUCKET_BYTES,
        )

    def comm_round(self, tensors: list[torch.Tensor], launch: LaunchEnv) -> None:
        # Issued together, waited for together: the reducer launches each bucket when it
        # is ready and waits for all of them before the optimizer step.
        for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
            work.wait()

    def finish(self, launch: LaunchEnv) -> None:
        if launch.distributed and dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class TorchRun:
    """One rank's run in the PyTorch family: the shared context and the device it computes
    on, in which precision and memory format."""

    ctx: Context
    strategy: Distribution
    device: torch.device
    precision: str
    channels_last: bool

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def autocast(self):
        dtype = self.amp_dtype
        return torch.autocast(self.device.type, dtype, enabled=dtype is not None)

    def sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sync(self) -> None:
        """The device's queued work done, then every rank at the same point."""
        self.sync_device()
        self.strategy.barrier(self.ctx.launch)

    def gather(self, obj: Any) -> list[Any]:
        return self.strategy.gather(obj, self.ctx.launch)


def train(argv: list[str] | None = None, strategy: Distribution | None = None) -> int:
    strategy = strategy or Distribution()
    parser = build_parser(strategy.prog)
    parser.add_argument(
        "--comm-benchmark",
        action="store_true",
        help="time one step's gradient allreduce, in this framework's buckets "
        "over its process group, instead of training",
    )
    strategy.add_args(parser)
    args = parser.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        raise TrainerError("--device cuda but no CUDA device is visible")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    ctx = start(strategy.prog, strategy.framework, args, on_cpu=not use_cuda)
    device, capability = torch.device("cpu"), None
    if use_cuda:
        device = torch.device(
            "cuda",
            pick_gpu(
                ctx.launch.local_rank,
                local_world_size(),
                torch.cuda.device_count(),
                ctx.launched_by == "srun",
            ),
        )
        torch.cuda.set_device(device)
        capability = torch.cuda.get_device_capability(device)
    # Each rank owns its cores; more threads than cores makes ranks fight and hides scaling.
    torch.set_num_threads(args.threads)

    precision = resolve_precision(args.precision, use_cuda, capability)
    channels_last = args.memory_format == "channels_last" or (
        args.memory_format == "auto" and use_cuda
    )
    if args.dataset in common_data.SYNTHETIC and args.loader != "native":
        raise TrainerError(
            f"--loader {args.loader} reads data, and {args.dataset} has none "
            "(it is made on the device); use --loader native"
        )

    # One rank needs no process group and no DDP: gradients are the same without them, and
    # the single-device baseline every speedup divides by should be the strongest one.
    strategy.init(args, ctx.launch, device)
    ctx.open_records()
    try:
        run = TorchRun(ctx, strategy, device, precision, channels_last)
        return comm_benchmark.run(run) if args.comm_benchmark else _run(run)
    finally:
        ctx.close_records()
        strategy.finish(ctx.launch)


def _run(run: TorchRun) -> int:
    ctx, strategy, device = run.ctx, run.strategy, run.device
    args, writer, launch = ctx.args, ctx.writer, ctx.launch
    shape = common_data.SHAPES[args.dataset]

    # Data: synthetic tensors live on the device; real data goes through --loader.
    data = None
    if args.dataset in common_data.SYNTHETIC:
        stream, steps_per_epoch, classes = _synthetic(run, shape)(), None, shape.classes
    else:
        data = loaders.build(
            args,
            ctx.world,
            launch.rank,
            launch.local_rank,
            device,
            run.channels_last,
            strategy.framework,
        )
        steps_per_epoch, classes = data.steps_per_epoch, data.classes

        def epochs() -> Iterator[Any]:
            epoch = 0
            while True:
                yield from data.epoch(epoch)
                epoch += 1
                yield None  # end of epoch marker

        stream = epochs()
    recipe = ctx.recipe(ctx.total_steps(steps_per_epoch), steps_per_epoch)
    torch.manual_seed(args.seed)
    model = build(args.model, classes).to(device)
    if run.channels_last:
        model = model.to(memory_format=torch.channels_last)

    cuda = device.type == "cuda"
    math_modes = set_math_modes(run.precision) if cuda else {}
    # Fused SGD: one kernel for every parameter's update on the GPU (DeepLearningExamples).
    opt = torch.optim.SGD(
        model.parameters(),
        lr=recipe.plan.lr(0),
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        **({"fused": True} if cuda else {}),
    )
    seen_dtype = ComputeDtype(model)
    wrapped, opt = strategy.wrap(model, opt, args, launch, device, run.precision)
    net = torch.compile(wrapped) if args.compile else wrapped
    scaler = torch.amp.GradScaler("cuda") if run.precision == "fp16" else None

    writer.write(
        "params",
        framework=strategy.framework,
        world_size=ctx.world,
        global_batch=ctx.global_batch,
        parameters=parameter_count(model),
        precision=run.precision,
        channels_last=run.channels_last,
        total_steps=recipe.total_steps,
        steps_per_epoch=steps_per_epoch,
        lr_scaled=recipe.plan.scaled_lr,
        device=device.type,
        classes=classes,
        train_images=data.train_images if data else None,
        eval_images=data.eval_images if data else None,
        distributed=launch.distributed,
        fused_sgd=cuda,
        **math_modes,
        **recipe_fields(args),
        **strategy.record(args, launch),
    )
    versions = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        **strategy.versions(),
        **(data.versions if data else {}),
    }
    ctx.open_meter(torch.cuda.get_device_properties(device) if cuda else None)
    ctx.write_env(
        versions,
        run.gather,
        device=torch.cuda.get_device_name(device) if cuda else None,
        backend=strategy.comm_backend(device),
    )

    def evaluate() -> float:
        model.eval()
        correct = torch.zeros(2, device=device)
        with torch.no_grad(), run.autocast():
            for xb, yb in data.val():
                correct[0] += (model(xb).argmax(1) == yb).sum()
                correct[1] += len(yb)
        strategy.all_reduce(correct, launch)
        model.train()
        return float(correct[0] / correct[1])

    last: list[Any] = []  # the latest batch, for the step-time breakdown

    def step(xb, yb):
        last[:] = [xb, yb]
        with run.autocast():
            loss = F.cross_entropy(net(xb), yb)
        strategy.step(net, opt, loss, scaler)
        return loss

    model.train()
    hooks = training_loop.Hooks(
        step=step,
        set_lr=lambda lr: strategy.set_lr(opt, lr),
        loss_of=lambda loss: float(loss.detach()),  # synchronises: interval boundaries only
        sync=run.sync,
        evaluate=evaluate if data is not None else None,
        timer=CudaTimer() if cuda else training_loop.WallTimer(),
        progress=ctx.progress,
        meter=ctx.meter,
    )
    loop = training_loop.run(recipe, hooks, writer, stream)
    digests = run.gather(_weights_digest(model))
    energy = ctx.energy(run.gather, loop.timed_steps(args.warmup_steps) * ctx.global_batch)
    timed = loop.timed_steps(args.warmup_steps)
    split = _breakdown(run, net, opt, scaler, last, timed) if timed and last else {}
    throughput = training_loop.write_summary(
        writer, recipe, loop, ctx.world, digests, compute_dtype=seen_dtype.seen, **energy, **split
    )
    ctx.say_done(throughput, loop)
    strategy.barrier(launch)
    return 0


def main(argv: list[str] | None = None, strategy: Distribution | None = None) -> int:
    return run_main(strategy.prog if strategy else PROG, lambda: train(argv, strategy))
