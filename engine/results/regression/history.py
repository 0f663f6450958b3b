"""The history of `dlscale check`: every check's result for every point, one JSON line
each, appended to a file the CI job keeps (`--history FILE`), so each point has a series
over time (its site, the label or commit the check was given, the date). From it:
- a baseline: the last N checks of the same point at the same site (`--window N`), as
  Bencher's thresholds take a window of past results (decide.window);
- change points over each point's series (changepoints.py), as Apache Otava reports them.

A line is whole or absent: each is written with one append. A line that is not a valid
entry is bad input (exit 2, the file, the line and the field named), never skipped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ...config.quantities import RATIO, RATIO_BOUND, SLOWDOWN, THROUGHPUT
from ...errors import UserError
from ...io.outputs import append_lines
from ...io.reading import load_json, read_text

LIMIT = 256 << 20  # a point's line is under 1 KiB: a quarter of a million checks and more


class Entry(BaseModel):
    """One point's result in one check."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    date: str  # ISO 8601, UTC
    label: str  # the commit, version or text the check was given (--label), else the date
    site: str
    experiment: str
    point: str  # check.point_name
    device: str | None = None
    unit: str = "images"
    statistic: str
    values: list[THROUGHPUT.field()]  # type: ignore[valid-type]  # this check's runs, one each
    value: THROUGHPUT.field(optional=True)  # type: ignore[valid-type]  # their mean: the series'
    outcome: str
    reference: str | None = None  # what it was checked against
    ratio: RATIO.field(optional=True) = None  # type: ignore[valid-type]
    low: RATIO_BOUND.field(optional=True) = None  # type: ignore[valid-type]
    high: RATIO_BOUND.field(optional=True) = None  # type: ignore[valid-type]
    # made with the test-only DLSCALE_TEST_SLOWDOWN
    test_slowdown: SLOWDOWN.field(optional=True) = None  # type: ignore[valid-type]

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        """A series: one point at one site on one device, judged by one measure."""
        return (self.site, self.point, self.device, self.statistic)


@dataclass(frozen=True)
class History:
    path: Path
    entries: list[Entry]

    def series(self, site: str, point: str, device: str | None, statistic: str) -> list[Entry]:
        """The point's checks by one measure, in the order they were made (the file's)."""
        key = (site, point, device, statistic)
        return [e for e in self.entries if e.key == key and e.value]


def read(path: str | Path) -> History:
    """The history file's entries; a file not there yet is an empty history."""
    path = Path(path)
    try:
        text = read_text(path, LIMIT)
    except FileNotFoundError:
        return History(path, [])
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--history {path}: cannot be read ({exc})") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(Entry.model_validate(load_json(line)))  # bounded (engine/io/reading.py)
        except ValueError as exc:
            raise UserError(f"{path}:{number}: {_why(exc)}") from None
    return History(path, entries)


def _why(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "the line"
        msg = first["msg"].removeprefix("Value error, ")
        return f"{field}: {msg} (got {first['input']!r}; a line of `dlscale check --history`)"
    return f"not a JSON line ({exc}); each line is one point of one check"


def append(path: str | Path, entries: list[Entry]) -> None:
    """Add this check's entries, each line with one write, so a killed check leaves whole
    lines (O_APPEND: two checks writing at once interleave lines, not bytes)."""
    if not entries:
        return
    lines = [json.dumps(e.model_dump(), sort_keys=True, allow_nan=False) + "\n" for e in entries]
    append_lines(path, lines, "--history")  # the one writer: never through a link


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
