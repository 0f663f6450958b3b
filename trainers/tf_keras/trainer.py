"""One rank's training with TensorFlow (Keras 2 models), shaped like pytorch/examples'
Trainer: the data, model and optimizer made once, then a step, an evaluation and the run's
end as named methods, which the shared timed loop (common.loop) calls. How ranks cooperate
is the run's `Distribution` (train.py; Horovod's in horovod_tf), not this class. Imported
once TensorFlow is set up (models.py imports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..common import loop as training_loop
from ..common.arrays import ArrayData
from ..common.context import Context, weights_digest
from . import device as tf_device
from .device import TfDevice
from .models import KERAS_VERSION, build, keras, parameter_count

if TYPE_CHECKING:
    from .train import Distribution


class Trainer:
    """The run's data, model and optimizer, and what the loop calls: the compiled step,
    `evaluate`, `sync`."""

    def __init__(self, tf, dist: Distribution, ctx: Context, device: TfDevice) -> None:
        self.tf, self.dist, self.ctx, self.device = tf, dist, ctx, device
        self.args = args = ctx.args
        keras.utils.set_random_seed(args.seed)  # the same initial weights on every rank
        self.data = ArrayData(args, ctx.world, ctx.rank, channels_last=True)
        steps_per_epoch = self.data.steps_per_epoch
        self.recipe = ctx.recipe(ctx.total_steps(steps_per_epoch), steps_per_epoch)
        tf_device.set_policy(keras, device.precision)
        self.scaled = device.precision == "fp16"  # fp16 gradients underflow without scaling
        with dist.scope():
            self.model = build(args.model, self.data.classes)
            self.lr = tf.Variable(self.recipe.plan.lr(0), trainable=False, dtype=tf.float32)
            opt = keras.optimizers.SGD(learning_rate=lambda: self.lr, momentum=args.momentum)
            if self.scaled:
                opt = keras.mixed_precision.LossScaleOptimizer(opt)
        self.opt = opt
        self.params = self.model.trainable_variables
        dist.start_training(self.model, opt)

    def make_step(self, mean_over: int, decay: float, wrap_tape):
        """One replica's step fn(x, y) -> loss (train.StepMaker): the loss is the sum over
        the batch divided by `mean_over`, `decay` x weight is added to each gradient, and
        `wrap_tape` (or None) wraps the gradient tape."""
        tf, model, opt, params = self.tf, self.model, self.opt, self.params
        scaled = self.scaled

        def loss_of(x, y):
            logits = tf.cast(model(x, training=True), tf.float32)  # softmax in fp32
            per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            return tf.nn.compute_average_loss(per_example, global_batch_size=mean_over)

        if self.args.compile:
            # XLA compiles the forward pass and, through it, the backward; the gradients'
            # all-reduce and the update stay outside, where every strategy runs them.
            loss_of = tf.function(loss_of, jit_compile=True)

        def step_fn(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(x, y)
                target = opt.get_scaled_loss(loss) if scaled else loss
            grads = (wrap_tape(tape) if wrap_tape else tape).gradient(target, params)
            if scaled:
                grads = opt.get_unscaled_gradients(grads)
            # PyTorch's SGD adds weight_decay x w to the (averaged) gradient.
            opt.apply_gradients([(g + decay * v, v) for g, v in zip(grads, params)])
            return loss

        return step_fn

    def write_params(self) -> None:
        device = self.device
        self.ctx.write_array_params(
            self.recipe,
            self.data,
            parameter_count(self.model),
            device.precision,
            device.cuda,
            {"xla": self.args.compile, "loss_scaling": self.scaled, "channels_last": True},
            **self.dist.record(self.args),
        )

    def write_env(self) -> None:
        tf = self.tf
        self.ctx.open_meter(self.device.meter_gpu())
        self.ctx.write_env(
            {
                "tensorflow": tf.__version__,
                "keras": KERAS_VERSION,
                "numpy": np.__version__,
                **tf_device.versions(tf),
                **self.dist.versions(),
            },
            self.dist.gather,
            device=self.device.name,
            backend=self.dist.backend(),
        )

    def evaluate(self) -> float:
        """Top-1 accuracy over the whole evaluation set, every rank's share summed."""
        return self.data.evaluate(
            lambda x: self.model(x, training=False).numpy(), self.dist.all_sum
        )

    def sync(self) -> None:
        if self.device.cuda:  # a GPU's queued steps done before the clock is read
            self.tf.test.experimental.sync_devices()
        self.dist.barrier()

    def hooks(self) -> training_loop.Hooks:
        return training_loop.Hooks(
            step=self.dist.step(self.make_step, self.args, self.ctx.global_batch),
            set_lr=self.lr.assign,
            loss_of=float,
            sync=self.sync,
            evaluate=self.evaluate if self.data.test is not None else None,
            progress=self.ctx.progress,
            meter=self.ctx.meter,
        )

    def finish(self, loop: training_loop.Loop) -> float:
        weights = sorted(self.params, key=lambda v: v.name)
        return self.ctx.finish(
            self.recipe,
            loop,
            weights_digest((v.name, v.numpy()) for v in weights),
            self.dist.gather,
            self.dist.barrier,
            compute_dtype=tf_device.compute_dtype(self.tf, keras, self.model),
        )

    def train(self) -> int:
        self.write_params()
        self.write_env()
        args, ctx = self.args, self.ctx
        assert ctx.writer is not None
        batches = tf_device.pipeline(
            self.tf, self.data, args.per_device_batch, self.device.cuda, args.threads
        )
        loop = training_loop.run(self.recipe, self.hooks(), ctx.writer, batches)
        self.finish(loop)
        self.dist.part()
        return 0
