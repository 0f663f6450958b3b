"""The one command line every trainer takes, so the engine launches all frameworks alike."""
from __future__ import annotations

import argparse

CIFAR_MODELS = ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
IMAGENET_MODELS = ("resnet50", "resnet101", "resnet152")
MODELS = CIFAR_MODELS + IMAGENET_MODELS
# Datasets held in memory as arrays (trainers/common/data.py): every trainer reads these.
ARRAY_DATASETS = ("synthetic-cifar", "synthetic-imagenet", "cifar10", "digits")
# ImageNet as class folders of JPEGs (trainers/common/imagenet.py): the PyTorch family reads it.
DATASETS = ARRAY_DATASETS + ("imagenet",)
# auto: bf16 on GPUs with bf16 tensor cores (compute capability 8.0+), fp16 below, fp32 on
# CPU. fp32 means fp32 (TF32 off); tf32 is TF32 matmuls and convolutions, chosen knowingly.
PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
LR_SCALING = ("linear", "sqrt", "none")
# After the linear warm-up: constant, step (/10 at 30/60/80% of training), poly (power 2)
# or cosine decay, as compared at scale by Aach et al. (common/schedule.py).
LR_SCHEDULES = ("constant", "step", "poly", "cosine")
# native: the framework's own loader; dali: NVIDIA DALI (the PyTorch family's trainers).
LOADERS = ("native", "dali")
NATIVE_ONLY = ("native",)  # the loaders of trainers without DALI (TensorFlow, MXNet)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2 (no usage wall)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(prog: str, datasets: tuple[str, ...] = DATASETS,
                 loaders: tuple[str, ...] = LOADERS) -> argparse.ArgumentParser:
    """`datasets` and `loaders`: what this trainer reads and how (engine/frameworks.py
    names the same, so planning refuses what a trainer would)."""
    p = _OneLineParser(prog=prog, description="dlscale trainer (one per framework, same flags)")
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--dataset", required=True, choices=datasets)
    p.add_argument("--data-dir", default=None,
                   help="folder of the dataset's files (cifar10; imagenet: holds train/, val/)")
    p.add_argument("--per-device-batch", type=_positive_int, required=True)
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--steps", type=_positive_int, help="timed steps after warm-up")
    length.add_argument("--epochs", type=_positive_int, help="passes over the training data")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=5,
                   help="first steps excluded from throughput (compilation, autotuning)")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate at --lr-base-batch")
    p.add_argument("--lr-base-batch", type=_positive_int, default=128)
    p.add_argument("--lr-scaling", choices=LR_SCALING, default="linear",
                   help="how lr grows with the global batch")
    p.add_argument("--lr-warmup-epochs", type=float, default=0.0,
                   help="linear lr ramp from lr/world to the scaled lr (Goyal et al.)")
    p.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto: bf16 on GPUs of compute capability 8.0+, fp16 below, fp32 on CPU")
    p.add_argument("--memory-format", choices=("auto", "channels_last", "contiguous"),
                   default="auto", help="auto: channels_last on GPU")
    p.add_argument("--compile", action="store_true", help="torch.compile / XLA where offered")
    p.add_argument("--loader", choices=loaders, default="native")
    p.add_argument("--loader-workers", type=_non_negative_int, default=0,
                   help="native: worker processes (0: in the training process); "
                        "dali: CPU threads of the pipeline (0 counts as 1)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="compute threads per rank on CPU (one by default: ranks own cores)")
    p.add_argument("--cpu-bind", choices=("auto", "none"), default="auto",
                   help="auto: pin each rank to its own cores on CPU when they fit")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="top-1 at which time-to-accuracy is taken")
    p.add_argument("--eval-every", type=_positive_int, default=1, help="epochs between evals")
    p.add_argument("--log-every", type=_positive_int, default=10, help="steps per interval record")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-id", default=None, help="recorded in the params record")
    p.add_argument("--output", default="metrics.jsonl", help="metric records (rank 0 writes)")
    p.add_argument("--inject-fault", default=None, metavar="crash@stepN",
                   help="for testing failure handling: raise at step N")
    return p


def fault_step(spec: str | None) -> int | None:
    """`crash@step7` -> 7. Used by tests to make a real trainer fail mid-run."""
    if not spec:
        return None
    kind, _, where = spec.partition("@step")
    if kind != "crash" or not where.isdigit():
        raise ValueError(f"--inject-fault must look like crash@step7, got {spec!r}")
    return int(where)


def recipe_fields(args: argparse.Namespace) -> dict:
    """The params record's fields that come straight from this command line, alike in every
    trainer (each adds what it derives: world size, parameters, the scaled lr...)."""
    names = ("model", "dataset", "per_device_batch", "compile", "loader", "loader_workers",
             "steps", "epochs", "warmup_steps", "lr", "lr_base_batch", "lr_scaling",
             "lr_warmup_epochs", "lr_schedule", "momentum", "weight_decay", "seed", "threads",
             "target_accuracy", "run_id")
    return {n: getattr(args, n) for n in names}
