"""PyTorch DistributedDataParallel trainer.

Runs under torchrun or plain srun (see common.launch_env), gloo on CPU and NCCL on GPU, and
writes the common metric records. Throughput counts timed steps only: warm-up steps are run
first and excluded, and timing brackets are closed by a device synchronisation and a barrier,
so the slowest rank sets the time.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..common import comm as common_comm
from ..common import data as common_data
from ..common.args import COMPILE_MODES, TOKEN_DATASETS, build_parser, positive_int
from ..common.context import Context, start
from ..common.entry import TrainerError, run_main
from ..common.launch_env import LaunchEnv, local_world_size
from . import comm as comm_benchmark
from .device import pick_gpu, resolve_precision
from .trainer import Trainer, trainable_weights

PROG = "dlscale-torch-ddp"
FRAMEWORK = "pytorch-ddp"


def _gather(obj: Any, launch: LaunchEnv) -> list[Any]:
    if not launch.distributed:
        return [obj]
    out: list[Any] = [None] * launch.world_size
    dist.all_gather_object(out, obj)
    return out


class Distribution:
    """How ranks cooperate. This one is PyTorch DDP over torch.distributed; the DeepSpeed and
    Horovod trainers subclass it and reuse everything else (model, data, timing, records),
    so the frameworks differ in exactly these methods."""

    framework = FRAMEWORK
    prog = PROG
    # channels_last weights, not only inputs: a framework that views its flattened parameters
    # as bytes (DeepSpeed) needs them contiguous, and cuDNN still runs NHWC from the inputs.
    channels_last_weights = True
    # Whether the framework computes in the run's precision itself (FSDP's mixed-precision
    # policy): then no autocast around the forward pass.
    casts_itself = False

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

    def data_share(self, launch: LaunchEnv) -> tuple[int, int]:
        """(this rank's place among the data-parallel ranks, how many there are): every
        rank is one, except under tensor parallelism."""
        return launch.rank, launch.world_size

    def full_weights(self, model) -> Any:
        """The trained weights by name, whole on every rank (for the weights' digest); a
        framework that shards them gathers them here (a collective: every rank calls it)."""
        return trainable_weights(model)

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
        dtype = None if self.strategy.casts_itself else self.amp_dtype
        return torch.autocast(self.device.type, dtype, enabled=dtype is not None)

    def sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sync(self) -> None:
        """The device's queued work done, then every rank at the same point."""
        self.sync_device()
        self.barrier()

    def barrier(self) -> None:
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
    parser.add_argument(
        "--gradient-elements",
        type=positive_int,
        default=None,
        help="with --comm-benchmark: a gradient of this many elements instead of --model's "
        "(a declared framework's own model, given by its parameter count)",
    )
    parser.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="with --compile: torch.compile's mode (reduce-overhead: CUDA graphs; "
        "max-autotune: Triton autotuning and CUDA graphs; max-autotune-no-cudagraphs)",
    )
    parser.add_argument(
        "--gpt-layers",
        type=positive_int,
        default=None,
        help="a transformer preset with this many blocks instead of its own (the memory "
        "probe grows a model this way; common/memory_probe.py)",
    )
    strategy.add_args(parser)
    args = parser.parse_args(argv)
    if args.compile_mode != "default" and not args.compile:
        raise TrainerError(f"--compile-mode {args.compile_mode} needs --compile")

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
    if args.dataset in (*common_data.SYNTHETIC, *TOKEN_DATASETS) and args.loader != "native":
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
        return comm_benchmark.run(run) if args.comm_benchmark else Trainer(run).train()
    finally:
        ctx.close_records()
        strategy.finish(ctx.launch)


def main(argv: list[str] | None = None, strategy: Distribution | None = None) -> int:
    return run_main(strategy.prog if strategy else PROG, lambda: train(argv, strategy))
