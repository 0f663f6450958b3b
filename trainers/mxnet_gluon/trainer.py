"""One MXNet worker's training (Gluon, `dist_sync` kvstore), shaped like pytorch/examples'
Trainer: the data, network and Gluon trainer made once, then a step, an evaluation and the
run's end as named methods, which the shared timed loop (common.loop) calls. Imported once
the roles' and threads' variables are set (it imports MXNet, which reads them)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

from ..common import loop as training_loop
from ..common.arrays import ArrayData
from ..common.context import Context, weights_digest
from ..common.entry import TrainerError
from . import device as mx_device
from .models import build, parameter_count

GATHER_BYTES = 512


class KvCollectives:
    """What the shared loop and records need of the other workers, through the kvstore's
    servers (none for a worker alone)."""

    def __init__(self, kv, world: int, rank: int) -> None:
        self.kv, self.world, self.rank = kv, world, rank
        self.keys = iter(range(1_000_000, 2_000_000))  # the Trainer's own are 0..parameters-1

    def all_sum(self, values: np.ndarray) -> np.ndarray:
        """Every worker pushes, the pull returns the sum."""
        if self.kv is None:
            return values
        key = next(self.keys)
        self.kv.init(key, nd.zeros(values.shape))
        self.kv.push(key, nd.array(values))
        out = nd.zeros(values.shape)
        self.kv.pull(key, out=out)
        return out.asnumpy()

    def gather(self, obj: Any) -> list[Any]:
        if self.kv is None:
            return [obj]
        raw = json.dumps(obj).encode()
        if len(raw) > GATHER_BYTES:
            raise TrainerError(f"a gathered value is over {GATHER_BYTES} bytes")
        rows = np.zeros((self.world, GATHER_BYTES), np.float32)
        rows[self.rank] = np.frombuffer(raw.ljust(GATHER_BYTES), np.uint8)
        return [json.loads(bytes(r.astype(np.uint8)).decode()) for r in self.all_sum(rows)]

    def barrier(self) -> None:
        if self.kv is not None:
            self.kv._barrier()


class Trainer:
    """The run's data, network and Gluon trainer, and what the loop calls: `step`,
    `evaluate`."""

    def __init__(self, ctx: Context, on_gpu: bool, precision: str) -> None:
        self.ctx, self.args, self.precision = ctx, ctx.args, precision
        args, world = ctx.args, ctx.world
        self.device = mx_device.setup(
            mx, args, on_gpu, precision, ctx.launch.local_rank, ctx.launched_by == "srun"
        )
        kv = mx.kv.create("dist_sync") if ctx.launch.distributed else None
        if kv is not None and kv.num_workers != world:
            raise TrainerError(
                f"the kvstore has {kv.num_workers} workers; the launcher started {world} ranks"
            )
        self.kv = kv
        self.peers = KvCollectives(kv, world, ctx.rank)
        mx.random.seed(args.seed)
        np.random.seed(args.seed)
        self.data = ArrayData(args, world, ctx.rank, channels_last=False)
        steps_per_epoch = self.data.steps_per_epoch
        self.recipe = ctx.recipe(ctx.total_steps(steps_per_epoch), steps_per_epoch)
        self._build_net()
        self._build_updater()
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def _build_net(self) -> None:
        device = self.device
        # initialised on the CPU: the same on every rank
        self.net = build(self.args.model, self.data.classes)
        if device.cuda:
            self.net.collect_params().reset_ctx(device.context)
        if device.dtype != "float32":
            self.net.cast(device.dtype)  # Gluon keeps BatchNorm's parameters in fp32
        self.net.hybridize(static_alloc=True, static_shape=True)

    def _build_updater(self) -> None:
        args, kv, mixed = self.args, self.kv, self.device.dtype != "float32"
        # Gluon's SGD: weight decay added to the gradient, as in PyTorch's SGD. The kvstore's
        # init broadcasts worker 0's initial weights to every worker. multi_precision: fp16
        # weights are updated through fp32 master copies.
        self.updater = gluon.Trainer(
            self.net.collect_params(),
            "sgd",
            {
                "learning_rate": self.recipe.plan.lr(0),
                "momentum": args.momentum,
                "wd": args.weight_decay,
                "multi_precision": mixed,
            },
            kvstore=kv if kv is not None else "device",
            update_on_kvstore=False if kv is not None else None,
        )
        if kv is not None:
            # MXNet 1.9's server answers a pull zero-copy from the value it stores, and the
            # message may leave only after the next merge has overwritten that value. Left to
            # the first step, worker 0's weights are broadcast (a pull) on the same keys the
            # gradients are then pushed to, so on a loaded machine a worker could receive the
            # gradient sum as its weights (seen: two ranks ending with different weights, 1
            # run in 4 under load). Broadcasting now, and a barrier once every worker holds
            # the weights, leaves no pull in flight when the first gradients arrive.
            self.updater._init_kvstore()
            self.updater._init_params()
            mx.nd.waitall()
            kv._barrier()

    def write_params(self) -> None:
        device, kv = self.device, self.kv
        self.ctx.write_array_params(
            self.recipe,
            self.data,
            parameter_count(self.net),
            self.precision,
            device.cuda,
            {"multi_precision": device.dtype != "float32", "channels_last": False},
            kvstore=kv.type if kv is not None else ("device" if device.cuda else None),
        )

    def write_env(self) -> None:
        device = self.device
        self.ctx.open_meter(mx_device.nvml_gpu(device.index) if device.cuda else None)
        self.ctx.write_env(
            {"mxnet": mx.__version__, "numpy": np.__version__, **mx_device.build_versions(mx)},
            self.peers.gather,
            device=mx_device.gpu_name(device),
            backend="ps-lite",
        )

    def step(self, xb, yb):
        """One training step; the loss, unread (reading it synchronises)."""
        with autograd.record():
            loss = self.loss_fn(self.net(xb).astype("float32"), yb)  # softmax in fp32
        loss.backward()
        # gradients summed over all workers, mean over the batch
        self.updater.step(self.ctx.global_batch)
        loss_nd = loss.mean()
        mx.nd.waitall()  # MXNet is asynchronous: the step is done only here
        return loss_nd

    def evaluate(self) -> float:
        """Top-1 accuracy over the whole evaluation set, every worker's share summed."""
        dev, dtype = self.device.context, self.device.dtype
        return self.data.evaluate(
            lambda x: self.net(nd.array(x, ctx=dev, dtype=dtype)).astype("float32").asnumpy(),
            self.peers.all_sum,
        )

    def hooks(self) -> training_loop.Hooks:
        return training_loop.Hooks(
            step=self.step,
            set_lr=self.updater.set_learning_rate,
            loss_of=lambda loss_nd: float(loss_nd.asscalar()),
            sync=self.peers.barrier,
            evaluate=self.evaluate if self.data.test is not None else None,
            progress=self.ctx.progress,
            meter=self.ctx.meter,
        )

    def batches(self) -> Iterator[Any]:
        """On the worker's device (synthetic data: made there once)."""
        dev, dtype = self.device.context, self.device.dtype
        return self.data.batches(
            lambda x, y: (nd.array(x, ctx=dev, dtype=dtype), nd.array(y, ctx=dev))
        )

    def trainable_weights(self) -> Iterator[tuple[str, np.ndarray]]:
        for name, p in sorted(self.net.collect_params().items()):
            if p.grad_req != "null":
                yield name, p.data().asnumpy()

    def finish(self, loop: training_loop.Loop) -> float:
        shape = self.data.shape
        return self.ctx.finish(
            self.recipe,
            loop,
            weights_digest(self.trainable_weights()),
            self.peers.gather,
            self.peers.barrier,
            compute_dtype=mx_device.compute_dtype(
                mx, self.net, self.device, shape.size, shape.channels
            ),
        )

    def leave(self) -> None:
        """A worker leaves the parameter server when its kvstore is freed, and the scheduler
        and servers end only when every worker has left: free it now, not at interpreter
        exit, where rank 0 would still be waiting for its roles."""
        # the Gluon trainer holds it twice
        self.updater._kvstore = self.updater._kvstore_params = None
        self.kv = self.peers.kv = None
        gc.collect()

    def train(self) -> int:
        self.write_params()
        self.write_env()
        assert self.ctx.writer is not None
        loop = training_loop.run(self.recipe, self.hooks(), self.ctx.writer, self.batches())
        self.finish(loop)
        self.leave()
        return 0
