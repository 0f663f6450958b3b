"""Declared frameworks: a user's own training script, declared in the spec's
`[frameworks.NAME]` table, run and measured like the built-in frameworks (docs/custom.md).

A declaration names the command as an argv list whose elements may hold placeholders
(`{nodes}`, `{global_batch}`, an `[experiment.axes]` name...), filled per run with
str.format_map on each element, never through a shell; the launcher that starts it (srun:
one task per device, torchrun: one per node, mpirun); its software (a venv, modules, a
container, as a profile's environments); its unit; and how it reports: `[frameworks.NAME.log]`
patterns read from the run's log (engine/tracking/log_patterns.py), or else the records the
script writes itself (trainers/report.py). With `[frameworks.NAME.comm]` giving its model's
parameter count, a study's communication benchmark times an allreduce of that gradient with
the declaration's own launcher and software (dlscale's PyTorch trainer in --comm-benchmark
mode, over the process group torchrun or srun sets up).

The spec's experiment checks (spec.py) ask `declared()` which names the spec being
validated declares: a context variable set around the whole spec's validation, so every
way a spec is validated (a file, the Build screen's form) sees its own declarations.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from ..io.text import quoted
from .software import Software
from .tomlfile import Number, StrictModel, limit

UNITS = ("images", "samples", "tokens")
LAUNCHERS = ("srun", "torchrun", "mpirun")
# What every run fills in; an [experiment.axes] name adds one more.
PLACEHOLDERS = (
    "nodes",
    "ranks_per_node",
    "devices",
    "per_device_batch",
    "global_batch",
    "precision",
    "model",
    "dataset",
    "steps",
    "epochs",
    "warmup_steps",
    "lr",
    "seed",
    "threads",
    "repetition",
    "run_id",
    "run_dir",
    "metrics",
    "device",
    "python",
    "script",
)
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
AXIS_NAME = r"^[a-z_][a-z0-9_]{0,31}$"


@contextmanager
def declaring(data: Any, folder: str | None) -> Iterator[None]:
    """While a spec's raw data is validated: its declared names, its axes' names and the
    folder relative paths are taken from."""
    tables = data.get("frameworks") if isinstance(data, dict) else None
    exp = data.get("experiment") if isinstance(data, dict) else None
    axes = exp.get("axes") if isinstance(exp, dict) else None
    token = _SPEC.set(
        {
            "names": list(tables) if isinstance(tables, dict) else [],
            "axes": list(axes) if isinstance(axes, dict) else [],
            "folder": folder or ".",
            "uses": _raw_uses(exp, tables),
        }
    )
    try:
        yield
    finally:
        _SPEC.reset(token)


_SPEC: ContextVar[dict[str, Any]] = ContextVar("dlscale_spec")


def declared() -> list[str]:
    """The framework names the spec under validation declares."""
    return list(_SPEC.get({}).get("names", []))


def declared_uses() -> set[str] | None:
    """The placeholders the commands (and units_per_step) of the spec under validation use,
    where every framework it runs is declared; None where it runs a built-in one. What a
    script needs of `[training]` is only what these name (Training's checks ask)."""
    return _SPEC.get({}).get("uses")


def _raw_uses(exp: Any, tables: Any) -> set[str] | None:
    names = exp.get("frameworks") if isinstance(exp, dict) else None
    if not (isinstance(names, list) and names and isinstance(tables, dict)):
        return None
    used: set[str] = set()
    for name in names:
        decl = tables.get(name) if isinstance(name, str) else None
        if not isinstance(decl, dict):
            return None  # a built-in framework (or a mistake the experiment's checks name)
        log = decl.get("log")
        log = log if isinstance(log, dict) else {}
        for text in [*_texts(decl.get("command")), *_texts(log.get("units_per_step"))]:
            try:
                used.update(fields_in(text))
            except ValueError:  # a lone brace: the command's own check says so
                continue
    return used


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def uses(decl: Declared) -> set[str]:
    """The placeholders a declaration's command and its log's units_per_step name."""
    texts = [*decl.command, *(decl.log.units_per_step if decl.log else [])]
    return {name for text in texts for name in fields_in(text)}


def all_declared(frameworks: list[str]) -> bool:
    """Whether a spec's frameworks are declared ones; a spec holds declared frameworks or
    built-in ones, never both (their models and datasets mean different things)."""
    names = declared()
    ours = [f for f in frameworks if f in names]
    if ours and len(ours) != len(frameworks):
        builtin = [f for f in frameworks if f not in names]
        raise ValueError(
            f"declared frameworks ({', '.join(ours)}) and built-in ones "
            f"({', '.join(builtin)}) in one spec: give each a spec of its own"
        )
    return bool(ours)


def fields_in(text: str) -> list[str]:
    """The placeholders of one argv element ("{{" is a literal brace)."""
    try:
        return [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise ValueError(f"{text!r}: {exc} (write a literal brace as {{{{ or }}}})") from None


def check_placeholders(text: str) -> str:
    """One argv element whose placeholders are all known: the run's, the spec's axes'."""
    allowed = [*PLACEHOLDERS, *_SPEC.get({}).get("axes", [])]
    for name in fields_in(text):
        if name not in allowed:
            raise ValueError(
                f"unknown placeholder {{{name}}}; allowed: "
                + ", ".join(f"{{{a}}}" for a in allowed)
            )
    return text


# An argv element (or a factor of units_per_step), its placeholders checked.
Filled = Annotated[StrictStr, AfterValidator(check_placeholders)]


def _regex(value: str | None, groups: int = 1) -> str | None:
    if value is None:
        return None
    try:
        pattern = re.compile(value)
    except re.error as exc:
        raise ValueError(f"{quoted(value)} is not a regular expression: {exc}") from None
    if pattern.groups < groups:
        raise ValueError(
            f"{quoted(value)} captures nothing: put the number in a group, e.g. "
            "([0-9.]+) or (?P<value>[0-9.]+)"
        )
    return value


class LogReport(StrictModel):
    """Zero-change reporting: patterns applied to each line of the run's log. Each captures
    one number, in the group named `value` or else the first group."""

    throughput: StrictStr | None = None  # units a second
    throughput_per: Literal["device", "total"] = "total"
    step_time: StrictStr | None = None  # seconds (or step_time_unit) a step
    step_time_unit: Literal["s", "ms"] = "s"
    # A step's units, for step times: the product of these (placeholders allowed).
    units_per_step: list[Filled] = Field(default=["{global_batch}"], min_length=1)
    loss: StrictStr | None = None
    accuracy: StrictStr | None = None  # a fraction, or a percentage above 1
    epoch: StrictStr | None = None
    # The step number a line reports ("step 200 ..."): a log that prints every N steps has
    # each measured line count the steps since the one before, not one step.
    step: StrictStr | None = None
    warmup_lines: limit(StrictInt, "no run prints that many lines", ge=0, le=10**9) = 0  # type: ignore[valid-type]
    warmup_until: StrictStr | None = None  # lines before its first match are warm-up
    # A line the script prints once its measurement is complete: a run whose log holds it
    # is COMPLETED even where its process then dies (marked with its exit status).
    complete_when: StrictStr | None = None

    _patterns = field_validator(
        "throughput", "step_time", "loss", "accuracy", "epoch", "step", "warmup_until"
    )(classmethod(lambda cls, v: _regex(v)))
    _final = field_validator("complete_when")(classmethod(lambda cls, v: _regex(v, groups=0)))

    @model_validator(mode="after")
    def _one_measure(self) -> LogReport:
        if (self.throughput is None) == (self.step_time is None):
            raise ValueError("give exactly one of throughput (units a second) or step_time")
        return self


class CommDeclared(StrictModel):
    """`[frameworks.NAME.comm]`: what the communication benchmark needs of a script's model.
    Its gradient, as fp32 elements, is allreduced in DDP's buckets."""

    parameters: StrictInt = Field(ge=1, le=10**13)  # the model's trainable parameters


# What the communication benchmark of a declared framework runs, with its launcher and
# software: dlscale's PyTorch trainer, timing a gradient of the declared size. The software
# needs torch (and numpy); dlscale.trainers comes on PYTHONPATH, as for the records module.
COMM_COMMAND = [
    "{python}", "-m", "dlscale.trainers.torch_ddp", "--comm-benchmark",
    "--model", "resnet20", "--dataset", "synthetic-cifar",  # required flags; unused
    "--per-device-batch", "{per_device_batch}", "--precision", "{precision}",
    "--device", "{device}", "--steps", "1", "--run-id", "{run_id}", "--output", "{metrics}",
]  # fmt: skip


class Declared(StrictModel):
    """One `[frameworks.NAME]` table."""

    command: list[Filled] = Field(min_length=1)
    script: StrictStr | None = None  # checked to exist; {script} is its absolute path
    launcher: Literal[LAUNCHERS] = "srun"  # type: ignore[valid-type]
    unit: Literal[UNITS] = "samples"  # type: ignore[valid-type]
    software: Software = Field(default_factory=Software)
    log: LogReport | None = None  # absent: the script writes records (trainers/report.py)
    comm: CommDeclared | None = None  # absent: no communication benchmark of its own
    description: StrictStr = ""
    # When a run counts as complete: its job's exit status 0 ("exit"), or its summary record
    # written ("records"), whatever its process does after it (log patterns say it with
    # log.complete_when, a pattern of their last line).
    complete_when: Literal["exit", "records"] = "exit"

    @field_validator("complete_when")
    @classmethod
    def _records_need_no_log(cls, value: str, info) -> Any:
        if value == "records" and info.data.get("log") is not None:
            raise ValueError(
                "with a [log] table its records are made from the log: say when its "
                "measurement is complete with log.complete_when, a pattern of its last line"
            )
        return value

    @field_validator("comm")
    @classmethod
    def _comm_needs_a_process_group(cls, value: CommDeclared | None, info) -> Any:
        launcher = info.data.get("launcher")
        if value is not None and launcher == "mpirun":
            raise ValueError(
                "the communication benchmark runs over torch's process group, which torchrun "
                'or srun sets up; with launcher = "mpirun" leave [comm] out'
            )
        return value

    @field_validator("script")
    @classmethod
    def _script_exists(cls, value: str | None) -> str | None:
        if value is not None and not script_path(value, _SPEC.get({}).get("folder")).is_file():
            raise ValueError(
                f"no such file: {value!r} (taken from the spec's folder "
                f"{_SPEC.get({}).get('folder', '.')})"
            )
        return value


def comm_declaration(decl: dict[str, Any]) -> dict[str, Any]:
    """What a declaration (as a run's recipe holds it) runs for its communication benchmark:
    the same launcher and software, COMM_COMMAND with its gradient's size, read as records."""
    command = [*COMM_COMMAND, "--gradient-elements", str(decl["comm"]["parameters"])]
    return {**decl, "command": command, "script": None, "log": None}


def anchored(data: dict[str, Any], folder: str | Path) -> dict[str, Any]:
    """The spec's data with each declaration's relative script and venv made absolute from
    the spec's `folder`: the form that edits it saves elsewhere (or submits from beside the
    store), where a relative path would name another file."""
    tables = data.get("frameworks")
    if not isinstance(tables, dict):
        return data
    out = {**data, "frameworks": dict(tables)}
    for name, decl in tables.items():
        if not isinstance(decl, dict):
            continue
        decl = out["frameworks"][name] = dict(decl)
        if isinstance(decl.get("script"), str):
            decl["script"] = str(script_path(decl["script"], str(folder)))
        sw = decl.get("software")
        if isinstance(sw, dict) and isinstance(sw.get("venv"), str):
            decl["software"] = {**sw, "venv": str(script_path(sw["venv"], str(folder)))}
    return out


def script_path(script: str, folder: str | None) -> Path:
    """A declaration's script or venv as a path: `~` expanded, relative ones taken from the
    spec's folder."""
    path = Path(script).expanduser()
    return path if path.is_absolute() else Path(folder or ".").resolve() / path


AxisValue = Number | StrictStr


def check_axes(axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
    for name, values in axes.items():
        if not re.fullmatch(AXIS_NAME, name):
            raise ValueError(f"axis {name!r}: names are lower case letters, digits and _")
        if name in PLACEHOLDERS:
            raise ValueError(f"axis {name!r} is a placeholder every run fills in already")
        if not values:
            raise ValueError(f"axis {name!r} has no values")
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"axis {name!r} repeats a value (each value is one set of runs)")
    return axes


def unset_lengths(declared: dict[str, Declared], training: Any) -> list[str]:
    """`{steps}` where the spec gives epochs or no length at all, and `{epochs}` likewise:
    the placeholder would have no value; one line per declaration and placeholder."""
    out = []
    for name, decl in declared.items():
        for length in ("steps", "epochs"):
            if length not in uses(decl) or getattr(training, length) is not None:
                continue
            other = "epochs" if length == "steps" else "steps"
            field = "command" if any(length in fields_in(t) for t in decl.command) else "log"
            gives = (
                f"training gives {other}"
                if getattr(training, other) is not None
                else f"[training] gives no {length}: add {length} = N there"
            )
            out.append(f"frameworks.{name}.{field} uses {{{length}}}, and {gives}")
    return out


def free_name(kind: str, value: str) -> str:
    """A declared framework's model or dataset: any name a run's label can carry."""
    if not re.fullmatch(NAME, value):
        raise ValueError(f"{kind} {value!r}: letters, digits and ._- only (at most 64)")
    return value


def check_names(declared: dict[str, Any], builtin: Any) -> dict[str, Any]:
    """Declared names: not a built-in framework's, and fit for a run's label."""
    for name in declared:
        if name in builtin:
            raise ValueError(f"{name!r} is a built-in framework; name yours otherwise")
        free_name("framework", name)
    return declared


def declared_names(data: dict[str, Any]) -> list[str]:
    """The frameworks a spec's raw data declares (for the Build screen's list)."""
    tables = data.get("frameworks") if isinstance(data, dict) else None
    return [n for n in tables if isinstance(n, str)] if isinstance(tables, dict) else []
