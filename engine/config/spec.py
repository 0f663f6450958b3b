"""Experiment specs: TOML files validated by pydantic, errors reported as file:line: field
(engine/tomlfile.py).

A spec names the matrix (frameworks x models x datasets x scales x batches x precisions x
loaders) and the training recipe shared by every run. Every number is bounded to what can
run, and the bound's error says why.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from ...trainers.common.args import (
    CIFAR_MODELS,
    DATASETS,
    FOLDER_LOADERS,
    IMAGENET_MODELS,
    LOADERS,
    MODELS,
    PRECISIONS,
    TOKEN_DATASETS,
)
from ...trainers.common.data import SHAPES, SYNTHETIC
from ...trainers.common.flags import LR_SCHEDULES, TRAINING, Knob
from ...trainers.common.gpt import GPT_MODELS
from ..runs import scale_label
from .custom import (
    AxisValue,
    Declared,
    all_declared,
    check_axes,
    check_names,
    declared,
    declared_uses,
    declaring,
    free_name,
    unset_lengths,
)
from .frameworks import FRAMEWORKS, taking
from .options import Options
from .quantities import MAX_BATCH, MAX_GLOBAL_BATCH
from .times import check_time
from .tomlfile import Number, StrictModel, limit, load_toml_model, worded

# Limits on what a spec asks for, each with the reason its error gives.
MAX_NODES = 100_000
NODES = limit(StrictInt, "more nodes than any Slurm cluster has", ge=1, le=MAX_NODES)
RANKS_PER_NODE = limit(StrictInt, "more ranks than any node has GPUs or cores", ge=1, le=1024)
BATCH_WHY = "larger batches do not fit any device's memory"
# The runs one spec may plan: ten times the largest study dlscale is measured at (10,000
# runs plan in 0.04 s and render in 2 s, benchmarks/engine_scale.py). Counted from the
# axes' lengths before anything is validated or built, so a spec of a million runs is one
# line at once, not minutes and gigabytes later.
MAX_RUNS = 100_000
MAX_REPETITIONS = 100
MAX_CPU = 8191  # a CPU's number as Linux counts them (NR_CPUS tops out at 8,192)
CPU_ID = Annotated[int, Field(strict=True, ge=0, le=MAX_CPU)]
_AXES = (
    "frameworks",
    "models",
    "datasets",
    "scales",
    "per_device_batch",
    "global_batch",
    "precisions",
    "loaders",
    "lr_schedules",
)


def matrix_size(experiment: dict[str, Any]) -> tuple[int, list[str]]:
    """The runs an [experiment] table (as written, not yet validated) expands to, and
    each axis's size in words: a list is as many values as it holds, anything else one."""
    sizes = [(axis, experiment[axis]) for axis in _AXES if axis in experiment]
    axes = experiment.get("axes")
    if isinstance(axes, dict):
        sizes += [(f"axes.{name}", values) for name, values in axes.items()]
    total, words = 1, []
    for axis, values in sizes:
        n = len(values) if isinstance(values, list) else 1
        total *= n
        words.append(f"{n:,} {axis}")
    reps = experiment.get("repetitions", 3)
    # one out of its range is the field's own error, with its reason: counted as one here
    fits = isinstance(reps, int) and not isinstance(reps, bool) and 1 <= reps <= MAX_REPETITIONS
    reps = reps if fits else 1
    words.append(f"{reps:,} repetitions")
    return total * reps, words


def _positive(batch: int) -> int:
    if batch < 1:
        raise ValueError(f"batch {batch} is not a positive integer")
    return batch


BATCH = Annotated[limit(StrictInt, BATCH_WHY, le=MAX_BATCH), AfterValidator(_positive)]
GLOBAL_BATCH = Annotated[
    limit(
        StrictInt,
        "a step of more than 2^20 images would hold most of "
        "ImageNet's 1.28 million training images",
        le=MAX_GLOBAL_BATCH,
    ),
    AfterValidator(_positive),
]


def _one_of(kind: str, value: str, allowed: list[str] | tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {kind} {value!r}; allowed: {', '.join(allowed)}")
    return value


_IMAGE_SIZE = {name: shape.size for name, shape in SHAPES.items()}


def _taken_by_every(what: str, value: str, frameworks: list[str]) -> None:
    """A dataset or loader (`what`: "datasets", "loaders") must be one every framework's
    trainer takes; else say which trainers take it and what this one takes."""
    for fw in frameworks:
        if fw not in FRAMEWORKS:  # a declared framework: its script reads what it reads
            continue
        theirs = getattr(FRAMEWORKS[fw], what)
        if value not in theirs:
            raise ValueError(
                f"{what[:-1]} {value!r} is taken only by the {', '.join(taking(what, value))} "
                f"trainers, not by {fw}'s (its {what}: {', '.join(theirs)}); give {fw} a spec "
                "of its own" + (' with loaders = ["native"]' if what == "loaders" else "")
            )


def model_fits_dataset(model: str, dataset: str) -> bool:
    """CIFAR ResNets take 32x32 images; ImageNet ResNets take 224x224; the transformer
    presets take tokens."""
    if model in GPT_MODELS or dataset in TOKEN_DATASETS:
        return model in GPT_MODELS and dataset in TOKEN_DATASETS
    size = _IMAGE_SIZE[dataset]
    return (model in CIFAR_MODELS and size == 32) or (model in IMAGENET_MODELS and size == 224)


class Scale(StrictModel):
    nodes: NODES
    ranks_per_node: RANKS_PER_NODE

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        # "2x4" reads as 2 nodes x 4 ranks (GPUs or CPU ranks) per node.
        # ASCII digits only: int() reads "١" (Arabic-Indic one) as 1, which would make
        # "١x1" a second, identical 1x1; "01x1" is 1x1 (duplicates are refused below).
        if isinstance(value, str):
            m = re.fullmatch(r" *([0-9]+) *[x×] *([0-9]+) *", value)
            if not m:
                raise ValueError(f'scale {value!r} is not NODESxRANKS in digits 0-9, e.g. "1x2"')
            return {"nodes": int(m[1]), "ranks_per_node": int(m[2])}
        return value

    @property
    def devices(self) -> int:
        return self.nodes * self.ranks_per_node

    def __str__(self) -> str:
        return f"{scale_label(self.nodes, self.ranks_per_node)}"


def _knob_type(k: Knob) -> Any:
    """A training knob's type in the spec, with the limits and reasons of the table."""
    if k.kind == "bool":
        kind: Any = StrictBool
    elif k.kind == "choice":
        kind = Literal[k.choices]  # type: ignore[valid-type]
    elif k.kind == "str":
        kind = (
            Annotated[StrictStr, Field(pattern=worded(k.pattern, k.form or k.help))]
            if k.pattern
            else StrictStr
        )
    else:
        kind = limit(StrictInt if k.kind == "int" else Number, k.why, k.low_why, **k.bounds())
    return kind | None if k.optional else kind


class _TrainingChecks(StrictModel):
    """What holds across the knobs, or needs more than a type."""

    @field_validator("data_dir", check_fields=False)
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        # `~` is the submitting user's home: expanded here, because the trainer gets the
        # path as one quoted argument that no shell expands.
        return os.path.expanduser(value) if value else value

    @field_validator("warmup_steps", check_fields=False)
    @classmethod
    def _warmup_shorter(cls, warmup: int, info: ValidationInfo) -> int:
        # On warmup_steps (steps is validated before it): a form that shows the steps and
        # not the warm-up marks its steps field with this (tui/form.py).
        steps = info.data.get("steps")
        uses = declared_uses()
        if uses is not None and not {"steps", "warmup_steps"} <= uses:
            return warmup  # a declared script's command that never gets both never reads it
        if isinstance(steps, int) and warmup >= steps:
            gets = "the command gets both, and " if uses is not None else ""
            raise ValueError(
                f"the {warmup} warm-up steps (warmup_steps) are not fewer than the {steps} "
                f"timed steps (steps): {gets}a run would warm up longer than it is timed; "
                "raise steps or lower warmup_steps"
            )
        return warmup

    @model_validator(mode="after")
    def _one_length(self) -> _TrainingChecks:
        steps = self.steps  # type: ignore[attr-defined]
        # A declared framework's script needs only what its command names (custom.py):
        # no length at all is its own business (the warm-up: _warmup_shorter).
        if declared_uses() is not None:
            if steps is not None and self.epochs is not None:  # type: ignore[attr-defined]
                raise ValueError("give at most one of steps or epochs")
            return self
        if (steps is None) == (self.epochs is None):  # type: ignore[attr-defined]
            raise ValueError("give exactly one of steps (timed steps after warm-up) or epochs")
        return self


# [training]: one field per knob of the trainers' own table (trainers/common/flags.py), so
# the spec, the trainers' options and the launch flags cannot drift apart.
Training: Any = create_model(
    "Training",
    __base__=_TrainingChecks,
    **{  # type: ignore[call-overload]
        k.name: (_knob_type(k), Field(default=k.default, description=k.help)) for k in TRAINING
    },
)


class Experiment(StrictModel):
    name: StrictStr = Field(
        pattern=worded(
            r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
            "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or a digit "
            "(no spaces)",
        )
    )
    description: StrictStr = ""
    frameworks: list[StrictStr] = Field(min_length=1)
    models: list[StrictStr] = Field(min_length=1)
    datasets: list[StrictStr] = Field(min_length=1)
    scales: list[Scale] = Field(min_length=1)
    per_device_batch: list[BATCH] | None = Field(default=None, min_length=1)
    global_batch: list[GLOBAL_BATCH] | None = Field(default=None, min_length=1)
    scaling: Literal["weak", "strong"] = "weak"
    precisions: list[Literal[PRECISIONS]] = ["auto"]  # type: ignore[valid-type]
    loaders: list[StrictStr] = Field(default=["native"], min_length=1)
    repetitions: limit(
        StrictInt,
        "beyond 100 repetitions the 95% confidence interval narrows too little to pay for the runs",
        ge=1,
        le=MAX_REPETITIONS,
    ) = 3
    # A matrix axis: one set of runs per schedule (Aach et al. compared them at scale).
    # Absent, [training].lr_schedule holds for every run.
    lr_schedules: list[Literal[LR_SCHEDULES]] | None = Field(  # type: ignore[valid-type]
        default=None, min_length=1
    )
    # Before the training runs, one short job per framework, model, scale and precision
    # that times the gradient's allreduce (plan.py: comm runs).
    comm_benchmark: StrictBool = False
    # At most this many of the study's runs at once on Slurm: a job array's %N throttle
    # (overrides the profile's max_concurrent). Not part of any run's identity.
    max_concurrent: (
        limit(StrictInt, "more jobs at once than Slurm can hold", ge=1, le=2**26) | None
    ) = None
    # The most one run may take (a Slurm time: 00:30:00, 2-00, UNLIMITED): a local run
    # past it is stopped and ends TIMEOUT, saying so; on Slurm, the job's limit when it is
    # shorter than the profile's time_limit. Absent: the local backend's default
    # (backends/local: DEFAULT_TIME_LIMIT), the profile's on Slurm. Not part of any
    # run's identity.
    time_limit: StrictStr | None = None
    # Axes of the user's own, for declared frameworks: `seq_len = [1024, 2048]` is one set
    # of runs per value, and `{seq_len}` in their commands (engine/config/custom.py).
    axes: dict[StrictStr, list[AxisValue]] = {}
    # What a run that other work disturbed (its interference record past the thresholds of
    # results/disturbed.py) does to its point: "flag" counts it and marks it, "leave-out"
    # lists it but counts it not, "rerun" repeats it (at most `disturbed_reruns` times, each
    # rerun naming the run it repeats) and counts the rerun in its place. Read when results
    # are made and runs followed, from the saved spec: not part of any run's identity.
    disturbed: Literal["flag", "leave-out", "rerun"] = "flag"
    # The local backend only: the CPUs each run is pinned to. "all": those dlscale may use
    # (no pinning); "quiet": the ranks' CPUs that were least busy over half a second just
    # before the run starts; a list: these CPUs. Not part of any run's identity; on Slurm
    # the job's CPUs are the task plugin's (refused there: backends/slurm).
    cpus: Literal["all", "quiet"] | list[CPU_ID] = "all"
    disturbed_reruns: limit(
        StrictInt,
        "a run disturbed this often says the machine is busy, not unlucky: find what is busy "
        "(`dlscale status` names it) or choose a quieter time",
        ge=1,
        le=5,  # results/disturbed.py's MAX_RERUNS (tests/test_disturbed.py)
    ) = 2  # and its RERUNS

    _axes = field_validator("axes")(classmethod(lambda cls, v: check_axes(v)))
    _time = field_validator("time_limit")(classmethod(lambda cls, v: check_time(v)))

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpu_list(cls, v: Any) -> Any:
        # one message for every wrong form (the union's own names only its first member)
        if v in ("all", "quiet"):
            return v
        whole = isinstance(v, list) and all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_CPU for c in v
        )
        if not whole or not v or len(set(v)) != len(v):
            raise ValueError(
                f'"all", "quiet", or a list of distinct CPU numbers from 0 to {MAX_CPU}'
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict):
            total, words = matrix_size(data)
            if total > MAX_RUNS:
                raise ValueError(
                    f"the matrix is {' x '.join(words)} = {total:,} runs, over the "
                    f"{MAX_RUNS:,} one spec may plan; split the study into several specs"
                )
        return data

    @property
    def batches(self) -> list[int]:
        """The batch axis: per device (weak scaling) or global (strong); validation leaves
        exactly the one the scaling needs."""
        chosen = self.per_device_batch if self.scaling == "weak" else self.global_batch
        assert chosen is not None
        return list(chosen)

    @field_validator(*_AXES)
    @classmethod
    def _distinct(cls, values: list[Any] | None) -> list[Any] | None:
        """Each value of an axis once: a repeated one ("1x1" and "01x1") would plan the
        same runs twice. (A set: an axis of 50,000 values is checked in linear time.)"""
        seen: set[Any] = set()
        for v in values or []:
            key = (v.nodes, v.ranks_per_node) if isinstance(v, Scale) else v
            if key in seen:
                raise ValueError(f"{str(v)!r} is given twice (each value is one set of runs)")
            seen.add(key)
        return values

    @field_validator("frameworks")
    @classmethod
    def _frameworks(cls, values: list[str], info: ValidationInfo) -> list[str]:
        values = [_one_of("framework", v, [*FRAMEWORKS, *declared()]) for v in values]
        all_declared(values)
        return values

    @field_validator("loaders")
    @classmethod
    def _loaders(cls, values: list[str], info: ValidationInfo) -> list[str]:
        values = [_one_of("loader", v, LOADERS) for v in values]
        if all_declared(info.data.get("frameworks", [])) and values != ["native"]:
            raise ValueError("a declared framework's script loads its own data: leave loaders out")
        tokens = [d for d in info.data.get("datasets", []) if d in TOKEN_DATASETS]
        if values != ["native"] and tokens:
            raise ValueError(
                f"{', '.join(tokens)} is read by the transformer's trainer itself (no loader "
                'is involved): give it loaders = ["native"]'
            )
        for loader in values:
            _taken_by_every("loaders", loader, info.data.get("frameworks", []))
            synthetic = [d for d in info.data.get("datasets", []) if d in SYNTHETIC]
            if loader != "native" and synthetic:
                real = [d for d in DATASETS if d not in SYNTHETIC]
                raise ValueError(
                    f"loader {loader!r} reads data, and {', '.join(synthetic)} has none (it is "
                    "made on the device: no loader is involved); give synthetic datasets a "
                    f'spec of their own with loaders = ["native"], or use {loader} with '
                    f"{', '.join(real)}"
                )
            arrays = [d for d in info.data.get("datasets", []) if d != "imagenet"]
            if loader in FOLDER_LOADERS and arrays:
                raise ValueError(
                    f"loader {loader!r} decodes JPEG folders (dataset imagenet), and "
                    f"{', '.join(arrays)} is held as arrays: give it a spec of its own with "
                    'loaders = ["native"] or ["dali"]'
                )
        return values

    @field_validator("models")
    @classmethod
    def _models(cls, values: list[str], info: ValidationInfo) -> list[str]:
        if all_declared(info.data.get("frameworks", [])):
            return [free_name("model", v) for v in values]
        return [_one_of("model", v, MODELS) for v in values]

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, values: list[str], info: ValidationInfo) -> list[str]:
        if all_declared(info.data.get("frameworks", [])):
            return [free_name("dataset", v) for v in values]
        values = [_one_of("dataset", v, DATASETS) for v in values]
        for dataset in values:
            _taken_by_every("datasets", dataset, info.data.get("frameworks", []))
        return values

    @field_validator("per_device_batch", "global_batch", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("scales", mode="before")
    @classmethod
    def _scale_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, dict)) else value

    @model_validator(mode="after")
    def _batches(self) -> Experiment:
        if self.scaling == "weak":
            if self.per_device_batch is None or self.global_batch is not None:
                raise ValueError("weak scaling takes per_device_batch (and no global_batch)")
        else:
            if self.global_batch is None or self.per_device_batch is not None:
                raise ValueError("strong scaling takes global_batch (and no per_device_batch)")
            for g in self.global_batch:
                for s in self.scales:
                    if g % s.devices:
                        raise ValueError(
                            f"global_batch {g} does not split evenly over scale "
                            f"{s} ({s.devices} devices)"
                        )
                    if g // s.devices > MAX_BATCH:
                        raise ValueError(
                            f"global_batch {g} is {g // s.devices} images per "
                            f"device at scale {s}, more than {MAX_BATCH}: "
                            f"{BATCH_WHY}"
                        )
        if all_declared(self.frameworks):
            return self
        if self.axes:
            raise ValueError("axes are for declared frameworks ([frameworks.NAME] tables)")
        for model in self.models:
            if not any(model_fits_dataset(model, d) for d in self.datasets):
                raise ValueError(
                    f"model {model} fits none of the datasets "
                    f"{', '.join(self.datasets)} (CIFAR ResNets take 32x32 data: "
                    "synthetic-cifar, cifar10, digits; ImageNet ResNets take "
                    "synthetic-imagenet, imagenet; the transformers "
                    f"({', '.join(GPT_MODELS)}) take {', '.join(TOKEN_DATASETS)})"
                )
        return self


class Spec(StrictModel):
    experiment: Experiment
    training: Training
    options: Options = Field(default_factory=Options)  # type: ignore[valid-type]
    # Declared frameworks: the user's own scripts (engine/config/custom.py).
    frameworks: dict[StrictStr, Declared] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _declarations(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        # The experiment's checks see the frameworks this spec declares (custom.declared).
        with declaring(data, (info.context or {}).get("folder")):
            if isinstance(data, dict) and "training" not in data and declared_uses() is not None:
                data = {**data, "training": {}}  # a script's own recipe: [training] optional
            return handler(data)

    _names = field_validator("frameworks")(classmethod(lambda cls, v: check_names(v, FRAMEWORKS)))

    @field_validator("training", mode="before")
    @classmethod
    def _one_schedule_source(cls, value: Any, info: ValidationInfo) -> Any:
        exp = info.data.get("experiment")
        if (
            isinstance(value, dict)
            and "lr_schedule" in value
            and exp is not None
            and exp.lr_schedules is not None
        ):
            raise ValueError(
                f"lr_schedule = {value['lr_schedule']!r} and experiment.lr_schedules = "
                f"{exp.lr_schedules!r} are both given; keep experiment.lr_schedules (one set "
                "of runs per schedule) or training.lr_schedule (one schedule for every run)"
            )
        return value

    def options_for(self, framework: str) -> dict[str, bool | int | str]:
        """The options the spec sets for a framework, defaults left out: a run's id
        changes only when an option really changes what the run does."""
        if framework not in FRAMEWORKS:  # a declared framework has no options
            return {}
        table = self.options.model_dump().get(framework) or {}
        defaults = {o.name: o.default for o in FRAMEWORKS[framework].options}
        return {k: v for k, v in table.items() if v != defaults.get(k)}

    @model_validator(mode="after")
    def _recipe_fits_data(self) -> Spec:
        t = self.training
        for problem in unset_lengths(self.frameworks, t):
            raise ValueError(problem)
        real = [d for d in self.experiment.datasets if d not in (*SYNTHETIC, *TOKEN_DATASETS)]
        synthetic = [d for d in self.experiment.datasets if d in (*SYNTHETIC, *TOKEN_DATASETS)]
        if synthetic and t.epochs is not None:
            raise ValueError(f"{', '.join(synthetic)} has no epochs; use training.steps")
        if t.target_accuracy is not None and not real:
            raise ValueError(
                "training.target_accuracy needs a real dataset (digits, cifar10, imagenet)"
            )
        if "cifar10" in self.experiment.datasets and not t.data_dir:
            raise ValueError(
                "dataset cifar10 needs training.data_dir (the extracted "
                "cifar-10-batches-py folder: `dlscale data fetch cifar10`)"
            )
        if "imagenet" in self.experiment.datasets and not t.data_dir:
            raise ValueError(
                "dataset imagenet needs training.data_dir (the folder holding "
                "train/ and val/; `dlscale data sample imagenet DIR` writes a "
                "small one)"
            )
        self._fsdp_fits()
        for fw in self.experiment.frameworks:
            mode = self.options_for(fw).get("compile_mode")
            if mode is not None and not t.compile:
                raise ValueError(
                    f"options.{fw}.compile_mode = {mode!r} needs training.compile = true"
                )
        return self

    def _fsdp_fits(self) -> None:
        """FSDP's tensor-parallel degree splits each node's ranks; its own mixed precision
        computes in a half precision."""
        if "pytorch-fsdp" not in self.experiment.frameworks:
            return
        options = self.options_for("pytorch-fsdp")
        tp = options.get("tensor_parallel", 1)
        assert isinstance(tp, int)
        for scale in self.experiment.scales:
            if scale.ranks_per_node % tp:
                raise ValueError(
                    f"options.pytorch-fsdp.tensor_parallel = {tp} is a degree inside a node, "
                    f"and scale {scale} has {scale.ranks_per_node} rank(s) per node; give "
                    f"scales with a multiple of {tp} ranks per node"
                )
        if tp > 1 and not set(self.experiment.models) <= set(GPT_MODELS):
            raise ValueError(
                f"options.pytorch-fsdp.tensor_parallel = {tp} splits a transformer's blocks; "
                f"the models must be transformers ({', '.join(GPT_MODELS)})"
            )
        full = [p for p in self.experiment.precisions if p in ("fp32", "tf32")]
        if options.get("mixed_precision") and full:
            raise ValueError(
                "options.pytorch-fsdp.mixed_precision = true computes in bf16 or fp16; "
                f"the precisions include {', '.join(full)}"
            )


class LoadedSpec(BaseModel):
    """A validated spec plus where it came from (the text is kept with every run)."""

    model_config = ConfigDict(frozen=True)
    path: str
    text: str
    spec: Spec

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


def load_spec(path: str | Path) -> LoadedSpec:
    text, spec = load_toml_model(path, Spec, {"folder": str(Path(path).absolute().parent)})
    return LoadedSpec(path=str(path), text=text, spec=spec)
