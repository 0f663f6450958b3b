"""Specs as data a form edits: the allowed choices, validation that says which field is
wrong, and writing a spec back to the same TOML the CLI reads.

The TUI's build screen holds a plain dict ({"experiment": {...}, "training": {...}}); this
module is where that dict meets the Spec model, so the form needs no file-format knowledge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError

from ...trainers.common.args import DATASETS, LOADERS, MODELS, PRECISIONS
from ..errors import SpecError
from ..io.outputs import write_file
from .custom import anchored, declared_names
from .frameworks import FRAMEWORKS
from .spec import LoadedSpec, Spec
from .tomlfile import describe, errors_of, field_name, parse_toml, problems_from

CHOICES: dict[str, tuple[str, ...]] = {
    "frameworks": tuple(FRAMEWORKS),
    "models": MODELS,
    "datasets": DATASETS,
    "precisions": PRECISIONS,
    "loaders": LOADERS,
}


def choices(data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """CHOICES for one spec's form: its declared frameworks ([frameworks.NAME], engine/
    config/custom.py) listed after the built-in ones, and, where it declares any, the
    models and datasets it names (a declared framework's are its own words)."""
    names = declared_names(data)
    if not names:
        return CHOICES
    exp = data.get("experiment") if isinstance(data.get("experiment"), dict) else {}
    own = {
        k: tuple(v for v in exp.get(k, []) if isinstance(v, str))  # type: ignore[union-attr]
        for k in ("models", "datasets")
    }
    return {
        **CHOICES,
        "frameworks": (*CHOICES["frameworks"], *names),
        "models": (*CHOICES["models"], *(m for m in own["models"] if m not in MODELS)),
        "datasets": (*CHOICES["datasets"], *(d for d in own["datasets"] if d not in DATASETS)),
    }


@dataclass(frozen=True)
class Problem:
    field: str  # dotted, e.g. "experiment.scales" or "training.steps"; "" for the whole
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _field_of(loc: tuple[Any, ...], kind: str) -> str:
    """The form field a pydantic location belongs to: `experiment.scales[1]` is the scales
    field, and a model-level check has no field of its own."""
    return re.sub(r"\[\d+\].*$", "", field_name(loc, kind)).removesuffix(".(file)")


def check(
    data: dict[str, Any], path: str = "<unsaved spec>"
) -> tuple[LoadedSpec | None, list[Problem]]:
    """Validate a spec dict; the loaded spec, or every problem with the field it is in."""
    try:
        # a declared framework's script is found from the spec's folder
        folder = str(Path(path).resolve().parent) if Path(path).is_file() else None
        spec = Spec.model_validate(data, context={"folder": folder})
    except ValidationError as exc:
        problems = []
        for err in errors_of(exc):
            field = _field_of(tuple(err["loc"]), err["type"])
            problems.append(Problem("" if field == "(file)" else field, describe(err, Spec)))
        return None, problems
    return LoadedSpec(path=path, text=to_toml(data), spec=spec), []


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_toml(data: dict[str, Any]) -> str:
    """The spec as TOML (None values left out: TOML has no null)."""
    head = "# written by dlscale; `dlscale run` and `dlscale-tui` both read it\n"
    return head + tomli_w.dumps(_clean(data))


def read(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """A spec file's raw data, to fill a form, plus its validation problems (file:line:
    field: reason). Unreadable or malformed TOML gives empty data and the reason."""
    try:
        text, data = parse_toml(path)
    except SpecError as exc:
        return {}, exc.problems
    folder = Path(path).absolute().parent
    try:
        Spec.model_validate(data, context={"folder": str(folder)})
    except ValidationError as exc:
        return anchored(form_data(data), folder), problems_from(str(path), text, exc, Spec)
    return anchored(data, folder), []


def form_data(data: dict[str, Any]) -> dict[str, Any]:
    """A spec's data as a form can hold it: each axis of [experiment] a list of plain
    values (a scale may also be a table), anything else in one left out, so a spec that
    does not validate (`frameworks = [["pytorch-ddp"]]`) still fills a form; its problems
    say what was wrong."""
    exp = data.get("experiment")
    if not isinstance(exp, dict):
        return {**data, "experiment": {}} if "experiment" in data else data
    clean = dict(exp)
    for key, value in exp.items():
        if isinstance(value, list):
            clean[key] = [
                v
                for v in value
                if isinstance(v, str | int | float | bool) or (key == "scales" and _flat(v))
            ]
        elif isinstance(value, dict) and not (key == "scales" and _flat(value)):
            del clean[key]
    return {**data, "experiment": clean}


def _flat(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, str | int | float | bool) for v in value.values()
    )


def save(data: dict[str, Any], path: str | Path) -> Path:
    """Write the spec; refuses (SpecError) one that would not load again."""
    p = Path(path)
    loaded, problems = check(data, str(p))
    if loaded is None:
        raise SpecError(str(p), [f"{p}: {pr}" for pr in problems])
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_file(p, loaded.text)  # the one writer: never through a link
