"""The statistics every number of dlscale is shown with, in one place: which values count,
a point's spread (mean, median, Student-t interval, coefficient of variation), Student's t
quantiles, Welch's test and Fieller's interval for a ratio of two means.

Rules (docs/measuring.md): a run's throughput counts when it is a finite number above 0;
a point's interval is the Student-t 95% interval of the mean of its repetitions, and that
one interval is what every table, chart and projection shows of a measured point
(`INTERVAL` names it beside them); a coefficient of variation above 5% marks it noisy.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.quantities import THROUGHPUT
from ..io.reading import read_json

NOISY_CV = 0.05
LEVEL = 0.95  # a measured point's interval
# The words named beside every table that shows a measured point's interval.
INTERVAL = "CI95: the half-width of the Student-t 95% confidence interval of the mean"


def counted(value: Any) -> float | None:
    """A run's throughput as a float when it counts (a number above 0 within a throughput's
    domain, config.quantities: a store filled before that rule may hold others), else None:
    the one rule `results`, `compare`, `check` and the projection count repetitions by."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value <= 0 or THROUGHPUT.problem(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float | None
    median: float | None
    ci95: float | None  # half-width; None with fewer than 2 values
    cv: float | None

    @property
    def noisy(self) -> bool:
        return self.cv is not None and self.cv > NOISY_CV

    @property
    def interval(self) -> tuple[float, float] | None:
        """The interval itself, [mean - ci95, mean + ci95]; None without one."""
        if self.mean is None or self.ci95 is None:
            return None
        return self.mean - self.ci95, self.mean + self.ci95

    @property
    def standard_error(self) -> float:
        """The standard error of the mean the interval was made from (0 without one)."""
        if self.ci95 is None or self.n < 2:
            return 0.0
        return self.ci95 / t_quantile(self.n - 1)


def spread(values: list[float]) -> Spread:
    if not values:
        return Spread(0, None, None, None, None)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Spread(1, mean, mean, None, None)
    sd = statistics.stdev(values)
    half = t_quantile(len(values) - 1) * sd / math.sqrt(len(values))
    return Spread(len(values), mean, statistics.median(values), half, sd / mean if mean else None)


def cv(values: list[float]) -> float | None:
    """The coefficient of variation (sample standard deviation / mean); None with fewer than
    two values or a mean at or below 0."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else None


def t_quantile(df: float, level: float = LEVEL) -> float:
    """Student's t at the two-sided `level` for `df` degrees of freedom (a `level` interval's
    half-width in standard errors): scipy.special's stdtrit, what scipy.stats.t.ppf calls.
    Whole degrees of freedom are kept in the user's cache folder (below)."""
    if float(df).is_integer():
        return _cached_quantile(int(df), level)
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + level / 2))


@functools.cache
def _cached_quantile(df: int, level: float) -> float:
    """Importing scipy took `dlscale results` of a 10,000-run study 0.4 s of its second
    (scipy.stats over 1 s), so each value scipy gives is kept in the user's cache folder and
    later commands read it there; a cache that cannot be read or written is only slower."""
    path = _cache_file()
    known = _cached(path)
    key = str(df) if level == LEVEL else f"{df}@{level:g}"
    if key in known:
        return known[key]
    from scipy.special import stdtrit

    value = float(stdtrit(df, 0.5 + level / 2))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps({**known, key: value}, sort_keys=True, allow_nan=False))
        os.replace(part, path)  # whole or not at all, whoever else writes it
    except OSError:
        pass
    return value


def _cache_file() -> Path:
    """One file per scipy release: releases differ in the last digits (a Python with
    another scipy must neither read nor overwrite this one's values)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("scipy")
    except PackageNotFoundError:
        release = "unknown"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dlscale" / f"t-quantiles-scipy-{release}.json"


def _cached(path: Path) -> dict[str, float]:
    try:
        data = read_json(path, 1 << 20)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if type(v) is float and 0 < v < math.inf}


# --- two samples: Welch's test and Fieller's interval for the ratio of their means ----------


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float | None
    high: float | None  # None: the interval is unbounded


@dataclass(frozen=True)
class Welch:
    t: float
    df: float
    p: float

    def significant(self, alpha: float) -> bool:
        return self.p < alpha


def _moments(values: list[float]) -> tuple[float, float, int]:
    """mean, the variance of the mean, n."""
    n = len(values)
    return statistics.fmean(values), statistics.variance(values) / n, n


def welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom from each side's variance of the mean."""
    num = (va + vb) ** 2
    den = (va**2 / (na - 1) if na > 1 else 0) + (vb**2 / (nb - 1) if nb > 1 else 0)
    return num / den if den > 0 else float(na + nb - 2)


def welch(a: list[float], b: list[float]) -> Welch | None:
    """Welch's two-sided t-test of mean(b) against mean(a); None with fewer than 2 values a
    side."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.special import stdtr

    ma, va, na = _moments(a)
    mb, vb, nb = _moments(b)
    if va + vb == 0:  # identical repetitions on both sides
        same = ma == mb
        return Welch(0.0 if same else math.copysign(math.inf, mb - ma), na + nb - 2, float(same))
    t = (mb - ma) / math.sqrt(va + vb)
    df = welch_df(va, na, vb, nb)
    return Welch(t, df, float(2 * stdtr(df, -abs(t))))


def fieller(a: list[float], b: list[float], level: float = LEVEL) -> Ratio | None:
    """mean(b) / mean(a) with Fieller's interval for the ratio of two independent means
    (Welch-Satterthwaite df); the interval is None with fewer than 2 values a side, and
    unbounded above (`high` None) when A's mean is not clearly above zero."""
    if not a or not b or statistics.fmean(a) == 0:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    r = mb / ma
    if len(a) < 2 or len(b) < 2:
        return Ratio(r, None, None)
    _, va, na = _moments(a)
    _, vb, nb = _moments(b)
    t = t_quantile(welch_df(va, na, vb, nb), level)
    g = t * t * va / (ma * ma)
    if g >= 1:  # A's mean is not clearly above zero: the ratio has no upper bound
        return Ratio(r, 0.0, None)
    half = (t / ma) * math.sqrt(vb * (1 - g) + r * r * va)
    return Ratio(r, (r - half) / (1 - g), (r + half) / (1 - g))
