"""TensorFlow trainer: MultiWorkerMirroredStrategy (ring all-reduce on CPU, NCCL on GPU), Keras
2 models, one intra-op and one inter-op thread per rank on CPU; on a GPU, the rank's own GPU,
Keras mixed precision (bf16, or fp16 with loss scaling), TF32 only when asked for, XLA with
--compile and a tf.data pipeline with prefetch (tf_keras/device.py).

The same model (tf_keras/models.py mirrors torch_ddp/models.py), the same recipe (SGD with
momentum and PyTorch-style coupled weight decay, the shared lr plan), the same timing rules
and metric records as the PyTorch trainers. A custom step rather than model.fit: timing per
step and the lr plan must match the other frameworks exactly.

Everything but how ranks cooperate is shared with the Horovod + TensorFlow trainer
(horovod_tf), which subclasses `Distribution`: the frameworks differ in exactly its methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..common.args import ARRAY_DATASETS, NATIVE_ONLY, build_parser
from ..common.context import start
from ..common.entry import TrainerError, run_main
from ..common.launch_env import LaunchEnv
from ..common.tf_cluster import tf_config
from . import device as tf_device
from .device import TfDevice

PROG = "dlscale-tensorflow"
FRAMEWORK = "tensorflow"
GATHER_BYTES = 1024
# how long a rank waits at the end for the others (a loaded machine's slowest rank)
PART_TIMEOUT_MS = 120_000

# make_step(mean_over, decay, wrap_tape) -> one replica's step fn(x, y) -> loss: the loss
# is the sum over the batch divided by `mean_over`, `decay` x weight is added to each
# gradient, and `wrap_tape` (or None) wraps the gradient tape (which takes the loss as
# scaled for fp16, so a gradient allreduce sees what the loss scaler expects).
StepMaker = Callable[[int, float, Any], Callable[[Any, Any], Any]]


class Distribution:
    """How ranks cooperate. This one is TensorFlow's MultiWorkerMirroredStrategy; TF_CONFIG is
    built by common.tf_cluster before TensorFlow is imported."""

    framework = FRAMEWORK
    prog = PROG
    strategy: Any = None

    def add_args(self, parser) -> None:
        """Flags of this framework alone (the shared ones are in common.args)."""

    def before_import(self, launch: LaunchEnv, launched_by: str) -> None:
        """Runs before TensorFlow is imported: what it reads from the environment."""
        if launch.distributed:
            os.environ["TF_CONFIG"] = json.dumps(
                tf_config(dataclasses.replace(launch, launcher=launched_by), os.environ)
            )
        else:
            os.environ.pop("TF_CONFIG", None)

    def init(self, tf, args, launch: LaunchEnv, device: TfDevice) -> None:
        self.tf, self.launch, self.device = tf, launch, device
        if launch.distributed:
            impl = tf.distribute.experimental.CommunicationImplementation
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(
                    implementation=impl.NCCL if device.cuda else impl.RING
                )
            )
        else:
            self.strategy = tf.distribute.get_strategy()
        if self.strategy.num_replicas_in_sync != launch.world_size:
            raise TrainerError(
                f"TensorFlow sees {self.strategy.num_replicas_in_sync} replicas; "
                f"the launcher started {launch.world_size} ranks"
            )

    def scope(self):
        """Where the model and optimizer are made (their variables are mirrored there)."""
        return self.strategy.scope()

    def start_training(self, model, opt) -> None:
        """After the model and optimizer exist, before the first step."""

    def step(self, make_step: StepMaker, args, global_batch: int):
        """The compiled training step: (x, y) -> the loss."""
        tf, strategy = self.tf, self.strategy
        # Each replica's gradient is its share of the global mean, summed by the all-reduce,
        # so each adds 1/world of PyTorch's coupled weight decay.
        one = make_step(global_batch, args.weight_decay / self.launch.world_size, None)
        if not self.launch.distributed:
            return tf.function(one)

        @tf.function
        def run(x, y):
            per_replica = strategy.run(one, args=(x, y))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return run

    # Collectives the shared loop and records need, in this framework's own terms.
    def _one_value(self, fn):
        """Run fn on this rank's replica; its per-replica result."""
        return self.strategy.run(fn) if self.launch.distributed else fn()

    def gather(self, obj: Any) -> list[Any]:
        if not self.launch.distributed:
            return [obj]
        tf = self.tf
        raw = json.dumps(obj).encode()
        if len(raw) > GATHER_BYTES:
            raise TrainerError(f"a gathered value is over {GATHER_BYTES} bytes")
        t = tf.constant([list(raw.ljust(GATHER_BYTES, b" "))], dtype=tf.int32)
        rows = self.strategy.gather(self._one_value(lambda: tf.identity(t)), axis=0).numpy()
        return [json.loads(bytes(r.astype(np.uint8)).decode()) for r in rows]

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        if not self.launch.distributed:
            return values
        tf = self.tf
        t = tf.constant(values, dtype=tf.float64)
        return self.strategy.reduce(
            tf.distribute.ReduceOp.SUM, self._one_value(lambda: tf.identity(t)), axis=None
        ).numpy()

    def barrier(self) -> None:
        self.all_sum(np.zeros(1))

    def part(self) -> None:
        """The ranks leave together, through TensorFlow's coordination service (not a
        collective). A ring collective's receiver pulls its chunks from the sender, so a
        rank that finished the last collective and left at once (os._exit) could still owe
        a peer a chunk: the peer's collective then failed "Connection reset by peer" (CI,
        2026-11-29; two localhost workers reducing 80 MB and leaving at once: 2 of 15
        pairs). Best effort: it fails only when a peer is gone (the leader, rank 0, may
        leave before answering the others), and that peer's own status says so."""
        if not self.launch.distributed or not isinstance(
            self.strategy, self.tf.distribute.MultiWorkerMirroredStrategy
        ):
            return
        from tensorflow.python.eager import context  # noqa: PLC0415 (the only API for it)

        with contextlib.suppress(Exception):
            context.context().wait_at_barrier("dlscale-part", PART_TIMEOUT_MS)

    def versions(self) -> dict[str, Any]:
        return {}

    def record(self, args) -> dict[str, Any]:
        """Extra fields for the params record (this framework's own settings)."""
        return {"strategy": "MultiWorkerMirroredStrategy" if self.launch.distributed else "default"}

    def backend(self) -> str:
        return "tf-nccl" if self.device.cuda else "tf-ring"

    def finish(self) -> None:
        """After the records are closed."""


def train(argv: list[str] | None = None, dist: Distribution | None = None) -> int:
    dist = dist or Distribution()
    # Arrays only, through the framework's own input pipeline: no ImageNet folders, no DALI.
    parser = build_parser(dist.prog, ARRAY_DATASETS, NATIVE_ONLY)
    dist.add_args(parser)
    args = parser.parse_args(argv)
    on_gpu = tf_device.wants_cuda(args.device)
    ctx = start(dist.prog, dist.framework, args, on_cpu=not on_gpu)
    dist.before_import(ctx.launch, ctx.launched_by)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not on_gpu:  # refused before the seconds an import takes
        tf_device.cpu_precision(args.precision, dist.framework)

    import tensorflow as tf  # after TF_CONFIG and the thread settings' variables

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    device = tf_device.setup(
        tf, args, ctx.launch.local_rank, ctx.launched_by == "srun", dist.framework
    )
    try:
        dist.init(tf, args, ctx.launch, device)
        ctx.open_records()
        # Keras (the models') is imported once TensorFlow and its strategy are set up.
        from .trainer import Trainer  # noqa: PLC0415

        return Trainer(tf, dist, ctx, device).train()
    finally:
        ctx.close_records()
        dist.finish()


def main(argv: list[str] | None = None, dist: Distribution | None = None) -> int:
    return run_main((dist or Distribution()).prog, lambda: train(argv, dist))
