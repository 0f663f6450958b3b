"""PyTorch FSDP2 trainer (`torch.distributed.fsdp.fully_shard`), with tensor parallelism as a
second axis inside the node (DTensor over a ("dp", "tp") device mesh), gloo on CPU and NCCL
on GPU.

Everything but the distribution is the PyTorch DDP trainer's (model, data, timing, records):
this `Distribution` shards the parameters, gradients and optimizer state over the
data-parallel ranks, and under tensor parallelism splits each block's layers over the ranks
of its group (parallelize.py). Its options: reshard after forward, FSDP's own mixed
precision, activation checkpointing and the tensor-parallel degree (docs/transformers.md)."""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from ..common.entry import TrainerError
from ..common.gpt import PRESETS, shape_of
from ..common.launch_env import LaunchEnv, local_world_size
from ..torch_ddp.train import Distribution
from ..torch_ddp.train import main as _main
from .parallelize import Parallelism, parallelize

FRAMEWORK = "pytorch-fsdp"
PROG = "dlscale-torch-fsdp"
TENSOR_PARALLEL = (1, 2, 4, 8)
RESHARD = ("always", "never")


class FSDP(Distribution):
    framework = FRAMEWORK
    prog = PROG

    def add_args(self, parser) -> None:
        parser.add_argument(
            "--reshard-after-forward",
            choices=RESHARD,
            default="always",
            help="always: free each block's gathered parameters after its forward pass and "
            "gather them again for its backward (least memory); never: keep them (one "
            "all-gather a step fewer per block, ZeRO-2's memory)",
        )
        parser.add_argument(
            "--fsdp-mixed-precision",
            action="store_true",
            help="FSDP's own mixed precision: parameters gathered and computed in the run's "
            "precision (bf16 or fp16), gradients reduced in fp32, instead of autocast "
            "over fp32 parameters",
        )
        parser.add_argument(
            "--activation-checkpointing",
            action="store_true",
            help="recompute each block's activations in the backward pass instead of keeping them",
        )
        parser.add_argument(
            "--tensor-parallel",
            type=int,
            choices=TENSOR_PARALLEL,
            default=1,
            help="ranks each block's layers are split over (inside a node); the others "
            "shard by FSDP",
        )

    def init(self, args, launch: LaunchEnv, device: torch.device) -> None:
        self.tp = args.tensor_parallel
        if launch.world_size % self.tp:
            raise TrainerError(
                f"--tensor-parallel {self.tp} needs a multiple of {self.tp} ranks; "
                f"the launcher started {launch.world_size}"
            )
        if self.tp > 1 and local_world_size() % self.tp:
            raise TrainerError(
                f"--tensor-parallel {self.tp} is a degree inside a node; this node has "
                f"{local_world_size()} rank(s)"
            )
        if self.tp > 1 and args.model in PRESETS:
            s = shape_of(args.model, args.gpt_layers)
            for what, n in (("heads", s.heads), ("key/value heads", s.kv), ("ffn", s.hidden)):
                if n % self.tp:
                    raise TrainerError(
                        f"{args.model}'s {n} {what} do not split over {self.tp} ranks"
                    )
        if launch.distributed:
            super().init(args, launch, device)
        else:  # FSDP needs a process group even for one rank: an in-process one
            dist.init_process_group(
                "gloo" if device.type == "cpu" else "nccl",
                store=dist.HashStore(),
                rank=0,
                world_size=1,
                timeout=datetime.timedelta(minutes=10),
            )
        self.mesh = init_device_mesh(
            device.type, (launch.world_size // self.tp, self.tp), mesh_dim_names=("dp", "tp")
        )

    def wrap(self, model, opt, args, launch: LaunchEnv, device: torch.device, precision: str):
        param_dtype = None
        if args.fsdp_mixed_precision:
            param_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
            if param_dtype is None:
                raise TrainerError(
                    "FSDP's mixed precision computes in bf16 or fp16; the run's precision "
                    f"is {precision}"
                )
            self.casts_itself = True
        how = Parallelism(
            tensor_parallel=self.tp,
            reshard_after_forward=args.reshard_after_forward == "always",
            param_dtype=param_dtype,
            activation_checkpointing=args.activation_checkpointing,
        )
        model = parallelize(model, self.mesh, how)
        # fully_shard replaced the parameters with sharded ones: the optimizer is made
        # again over them (FSDP2's rule), with the same settings; foreach, not fused.
        settings = {**opt.defaults, "fused": None}
        return model, type(opt)(model.parameters(), **settings)

    def data_share(self, launch: LaunchEnv) -> tuple[int, int]:
        # The mesh is ("dp", "tp") in row-major order: ranks r*tp .. r*tp+tp-1 share a batch.
        return launch.rank // self.tp, launch.world_size // self.tp

    def full_weights(self, model) -> Any:
        for name, p in sorted(model.named_parameters()):
            whole = p.full_tensor() if isinstance(p, DTensor) else p
            yield name, whole.detach().float().cpu().contiguous().numpy()

    def no_sync(self, net, launch: LaunchEnv):
        # A step without the gradients' reduce-scatter still all-gathers the parameters:
        # no step without communication to compare with.
        return None if launch.distributed else contextlib.nullcontext

    def comm_plan(self, grad_elements: list[int], args):
        raise TrainerError(
            "pytorch-fsdp has no communication benchmark yet: its collectives are all-gathers "
            "and reduce-scatters, and the benchmark times an allreduce"
        )

    def record(self, args, launch: LaunchEnv) -> dict[str, Any]:
        return {
            "fsdp": True,
            "reshard_after_forward": args.reshard_after_forward,
            "fsdp_mixed_precision": bool(args.fsdp_mixed_precision),
            "activation_checkpointing": bool(args.activation_checkpointing),
            "tensor_parallel": self.tp,
            "data_parallel": launch.world_size // self.tp,
        }

    def finish(self, launch: LaunchEnv) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return _main(argv, FSDP())
