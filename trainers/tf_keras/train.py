"""TensorFlow trainer: MultiWorkerMirroredStrategy (ring all-reduce), Keras 2 models, one
intra-op and one inter-op thread per rank on CPU.

The same model (tf_keras/models.py mirrors torch_ddp/models.py), the same recipe (SGD with
momentum and PyTorch-style coupled weight decay, the shared lr plan), the same timing rules
and metric records as the PyTorch trainers. A custom step rather than model.fit: timing per
step and the lr plan must match the other frameworks exactly.

Everything but how ranks cooperate is shared with the Horovod + TensorFlow trainer
(horovod_tf), which subclasses `Distribution`: the frameworks differ in exactly its methods.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..common import loop as training_loop
from ..common.args import ARRAY_DATASETS, NATIVE_ONLY, build_parser, recipe_fields
from ..common.arrays import ArrayData
from ..common.context import Context, start
from ..common.entry import TrainerError, run_main
from ..common.launch_env import LaunchEnv
from ..common.tf_cluster import tf_config

PROG = "dlscale-tensorflow"
FRAMEWORK = "tensorflow"
GATHER_BYTES = 1024

# make_step(mean_over, decay, wrap_tape) -> one replica's step fn(x, y) -> loss: the loss
# is the sum over the batch divided by `mean_over`, `decay` x weight is added to each
# gradient, and `wrap_tape` (or None) wraps the gradient tape.
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
            os.environ["TF_CONFIG"] = json.dumps(tf_config(
                dataclasses.replace(launch, launcher=launched_by), os.environ))
        else:
            os.environ.pop("TF_CONFIG", None)

    def init(self, tf, args, launch: LaunchEnv) -> None:
        self.tf, self.launch = tf, launch
        if launch.distributed:
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(
                    implementation=tf.distribute.experimental.CommunicationImplementation.RING))
        else:
            self.strategy = tf.distribute.get_strategy()
        if self.strategy.num_replicas_in_sync != launch.world_size:
            raise TrainerError(f"TensorFlow sees {self.strategy.num_replicas_in_sync} replicas; "
                               f"the launcher started {launch.world_size} ranks")

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
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM,
                                    self._one_value(lambda: tf.identity(t)), axis=None).numpy()

    def barrier(self) -> None:
        self.all_sum(np.zeros(1))

    def versions(self) -> dict[str, Any]:
        return {}

    def record(self, args) -> dict[str, Any]:
        """Extra fields for the params record (this framework's own settings)."""
        return {"strategy": "MultiWorkerMirroredStrategy" if self.launch.distributed
                else "default"}

    def backend(self) -> str:
        return "tf-ring"

    def finish(self) -> None:
        """After the records are closed."""


def train(argv: list[str] | None = None, dist: Distribution | None = None) -> int:
    dist = dist or Distribution()
    # Arrays only, through the framework's own input pipeline: no ImageNet folders, no DALI.
    parser = build_parser(dist.prog, ARRAY_DATASETS, NATIVE_ONLY)
    dist.add_args(parser)
    args = parser.parse_args(argv)
    ctx = start(dist.prog, dist.framework, args, on_cpu=True)
    dist.before_import(ctx.launch, ctx.launched_by)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.device == "cuda":
        raise TrainerError(f"the {dist.framework} environment is tensorflow-cpu; no GPU here")
    precision = "fp32" if args.precision == "auto" else args.precision
    if precision != "fp32":
        raise TrainerError(f"precision {precision}: the {dist.framework} trainer runs fp32 on CPU")
    if args.compile:
        raise TrainerError(f"--compile: the {dist.framework} trainer always runs a tf.function "
                           "step")

    import tensorflow as tf  # after TF_CONFIG and the thread settings' variables
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    try:
        dist.init(tf, args, ctx.launch)
        ctx.open_records()
        return _run(tf, dist, ctx)
    finally:
        ctx.close_records()
        dist.finish()


def _run(tf, dist: Distribution, ctx: Context) -> int:
    from .models import KERAS_VERSION, build, keras, parameter_count

    args, writer, global_batch = ctx.args, ctx.writer, ctx.global_batch
    keras.utils.set_random_seed(args.seed)  # the same initial weights on every rank
    data = ArrayData(args, ctx.world, ctx.rank, channels_last=True)
    recipe = ctx.recipe(ctx.total_steps(data.steps_per_epoch), data.steps_per_epoch)
    with dist.scope():
        model = build(args.model, data.classes)
        lr_var = tf.Variable(recipe.plan.lr(0), trainable=False, dtype=tf.float32)
        opt = keras.optimizers.SGD(learning_rate=lambda: lr_var, momentum=args.momentum)
    params = model.trainable_variables
    dist.start_training(model, opt)

    def make_step(mean_over: int, decay: float, wrap_tape):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=mean_over)
            grads = (wrap_tape(tape) if wrap_tape else tape).gradient(loss, params)
            # PyTorch's SGD adds weight_decay x w to the (averaged) gradient.
            opt.apply_gradients([(g + decay * v, v) for g, v in zip(grads, params)])
            return loss
        return step_fn

    writer.write("params", framework=dist.framework, world_size=ctx.world,
                 global_batch=global_batch, parameters=parameter_count(model),
                 precision="fp32", channels_last=True, total_steps=recipe.total_steps,
                 steps_per_epoch=data.steps_per_epoch, lr_scaled=recipe.plan.scaled_lr,
                 device="cpu", distributed=ctx.launch.distributed, **recipe_fields(args),
                 **dist.record(args))
    ctx.open_meter()
    ctx.write_env({"tensorflow": tf.__version__, "keras": KERAS_VERSION,
                   "numpy": np.__version__, **dist.versions()}, dist.gather,
                  backend=dist.backend())

    def evaluate() -> float:
        return data.evaluate(lambda x: model(x, training=False).numpy(), dist.all_sum)

    hooks = training_loop.Hooks(
        step=dist.step(make_step, args, global_batch),  # on CPU it returns when done
        set_lr=lr_var.assign, loss_of=float, sync=dist.barrier,
        evaluate=evaluate if data.test is not None else None,
        progress=ctx.progress, meter=ctx.meter)
    loop = training_loop.run(recipe, hooks, writer, data.batches(
        lambda x, y: (tf.constant(x), tf.constant(y, dtype=tf.int64))))
    digest = hashlib.sha256()
    for v in sorted(params, key=lambda v: v.name):
        digest.update(v.name.encode())
        digest.update(np.asarray(v.numpy(), np.float32).tobytes())
    digests = dist.gather(digest.hexdigest()[:16])
    energy = ctx.energy(dist.gather, loop.timed_steps(args.warmup_steps) * global_batch)
    throughput = training_loop.write_summary(writer, recipe, loop, ctx.world, digests,
                                             compute_dtype="float32", **energy)
    ctx.say_done(throughput, loop)
    dist.barrier()
    return 0


def main(argv: list[str] | None = None, dist: Distribution | None = None) -> int:
    return run_main((dist or Distribution()).prog, lambda: train(argv, dist))
