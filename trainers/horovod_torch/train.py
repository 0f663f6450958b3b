"""Horovod + PyTorch trainer: hvd.DistributedOptimizer over gloo, initial parameters and
optimizer state broadcast from rank 0, optional fp16 compression of the allreduce.

Everything but the distribution is the PyTorch DDP trainer's (model, data, timing, records).
Locally horovodrun --gloo starts the ranks; under Slurm srun does, and the trainer sets up
Horovod's gloo rendezvous itself (common.horovod_rendezvous): no ssh, no MPI.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..common import comm
from ..common.horovod_shared import HorovodShared
from ..common.launch_env import LaunchEnv
from ..torch_ddp.train import Distribution
from ..torch_ddp.train import main as _main

FRAMEWORK = "horovod-pytorch"
PROG = "dlscale-horovod-pytorch"


class HorovodTorch(HorovodShared, Distribution):
    framework = FRAMEWORK
    prog = PROG

    def init(self, args, launch: LaunchEnv, device: torch.device) -> None:
        self.join(launch)
        import horovod.torch as hvd  # noqa: PLC0415  (after the rendezvous variables)

        self.init_horovod(hvd, launch)
        if device.type == "cuda":
            # The rank's GPU is the one train() picked (pick_gpu): under srun's per-task
            # binding it sees one GPU, index 0, whatever Horovod's local rank.
            torch.cuda.set_device(device)
            self.require_nccl()

    def wrap(self, model, opt, args, launch: LaunchEnv, device: torch.device, precision: str):
        if not launch.distributed:
            return model, opt
        hvd = self.hvd
        # Every rank starts from rank 0's weights and optimizer state, as DDP does.
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(), compression=self.compression(args)
        )
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        return model, opt

    def zero_grad(self, opt) -> None:
        opt.zero_grad()  # Horovod's optimizer takes no set_to_none

    def optimizer_step(self, net, opt, scaler) -> None:
        if scaler is None:
            opt.step()  # waits for the gradients' allreduce, then steps
            return
        # fp16 on GPU: the allreduce must finish before the scaler unscales the gradients.
        opt.synchronize()
        with opt.skip_synchronize():
            scaler.step(opt)
        scaler.update()

    def no_sync(self, net, launch: LaunchEnv):
        # Its allreduce starts in backward hooks, per gradient: there is no step without it.
        return None if launch.distributed else super().no_sync(net, launch)

    def gather(self, obj: Any, launch: LaunchEnv) -> list[Any]:
        return self.hvd.allgather_object(obj) if launch.distributed else [obj]

    def barrier(self, launch: LaunchEnv) -> None:
        if launch.distributed:
            self.hvd.barrier()

    def all_reduce(self, t: torch.Tensor, launch: LaunchEnv) -> torch.Tensor:
        if launch.distributed:
            t.copy_(self.hvd.allreduce(t, op=self.hvd.Sum))
        return t

    def comm_plan(self, grad_elements: list[int], args) -> comm.CommPlan:
        """Each gradient on its own, as DistributedOptimizer's hooks issue them, for Horovod
        to fuse up to its threshold; fp16 when --fp16-allreduce compresses them."""
        element = 2 if args.fp16_allreduce else 4
        threshold = int(os.environ.get("HOROVOD_FUSION_THRESHOLD", comm.HOROVOD_FUSION_BYTES))
        return comm.CommPlan(
            [element * n for n in grad_elements], threshold, element, fused_by="library"
        )

    def comm_round(self, tensors: list[torch.Tensor], launch: LaunchEnv) -> None:
        hvd = self.hvd
        handles = [
            hvd.allreduce_async_(t, name=f"dlscale.comm.{i}", op=hvd.Sum)
            for i, t in enumerate(tensors)
        ]
        for handle in handles:
            hvd.synchronize(handle)

    def comm_backend(self, device: torch.device) -> str:
        return "horovod-gloo" if device.type == "cpu" else "horovod-nccl"


def main(argv: list[str] | None = None) -> int:
    return _main(argv, HorovodTorch())
