"""The one command line every trainer takes, so the engine launches all frameworks alike."""

from __future__ import annotations

import argparse
import operator

from .flags import LR_SCALING, LR_SCHEDULES, TRAINING, Knob  # noqa: F401  (re-exported)
from .gpt import GPT_MODELS

CIFAR_MODELS = ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
IMAGENET_MODELS = ("resnet50", "resnet101", "resnet152")
# The built-in GPT-style decoder's presets (common/gpt.py) take token datasets.
MODELS = CIFAR_MODELS + IMAGENET_MODELS + GPT_MODELS
# Datasets held in memory as arrays (trainers/common/data.py): every trainer reads these.
ARRAY_DATASETS = ("synthetic-cifar", "synthetic-imagenet", "cifar10", "digits")
# ImageNet as class folders of JPEGs (trainers/common/imagenet.py): the PyTorch family reads it.
IMAGE_DATASETS = ARRAY_DATASETS + ("imagenet",)
# Token streams for the built-in transformer (torch_ddp/tokens.py): random tokens made on
# the device once, or windows of a public-domain book read as bytes (common/data.py). Steps
# only, no epochs; read by the trainer itself (loader native).
TOKEN_DATASETS = ("synthetic-tokens", "alice")
DATASETS = IMAGE_DATASETS + TOKEN_DATASETS
# auto: bf16 on GPUs with bf16 tensor cores (compute capability 8.0+), fp16 below, fp32 on
# CPU. fp32 means fp32 (TF32 off); tf32 is TF32 matmuls and convolutions, chosen knowingly.
PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
# native: the framework's own loader; dali: NVIDIA DALI; nvjpeg: JPEGs decoded on the GPU by
# torchvision's nvJPEG decoder (the PyTorch family's trainers; ImageNet folders, GPU runs).
LOADERS = ("native", "dali", "nvjpeg")
GPU_LOADERS = ("nvjpeg",)
FOLDER_LOADERS = ("nvjpeg",)  # loaders that read JPEG folders only, not array datasets
NATIVE_ONLY = ("native",)
# torch.compile's modes, the PyTorch family's `compile_mode` option (engine/config/frameworks.py).
COMPILE_MODES = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)  # the loaders of trainers without DALI (TensorFlow, MXNet)


_BOUNDS = {
    "ge": (operator.ge, ">="),
    "gt": (operator.gt, ">"),
    "le": (operator.le, "<="),
    "lt": (operator.lt, "<"),
}


def _number_type(k: Knob):
    """argparse type for a knob: its kind, within its bounds (the spec holds the same
    limits, so a run the spec accepts is one its trainer takes)."""
    cast = int if k.kind == "int" else float

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            what = "an integer" if cast is int else "a number"
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        for bound, limit in k.bounds().items():
            holds, sign = _BOUNDS[bound]
            if not holds(value, limit):
                said = {("ge", 1): "a positive integer", ("ge", 0): "0 or more"}.get(
                    (bound, limit) if cast is int else None, f"{sign} {limit:g}"
                )
                raise argparse.ArgumentTypeError(f"must be {said}, got {text}")
        return value

    return parse


# argparse type for a count that must be 1 or more (--per-device-batch, a trainer's own flags)
positive_int = _number_type(Knob("count", "int", None, "", ge=1))


def add_knob(parser, k: Knob) -> None:
    if k.kind == "bool":
        parser.add_argument(k.option, action="store_true", help=k.help)
        return
    kw: dict = {"default": k.default, "help": k.help, "dest": k.dest}
    if k.kind == "choice":
        kw["choices"] = k.choices
    elif k.kind in ("int", "number"):
        kw["type"] = _number_type(k)
    parser.add_argument(k.option, **kw)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2 (no usage wall)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(
    prog: str, datasets: tuple[str, ...] = DATASETS, loaders: tuple[str, ...] = LOADERS
) -> argparse.ArgumentParser:
    """`datasets` and `loaders`: what this trainer reads and how (engine/frameworks.py
    names the same, so planning refuses what a trainer would)."""
    p = _OneLineParser(prog=prog, description="dlscale trainer (one per framework, same flags)")
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--dataset", required=True, choices=datasets)
    p.add_argument(
        "--per-device-batch",
        type=positive_int,
        required=True,
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto: bf16 on GPUs of compute capability 8.0+, fp16 below, fp32 on CPU",
    )
    p.add_argument("--loader", choices=loaders, default="native")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--cpu-bind",
        choices=("auto", "none"),
        default="auto",
        help="auto: pin each rank to its own cores on CPU when they fit",
    )
    p.add_argument("--run-id", default=None, help="recorded in the params record")
    p.add_argument("--output", default="metrics.jsonl", help="metric records (rank 0 writes)")
    # The training knobs, from the one table (flags.py); steps and epochs: exactly one.
    length = p.add_mutually_exclusive_group(required=True)
    for k in TRAINING:
        add_knob(length if k.group == "length" else p, k)
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
    names = (
        "model",
        "dataset",
        "per_device_batch",
        "loader",
        "run_id",
        *(k.dest for k in TRAINING if k.name != "inject_fault"),
    )
    return {n: getattr(args, n) for n in names}
