"""MXNet 1.9.1 Gluon trainer with the `dist_sync` parameter-server kvstore.

The job starts MXNet's roles itself (MXNet's bundled launch.py crashes on Python 3.11): the
job's rank 0 starts the scheduler, the first rank on every node starts a server, and every
rank is a worker. The roles meet at MASTER_ADDR:MASTER_PORT+3. Gradients are summed by the
servers; each worker then applies the same SGD update (update_on_kvstore=False), so the lr
plan is the shared one. Same model (mxnet_gluon/models.py), recipe, timing and records as the
other trainers; kv.num_workers is checked against the launcher's world size.
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

from ..common import data as common_data
from ..common.args import (ARRAY_DATASETS, NATIVE_ONLY, build_parser, fault_step,
                          recipe_fields)
from ..common.entry import TrainerError, dlscale_version, run_main
from ..common.launch_env import (LaunchEnv, bind_cpus, cpu_model, detect, local_world_size,
                                 node_name)
from ..common.lifeline import parent_watch
from ..common import loop as training_loop
from ..common.records import RecordWriter
from ..common.schedule import LRPlan, scaled_lr

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
    os.environ.update(DMLC_PS_ROOT_URI=launch.master_addr,
                      DMLC_PS_ROOT_PORT=str(launch.master_port + ROLE_PORT_OFFSET),
                      DMLC_NUM_WORKER=str(launch.world_size), DMLC_NUM_SERVER=str(nodes))
    roles = []
    for role, mine in (("scheduler", launch.rank == 0), ("server", launch.local_rank == 0)):
        if mine:
            proc = subprocess.Popen([sys.executable, "-c", "import mxnet"],
                                    env={**os.environ, "DMLC_ROLE": role},
                                    stdin=subprocess.DEVNULL,
                                    # a killed worker takes its roles along
                                    preexec_fn=parent_watch())
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
        sys.stderr.write(f"{PROG}: error: MXNet's {role} (pid {p.pid}) exited with code {rc} "
                         "before training finished (its output is above); stopping\n")
        sys.stderr.flush()
        os._exit(1)


def train(argv: list[str] | None = None) -> int:
    # Arrays only, through the framework's own input pipeline: no ImageNet folders, no DALI.
    args = build_parser(PROG, ARRAY_DATASETS, NATIVE_ONLY).parse_args(argv)
    launch = detect()
    crash_at = fault_step(args.inject_fault)
    launched_by = launch.launcher
    if launch.world_size == 1:
        launch = dataclasses.replace(launch, launcher="single")
    if args.device == "cuda":
        raise TrainerError("the MXNet environment is the CPU build; no GPU here")
    precision = "fp32" if args.precision == "auto" else args.precision
    if precision != "fp32":
        raise TrainerError(f"precision {precision}: the MXNet trainer runs fp32 on CPU")
    if args.dataset in common_data.SYNTHETIC and args.epochs:
        raise TrainerError(f"{args.dataset} has no epochs; give --steps")
    cores = None
    if args.cpu_bind == "auto" and "SLURM_JOB_ID" not in os.environ:
        cores = bind_cpus(launch.local_rank, local_world_size(), args.threads)
    # MXNet's engine sizes its pools from these at import: one rank, its own threads.
    os.environ.update(MXNET_CPU_WORKER_NTHREADS=str(args.threads),
                      OMP_NUM_THREADS=str(args.threads))
    roles = start_roles(dataclasses.replace(launch, launcher=launched_by)) \
        if launch.distributed else []
    writer = RecordWriter(args.output, enabled=launch.rank == 0)
    finished = False
    try:
        rc = _run(args, launch, launched_by, cores, crash_at, writer)
        finished = True
        return rc
    finally:
        writer.close()
        _leaving.set()
        for p in roles:  # they end once every worker has left; after a failure, at once
            try:
                p.wait(timeout=60 if finished else 0.1)
            except subprocess.TimeoutExpired:
                p.kill()


def _run(args, launch: LaunchEnv, launched_by: str, cores, crash_at, writer) -> int:
    import mxnet as mx
    from mxnet import autograd, gluon, nd

    from .models import build, parameter_count

    world = launch.world_size
    kv = mx.kv.create("dist_sync") if launch.distributed else None
    if kv is not None and kv.num_workers != world:
        raise TrainerError(f"the kvstore has {kv.num_workers} workers; the launcher started "
                           f"{world} ranks")
    shape = common_data.SHAPES[args.dataset]
    global_batch = args.per_device_batch * world
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
        rows[launch.rank] = np.frombuffer(raw.ljust(GATHER_BYTES), np.uint8)
        return [json.loads(bytes(r.astype(np.uint8)).decode()) for r in all_sum(rows)]

    def barrier() -> None:
        if kv is not None:
            kv._barrier()

    test = train_split = None
    if args.dataset in common_data.SYNTHETIC:
        rng = np.random.default_rng(args.seed + launch.rank)
        x_syn = nd.array(rng.standard_normal(
            (args.per_device_batch, shape.channels, shape.size, shape.size), dtype=np.float32))
        y_syn = nd.array(rng.integers(0, shape.classes, args.per_device_batch))
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
    mean = np.array(common_data.CIFAR_MEAN, np.float32).reshape(1, 3, 1, 1) * 255
    std = np.array(common_data.CIFAR_STD, np.float32).reshape(1, 3, 1, 1) * 255

    def prepare(images: np.ndarray, augment: bool, rng) -> Any:
        x = images.astype(np.float32)
        if augment:  # the other trainers' flip + 4-pixel-padded random crop
            flip = rng.random(len(x)) < 0.5
            x[flip] = x[flip, :, :, ::-1]
            padded = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)))
            ox, oy = rng.integers(0, 9, size=2)
            x = padded[:, :, oy:oy + 32, ox:ox + 32]
        return nd.array((x - mean) / std)

    lr_peak = scaled_lr(args.lr, args.lr_base_batch, global_batch, args.lr_scaling)
    plan = LRPlan(args.lr, lr_peak, int(args.lr_warmup_epochs * (steps_per_epoch or 0)),
                  total_steps, args.lr_schedule)
    net = build(args.model, shape.classes)
    net.hybridize(static_alloc=True, static_shape=True)
    n_params = parameter_count(net)
    # Gluon's SGD: weight decay added to the gradient, as in PyTorch's SGD. The kvstore's
    # init broadcasts worker 0's initial weights to every worker.
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": plan.lr(0), "momentum": args.momentum,
                             "wd": args.weight_decay},
                            kvstore=kv if kv is not None else "device",
                            update_on_kvstore=False if kv is not None else None)
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

    writer.write("params", framework=FRAMEWORK, world_size=world, global_batch=global_batch,
                 parameters=n_params, precision="fp32", channels_last=False,
                 total_steps=total_steps, steps_per_epoch=steps_per_epoch, lr_scaled=lr_peak,
                 device="cpu", distributed=launch.distributed, **recipe_fields(args),
                 kvstore=kv.type if kv is not None else None)
    hosts = gather(node_name())
    writer.write("env", framework_versions={"mxnet": mx.__version__, "numpy": np.__version__,
                                            "python": sys.version.split()[0]},
                 hostnames=hosts, devices=gather(f"cpu: {cpu_model()} ({args.threads} thread(s))"),
                 world_size=world, dlscale_version=dlscale_version(), launcher=launched_by,
                 backend="ps-lite" if kv is not None else None,
                 job_id=os.environ.get("SLURM_JOB_ID"), nodes=sorted(set(hosts)),
                 omp_num_threads=os.environ.get("OMP_NUM_THREADS"), cpu_affinity=gather(cores))

    def evaluate() -> float:
        part = slice(launch.rank, None, world)
        images, labels = test.images[part], test.labels[part]
        correct = 0
        for i in range(0, len(images), 256):
            logits = net(prepare(images[i:i + 256], False, None)).asnumpy()
            correct += int(np.sum(logits.argmax(1) == labels[i:i + 256]))
        total = all_sum(np.array([correct, len(labels)], np.float32))
        return float(total[0] / total[1])

    def batches():
        if train_split is None:
            while True:
                yield x_syn, y_syn
        epoch = 0
        while True:
            order = np.random.default_rng(args.seed + epoch).permutation(len(train_split.labels))
            mine = order[:steps_per_epoch * global_batch].reshape(
                steps_per_epoch, world, args.per_device_batch)[:, launch.rank]
            aug = np.random.default_rng(args.seed + 1000 * epoch + launch.rank)
            for idx in mine:
                yield (prepare(train_split.images[idx], args.dataset == "cifar10", aug),
                       nd.array(train_split.labels[idx]))
            epoch += 1
            yield None

    def step_fn(xb, yb):
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(global_batch)  # gradients summed over all workers, mean over the batch
        loss_nd = loss.mean()
        mx.nd.waitall()  # MXNet is asynchronous: the step is done only here
        return loss_nd

    loop = training_loop.run(
        args, writer, batches(), total_steps=total_steps, global_batch=global_batch, plan=plan,
        crash_at=crash_at, barrier=barrier, evaluate=evaluate if test is not None else None,
        set_lr=trainer.set_learning_rate, step_fn=step_fn,
        loss_of=lambda loss_nd: float(loss_nd.asscalar()))
    digest = hashlib.sha256()
    for name, p in sorted(net.collect_params().items()):
        if p.grad_req != "null":
            digest.update(name.encode())
            digest.update(p.data().asnumpy().astype(np.float32).tobytes())
    digests = gather(digest.hexdigest()[:16])
    throughput = training_loop.write_summary(writer, args, loop, global_batch, world, digests)
    timed_steps = loop.timed_steps(args.warmup_steps)
    if launch.rank == 0:
        print(f"{PROG}: {args.model} x{world} {throughput:.1f} images/s over {timed_steps} "
              f"timed steps", flush=True)
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
