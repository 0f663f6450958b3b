"""DeepSpeed trainer: ZeRO stages 0-3 over torch.distributed (gloo on CPU, NCCL on GPU).

Everything but the distribution is the PyTorch DDP trainer's (same model from
torch_ddp.models, hyperparameters, timing and records): only the engine that wraps the
model and steps the optimizer differs. Started by srun or torchrun, never by DeepSpeed's
pdsh/ssh launcher: the launcher's variables are read by common.launch_env like every trainer.
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any

# Before deepspeed is imported: no CUDA extension is built or loaded on a CPU node, and the
# accelerator is not guessed from whatever libraries happen to be installed.
os.environ.setdefault("DS_BUILD_OPS", "0")
# Ops DeepSpeed builds just in time (the CPU shared-memory allreduce) live in the
# environment, where `dlscale env create` built them: minutes a run would otherwise spend.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
# Built and checked by the environment's own ninja (pip's, beside this Python), as `env
# create` built them: ninja 1.13 hashes a build's commands differently from 1.11, so a
# system ninja first on PATH found every command "changed" and rebuilt the op at every
# other run (90 s alone, minutes under load).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ..common import comm  # noqa: E402
from ..common.entry import leave  # noqa: E402
from ..common.launch_env import LaunchEnv  # noqa: E402
from ..torch_ddp.train import Distribution, TrainerError  # noqa: E402
from ..torch_ddp.train import main as _main

FRAMEWORK = "deepspeed"
PROG = "dlscale-deepspeed"


class DeepSpeedZeRO(Distribution):
    framework = FRAMEWORK
    prog = PROG
    # Its broadcast views each parameter as bytes, which a channels_last weight (stride(-1)
    # != 1) refuses on the GPU; channels_last inputs still give NHWC convolutions.
    channels_last_weights = False

    def add_args(self, parser) -> None:
        parser.add_argument(
            "--zero-stage",
            type=int,
            choices=(0, 1, 2, 3),
            default=1,
            help="ZeRO stage: 0 plain data parallel, 1 optimizer state "
            "partitioned, 2 gradients too, 3 and the parameters (gathered per layer as "
            "they are needed, as FSDP's)",
        )

    def init(self, args, launch: LaunchEnv, device: torch.device) -> None:
        if device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed  # noqa: PLC0415  (after the variables above)

        self.ds = deepspeed
        self.zero_stage = args.zero_stage
        # DeepSpeed's engine needs a process group even for one rank; its init reads the
        # same RANK/WORLD_SIZE/MASTER_* variables the launchers set (srun: set here).
        os.environ.update(
            RANK=str(launch.rank),
            WORLD_SIZE=str(launch.world_size),
            LOCAL_RANK=str(launch.local_rank),
            MASTER_ADDR=launch.master_addr or "127.0.0.1",
            MASTER_PORT=str(launch.master_port or _free_port()),
        )
        deepspeed.init_distributed(
            dist_backend=self.comm_backend(device),
            auto_mpi_discovery=False,
            timeout=datetime.timedelta(minutes=10),
            rank=launch.rank,
            world_size=launch.world_size,
        )
        if dist.get_world_size() != launch.world_size:
            raise TrainerError(
                f"DeepSpeed sees {dist.get_world_size()} ranks; the launcher "
                f"started {launch.world_size}"
            )

    def wrap(self, model, opt, args, launch: LaunchEnv, device: torch.device, precision: str):
        engine, optimizer, _, _ = self.ds.initialize(
            model=model,
            optimizer=opt,
            dist_init_required=False,
            config=deepspeed_config(args.per_device_batch, args.zero_stage, precision),
        )
        return engine, optimizer

    def step(self, net, opt, loss, scaler) -> None:
        self.backward(net, loss)
        self.optimizer_step(net, opt, scaler)

    def zero_grad(self, opt) -> None:
        pass  # the engine's step zeroes them

    def backward(self, net, loss) -> None:
        net.backward(loss)  # the engine reduces (and with ZeRO partitions) the gradients

    def optimizer_step(self, net, opt, scaler) -> None:
        net.step()

    def no_sync(self, net, launch: LaunchEnv):
        # Its no_sync forbids the optimizer step inside it, and ZeRO 2 cannot skip the
        # reduction at all: no step without synchronisation to compare with.
        return None if launch.distributed else super().no_sync(net, launch)

    def comm_plan(self, grad_elements: list[int], args) -> comm.CommPlan:
        """DeepSpeed's reduce buckets (zero_optimization.reduce_bucket_size, 5e8 elements by
        default: one bucket for every model here), fp32. ZeRO 1 and 2 reduce (or
        reduce-scatter) those bytes rather than allreduce them; the benchmark times the
        allreduce, the collective DeepSpeed falls back to and stage 0 uses."""
        cap = 4 * comm.DEEPSPEED_BUCKET_ELEMENTS
        return comm.CommPlan(comm.buckets([4 * n for n in grad_elements], [cap]), cap)

    def full_weights(self, model) -> Any:
        """Under ZeRO-3 each rank holds a partition of each parameter: gathered whole
        for the digest (a collective), one parameter at a time."""
        if self.zero_stage < 3:
            yield from super().full_weights(model)
            return
        for name, p in sorted(model.named_parameters()):
            with self.ds.zero.GatheredParameters([p]):
                yield name, p.detach().float().cpu().contiguous().numpy()

    def versions(self) -> dict[str, Any]:
        return {"deepspeed": self.ds.__version__}

    def record(self, args, launch: LaunchEnv) -> dict[str, Any]:
        return {"zero_stage": args.zero_stage}

    def finish(self, launch: LaunchEnv) -> None:
        # A barrier before tearing down: a rank that destroys the group while another is
        # still in DeepSpeed's last collective made runs abort at exit.
        if dist.is_initialized():
            if launch.distributed:
                dist.barrier()
            dist.destroy_process_group()


def deepspeed_config(per_device_batch: int, zero_stage: int, precision: str) -> dict[str, Any]:
    """The engine's configuration for a run in `precision` (as resolved for the device).

    DeepSpeed (0.18+) runs forward under its own autocast, which turns an outer one off
    unless its `torch_autocast` section is enabled; its `bf16`/`fp16` sections instead cast
    the parameters to half while the inputs stay fp32. So mixed precision is asked for the
    way every other framework here runs it: autocast, fp32 master weights (with DeepSpeed's
    own loss scaler under fp16), and what is recorded is what computes."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": per_device_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        # Our SGD (the same optimizer as every framework) is not one DeepSpeed tested
        # ZeRO with; it works, and parity of the recipe matters more here.
        "zero_allow_untested_optimizer": True,
        # DeepSpeed 0.19 clips gradients to a norm of 1.0 unless told otherwise, which no
        # other framework here does: the same recipe must give the same updates (the
        # strategies' loss curves agree only without it; docs/transformers.md).
        "gradient_clipping": 0.0,
        "steps_per_print": 10**9,  # our records report progress, not DeepSpeed's log
        "wall_clock_breakdown": False,
    }
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision)
    if dtype:
        config["torch_autocast"] = {"enabled": True, "dtype": dtype}
    return config


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    leave(_main(argv, DeepSpeedZeRO()))  # see leave(): aborts at exit otherwise
