"""The PyTorch family's communication benchmark (`--comm-benchmark`): the model's gradient,
in the buckets its framework fills (Distribution.comm_plan), allreduced the way that
framework issues it (Distribution.comm_round) over the run's own process group: gloo on CPU,
NCCL on GPU, Horovod's own where it is Horovod. Nothing is trained; see common/comm.py for
the timing and the definitions."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from ..common import comm
from ..common import data as common_data
from ..common.args import TOKEN_DATASETS, recipe_fields
from ..common.entry import TrainerError
from ..common.gpt import PRESETS
from .models import build, parameter_count


def classes_of(args) -> int:
    """The classifier's width (it sets the last layer's gradient): ImageNet folders have
    as many classes as class folders, the array datasets their known number."""
    if args.dataset in TOKEN_DATASETS:  # a transformer: its output layer is its vocabulary
        return PRESETS[args.model].vocab
    if args.dataset == "imagenet":
        from ..common import imagenet  # noqa: PLC0415  (reads the folder list only)

        return len(imagenet.read_folders(args.data_dir).classes)
    return common_data.SHAPES[args.dataset].classes


def gradient_elements(model: torch.nn.Module) -> list[int]:
    """Each trainable parameter's size, in the order backward produces the gradients (the
    last layer's first): the order the buckets fill."""
    return [p.numel() for p in model.parameters() if p.requires_grad][::-1]


# A declared gradient (--gradient-elements) as parameters of at most this many elements:
# the buckets then fill as DDP fills them from a model's layers (a large model's layers are
# mostly this size or smaller), not as one tensor bigger than any bucket.
DECLARED_LAYER_ELEMENTS = 1 << 20


def declared_gradient(elements: int) -> list[int]:
    """A script's gradient known only by its size, as parameter sizes."""
    step = DECLARED_LAYER_ELEMENTS
    return [min(step, elements - i) for i in range(0, elements, step)]


def run(run: Any) -> int:
    """`run` is train.TorchRun: the rank's context, its framework and device."""
    ctx, strategy, device = run.ctx, run.strategy, run.device
    args, writer, launch = ctx.args, ctx.writer, ctx.launch
    if not launch.distributed:
        raise TrainerError(
            "--comm-benchmark needs 2 or more ranks: one rank has nothing to communicate"
        )
    fields = recipe_fields(args)
    if args.gradient_elements:  # a declared framework's script: its gradient by its size
        grads, parameters = declared_gradient(args.gradient_elements), args.gradient_elements
        fields["model"] = f"a gradient of {parameters} elements"
    else:
        model = build(args.model, classes_of(args))
        grads, parameters = gradient_elements(model), parameter_count(model)
    plan = strategy.comm_plan(grads, args)
    dtype = {2: torch.float16, 4: torch.float32}[plan.element_bytes]
    # Zeros: a sum of zeros stays finite however many rounds run (ones would overflow fp16).
    tensors = [
        torch.zeros(size // plan.element_bytes, dtype=dtype, device=device) for size in plan.sizes
    ]
    cuda = device.type == "cuda"
    backend = strategy.comm_backend(device)
    writer.write(
        "params",
        framework=strategy.framework,
        world_size=ctx.world,
        global_batch=ctx.global_batch,
        parameters=parameters,
        precision=run.precision,
        device=device.type,
        mode="comm-benchmark",
        distributed=True,
        **fields,
        **strategy.record(args, launch),
    )
    versions = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        **strategy.versions(),
    }
    ctx.write_env(
        versions,
        run.gather,
        device=torch.cuda.get_device_name(device) if cuda else None,
        backend=backend,
    )
    times = comm.time_rounds(
        lambda: strategy.comm_round(tensors, launch),
        lambda: strategy.barrier(launch),
        run.sync_device,
    )
    per_rank = run.gather(times)
    # The sweep: one buffer per size, allreduced as the framework issues one bucket, so
    # the engine can fit latency and bandwidth (engine/results/commfit.py).
    tensors.clear()  # the step's buffers go before the sweep's are made
    sweep = []
    for size in comm.sweep_sizes(plan):
        one = [torch.zeros(size // plan.element_bytes, dtype=dtype, device=device)]
        sweep_times = comm.time_rounds(
            functools.partial(strategy.comm_round, one, launch),
            lambda: strategy.barrier(launch),
            run.sync_device,
            comm.SWEEP_WARMUP,
            comm.SWEEP_ROUNDS,
        )
        sweep.append(comm.sweep_entry(run.gather(sweep_times), size))
    fields = comm.record_fields(per_rank, plan, backend, sweep=sweep)
    writer.write("comm", **fields)
    # The run ends with a summary like every run (the engine settles a run by it): nothing
    # was trained, so no image was timed.
    writer.write(
        "summary",
        status="completed",
        throughput=0.0,
        throughput_per_device=0.0,
        timed_steps=0,
        warmup_steps=0,
        images_timed=0,
        elapsed_s=fields["elapsed_s"],
        measured="comm",
        **{
            k: fields[k]
            for k in (
                "comm_bytes",
                "comm_time_s",
                "comm_algbw_gbps",
                "comm_busbw_gbps",
                "bucket_bytes",
                "backend",
            )
        },
    )
    ctx.progress(comm.progress_line(fields))
    strategy.barrier(launch)
    return 0
