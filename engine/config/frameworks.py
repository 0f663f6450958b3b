"""The frameworks dlscale knows, which ones it can run today, and how their trainers start."""

from __future__ import annotations

from dataclasses import dataclass

from ...trainers.common.args import (
    ARRAY_DATASETS,
    COMPILE_MODES,
    DATASETS,
    IMAGE_DATASETS,
    LOADERS,
    NATIVE_ONLY,
)


@dataclass(frozen=True)
class Option:
    """A framework's own knob, set per study in the spec's `[options.FRAMEWORK]` table and
    passed to its trainer as `flag` (a bool is a switch, an int takes its value)."""

    name: str
    flag: str
    default: bool | int | str
    allowed: tuple[int | str, ...] = ()  # for an int or a text: its values
    help: str = ""


# Horovod's allreduce compression, the knob Mahon et al. (CCGRID 2020) turned.
FP16_ALLREDUCE = Option(
    "fp16_allreduce",
    "--fp16-allreduce",
    False,
    help="compress gradients to fp16 for Horovod's allreduce",
)


# torch.compile's mode, for the PyTorch family's runs with training.compile = true: CUDA
# graphs (reduce-overhead) and Triton autotuning are what users compare frameworks with.
COMPILE_MODE = Option(
    "compile_mode",
    "--compile-mode",
    "default",
    COMPILE_MODES,
    "with training.compile: torch.compile's mode (reduce-overhead: CUDA graphs)",
)


@dataclass(frozen=True)
class Framework:
    name: str
    trainer_module: str  # python -m target
    # Local backend: "ranks" (dlscale.trainers.common.spawn: torchrun's variables per rank,
    # from a launcher that imports only the standard library: torchrun's own import of torch
    # and its rendezvous cost 2.5 to 4 s a run here, benchmarks/launch_overhead.py), or
    # "horovodrun" (Horovod's own, over gloo).
    launcher: str
    # Slurm: the job-script template; "srun" starts one task per device, "torchrun" one
    # per node. A profile's environment may choose another that the trainer supports.
    slurm_launchers: tuple[str, ...] = ("srun", "torchrun")
    # What its trainer reads and through which loaders (the trainer's own flags take the
    # same: trainers/common/args.py), so planning refuses what the trainer would. The token
    # datasets (the built-in transformer's) only where the trainer runs it.
    datasets: tuple[str, ...] = IMAGE_DATASETS
    loaders: tuple[str, ...] = LOADERS
    options: tuple[Option, ...] = ()


# FSDP2's options (trainers/torch_fsdp; docs/transformers.md). Strategies that shard differ
# in what a run measures and are compared side by side, so each is a framework of its own
# (one row per framework in every table and on the Build screen); how it shards is its
# options.
FSDP_OPTIONS = (
    Option(
        "reshard_after_forward",
        "--reshard-after-forward",
        "always",
        ("always", "never"),
        "always: free each block's gathered parameters after its forward pass (least "
        "memory); never: keep them for the backward pass (one all-gather fewer)",
    ),
    Option(
        "mixed_precision",
        "--fsdp-mixed-precision",
        False,
        help="FSDP's own mixed precision: parameters gathered and computed in the run's "
        "precision (bf16 or fp16), gradients reduced in fp32",
    ),
    Option(
        "activation_checkpointing",
        "--activation-checkpointing",
        False,
        help="recompute each transformer block's activations in the backward pass",
    ),
    Option(
        "tensor_parallel",
        "--tensor-parallel",
        1,
        (1, 2, 4, 8),
        "ranks each transformer block is split over, inside a node (DTensor); the rest "
        "shard by FSDP",
    ),
)


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "pytorch-ddp",
            "dlscale.trainers.torch_ddp",
            "ranks",
            datasets=DATASETS,
            options=(COMPILE_MODE,),
        ),
        Framework(
            "pytorch-fsdp",
            "dlscale.trainers.torch_fsdp",
            "ranks",
            datasets=DATASETS,
            options=(*FSDP_OPTIONS, COMPILE_MODE),
        ),
        # Under Slurm srun starts one task per rank; the trainer runs Horovod's gloo rendezvous.
        Framework(
            "horovod-pytorch",
            "dlscale.trainers.horovod_torch",
            "horovodrun",
            ("srun",),
            options=(FP16_ALLREDUCE, COMPILE_MODE),
        ),
        Framework(
            "horovod-tensorflow",
            "dlscale.trainers.horovod_tf",
            "horovodrun",
            ("srun",),
            ARRAY_DATASETS,
            NATIVE_ONLY,
            options=(FP16_ALLREDUCE,),
        ),
        # TF_CONFIG from the job's node addresses (DLSCALE_NODE_ADDRS, exported by the job
        # script), never TF's SlurmClusterResolver, which runs nvidia-smi.
        Framework(
            "tensorflow",
            "dlscale.trainers.tf_keras",
            "ranks",
            ("srun",),
            ARRAY_DATASETS,
            NATIVE_ONLY,
        ),
        # The trainer starts MXNet's scheduler and servers itself (MXNet's launch.py crashes on
        # Python 3.11).
        Framework(
            "mxnet", "dlscale.trainers.mxnet_gluon", "ranks", ("srun",), ARRAY_DATASETS, NATIVE_ONLY
        ),
        # srun first: one task per rank, rendezvous through the job script's MASTER_ADDR, no
        # pdsh/ssh launcher of DeepSpeed's own.
        Framework(
            "deepspeed",
            "dlscale.trainers.deepspeed_zero",
            "ranks",
            datasets=DATASETS,
            options=(
                Option(
                    "zero_stage",
                    "--zero-stage",
                    1,
                    (0, 1, 2, 3),
                    "ZeRO stage: 0 plain data parallel, 1 optimizer state, 2 and gradients, "
                    "3 and parameters partitioned across ranks",
                ),
                COMPILE_MODE,
            ),
        ),
    )
}


def option_flags(framework: str, values: dict[str, bool | int | str]) -> list[str]:
    """The trainer flags for a run's framework options (those the spec set)."""
    flags: list[str] = []
    for opt in FRAMEWORKS[framework].options:
        if opt.name not in values:
            continue
        value = values[opt.name]
        if isinstance(opt.default, bool):
            flags += [opt.flag] if value else []
        else:
            flags += [opt.flag, str(value)]
    return flags


def taking(what: str, value: str) -> list[str]:
    """The frameworks whose trainers take a dataset or loader (`what`: "datasets", "loaders")."""
    return [f.name for f in FRAMEWORKS.values() if value in getattr(f, what)]


# Here, not in planning, so that results can say why a point has none without loading
# planning (pydantic).
# The trainers with a --comm-benchmark mode (the PyTorch family); the others, and why not.
COMM_BENCHMARK_FRAMEWORKS = ("pytorch-ddp", "deepspeed", "horovod-pytorch")
_ANOTHER_LIBRARY = (
    "timing torch's gloo instead would measure another library's collective, "
    "not the one its runs use"
)
NO_COMM_BENCHMARK = {
    "tensorflow": "its trainer has no communication benchmark yet (its collectives are "
    f"MultiWorkerMirroredStrategy's); {_ANOTHER_LIBRARY}",
    "horovod-tensorflow": "its trainer has no communication benchmark yet (Horovod's "
    f"allreduce through TensorFlow); {_ANOTHER_LIBRARY}",
    "mxnet": "its trainer has no communication benchmark yet, and MXNet's dist_sync kvstore "
    "pushes and pulls through parameter servers rather than allreducing",
    "pytorch-fsdp": "its trainer has no communication benchmark yet: FSDP all-gathers the "
    "parameters and reduce-scatters the gradients, and the benchmark times an allreduce",
}
