"""Horovod + TensorFlow trainer: the TensorFlow trainer's Keras model, data, step and records
(tf_keras/train.py), with Horovod doing the distribution: hvd.DistributedGradientTape
averages the gradients (optionally compressed to fp16 for the allreduce, the CCGRID study's
knob), and every rank starts from rank 0's weights and optimizer state.

horovodrun --gloo starts the ranks locally; under Slurm srun does, and the trainer sets up
Horovod's gloo rendezvous itself (common.horovod_rendezvous): no ssh, no MPI.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ..common.horovod_shared import HorovodShared
from ..common.launch_env import LaunchEnv
from ..tf_keras.train import Distribution
from ..tf_keras.train import main as _main

FRAMEWORK = "horovod-tensorflow"
PROG = "dlscale-horovod-tensorflow"


class HorovodTF(HorovodShared, Distribution):
    framework = FRAMEWORK
    prog = PROG

    def before_import(self, launch: LaunchEnv, launched_by: str) -> None:
        self.join(launch)  # no TF_CONFIG: TensorFlow itself stays single-worker

    def init(self, tf, args, launch: LaunchEnv, device) -> None:
        self.tf, self.launch, self.device = tf, launch, device
        import horovod.tensorflow as hvd  # noqa: PLC0415  (after the rendezvous variables)

        self.init_horovod(hvd, launch)
        if device.cuda:
            self.require_nccl()

    def scope(self):
        return contextlib.nullcontext()  # plain variables: Horovod reduces the gradients

    def start_training(self, model, opt) -> None:
        if not self.launch.distributed:
            return
        # The optimizer's slots exist only once it is built: built now, its state goes out
        # with the weights before the first step instead of after it (a loss-scaling one's
        # scale too).
        opt.build(model.trainable_variables)
        self.hvd.broadcast_variables(model.variables, root_rank=0)
        self.hvd.broadcast_variables(opt.variables, root_rank=0)

    def step(self, make_step, args, global_batch: int):
        if not self.launch.distributed:
            return self.tf.function(make_step(global_batch, args.weight_decay, None))
        compression = self.compression(args)
        # The tape averages the gradients over ranks: each rank's loss is its own batch's
        # mean, and the whole decay goes onto the averaged gradient, as in PyTorch's SGD.
        return self.tf.function(
            make_step(
                args.per_device_batch,
                args.weight_decay,
                lambda tape: self.hvd.DistributedGradientTape(tape, compression=compression),
            )
        )

    def gather(self, obj: Any) -> list[Any]:
        return self.hvd.allgather_object(obj) if self.launch.distributed else [obj]

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        if not self.launch.distributed:
            return values
        return self.hvd.allreduce(
            self.tf.constant(values, self.tf.float64), op=self.hvd.Sum
        ).numpy()

    def backend(self) -> str:
        return "horovod-nccl" if self.device.cuda else "horovod-gloo"


def main(argv: list[str] | None = None) -> int:
    return _main(argv, HorovodTF())
