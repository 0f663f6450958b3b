"""Experiment specs: TOML files validated by pydantic, errors reported as file:line: field.

A spec names the matrix (frameworks x models x datasets x scales x batches x precisions x
loaders) and the training recipe shared by every run. Types are strict: TOML has types, so
`per_device_batch = "64"` is a mistake worth reporting, not something to coerce.
"""
from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat,
                      StrictInt, StrictStr, ValidationError, ValidationInfo, create_model,
                      field_validator, model_validator)

from ..trainers.common.args import (CIFAR_MODELS, DATASETS, IMAGENET_MODELS, LOADERS,
                                    LR_SCALING, LR_SCHEDULES, MODELS, PRECISIONS)
from ..trainers.common.data import SHAPES, SYNTHETIC
from .errors import SpecError
from .frameworks import FRAMEWORKS, Option, available, taking

Number = StrictFloat | StrictInt


def _one_of(kind: str, value: str, allowed: list[str] | tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {kind} {value!r}; allowed: {', '.join(allowed)}")
    return value


# Named by the studies (examples/studies/), not runnable yet. A spec naming one loads only
# for planning (load_spec(..., planning=True)): it parses and expands into runs, so a study's
# whole matrix can be seen, but it is never submitted. Frameworks say the same through
# FRAMEWORKS[...].available. Empty while every dataset and loader named has a reader.
PLANNED_DATASETS: dict[str, str] = {}
PLANNED_LOADERS: dict[str, str] = {}
_IMAGE_SIZE = {name: shape.size for name, shape in SHAPES.items()}


def _runnable(kind: str, value: str, runnable: list[str] | tuple[str, ...],
              planned: dict[str, str], info: ValidationInfo) -> str:
    """A value dlscale can run; or, while planning, one it will run once written."""
    if value in runnable:
        return value
    if value in planned:
        if (info.context or {}).get("planning"):
            return value
        raise ValueError(f"{kind} {value!r} cannot run yet: {planned[value]}; available "
                         f"now: {', '.join(runnable)}")
    raise ValueError(f"unknown {kind} {value!r}; allowed: {', '.join([*runnable, *planned])}")


def _taken_by_every(what: str, value: str, frameworks: list[str]) -> None:
    """A dataset or loader (`what`: "datasets", "loaders") must be one every framework's
    trainer takes; else say which trainers take it and what this one takes."""
    for fw in frameworks:
        theirs = getattr(FRAMEWORKS[fw], what)
        if value not in theirs:
            raise ValueError(
                f"{what[:-1]} {value!r} is taken only by the {', '.join(taking(what, value))} "
                f"trainers, not by {fw}'s (its {what}: {', '.join(theirs)}); give {fw} a spec "
                "of its own" + (' with loaders = ["native"]' if what == "loaders" else ""))


def model_fits_dataset(model: str, dataset: str) -> bool:
    """CIFAR ResNets take 32x32 images; ImageNet ResNets take 224x224."""
    size = _IMAGE_SIZE[dataset]
    return (model in CIFAR_MODELS and size == 32) or (model in IMAGENET_MODELS and size == 224)


class StrictModel(BaseModel):
    """TOML has types, so values are taken as typed; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Scale(StrictModel):
    nodes: StrictInt = Field(ge=1, le=100_000)
    ranks_per_node: StrictInt = Field(ge=1, le=1024)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        # "2x4" reads as 2 nodes x 4 ranks (GPUs or CPU ranks) per node.
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+)\s*[x×]\s*(\d+)\s*", value)
            if not m:
                raise ValueError(f"scale {value!r} is not NODESxRANKS, e.g. \"1x2\"")
            return {"nodes": int(m[1]), "ranks_per_node": int(m[2])}
        return value

    @property
    def devices(self) -> int:
        return self.nodes * self.ranks_per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.ranks_per_node}"


class Training(StrictModel):
    steps: StrictInt | None = Field(default=None, ge=1)
    epochs: StrictInt | None = Field(default=None, ge=1)
    warmup_steps: StrictInt = Field(default=5, ge=0)
    lr: Number = Field(default=0.1, gt=0)
    lr_base_batch: StrictInt = Field(default=128, ge=1)
    lr_scaling: Literal[LR_SCALING] = "linear"  # type: ignore[valid-type]
    lr_warmup_epochs: Number = Field(default=0.0, ge=0)
    lr_schedule: Literal[LR_SCHEDULES] = "constant"  # type: ignore[valid-type]
    momentum: Number = Field(default=0.9, ge=0, lt=1)
    weight_decay: Number = Field(default=5e-4, ge=0)
    target_accuracy: Number | None = Field(default=None, gt=0, le=1)
    eval_every: StrictInt = Field(default=1, ge=1)
    log_every: StrictInt = Field(default=10, ge=1)
    threads_per_rank: StrictInt = Field(default=1, ge=1)
    seed: StrictInt = 0
    compile: StrictBool = False
    memory_format: Literal["auto", "channels_last", "contiguous"] = "auto"
    loader_workers: StrictInt = Field(default=0, ge=0)
    data_dir: StrictStr | None = None
    inject_fault: StrictStr | None = Field(default=None, pattern=r"^crash@step\d+$")

    @field_validator("data_dir")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        # `~` is the submitting user's home: expanded here, because the trainer gets the
        # path as one quoted argument that no shell expands.
        return os.path.expanduser(value) if value else value

    @model_validator(mode="after")
    def _one_length(self) -> "Training":
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps (timed steps after warm-up) or epochs")
        return self


class Experiment(StrictModel):
    name: StrictStr = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: StrictStr = ""
    frameworks: list[StrictStr] = Field(min_length=1)
    models: list[StrictStr] = Field(min_length=1)
    datasets: list[StrictStr] = Field(min_length=1)
    scales: list[Scale] = Field(min_length=1)
    per_device_batch: list[StrictInt] | None = Field(default=None, min_length=1)
    global_batch: list[StrictInt] | None = Field(default=None, min_length=1)
    scaling: Literal["weak", "strong"] = "weak"
    precisions: list[Literal[PRECISIONS]] = ["auto"]  # type: ignore[valid-type]
    loaders: list[StrictStr] = Field(default=["native"], min_length=1)
    repetitions: StrictInt = Field(default=3, ge=1, le=100)

    @field_validator("frameworks")
    @classmethod
    def _frameworks(cls, values: list[str], info: ValidationInfo) -> list[str]:
        planned = {f.name: f.note for f in FRAMEWORKS.values() if not f.available}
        return [_runnable("framework", v, available(), planned, info) for v in values]

    @field_validator("loaders")
    @classmethod
    def _loaders(cls, values: list[str], info: ValidationInfo) -> list[str]:
        values = [_runnable("loader", v, LOADERS, PLANNED_LOADERS, info) for v in values]
        for loader in values:
            _taken_by_every("loaders", loader, info.data.get("frameworks", []))
            synthetic = [d for d in info.data.get("datasets", []) if d in SYNTHETIC]
            if loader != "native" and synthetic:
                real = [d for d in DATASETS if d not in SYNTHETIC]
                raise ValueError(
                    f"loader {loader!r} reads data, and {', '.join(synthetic)} has none (it is "
                    "made on the device: no loader is involved); give synthetic datasets a "
                    f"spec of their own with loaders = [\"native\"], or use {loader} with "
                    f"{', '.join(real)}")
        return values

    @field_validator("models")
    @classmethod
    def _models(cls, values: list[str]) -> list[str]:
        return [_one_of("model", v, MODELS) for v in values]

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, values: list[str], info: ValidationInfo) -> list[str]:
        values = [_runnable("dataset", v, DATASETS, PLANNED_DATASETS, info) for v in values]
        for dataset in values:
            _taken_by_every("datasets", dataset, info.data.get("frameworks", []))
        return values

    @field_validator("per_device_batch", "global_batch", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("per_device_batch", "global_batch")
    @classmethod
    def _positive(cls, values: list[int] | None) -> list[int] | None:
        for v in values or []:
            if v < 1:
                raise ValueError(f"batch {v} is not a positive integer")
        return values

    @field_validator("scales", mode="before")
    @classmethod
    def _scale_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, dict)) else value

    @model_validator(mode="after")
    def _batches(self) -> "Experiment":
        if self.scaling == "weak":
            if self.per_device_batch is None or self.global_batch is not None:
                raise ValueError("weak scaling takes per_device_batch (and no global_batch)")
        else:
            if self.global_batch is None or self.per_device_batch is not None:
                raise ValueError("strong scaling takes global_batch (and no per_device_batch)")
            for g in self.global_batch:
                for s in self.scales:
                    if g % s.devices:
                        raise ValueError(f"global_batch {g} does not split evenly over scale "
                                         f"{s} ({s.devices} devices)")
        for model in self.models:
            if not any(model_fits_dataset(model, d) for d in self.datasets):
                raise ValueError(f"model {model} fits none of the datasets "
                                 f"{', '.join(self.datasets)} (CIFAR ResNets take 32x32 data: "
                                 "synthetic-cifar, cifar10, digits; ImageNet ResNets take "
                                 "synthetic-imagenet, imagenet)")
        return self


def _option_type(opt: Option) -> Any:
    if isinstance(opt.default, bool):
        return StrictBool

    def allowed(value: int) -> int:
        if opt.allowed and value not in opt.allowed:
            raise ValueError(f"allowed: {', '.join(map(str, opt.allowed))}")
        return value
    # StrictInt first: a Literal[0, 1, 2] would take `true` as 1.
    return Annotated[StrictInt, AfterValidator(allowed)]


# `[options.FRAMEWORK]` tables, one model per framework with knobs of its own, built from
# the frameworks table so a new option needs no change here; unknown frameworks and keys
# are reported with what is allowed, at their line.
Options = create_model("Options", __base__=StrictModel, **{
    fw.name: (create_model(f"Options_{fw.name}", __base__=StrictModel, **{
        opt.name: (_option_type(opt), Field(default=opt.default, description=opt.help))
        for opt in fw.options}), Field(default=None))
    for fw in FRAMEWORKS.values() if fw.options})


class Spec(StrictModel):
    experiment: Experiment
    training: Training
    options: Options = Field(default_factory=Options)  # type: ignore[valid-type]

    def options_for(self, framework: str) -> dict[str, bool | int]:
        """The options the spec sets for a framework, defaults left out: a run's id
        changes only when an option really changes what the run does."""
        table = self.options.model_dump().get(framework) or {}
        defaults = {o.name: o.default for o in FRAMEWORKS[framework].options}
        return {k: v for k, v in table.items() if v != defaults.get(k)}

    @model_validator(mode="after")
    def _recipe_fits_data(self) -> "Spec":
        t = self.training
        real = [d for d in self.experiment.datasets if d not in SYNTHETIC]
        synthetic = [d for d in self.experiment.datasets if d in SYNTHETIC]
        if synthetic and t.epochs is not None:
            raise ValueError(f"{', '.join(synthetic)} has no epochs; use training.steps")
        if t.target_accuracy is not None and not real:
            raise ValueError("training.target_accuracy needs a real dataset (digits, cifar10, "
                             "imagenet)")
        if "cifar10" in self.experiment.datasets and not t.data_dir:
            raise ValueError("dataset cifar10 needs training.data_dir (the extracted "
                             "cifar-10-batches-py folder: `dlscale data fetch cifar10`)")
        if "imagenet" in self.experiment.datasets and not t.data_dir:
            raise ValueError("dataset imagenet needs training.data_dir (the folder holding "
                             "train/ and val/; `dlscale data sample imagenet DIR` writes a "
                             "small one)")
        return self


class LoadedSpec(BaseModel):
    """A validated spec plus where it came from (the text is kept with every run)."""

    model_config = ConfigDict(frozen=True)
    path: str
    text: str
    spec: Spec

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


# --- error reporting -------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of a field in the TOML text, from pydantic's location tuple.

    Handles tables (`[training]`), dotted tables (`[environments.pytorch-ddp]`) and arrays
    of tables (`[[partitions]]`, the n-th one for an index), else returns None."""
    parts = [p for p in loc if isinstance(p, int) or not (
        p.startswith("function-") or p in ("str", "dict[str,any]", "list[str]"))]
    lines = text.splitlines()
    for split in range(len(parts), -1, -1):
        head, rest = parts[:split], parts[split:]
        occurrence = None
        if head and isinstance(head[-1], int):
            occurrence, head = head[-1], head[:-1]
        if any(isinstance(h, int) for h in head):
            continue
        table = ".".join(head)
        key = next((r for r in rest if isinstance(r, str)), None)
        if not table:
            for number, line in enumerate(lines, 1):
                if _HEADER.match(line):
                    break
                if key and re.match(rf"^\s*{re.escape(key)}\s*=", line):
                    return number
            continue
        current, seen = "", -1
        for number, line in enumerate(lines, 1):
            header = _HEADER.match(line)
            if header:
                current = ".".join(x.strip().strip('"\'') for x in header[1].split("."))
                if current == table:
                    seen += 1
                    if key is None and occurrence in (None, seen):
                        return number
                continue
            if (key and current == table and occurrence in (None, seen)
                    and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line)):
                return number
    return None


def _describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    kind, msg = err["type"], err["msg"]
    loc = err["loc"]
    if kind == "extra_forbidden":
        parent: Any = model
        for part in loc[:-1]:
            if isinstance(part, str) and isinstance(parent, type) and issubclass(parent, BaseModel):
                ann = parent.model_fields[part].annotation
                parent = ann if isinstance(ann, type) else parent
        allowed = list(parent.model_fields) if isinstance(parent, type) and issubclass(
            parent, BaseModel) else []
        return f"unknown key; allowed keys here: {', '.join(allowed)}"
    if kind == "missing":
        return "required, but missing"
    msg = msg.removeprefix("Value error, ")
    if "input" in err and kind not in ("model_type",) and not isinstance(err["input"], dict):
        msg += f" (got {err['input']!r})"
    return msg


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-") or part in ("str", "dict[str,any]"):
            continue
        else:
            out += ("." if out else "") + part
    return out or "(file)"


def problems_from(path: str, text: str, exc: ValidationError, model: type[BaseModel]) -> list[str]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        line = _line_of(text, loc)
        where = f"{path}:{line}" if line else path
        out.append(f"{where}: {_field(loc)}: {_describe(err, model)}")
    return out


def parse_toml(path: str | Path) -> tuple[str, dict[str, Any]]:
    """Read a TOML file; SpecError (file, line, column) when it is missing or malformed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), [f"{p}: no such file"]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError(str(p), [f"{p}: cannot read ({exc.__class__.__name__}: {exc})"]) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{p}:{m[1]}:{m[2]}" if m else str(p)
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise SpecError(str(p), [f"{where}: invalid TOML: {reason}"]) from None


M = TypeVar("M", bound=BaseModel)


def load_toml_model(path: str | Path, model: type[M],
                    context: dict[str, Any] | None = None) -> tuple[str, M]:
    """Read and validate a TOML file; SpecError with file:line: field for every problem."""
    text, data = parse_toml(path)
    try:
        return text, model.model_validate(data, context=context)
    except ValidationError as exc:
        raise SpecError(str(path), problems_from(str(path), text, exc, model)) from None


def load_spec(path: str | Path, planning: bool = False) -> LoadedSpec:
    """planning=True also takes frameworks, datasets and loaders that cannot run yet
    (PLANNED_*): for seeing a study's whole matrix, never for submitting it."""
    text, spec = load_toml_model(path, Spec, {"planning": True} if planning else None)
    return LoadedSpec(path=str(path), text=text, spec=spec)
