"""Every number that comes from outside, held to the domain of what it measures: a flag, a
profile's field, a spec's knob, a bundle's row or record, a history line. This is the one
home of that rule; each entry point asks it, in its own words for where the number was:

- finite (no NaN, no infinity: Click's FloatRange and TOML take both);
- normal: 0, or at least the smallest normal float (2.2e-308). A denormal such as 5e-324
  is no measurement, and one divided by it overflows to infinity;
- within the stated physical range of its quantity (the table below), with the reason for
  the bounds: a bandwidth of 1e-300 GB/s or a throughput of 1e-300 a second is no machine's,
  and a projection made from one has no finite answer.

A quantity says why a value is outside it (`Quantity.problem`, None inside) and its domain
in words (`Quantity.rule`), and gives a command-line option its type (`Quantity.option`: a
click.ParamType) and a pydantic field its type (`Quantity.field`), each refusing a value
outside with those words, naming the option or the file and field.
A run's records are read by the record format (trainers/common/records.py), which runs on
compute nodes without the engine: it holds the same rule for their numbers, and its
throughput bounds are the ones THROUGHPUT takes here.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import click

from ...trainers.common.records import MAX_COUNT, MIN_THROUGHPUT

SMALLEST = sys.float_info.min  # the smallest normal float, 2.2250738585072014e-308


def normal(x: float) -> bool:
    """Finite, and 0 or at least the smallest normal float in size."""
    return math.isfinite(x) and (x == 0 or abs(x) >= SMALLEST)


def _shown(x: float) -> str:
    if x == 2**53:
        return "2^53"
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:g}".replace("e-0", "e-").replace("e+0", "e+")


def read(text: str) -> float | str:
    """A number as a command line gives it ("1e3", " 5 ", "nan"), read as Python reads a
    float, in ASCII digits only (float() reads other scripts' too: "١"); else the text,
    which no quantity takes."""
    text = text.strip()
    try:
        return float(text) if text.isascii() else text
    except ValueError:
        return text


@dataclass(frozen=True)
class Quantity:
    """What a number measures, in the user's words, and the range it can take."""

    what: str  # "a device link's bandwidth"
    low: float
    high: float
    unit: str = ""
    whole: bool = False  # a count: a whole number
    high_open: bool = False  # below `high`, not up to it
    why: str = ""  # what the bounds stand for, where it is not plain

    def rule(self) -> str:
        """The domain in words: "a link's bandwidth is a number from 0.001 to 100,000 GB/s
        (...)"."""
        kind = "a whole number" if self.whole else "a number"
        top = f"below {_shown(self.high)}" if self.high_open else f"to {_shown(self.high)}"
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.what} is {kind} from {_shown(self.low)} {top}{unit}" + (
            f" ({self.why})" if self.why else ""
        )

    def problem(self, value: Any) -> str | None:
        """Why `value` is outside the domain, or None when it is inside."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        if isinstance(value, float):  # an int is exact: only its range can fail
            if not math.isfinite(value):
                return "not a finite number"
            if self.whole and not value.is_integer():
                return "not a whole number"
            if not normal(value):
                return f"a denormal number (below {SMALLEST:.2g} in size), which no measurement is"
        inside = self.low <= value and (value < self.high if self.high_open else value <= self.high)
        return None if inside else "out of range"

    def value(self, value: Any) -> Any:
        """A value inside the domain as the engine takes it: an int for a whole quantity,
        a float else (0.0 for -0.0)."""
        return int(value) if self.whole else float(value) + 0.0  # -0.0 + 0.0 is 0.0

    def option(self) -> click.ParamType:
        """The type of a command-line option taking this quantity."""
        return Measure(self)

    def field(self, optional: bool = False) -> Any:
        """The type of a pydantic field taking this quantity: JSON's or TOML's number (not
        a string, not a boolean) inside the domain."""
        from typing import Annotated

        from pydantic import AfterValidator, StrictFloat, StrictInt

        def check(value: Any) -> Any:
            if value is None:
                return value
            problem = self.problem(value)
            if problem is not None:
                raise ValueError(f"{problem}; {self.rule()}")
            return self.value(value)

        kind: Any = StrictFloat | StrictInt
        return Annotated[kind | None if optional else kind, AfterValidator(check)]


class Measure(click.ParamType):
    """A command-line option's number, read as Python reads a float ("1e3", "nan") and then
    held to its quantity: NaN, infinities and denormals are refused with the rest."""

    def __init__(self, quantity: Quantity) -> None:
        self.quantity = quantity
        self.name = "integer" if quantity.whole else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = value if isinstance(value, (int, float)) else read(str(value))  # or a default
        problem = self.quantity.problem(number)
        if problem is not None:
            self.fail(f"{value!r} is {problem}; {self.quantity.rule()}", param, ctx)
        return self.quantity.value(number)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        q = self.quantity
        return f"{'INTEGER' if q.whole else 'FLOAT'} {_shown(q.low)}..{_shown(q.high)}"


# --- the quantities: what each number from outside measures, and its range --------------

MAX_BATCH = 65_536  # larger per-device batches do not fit any device's memory
MAX_GLOBAL_BATCH = 2**20  # a step of more than 2^20 images holds most of ImageNet

BANDWIDTH = Quantity(
    "a link's bandwidth",
    0.001,
    100_000,
    "GB/s",
    why="10^9 bytes a second; 1 MB/s is slower than any cluster's link",
)
LATENCY = Quantity("a message's latency", 0, 1e6, "us")
JITTER_CV = Quantity("a rank's step jitter (a coefficient of variation)", 0, 10)
OVERHEAD_MS = Quantity("the overhead per step the batch does not shrink", 0, 1e6, "ms")
OVERLAP = Quantity(
    "the share of a step's compute the allreduce can hide behind", 0, 1, high_open=True
)
BATCH = Quantity("a per-device batch", 1, MAX_BATCH, whole=True)
GLOBAL_BATCH = Quantity("a global batch (all devices')", 1, MAX_GLOBAL_BATCH, whole=True)
THROUGHPUT = Quantity(
    "a throughput",
    MIN_THROUGHPUT,
    MAX_COUNT,
    "a second",
    why="less than one in 30 years is none",
)
MINUTES = Quantity("a time budget", 0.1, 10_000, "minutes")
RATIO = Quantity("a ratio of two throughputs", 1e-30, 1e30)
RATIO_BOUND = Quantity("a bound of a ratio's interval", -1e30, 1e30)
SLOWDOWN = Quantity("a test-only slowdown (DLSCALE_TEST_SLOWDOWN)", 0, 0.9, high_open=True)
TIMESTAMP = Quantity("a time (seconds since 1970)", 0, 1e11, "s")
