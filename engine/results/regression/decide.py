"""The rule `dlscale check` judges a point by: regressed, passed or undecided, from the ratio
of the candidate's throughput to the reference's, with both sides' uncertainty:
significance together with a minimum effect, as pyperf and asv decide (and Hoefler &
Belli, SC'15), and a sequential test's two hypotheses, as Wald's: no slowdown, or a
slowdown of twice the tolerance.

With `edge` = 1 - tolerance and the ratio's interval [low, high] at LEVEL:
- regressed: high < 1 and ratio < edge (slower beyond the noise, and by more than the
  tolerance);
- passed: low > 1 - 2 x tolerance and ratio >= edge (a slowdown of twice the tolerance is
  ruled out, and what was measured is within the tolerance);
- undecided otherwise: more repetitions narrow the interval (`repetitions_to_decide` says
  about how many). A true slowdown of the tolerance itself goes either way: the tolerance
  is where the rule is indifferent.

Why not the stricter rule this replaced (the whole interval below, or above, the edge):
both outcomes then had to resolve the ratio to within the tolerance's distance from the
truth, so on the shared 2-core VM (a pair's log ratio spread by 0.13 to 0.16) most checks
ended undecided within a CI job's budget, and a 10% slowdown was caught in 20% of them at
8 pairs. This rule asks each outcome to rule out the other hypothesis, twice the distance
away: about a quarter of the repetitions for the same error rates.

The interval, by how the two sides were measured:
- paired (`paired`): candidate and reference runs interleaved (ABBA...), so the machine's
  drift hits both alike: a Student-t interval on the mean of the pairs' log ratios, whose
  spread holds both sides' noise, widened where neighbouring pairs moved together (a burst
  of load spans a few runs): by their lag-1 autocorrelation, as an AR(1) series' mean is
  (`autocorrelation`); a pass needs MIN_PAIRS_TO_PASS pairs;
- independent (`independent`): a baseline measured earlier or elsewhere: Fieller's interval
  for the ratio of two means with the Welch-Satterthwaite degrees of freedom
  (stats.fieller);
- a window of past checks (`window`, Bencher's): the candidate's value against the spread
  of the last N checks' values, as a Student-t prediction interval (the next check varies
  as much as the past ones did).

LEVEL is two-sided 99% at every look (0.5% a side), after at least MIN_PAIRS pairs (or
repetitions of the study, against at least two of a baseline measured apart): `check`
looks after every round, and each look is another chance for noise to cross a boundary.
Measured on synthetic checks of 20 and 40 looks at a pair's log spread of 0.10 and 0.14
(the VM's; tests/test_decide.py keeps these true): unchanged code was called regressed in
2.6-3.5% of them, and a 10% slowdown passed in 2.0-4.0% and caught in 96-97% once the
budget sufficed (20 pairs at 0.10, 40 at 0.14: 9 and 14 pairs on average). At 95% a look
the first rate was 7-9%; at 98%, 4-5%.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..stats import cv, fieller, t_quantile

REGRESSED, PASSED, UNDECIDED = "regressed", "passed", "undecided"
LEVEL = 0.99
MIN_PAIRS = 3  # a spread from two pairs can be tiny by chance: no decision before three
# A pass rules out a slowdown: not from a handful of pairs a burst of load may have moved
# together (issue 51: three passes of a real 10% slowdown came after 5 pairs).
MIN_PAIRS_TO_PASS = 6
MAX_AUTOCORRELATION = 0.9  # past it, the pairs tell too little to inflate by
MIN_BASELINE = 2  # a baseline measured apart cannot grow: two of its repetitions suffice
PAIRED = "paired runs' log ratios, Student-t 99%"
INDEPENDENT = "Fieller's 99% interval, Welch-Satterthwaite df"
WINDOW = "Student-t 99% prediction interval over the window"


@dataclass(frozen=True)
class Decision:
    outcome: str  # REGRESSED, PASSED or UNDECIDED
    ratio: float | None  # candidate / reference
    low: float | None  # None: no interval (too few repetitions)
    high: float | None  # None: unbounded (the reference's mean is not clearly above 0)
    method: str
    n: tuple[int, int]  # repetitions (or checks) on each side: candidate, reference
    spread: float | None = None  # the log ratio's standard deviation per pair or check
    # independent sides: the relative standard error of the baseline's mean, which more
    # repetitions of the study cannot shrink
    reference_se: float | None = None
    # paired: how much neighbouring pairs moved together (lag-1, bias-corrected, 0 at the
    # least), by which the interval was widened
    autocorrelation: float = 0.0

    @property
    def change(self) -> float | None:
        """The slowdown (positive) or speedup (negative), as a fraction."""
        return None if self.ratio is None else 1 - self.ratio


def critical(df: float) -> float:
    """Student-t at the two-sided LEVEL."""
    return t_quantile(df, LEVEL)


def edges(tolerance: float) -> tuple[float, float]:
    """(where the rule is indifferent, the slowdown a pass must rule out): 1 - tolerance and
    1 - 2 x tolerance."""
    return 1 - tolerance, 1 - 2 * tolerance


def rule_text(tolerance: float) -> str:
    """The rule in words, with its numbers: what `check` prints above its verdicts and what
    benchmarks/check_rates.py records with its rates."""
    edge, caught = edges(tolerance)
    return (
        f"regressed when the ratio is below {edge:.3f} and its {100 * LEVEL:g}% interval "
        f"below 1, passed when it is at or above {edge:.3f} and its interval above "
        f"{caught:.3f}"
    )


def outcome_of(ratio: float, low: float | None, high: float | None, tolerance: float) -> str:
    """The rule on a ratio and its interval, however many repetitions made them."""
    edge, caught = edges(tolerance)
    if high is not None and high < 1 and ratio < edge:
        return REGRESSED
    if low is not None and low > caught and ratio >= edge:
        return PASSED
    return UNDECIDED


def paired(candidate: list[float], reference: list[float], tolerance: float) -> Decision:
    """Pairs (candidate[i], reference[i]) measured next to each other."""
    logs = [math.log(c / r) for c, r in zip(candidate, reference) if c > 0 and r > 0]
    n = len(logs)
    if n == 0:
        return Decision(UNDECIDED, None, None, None, PAIRED, (0, 0))
    mean = statistics.fmean(logs)
    if n < 2:
        return Decision(UNDECIDED, math.exp(mean), None, None, PAIRED, (1, 1))
    sd = statistics.stdev(logs)
    rho = autocorrelation(logs)
    inflate = (1 + rho) / (1 - rho)  # an AR(1) series' variance of the mean, over n's
    half = critical(max(1.0, n / inflate - 1)) * sd * math.sqrt(inflate / n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    outcome = outcome_of(math.exp(mean), low, high, tolerance) if n >= MIN_PAIRS else UNDECIDED
    if outcome == PASSED and n < MIN_PAIRS_TO_PASS:
        outcome = UNDECIDED
    return Decision(outcome, math.exp(mean), low, high, PAIRED, (n, n), sd, autocorrelation=rho)


def autocorrelation(logs: list[float]) -> float:
    """How much neighbouring pairs move together: the lag-1 autocorrelation of their log
    ratios in the order measured, corrected for its bias in short series (Kendall's: it
    reads low by about (1 + 3 rho) / n), at least 0 and at most MAX_AUTOCORRELATION. A
    burst of load spans a few runs, and in ABBA order the runs next to each other are one
    side's (the B B and A A between pairs), so it moves neighbouring pairs alike; the
    Student-t interval, which takes pairs as independent, is then too narrow (measured on
    AR(1) pairs at 0.5: 87-90% coverage for 99%, tests/test_decide.py)."""
    n = len(logs)
    if n < 3:
        return 0.0
    mean = statistics.fmean(logs)
    d = [x - mean for x in logs]
    total = sum(x * x for x in d)
    if total <= 0:
        return 0.0
    r = sum(a * b for a, b in zip(d, d[1:])) / total
    return min(MAX_AUTOCORRELATION, max(0.0, r + (1 + 3 * r) / n))


def independent(candidate: list[float], reference: list[float], tolerance: float) -> Decision:
    """Two sides measured apart (a baseline from before, or another site's)."""
    n = (len(candidate), len(reference))
    r = fieller(reference, candidate, LEVEL)
    if r is None:
        return Decision(UNDECIDED, None, None, None, INDEPENDENT, n)
    if r.low is None:
        return Decision(UNDECIDED, r.value, None, None, INDEPENDENT, n)
    # the study's side can grow (check --run adds to it), a baseline's cannot: three of
    # the study's and two of the baseline's at the least
    enough = n[0] >= MIN_PAIRS and n[1] >= MIN_BASELINE
    outcome = outcome_of(r.value, r.low, r.high, tolerance) if enough else UNDECIDED
    se = (cv(reference) or 0.0) / math.sqrt(n[1])
    return Decision(outcome, r.value, r.low, r.high, INDEPENDENT, n, cv(candidate) or 0.0, se)


def window(value: float, past: list[float], tolerance: float) -> Decision:
    """This check's value against the values of the last N checks of the same point."""
    logs = [math.log(v) for v in past if v > 0]
    n = (1, len(logs))
    if not logs or value <= 0:
        return Decision(UNDECIDED, None, None, None, WINDOW, n)
    mean = statistics.fmean(logs)
    r = math.exp(math.log(value) - mean)
    if len(logs) < 2:
        return Decision(UNDECIDED, r, None, None, WINDOW, n)
    sd = statistics.stdev(logs)
    half = critical(len(logs) - 1) * sd * math.sqrt(1 + 1 / len(logs))
    low, high = r * math.exp(-half), r * math.exp(half)
    outcome = outcome_of(r, low, high, tolerance) if len(logs) >= MIN_PAIRS else UNDECIDED
    return Decision(outcome, r, low, high, WINDOW, n, sd)


def gap(ratio: float, tolerance: float) -> float:
    """How far (log scale) the ratio's interval must reach, a side, for it to decide: to 1
    from a ratio below the edge, to 1 - 2 x tolerance from one at or above it."""
    edge, caught = edges(tolerance)
    return abs(math.log(ratio)) if ratio < edge else math.log(ratio) - math.log(caught)


def repetitions_to_decide(d: Decision, tolerance: float, limit: int = 1000) -> int | None:
    """About how many repetitions (pairs, for paired runs; the study's, against a baseline
    measured apart, whose own spread stays) would decide an undecided point, were its
    ratio and spread what they are now: the fewest n whose interval's half-width (log
    scale) is under the ratio's `gap`. None when no number would (the baseline's spread
    alone is too wide, or nothing is known of the spread); a projection, not a
    measurement."""
    if d.ratio is None or d.spread is None or d.ratio <= 0:
        return None
    need = gap(d.ratio, tolerance)
    if need <= 0:
        return None
    fixed = d.reference_se or 0.0  # a baseline measured apart does not grow
    inflate = (1 + d.autocorrelation) / (1 - d.autocorrelation)
    least = MIN_PAIRS_TO_PASS if d.method == PAIRED and d.ratio >= edges(tolerance)[0] else 2
    for n in range(max(MIN_PAIRS, least), limit + 1):
        df = max(1.0, n / inflate - 1)
        if critical(df) * math.hypot(d.spread * math.sqrt(inflate / n), fixed) < need:
            return n
    return None
