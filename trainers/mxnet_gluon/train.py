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
import os
import subprocess
import sys
import threading

from ..common.args import ARRAY_DATASETS, NATIVE_ONLY, build_parser
from ..common.context import start
from ..common.entry import run_main
from ..common.launch_env import LaunchEnv
from ..common.lifeline import parent_watch
from . import device as mx_device

PROG = "dlscale-mxnet"
FRAMEWORK = "mxnet"
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
        from .trainer import Trainer  # noqa: PLC0415  (MXNet reads the variables set above)

        rc = Trainer(ctx, on_gpu, precision).train()
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


def main(argv: list[str] | None = None) -> int:
    rc = run_main(PROG, lambda: train(argv))
    if rc != 0:
        # A failed worker's kvstore would wait at interpreter exit for peers and roles that
        # are gone: leave without running destructors, the error line already written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc
