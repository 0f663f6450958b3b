"""`dlscale check`: a study's points against a reference, each judged passed, regressed,
undecided (the rule of decide.py could not tell within the budget) or not judged (nothing
to judge it against), for CI systems.

The reference of a point is, by what the check was given:
- its partner in a baseline (an experiment of the store, or a bundle), measured before or
  elsewhere: decided on independent samples;
- the baseline's own runs re-run now, interleaved with the study's (check_runs.py): decided
  on the pairs;
- the last N checks of the same point in the history (history.py): decided against the
  window's spread.

Each run contributes one value: its throughput over its timed steps (the summary's, as
`results` shows it). The test-only slowdown stretches that time, not each step's record.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import NotFoundError
from ...runs import TERMINAL, scale_label
from ...tracking.store import Store
from .. import analysis, bundles
from ..bundles.read import read_bundle
from ..compare import partners
from ..formatting import slowed_words
from ..points import Point
from ..stats import counted
from . import decide

PASSED, REGRESSED, UNDECIDED, SKIPPED = (
    decide.PASSED,
    decide.REGRESSED,
    decide.UNDECIDED,
    "not judged",
)
STATISTIC = "each run's throughput over its timed steps"


@dataclass(frozen=True)
class Measure:
    """What a check judges each run by (`--measure`): its name, the words the verdicts
    and the JUnit file say it in, and how a run's summary gives it (higher is better, so
    the rule reads every measure the same way)."""

    name: str
    statistic: str
    per: str  # after the unit: "/s", " per CPU s"

    def value(self, summary: dict[str, Any]) -> float | None:
        if self.name == "wall":
            return counted(summary.get("throughput"))
        # units a CPU second of rank 0: the step's units over its CPU seconds. A declared
        # script's summary counts no units: its throughput over its timed seconds does
        cpu, steps, units = (
            summary.get("cpu_s_per_step"),
            summary.get("timed_steps"),
            summary.get("images_timed") or _units_timed(summary),
        )
        if not all(isinstance(x, (int, float)) and x > 0 for x in (cpu, steps, units)):
            return None
        return counted(units / steps / cpu)  # type: ignore[operator]

    def at(self, p: Point, b: Point | None = None) -> Measure:
        """The measure this point (against baseline point `b`) is judged by: this one;
        `auto` chooses per point."""
        return self

    def reason(self, p: Point, b: Point | None = None) -> str | None:
        """Why `at` chose what it chose, for the verdict (None: the user chose)."""
        return None


def _units_timed(summary: dict[str, Any]) -> float | None:
    rate, seconds = counted(summary.get("throughput")), counted(summary.get("elapsed_s"))
    return rate * seconds if rate is not None and seconds is not None else None


@dataclass(frozen=True)
class Auto(Measure):
    """`--measure auto`: CPU time where it sees what the point costs (one rank on CPUs,
    every completed run of both sides recording it), the clock otherwise. Under the bursty
    adversary of issue 51 (docs/benchmarks.md) CPU time held every target on a busy
    machine and the clock decided 3 checks in 90; rank 0's CPU time does not see waits for
    other ranks or a device, so those points keep the clock."""

    def value(self, summary: dict[str, Any]) -> float | None:
        raise TypeError("auto is a choice of measure per point: call .at(point) first")

    def at(self, p: Point, b: Point | None = None) -> Measure:
        return CPU if self._not_cpu(p, b) is None else WALL

    def reason(self, p: Point, b: Point | None = None) -> str | None:
        why = self._not_cpu(p, b)
        if why is None:
            return "judged by CPU time: one rank on CPUs, every run records it"
        return f"judged by wall time: {why}"

    @staticmethod
    def _not_cpu(p: Point, b: Point | None) -> str | None:
        for side, q in (("the study's", p), ("the baseline's", b)):
            if q is None:
                continue
            if q.device != "cpu":
                on = f"on {q.device}" if q.device else "on a device not recorded"
                return f"{side} runs are {on}; the CPU only waits for it"
            ranks = q.nodes * q.ranks_per_node
            if ranks > 1:
                return f"{ranks} ranks; rank 0's CPU time does not see its waits for the others"
            done = [s for s in q.summaries if WALL.value(s) is not None]
            lacking = [s for s in done if CPU.value(s) is None]
            if lacking:
                said = next(
                    (s["cpu_unavailable"] for s in lacking if s.get("cpu_unavailable")), None
                )
                because = (
                    f"the meter around the script: {said}"
                    if said
                    else "made before dlscale recorded it, or where the kernel gives no "
                    "process's CPU time"
                )
                return f"{len(lacking)} of {side} {len(done)} runs record no CPU time ({because})"
        return None


# what a run's value can be
MEASURES: dict[str, Measure] = {
    "wall": Measure("wall", STATISTIC, "/s"),
    "cpu": Measure(
        "cpu",
        "each run's units per CPU second of rank 0's process tree over its timed steps (a "
        "declared framework's script's tree, metered from outside; its CPU time per step, "
        "which a busy machine moves less than the clock; time waiting for I/O, other ranks "
        "or a device is not in it)",
        " per CPU s",
    ),
}
WALL, CPU = MEASURES["wall"], MEASURES["cpu"]
AUTO = Auto(
    "auto",
    "each point by CPU time where it is one rank on CPUs and every run records it (units per "
    "CPU second of rank 0's process tree over its timed steps), else by its throughput over "
    "its timed steps; each verdict says which",
    "",
)
# what `--measure` chooses from
CHOICES: dict[str, Measure] = {**MEASURES, "auto": AUTO}


@dataclass
class Verdict:
    name: str  # the point, in the user's words
    outcome: str  # PASSED, REGRESSED, UNDECIDED or SKIPPED
    why: str
    point: Point | None
    baseline: Point | None
    decision: decide.Decision | None = None
    needed: int | None = None  # repetitions a side that would decide it (projected)
    seconds: float = 0.0  # the time its runs took in this check (JUnit's time)
    in_study: bool = True  # False: a baseline point the study does not measure
    measure: Measure | None = None  # what judged it (auto's choice for the point)

    @property
    def judged(self) -> bool:
        return self.outcome in (PASSED, REGRESSED)


@dataclass
class Baseline:
    name: str  # the experiment, the bundle's NAME@SITE, or the history window
    source: str  # "experiment in the store", the bundle's path, or the history file
    points: list[Point]
    runnable: bool = False  # measured in this store: its runs can be re-run (interleaved)


def point_name(p: Point) -> str:
    return (
        f"{p.framework} {p.model} {p.dataset} {scale_label(p.nodes, p.ranks_per_node)} "
        f"b{p.per_device_batch}{'' if p.scaling == 'weak' else ' strong'} {p.precision} "
        f"{p.loader}"
        + (f" {p.lr_schedule}" if p.lr_schedule not in (None, "constant") else "")
        # a declared framework's own axes: a point of its own per value, so a name of its own
        + "".join(f" {k}={v}" for k, v in sorted(p.axes.items()))
    )


def run_value(summary: dict[str, Any], measure: Measure = WALL) -> float | None:
    """One run's value for the check: by default its throughput over its timed steps,
    where it counts (stats.counted: the rule `results` and `compare` count by)."""
    return measure.value(summary)


def values_of(p: Point, measure: Measure = WALL) -> list[float]:
    """The point's completed repetitions' values (by the measure it is judged by), in the
    order they were stored."""
    measure = measure.at(p)
    out = [run_value(s, measure) for s in p.summaries]
    return [v for v in out if v is not None]


def measures_of(current: list[Point], baseline: Baseline, measure: Measure) -> dict[str, Measure]:
    """By point name, the measure each of the study's points matched in the baseline is
    judged by (`auto` chooses per point): what its pairs' values are read by."""
    pairs, _, _ = partners(current, baseline.points)
    return {point_name(p): measure.at(p, b) for p, b in pairs}


def seconds_of(p: Point | None) -> float:
    return sum(p.runtimes) if p is not None else 0.0


def load_baseline(store: Store, given: str) -> Baseline:
    """An experiment of the store by name, else a bundle file, read into a store of its own
    that lives only for this call (the user's store is not touched)."""
    if given in store.experiment_names():
        runs = store.runs(given)
        here = not any(r.get("site") for r in runs)
        return Baseline(given, "experiment in the store", analysis.points(store, given), here)
    path = Path(given)
    if not path.is_file():
        raise NotFoundError(
            f"--baseline {given}: neither an experiment in the store ({store.home}) nor a "
            f"bundle file; experiments: {', '.join(store.experiment_names()) or 'none'}"
        )
    bundle = read_bundle(path)
    with tempfile.TemporaryDirectory(prefix="dlscale-baseline-") as tmp:
        scratch = Store(tmp)
        try:
            name = bundles.add(scratch, bundle).experiment
            return Baseline(name, str(path), analysis.points(scratch, name))
        finally:
            scratch.close()


def _failed(p: Point) -> bool:
    """Every repetition ended and none completed."""
    return p.throughput.n == 0 and bool(p.states) and all(s in TERMINAL for s in p.states)


def _unmeasured(p: Point, b: Point, measure: Measure) -> str | None:
    """Why a side's completed runs give no value of the measure (None: they do, or none
    completed): CPU time is recorded by the built-in trainers, and metered around a
    declared framework's script, since this version only."""
    for side, q in (("the study's", p), ("the baseline's", b)):
        done = [s for s in q.summaries if WALL.value(s) is not None]
        if done and not any(measure.value(s) is not None for s in done):
            why = next((s["cpu_unavailable"] for s in done if s.get("cpu_unavailable")), None)
            because = (
                f"the meter around the script: {why}"
                if why
                else "CPU time per step is recorded by the built-in trainers and metered "
                "around a declared framework's script, from this version on, where the "
                "kernel gives a process's CPU time"
            )
            return (
                f"{side} runs record no {measure.name} measure ({because}); check with "
                "--measure wall"
            )
    return None


def _slowed(*points: Point | None) -> str:
    words = slowed_words(p.test_slowdown for p in points if p is not None)
    return f" [{words}]" if words else ""


def describe(
    d: decide.Decision,
    tolerance: float,
    unit: str,
    sides: tuple[float, float],
    measure: Measure = WALL,
) -> str:
    """A decision in words: both sides' values, the ratio with its interval, and what the
    interval rules out (the bound it was held to, named the way it is read)."""
    edge, caught = decide.edges(tolerance)
    shown = f"{sides[0]:,.1f} against {sides[1]:,.1f} {unit}{measure.per}"
    if d.ratio is None:
        return shown
    n = {
        decide.PAIRED: f"n={d.n[0]} pairs"
        + (
            f", widened for neighbouring pairs moving together (lag-1 {d.autocorrelation:.2f})"
            if d.autocorrelation > 0
            else ""
        ),
        decide.WINDOW: f"against the last {d.n[1]} checks",
    }.get(d.method, f"n={d.n[0]} and {d.n[1]}")
    if d.low is None:
        return f"{shown}, ratio {d.ratio:.3f} (no interval yet, {n})"
    high = "unbounded" if d.high is None else f"{d.high:.3f}"
    ratio = f"ratio {d.ratio:.3f} [{d.low:.3f}, {high}] ({d.method}, {n})"
    tol, twice = f"{100 * tolerance:g}%", f"{200 * tolerance:g}%"
    if d.outcome == decide.REGRESSED:
        return (
            f"{shown}, {ratio}: {100 * (1 - d.ratio):.1f}% slower, past the {tol} tolerance; "
            "the whole interval is below 1.000, so slower beyond the noise"
        )
    if d.outcome == decide.PASSED:
        return (
            f"{shown}, {ratio}: within the {tol} tolerance; the whole interval is above "
            f"{caught:.3f}, so a {twice} slowdown is ruled out"
        )
    clear = decide.outcome_of(d.ratio, d.low, d.high, tolerance)
    if clear != decide.UNDECIDED:
        # clear, but from too few repetitions for the rule to trust the spread
        pairs = decide.MIN_PAIRS_TO_PASS if clear == decide.PASSED else decide.MIN_PAIRS
        need = {
            decide.PAIRED: f"{pairs} pairs"
            + (
                " to pass: a few may all have moved with the load" if clear == decide.PASSED else ""
            ),
            decide.WINDOW: f"{decide.MIN_PAIRS} past checks",
        }.get(
            d.method,
            f"{decide.MIN_PAIRS} of the study's repetitions and {decide.MIN_BASELINE} of the "
            "baseline's",
        )
        return f"{shown}, {ratio}: too few repetitions to judge; the rule needs {need}"
    if d.ratio < edge:
        return (
            f"{shown}, {ratio}: {100 * (1 - d.ratio):.1f}% slower, past the {tol} "
            "tolerance, but the interval reaches 1.000: not yet beyond the noise"
        )
    return (
        f"{shown}, {ratio}: within the {tol} tolerance, but the interval reaches "
        f"{caught:.3f}: a {twice} slowdown is not yet ruled out"
    )


def budget_text(d: decide.Decision, tolerance: float, side: str) -> tuple[int | None, str]:
    """What would decide an undecided point: (repetitions a side, the words)."""
    n = decide.repetitions_to_decide(d, tolerance)
    if n is None and d.reference_se and d.ratio and d.low is not None:
        return None, (
            f"no number of the study's repetitions would: the baseline's own mean is known "
            f"only to ±{100 * decide.critical(d.n[1] - 1) * d.reference_se:.1f}% from its "
            f"{d.n[1]} repetitions; a baseline with more repetitions would"
        )
    if n is None:
        return None, "at least 3 repetitions a side, to know the spread"
    return n, f"about {n} {side} would decide it at the spread measured so far (projected)"


def judge(
    p: Point,
    b: Point,
    tolerance: float,
    reference: list[float] | None = None,
    candidate: list[float] | None = None,
    measure: Measure = WALL,
) -> Verdict:
    """A matched point: paired when `reference` (and `candidate`) are the values of runs
    interleaved in this check, else the study's values against the baseline's."""
    v = _judge(p, b, tolerance, reference, candidate, chosen := measure.at(p, b))
    v.measure = chosen
    chose = measure.reason(p, b)
    if chose and v.outcome in (PASSED, REGRESSED, UNDECIDED) and v.decision is not None:
        v.why += f" ({chose})"
    return v


def _judge(
    p: Point,
    b: Point,
    tolerance: float,
    reference: list[float] | None,
    candidate: list[float] | None,
    measure: Measure,
) -> Verdict:
    name = point_name(p)
    slowed = _slowed(p, b)
    unmeasured = _unmeasured(p, b, measure)
    if unmeasured:
        return Verdict(name, SKIPPED, unmeasured, p, b)
    if _failed(p):
        return Verdict(
            name,
            REGRESSED,
            f"no repetition completed ({', '.join(sorted(set(p.states)))}); the "
            f"baseline's runs did{slowed}",
            p,
            b,
        )
    if reference is not None:
        ours = candidate if candidate is not None else values_of(p, measure)
        d = decide.paired(ours, reference, tolerance)
        side, theirs = "pairs", reference
    else:
        ours, theirs = values_of(p, measure), values_of(b, measure)
        if not theirs:
            return Verdict(name, SKIPPED, "the baseline has no completed repetition of it", p, b)
        d = decide.independent(ours, theirs, tolerance)
        side = "repetitions of the study's"
    if not ours:
        return Verdict(name, UNDECIDED, f"no completed repetition yet{slowed}", p, b, d)
    sides = (statistics.fmean(ours), statistics.fmean(theirs))
    text = describe(d, tolerance, p.unit, sides, measure)
    if d.outcome != UNDECIDED:
        return Verdict(name, d.outcome, text + slowed, p, b, d)
    needed, words = budget_text(d, tolerance, side)
    return Verdict(name, UNDECIDED, f"{text}; {words}{slowed}", p, b, d, needed)


def check(
    current: list[Point],
    baseline: Baseline,
    tolerance: float,
    paired: dict[str, tuple[list[float], list[float]]] | None = None,
    measure: Measure = WALL,
) -> list[Verdict]:
    """A verdict for every point of either side. `paired`: by point name, the values of
    the study's and the reference's runs interleaved in this check."""
    pairs, lonely, left = partners(current, baseline.points)
    out = []
    for p, b in pairs:
        got = (paired or {}).get(point_name(p))
        if paired is not None and got is None:
            v = Verdict(point_name(p), SKIPPED, "no run of it was interleaved", p, b)
        elif got is not None:
            v = judge(p, b, tolerance, reference=got[1], candidate=got[0], measure=measure)
        else:
            v = judge(p, b, tolerance, measure=measure)
        v.seconds = seconds_of(p)
        out.append(v)
    out += [
        Verdict(
            point_name(p),
            SKIPPED,
            f"no such point in the baseline {baseline.name}",
            p,
            None,
            seconds=seconds_of(p),
        )
        for p in lonely
    ]
    out += [
        Verdict(point_name(b), SKIPPED, "in the baseline, not measured in this study", None, b)
        for b in left
    ]
    for v in out:
        v.in_study = v.point is not None
    return out


def check_window(
    current: list[Point],
    past: dict[str, list[float]],
    n: int,
    tolerance: float,
    where: str,
    measure: Measure = WALL,
) -> list[Verdict]:
    """Each point against its last `n` checks (`past`: by point name, the series' values,
    oldest first), Bencher's window: decide.window's prediction interval."""
    out = []
    for p in current:
        chose, measure_p = measure.reason(p), measure.at(p)
        name, ours, slowed = point_name(p), values_of(p, measure_p), _slowed(p)
        series = past.get(name, [])[-n:]
        if _failed(p):
            why = f"no repetition completed ({', '.join(sorted(set(p.states)))})"
            out.append(Verdict(name, REGRESSED, why + slowed, p, None))
        elif not series:
            why = f"no earlier check of it in {where}"
            out.append(Verdict(name, SKIPPED, why + slowed, p, None))
        elif not ours:
            out.append(Verdict(name, UNDECIDED, f"no completed repetition{slowed}", p, None))
        else:
            value = statistics.fmean(ours)
            d = decide.window(value, series, tolerance)
            assert d.ratio is not None
            text = describe(d, tolerance, p.unit, (value, value / d.ratio), measure_p)
            if d.outcome == UNDECIDED:
                text += "; " + _window_budget(d, tolerance)
            text += f" ({chose})" if chose else ""
            out.append(Verdict(name, d.outcome, text + slowed, p, None, d))
        out[-1].seconds, out[-1].measure = seconds_of(p), measure_p
    return out


def _window_budget(d: decide.Decision, tolerance: float) -> str:
    if d.spread is None:
        return f"the window needs at least {decide.MIN_PAIRS} earlier checks"
    n = d.n[1]
    steady = (
        decide.gap(d.ratio or 1, tolerance) / (decide.critical(n - 1) * math.sqrt(1 + 1 / n))
        if n > 1
        else 0.0
    )
    return (
        f"the window's checks vary by {100 * d.spread:.1f}% (log sd); it would decide this "
        f"ratio were they within about {100 * steady:.1f}%, or with more checks in it"
    )
