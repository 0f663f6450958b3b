"""TOML files validated by pydantic models (specs, cluster profiles, references), and their
errors as `file:line: field: reason`, one line per problem, naming what is allowed.

TOML has types, so models are strict: `per_device_batch = "64"` is a mistake worth
reporting, not something to coerce. Numbers are bounded to what can run, and the bound's
error says why it is there (`limit`).
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from ..errors import SpecError
from ..io.reading import TEXT_LIMIT, FileTooLarge, NotRegularFile, read_text
from .quantities import normal
from .toml_text import parse_toml_text


def _normal(value: float | int) -> float | int:
    if isinstance(value, float) and not normal(value):
        raise ValueError(
            "a denormal number (below 2.2e-308 in size), which no setting or measurement is"
        )
    return value


# A spec's or profile's number: TOML's float or integer, finite (StrictModel) and normal
# (engine/quantities.py's rule), within the bounds its field gives.
Number = Annotated[StrictFloat | StrictInt, AfterValidator(_normal)]


class StrictModel(BaseModel):
    """Values are taken as typed; unknown keys are errors; TOML's nan and inf are refused
    (no count, rate or fraction a run takes can be either)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def limit(kind: Any, why: str, low_why: str | None = None, **bounds: Any) -> Any:
    """`kind` within `bounds` (ge, gt, le, lt). Past the upper bound the error says `why`
    the bound is there; past the lower one `low_why`, when the reason is not obvious."""

    def check(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            reason = {
                "less_than": why,
                "less_than_equal": why,
                "greater_than": low_why,
                "greater_than_equal": low_why,
            }.get(first["type"])
            if not reason:
                raise
            raise PydanticCustomError(
                first["type"], "{bound}: {why}", {"bound": first["msg"], "why": reason}
            ) from None

    return Annotated[kind, Field(**bounds), WrapValidator(check)]


# --- where a problem is: the field and its line ------------------------------------------

# Parts of pydantic's error locations that name a branch of a union or a validator, not a
# key of the file ("lr.float" is the float branch of lr).
_TAGS = ("str", "int", "float", "bool")
_TAG_PREFIXES = (
    "function-",
    "constrained-",
    "lax-or-strict",
    "list[",
    "dict[",
    "literal[",
    "nullable[",
    "json-or-python[",
)


def _parts(loc: tuple[Any, ...], kind: str = "") -> list[Any]:
    """The keys and indices of a location, branch tags left out (the last part of an
    unknown key is the key, whatever it is called)."""
    keep = len(loc) - 1 if kind == "extra_forbidden" else len(loc)
    return [
        p
        for i, p in enumerate(loc)
        if isinstance(p, int) or i >= keep or not (p in _TAGS or p.startswith(_TAG_PREFIXES))
    ]


def field_name(loc: tuple[Any, ...], kind: str = "") -> str:
    out = ""
    for part in _parts(loc, kind):
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out or "(file)"


_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")


def line_of(text: str, loc: tuple[Any, ...], kind: str = "") -> int | None:
    """The 1-based line of a field in the TOML text, from pydantic's location tuple.

    Handles tables (`[training]`), dotted tables (`[environments.pytorch-ddp]`) and arrays
    of tables (`[[partitions]]`, the n-th one for an index), else returns None."""
    parts = _parts(loc, kind)
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
                if key and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                    return number
            continue
        current, seen = "", -1
        for number, line in enumerate(lines, 1):
            header = _HEADER.match(line)
            if header:
                current = ".".join(x.strip().strip("\"'") for x in header[1].split("."))
                if current == table:
                    seen += 1
                    if key is None and occurrence in (None, seen):
                        return number
                continue
            if (
                key
                and current == table
                and occurrence in (None, seen)
                and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line)
            ):
                return number
    return None


def missing_line(text: str, loc: tuple[Any, ...]) -> int:
    """Where a missing key or table belongs: its table's header, else (a table of the file's
    own) the file's last line, where one is added."""
    for cut in range(len(loc) - 1, 0, -1):
        line = line_of(text, loc[:cut])
        if line is not None:
            return line
    return max(1, len(text.splitlines()))


# --- what the problem is ---------------------------------------------------------------


def _model_at(model: Any, parts: list[Any]) -> Any:
    """The type found at a location (a model, a list, a dict...), following fields, list
    items and dict values; None when the location leaves the models."""
    current = model
    for part in parts:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            return None
    return _unwrap(current)


def _unwrap(annotation: Any) -> Any:
    """`X | None`, `Annotated[X, ...]` -> X (the first model or container of a union)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = next(
                (
                    a
                    for a in args
                    if typing.get_origin(a) in (list, dict)
                    or (isinstance(a, type) and issubclass(a, BaseModel))
                ),
                args[0],
            )
        else:
            return annotation


def _toml_type(value: Any) -> str:
    if isinstance(value, list):
        return (
            "an array of tables"
            if value and all(isinstance(v, dict) for v in value)
            else "an array"
        )
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    )


# What each pattern a text field must match means, in words: an error says these, never the
# regular expression (which a new user cannot read). `worded` registers one.
PATTERN_WORDS: dict[str, str] = {}


def worded(regex: str, words: str) -> str:
    """`regex`, for Field(pattern=...), with what it allows in words ("letters, digits...")."""
    PATTERN_WORDS[regex] = words
    return regex


def describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    kind, msg, loc = err["type"], err["msg"], tuple(err["loc"])
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(str((err.get("ctx") or {}).get("pattern")))
        msg = f"should be {words}" if words else msg
    if kind == "extra_forbidden":
        parent = _model_at(model, _parts(loc, kind)[:-1])
        allowed = (
            list(parent.model_fields)
            if isinstance(parent, type) and issubclass(parent, BaseModel)
            else []
        )
        return f"unknown key; allowed keys here: {', '.join(allowed)}"
    if kind == "missing":
        parts = _parts(loc)
        table = _model_at(model, parts)
        if isinstance(table, type) and issubclass(table, BaseModel):
            return f"required, but missing: add a [{'.'.join(map(str, parts))}] table"
        return "required, but missing"
    if kind == "model_type":
        parts = _parts(loc)
        what = f"a table ([{parts[0]}])" if len(parts) == 1 else "a table"
        got = err.get("input")
        return f"should be {what}, not {_toml_type(got)}" + (
            "" if isinstance(got, (list, dict)) else f" (got {got!r})"
        )
    if kind == "finite_number":
        msg += ": nan and inf are not values a run can use"
    msg = msg.removeprefix("Value error, ")
    if "input" in err and not isinstance(err["input"], dict):
        msg += f" (got {err['input']!r})"
    return msg


def errors_of(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors, one per place: a value no branch of a union takes (`lr = "fast"`:
    neither a float nor an int) is one problem, not one per branch."""
    out: list[dict[str, Any]] = []
    seen = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        clean = tuple(_parts(loc, err["type"]))
        if clean != loc:
            if clean in seen:
                continue
            seen.add(clean)
        out.append(dict(err))
    return out


def problems_from(path: str, text: str, exc: ValidationError, model: type[BaseModel]) -> list[str]:
    out = []
    for err in errors_of(exc):
        loc = tuple(err["loc"])
        line = line_of(text, loc, err["type"])
        if line is None and err["type"] == "missing":
            line = missing_line(text, loc)
        where = f"{path}:{line}" if line else path
        out.append(f"{where}: {field_name(loc, err['type'])}: {describe(err, model)}")
    return out


# --- reading ---------------------------------------------------------------------------


def parse_toml(path: str | Path) -> tuple[str, dict[str, Any]]:
    """Read a TOML file; SpecError (file, line, column) when it is missing, malformed, not
    a regular file (a FIFO, a device), over files.TEXT_LIMIT or nested over TOML_DEPTH."""
    p = Path(path)
    try:
        text = read_text(p)
    except FileNotFoundError:
        raise SpecError(str(p), [f"{p}: no such file"]) from None
    except (NotRegularFile, FileTooLarge) as exc:  # a FIFO, /dev/zero, a folder...
        why = f"{exc}; a spec, profile or reference is read only from {ALLOWED}"
        raise SpecError(str(p), [why]) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # no access, NUL...
        why = f"{p}: cannot read ({exc.__class__.__name__}: {exc})"
        raise SpecError(str(p), [why]) from None
    return text, parse_toml_text(text, str(p))


ALLOWED = f"a regular file of at most {TEXT_LIMIT >> 20} MiB"

M = TypeVar("M", bound=BaseModel)


def load_toml_model(
    path: str | Path, model: type[M], context: dict[str, Any] | None = None
) -> tuple[str, M]:
    """Read and validate a TOML file; SpecError with file:line: field for every problem."""
    text, data = parse_toml(path)
    try:
        return text, model.model_validate(data, context=context)
    except ValidationError as exc:
        raise SpecError(str(path), problems_from(str(path), text, exc, model)) from None
