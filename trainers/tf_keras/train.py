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
import sys
from typing import Any, Callable

import numpy as np

from ..common import data as common_data
from ..common.args import (ARRAY_DATASETS, NATIVE_ONLY, build_parser, fault_step,
                          recipe_fields)
from ..common.entry import TrainerError, dlscale_version, run_main
from ..common.launch_env import (LaunchEnv, bind_cpus, cpu_model, detect, local_world_size,
                                 node_name)
from ..common import loop as training_loop
from ..common.records import RecordWriter
from ..common.schedule import LRPlan, scaled_lr
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
    launch = detect()
    crash_at = fault_step(args.inject_fault)
    launched_by = launch.launcher
    if launch.world_size == 1:
        launch = dataclasses.replace(launch, launcher="single")
    dist.before_import(launch, launched_by)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cores = None
    if args.cpu_bind == "auto" and "SLURM_JOB_ID" not in os.environ:
        cores = bind_cpus(launch.local_rank, local_world_size(), args.threads)
    if args.device == "cuda":
        raise TrainerError(f"the {dist.framework} environment is tensorflow-cpu; no GPU here")
    precision = "fp32" if args.precision == "auto" else args.precision
    if precision != "fp32":
        raise TrainerError(f"precision {precision}: the {dist.framework} trainer runs fp32 on CPU")
    if args.compile:
        raise TrainerError(f"--compile: the {dist.framework} trainer always runs a tf.function "
                           "step")
    if args.dataset in common_data.SYNTHETIC and args.epochs:
        raise TrainerError(f"{args.dataset} has no epochs; give --steps")

    import tensorflow as tf  # after TF_CONFIG and the thread settings' variables
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    writer = None
    try:
        dist.init(tf, args, launch)
        writer = RecordWriter(args.output, enabled=launch.rank == 0)
        return _run(tf, dist, args, launch, launched_by, cores, crash_at, writer)
    finally:
        if writer is not None:
            writer.close()
        dist.finish()


def _run(tf, dist: Distribution, args, launch: LaunchEnv, launched_by: str, cores, crash_at,
         writer: RecordWriter) -> int:
    from .models import KERAS_VERSION, build, keras, parameter_count

    world = launch.world_size
    shape = common_data.SHAPES[args.dataset]
    global_batch = args.per_device_batch * world
    keras.utils.set_random_seed(args.seed)  # the same initial weights on every rank

    # Data: synthetic tensors made once per rank; real data sharded by rank.
    test = train_split = None
    if args.dataset in common_data.SYNTHETIC:
        rng = np.random.default_rng(args.seed + launch.rank)
        x_syn = tf.constant(rng.standard_normal(
            (args.per_device_batch, shape.size, shape.size, shape.channels), dtype=np.float32))
        y_syn = tf.constant(rng.integers(0, shape.classes, args.per_device_batch), dtype=tf.int64)
        steps_per_epoch = None
        total_steps = args.warmup_steps + args.steps
    else:
        train_split, test = common_data.load_real(args.dataset, args.data_dir, args.seed)
        steps_per_epoch = len(train_split.labels) // global_batch
        if steps_per_epoch == 0:
            raise TrainerError(f"{len(train_split.labels)} training images are fewer than one "
                               f"global batch ({global_batch}); lower the per-device batch")
        total_steps = (steps_per_epoch * args.epochs if args.epochs
                       else args.warmup_steps + args.steps)
    mean = np.array(common_data.CIFAR_MEAN, np.float32).reshape(1, 1, 1, 3) * 255
    std = np.array(common_data.CIFAR_STD, np.float32).reshape(1, 1, 1, 3) * 255

    def prepare(images: np.ndarray, augment: bool, rng: np.random.Generator) -> np.ndarray:
        x = images.transpose(0, 2, 3, 1).astype(np.float32)  # NCHW uint8 -> NHWC float
        if augment:  # the PyTorch trainers' flip + 4-pixel-padded random crop
            flip = rng.random(len(x)) < 0.5
            x[flip] = x[flip, :, ::-1]
            padded = np.pad(x, ((0, 0), (4, 4), (4, 4), (0, 0)))
            ox, oy = rng.integers(0, 9, size=2)
            x = padded[:, oy:oy + 32, ox:ox + 32]
        return (x - mean) / std

    lr_peak = scaled_lr(args.lr, args.lr_base_batch, global_batch, args.lr_scaling)
    plan = LRPlan(args.lr, lr_peak, int(args.lr_warmup_epochs * (steps_per_epoch or 0)),
                  total_steps, args.lr_schedule)
    with dist.scope():
        model = build(args.model, shape.classes)
        lr_var = tf.Variable(plan.lr(0), trainable=False, dtype=tf.float32)
        opt = keras.optimizers.SGD(learning_rate=lambda: lr_var, momentum=args.momentum)
    n_params = parameter_count(model)
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

    train_step = dist.step(make_step, args, global_batch)

    writer.write("params", framework=dist.framework, world_size=world,
                 global_batch=global_batch, parameters=n_params, precision="fp32",
                 channels_last=True, total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                 lr_scaled=lr_peak, device="cpu", distributed=launch.distributed,
                 **recipe_fields(args), **dist.record(args))
    versions = {"tensorflow": tf.__version__, "keras": KERAS_VERSION,
                "python": sys.version.split()[0], "numpy": np.__version__, **dist.versions()}
    hosts = dist.gather(node_name())
    writer.write("env", framework_versions=versions, hostnames=hosts,
                 devices=dist.gather(f"cpu: {cpu_model()} ({args.threads} thread(s))"),
                 world_size=world, dlscale_version=dlscale_version(), launcher=launched_by,
                 backend=dist.backend() if launch.distributed else None,
                 job_id=os.environ.get("SLURM_JOB_ID"), nodes=sorted(set(hosts)),
                 omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                 cpu_affinity=dist.gather(cores))

    def evaluate() -> float:
        part = slice(launch.rank, None, world)
        images, labels = test.images[part], test.labels[part]
        correct = 0
        for i in range(0, len(images), 256):
            logits = model(prepare(images[i:i + 256], False, None), training=False)
            correct += int(np.sum(np.argmax(logits.numpy(), 1) == labels[i:i + 256]))
        total = dist.all_sum(np.array([correct, len(labels)], np.float64))
        return float(total[0] / total[1])

    def batches():
        if train_split is None:
            while True:
                yield x_syn, y_syn
        epoch = 0
        while True:
            rng = np.random.default_rng(args.seed + epoch)  # the same order on every rank
            order = rng.permutation(len(train_split.labels))[:steps_per_epoch * global_batch]
            mine = order.reshape(steps_per_epoch, world, args.per_device_batch)[:, launch.rank]
            aug = np.random.default_rng(args.seed + 1000 * epoch + launch.rank)
            for idx in mine:
                yield (tf.constant(prepare(train_split.images[idx], args.dataset == "cifar10", aug)),
                       tf.constant(train_split.labels[idx]))
            epoch += 1
            yield None

    loop = training_loop.run(
        args, writer, batches(), total_steps=total_steps, global_batch=global_batch, plan=plan,
        crash_at=crash_at, barrier=dist.barrier,
        evaluate=evaluate if test is not None else None, set_lr=lr_var.assign,
        step_fn=train_step,  # on CPU the call returns when the step is done
        loss_of=float)
    digest = hashlib.sha256()
    for v in sorted(params, key=lambda v: v.name):
        digest.update(v.name.encode())
        digest.update(np.asarray(v.numpy(), np.float32).tobytes())
    digests = dist.gather(digest.hexdigest()[:16])
    throughput = training_loop.write_summary(writer, args, loop, global_batch, world, digests)
    timed_steps, best_top1 = loop.timed_steps(args.warmup_steps), loop.best_top1
    if launch.rank == 0:
        print(f"{dist.prog}: {args.model} x{world} {throughput:.1f} images/s over {timed_steps} "
              f"timed steps" + (f", top-1 {best_top1:.3f}" if best_top1 is not None else ""),
              flush=True)
    dist.barrier()
    return 0


def main(argv: list[str] | None = None, dist: Distribution | None = None) -> int:
    return run_main((dist or Distribution()).prog, lambda: train(argv, dist))
