"""MXNet 1.9.1 Gluon trainer with the `dist_sync` parameter-server kvstore.

The job starts MXNet's roles itself (MXNet's bundled launch.py crashes on Python 3.11): the
job's rank 0 starts the scheduler, the first rank on every node starts a server, and every
rank is a worker. The roles meet at MASTER_ADDR:MASTER_PORT+3. Gradients are summed by the
servers; each worker then applies the same SGD update (update_on_kvstore=False), so the lr
plan is the shared one. Same model (mxnet_gluon/models.py), recipe, timing and records as the
other trainers; kv.num_workers is checked against the launcher's world size.

On a GPU (mxnet_gluon/device.py) each worker computes on mx.gpu of its local rank (the one
GPU srun's per-task binding shows it), one rank alone uses the 'device' kvstore, and fp16
casts the network (BatchNorm stays fp32) with multi-precision SGD keeping fp32 master
weights. MXNet 1.9 has no bf16 on GPUs: refused with that reason.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np

from ..common import loop as training_loop
from ..common.args import ARRAY_DATASETS, NATIVE_ONLY, build_parser, recipe_fields
from ..common.arrays import ArrayData
from ..common.context import Context, start
from ..common.entry import TrainerError, run_main
from ..common.launch_env import LaunchEnv
from ..common.lifeline import parent_watch
from . import device as mx_device
from .device import MxDevice

PROG = "dlscale-mxnet"
FRAMEWORK = "mxnet"
GATHER_BYTES = 512
ROLE_PORT_OFFSET = 3  # MASTER_PORT +1 Horovod's, +2.. TensorFlow's: none run beside MXNet


def start_roles(launch: LaunchEnv) -> list[subprocess.Popen]:
    """Set DMLC_* for this worker; start the scheduler (job rank 0) and this node's server
    (its first rank). Importing mxnet with DMLC_ROLE=scheduler|server runs that role until
    every worker has finished."""
    nodes = int(os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    if launch.launcher not in ("srun",):
        nodes = 1  # torchrun/spawn: one machine
    assert launch.master_addr and launch.master_port
    os.environ.update(
        DMLC_PS_ROOT_URI=launch.master_addr,
        DMLC_PS_ROOT_PORT=str(launch.master_port + ROLE_PORT_OFFSET),
        DMLC_NUM_WORKER=str(launch.world_size),
        DMLC_NUM_SERVER=str(nodes),
    )
    roles = []
    for role, mine in (("scheduler", launch.rank == 0), ("server", launch.local_rank == 0)):
        if mine:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import mxnet"],
                env={**os.environ, "DMLC_ROLE": role},
                stdin=subprocess.DEVNULL,
                # a killed worker takes its roles along
                preexec_fn=parent_watch(),
            )
            threading.Thread(target=_watch_role, args=(proc, role), daemon=True).start()
            roles.append(proc)
    os.environ["DMLC_ROLE"] = "worker"
    return roles


_leaving = threading.Event()  # set once this worker is done with its roles


def _watch_role(p: subprocess.Popen, role: str) -> None:
    """A scheduler or server that dies (its port taken, a crash) would leave every worker
    waiting on the parameter server forever: end this worker at once, saying which."""
    rc = p.wait()
    if rc != 0 and not _leaving.is_set():
        sys.stderr.write(
            f"{PROG}: error: MXNet's {role} (pid {p.pid}) exited with code {rc} "
            "before training finished (its output is above); stopping\n"
        )
        sys.stderr.flush()
        os._exit(1)


def train(argv: list[str] | None = None) -> int:
    # Arrays only, through the framework's own input pipeline: no ImageNet folders, no DALI.
    args = build_parser(PROG, ARRAY_DATASETS, NATIVE_ONLY).parse_args(argv)
    on_gpu, precision = mx_device.before_import(args)
    ctx = start(PROG, FRAMEWORK, args, on_cpu=not on_gpu)
    # MXNet's engine sizes its pools from these at import: one rank, its own threads.
    os.environ.update(
        MXNET_CPU_WORKER_NTHREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads)
    )
    roles = (
        start_roles(dataclasses.replace(ctx.launch, launcher=ctx.launched_by))
        if ctx.launch.distributed
        else []
    )
    ctx.open_records()
    finished = False
    try:
        rc = _run(ctx, on_gpu, precision)
        finished = True
        return rc
    finally:
        ctx.close_records()
        _leaving.set()
        for p in roles:  # they end once every worker has left; after a failure, at once
            try:
                p.wait(timeout=60 if finished else 0.1)
            except subprocess.TimeoutExpired:
                p.kill()


def _run(ctx: Context, on_gpu: bool, precision: str) -> int:
    import mxnet as mx
    from mxnet import autograd, gluon, nd

    from .models import build, parameter_count

    args, writer, world, global_batch = ctx.args, ctx.writer, ctx.world, ctx.global_batch
    device: MxDevice = mx_device.setup(
        mx, args, on_gpu, precision, ctx.launch.local_rank, ctx.launched_by == "srun"
    )
    dev, dtype = device.context, device.dtype
    kv = mx.kv.create("dist_sync") if ctx.launch.distributed else None
    if kv is not None and kv.num_workers != world:
        raise TrainerError(
            f"the kvstore has {kv.num_workers} workers; the launcher started {world} ranks"
        )
    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    keys = iter(range(1_000_000, 2_000_000))  # the Trainer's own keys are 0..parameters-1

    def all_sum(values: np.ndarray) -> np.ndarray:
        """Through the servers: every worker pushes, the pull returns the sum."""
        if kv is None:
            return values
        key = next(keys)
        kv.init(key, nd.zeros(values.shape))
        kv.push(key, nd.array(values))
        out = nd.zeros(values.shape)
        kv.pull(key, out=out)
        return out.asnumpy()

    def gather(obj: Any) -> list[Any]:
        if kv is None:
            return [obj]
        raw = json.dumps(obj).encode()
        if len(raw) > GATHER_BYTES:
            raise TrainerError(f"a gathered value is over {GATHER_BYTES} bytes")
        rows = np.zeros((world, GATHER_BYTES), np.float32)
        rows[ctx.rank] = np.frombuffer(raw.ljust(GATHER_BYTES), np.uint8)
        return [json.loads(bytes(r.astype(np.uint8)).decode()) for r in all_sum(rows)]

    def barrier() -> None:
        if kv is not None:
            kv._barrier()

    data = ArrayData(args, world, ctx.rank, channels_last=False)
    recipe = ctx.recipe(ctx.total_steps(data.steps_per_epoch), data.steps_per_epoch)
    net = build(args.model, data.classes)  # initialised on the CPU: the same on every rank
    if device.cuda:
        net.collect_params().reset_ctx(dev)
    if dtype != "float32":
        net.cast(dtype)  # Gluon keeps BatchNorm's parameters in fp32
    net.hybridize(static_alloc=True, static_shape=True)
    # Gluon's SGD: weight decay added to the gradient, as in PyTorch's SGD. The kvstore's
    # init broadcasts worker 0's initial weights to every worker. multi_precision: fp16
    # weights are updated through fp32 master copies.
    trainer = gluon.Trainer(
        net.collect_params(),
        "sgd",
        {
            "learning_rate": recipe.plan.lr(0),
            "momentum": args.momentum,
            "wd": args.weight_decay,
            "multi_precision": dtype != "float32",
        },
        kvstore=kv if kv is not None else "device",
        update_on_kvstore=False if kv is not None else None,
    )
    if kv is not None:
        # MXNet 1.9's server answers a pull zero-copy from the value it stores, and the
        # message may leave only after the next merge has overwritten that value. Left to
        # the first step, worker 0's weights are broadcast (a pull) on the same keys the
        # gradients are then pushed to, so on a loaded machine a worker could receive the
        # gradient sum as its weights (seen: two ranks ending with different weights, 1 run
        # in 4 under load). Broadcasting now, and a barrier once every worker holds the
        # weights, leaves no pull in flight when the first gradients arrive.
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
        kv._barrier()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    writer.write(
        "params",
        framework=FRAMEWORK,
        world_size=world,
        global_batch=global_batch,
        parameters=parameter_count(net),
        precision=precision,
        tf32=precision == "tf32",
        multi_precision=dtype != "float32",
        channels_last=False,
        total_steps=recipe.total_steps,
        steps_per_epoch=data.steps_per_epoch,
        train_images=data.train_images,
        eval_images=data.eval_images,
        lr_scaled=recipe.plan.scaled_lr,
        device="cuda" if device.cuda else "cpu",
        distributed=ctx.launch.distributed,
        **recipe_fields(args),
        kvstore=kv.type if kv is not None else ("device" if device.cuda else None),
    )
    ctx.open_meter(mx_device.nvml_gpu(device.index) if device.cuda else None)
    ctx.write_env(
        {"mxnet": mx.__version__, "numpy": np.__version__, **mx_device.build_versions(mx)},
        gather,
        device=mx_device.gpu_name(device),
        backend="ps-lite",
    )

    def step_fn(xb, yb):
        with autograd.record():
            loss = loss_fn(net(xb).astype("float32"), yb)  # softmax in fp32
        loss.backward()
        trainer.step(global_batch)  # gradients summed over all workers, mean over the batch
        loss_nd = loss.mean()
        mx.nd.waitall()  # MXNet is asynchronous: the step is done only here
        return loss_nd

    def evaluate() -> float:
        return data.evaluate(
            lambda x: net(nd.array(x, ctx=dev, dtype=dtype)).astype("float32").asnumpy(), all_sum
        )

    hooks = training_loop.Hooks(
        step=step_fn,
        set_lr=trainer.set_learning_rate,
        loss_of=lambda loss_nd: float(loss_nd.asscalar()),
        sync=barrier,
        evaluate=evaluate if data.test is not None else None,
        progress=ctx.progress,
        meter=ctx.meter,
    )
    # Batches on the rank's device (synthetic data: made there once).
    loop = training_loop.run(
        recipe,
        hooks,
        writer,
        data.batches(lambda x, y: (nd.array(x, ctx=dev, dtype=dtype), nd.array(y, ctx=dev))),
    )
    digest = hashlib.sha256()
    for name, p in sorted(net.collect_params().items()):
        if p.grad_req != "null":
            digest.update(name.encode())
            digest.update(p.data().asnumpy().astype(np.float32).tobytes())
    digests = gather(digest.hexdigest()[:16])
    energy = ctx.energy(gather, loop.timed_steps(args.warmup_steps) * global_batch)
    throughput = training_loop.write_summary(
        writer,
        recipe,
        loop,
        world,
        digests,
        compute_dtype=mx_device.compute_dtype(
            mx, net, device, data.shape.size, data.shape.channels
        ),
        **energy,
    )
    ctx.say_done(throughput, loop)
    barrier()
    # A worker leaves the parameter server when its kvstore is freed, and the scheduler and
    # servers end only when every worker has left: free it now, not at interpreter exit,
    # where rank 0 would still be waiting for its roles.
    trainer._kvstore = trainer._kvstore_params = None  # the Trainer holds it twice
    kv = None
    gc.collect()
    return 0


def main(argv: list[str] | None = None) -> int:
    rc = run_main(PROG, lambda: train(argv))
    if rc != 0:
        # A failed worker's kvstore would wait at interpreter exit for peers and roles that
        # are gone: leave without running destructors, the error line already written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc
