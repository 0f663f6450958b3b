"""`dlscale check`'s rule (engine/results/decide.py) on synthetic series of known shift and
noise: interleaved pairs looked at after every pair, as `check --run` does, with the
machine's drift shared by both runs of a pair. Measured here, not assumed: the false-alarm
rate (unchanged code called regressed), the miss rate (a 10% slowdown called passed) and
the power within a budget, at noise levels like a quiet node's and a busy machine's. Pure
and seeded: about 3 s."""

import math
import random

import pytest

from dlscale.engine.results.regression import decide
from dlscale.engine.results.regression.decide import PASSED, REGRESSED, UNDECIDED

TOLERANCE = 0.05


def sequential(ratio: float, noise: float, budget: int, rng: random.Random) -> tuple[str, int]:
    """Pairs added one at a time until the rule decides or `budget` pairs are spent. Each
    pair shares a drift (a 30% swing of the machine's speed); `noise` is the log spread of
    one pair's ratio."""
    study, reference = [], []
    for n in range(1, budget + 1):
        drift = math.exp(rng.gauss(0, 0.3))
        reference.append(100 * drift * math.exp(rng.gauss(0, noise / math.sqrt(2))))
        study.append(100 * ratio * drift * math.exp(rng.gauss(0, noise / math.sqrt(2))))
        d = decide.paired(study, reference, TOLERANCE)
        if d.outcome != UNDECIDED:
            return d.outcome, n
    return UNDECIDED, budget


def rates(ratio: float, noise: float, budget: int, trials: int = 400) -> dict[str, float]:
    rng = random.Random(f"{ratio}-{noise}-{budget}")
    got = [sequential(ratio, noise, budget, rng)[0] for _ in range(trials)]
    return {o: got.count(o) / trials for o in (REGRESSED, PASSED, UNDECIDED)}


@pytest.mark.parametrize("noise,budget", [(0.02, 10), (0.05, 20), (0.10, 40), (0.14, 40)])
def test_unchanged_code_is_not_called_regressed_and_a_10pct_slowdown_is_caught(noise, budget):
    same = rates(1.0, noise, budget)
    slow = rates(0.90, noise, budget)
    assert same[REGRESSED] <= 0.05, same  # never cries wolf (sequential looks included)
    assert slow[PASSED] <= 0.05, slow  # a real slowdown is not passed
    assert same[PASSED] >= 0.90, same  # and the budget is enough to decide
    assert slow[REGRESSED] >= 0.90, slow


def test_heavy_tailed_noise_like_a_busy_machine_s_does_not_cry_wolf():
    """A pair's log ratio spread by 0.32 with Student-t tails (3 degrees of freedom), as
    benchmarks/check_rates.py measured on the shared 2-core VM: mostly undecided within 20
    pairs, and still no more than 5% of unchanged checks called regressed."""
    rng = random.Random(5)

    def noise() -> float:
        chi = sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3
        return 0.32 * rng.gauss(0, 1) / math.sqrt(chi) / math.sqrt(3)

    wolf = 0
    for _ in range(400):
        study = []
        for _ in range(20):
            study.append(math.exp(noise()))
            d = decide.paired(study, [1.0] * len(study), TOLERANCE)
            if d.outcome != UNDECIDED:
                wolf += d.outcome == REGRESSED
                break
    assert wolf / 400 <= 0.05  # measured: 2.6% of 1,500


def test_a_slowdown_of_the_tolerance_itself_goes_either_way():
    """The tolerance is where the rule is indifferent: neither outcome is an error there."""
    edge = rates(1 - TOLERANCE, 0.05, 20)
    assert 0.3 <= edge[REGRESSED] <= 0.7 and 0.3 <= edge[PASSED] <= 0.7, edge


def test_each_outcome_must_rule_out_the_other_hypothesis():
    """Regressed: below the edge and the interval below 1. Passed: at or above the edge and
    the interval above 1 - 2 x tolerance. A ratio past the edge whose interval still
    reaches the other hypothesis is undecided, however many repetitions made it."""
    edge, caught = decide.edges(TOLERANCE)
    assert (edge, caught) == (0.95, 0.90)
    assert decide.outcome_of(0.93, 0.88, 0.99, TOLERANCE) == REGRESSED
    assert decide.outcome_of(0.93, 0.88, 1.01, TOLERANCE) == UNDECIDED  # not beyond noise
    assert decide.outcome_of(0.97, 0.91, 1.03, TOLERANCE) == PASSED
    assert decide.outcome_of(0.97, 0.89, 1.03, TOLERANCE) == UNDECIDED  # 10% not ruled out
    assert decide.outcome_of(0.95, 0.92, 0.99, TOLERANCE) == PASSED  # the edge is within


def test_too_small_a_budget_leaves_it_undecided_and_names_what_would_decide():
    rng = random.Random(3)
    study = [100 * math.exp(rng.gauss(0, 0.2)) for _ in range(3)]
    reference = [100 * math.exp(rng.gauss(0, 0.2)) for _ in range(3)]
    d = decide.paired(study, reference, TOLERANCE)
    assert d.outcome == UNDECIDED and d.spread is not None
    n = decide.repetitions_to_decide(d, TOLERANCE)
    assert n is not None and n > 3
    # the projection is the n at which the interval's half-width falls under the gap: to
    # 1 from a ratio below the edge, to 1 - 2 x tolerance from one at or above it
    gap = decide.gap(d.ratio, TOLERANCE)
    assert gap == (-math.log(d.ratio) if d.ratio < 0.95 else math.log(d.ratio) - math.log(0.90))
    assert decide.critical(n - 1) * d.spread / math.sqrt(n) < gap
    assert decide.critical(n - 2) * d.spread / math.sqrt(n - 1) >= gap


def test_no_decision_before_three_pairs():
    assert decide.paired([90.0, 90.0], [100.0, 100.0], TOLERANCE).outcome == UNDECIDED
    assert decide.paired([90.0, 90.1, 89.9], [100.0, 100.0, 100.0], TOLERANCE).outcome == (
        REGRESSED
    )
    # a pass rules out a slowdown: not from fewer than six pairs (issue 51)
    steady = [99.0, 99.1, 98.9, 99.05, 98.95, 99.0]
    for n in range(3, 6):
        assert decide.paired(steady[:n], [100.0] * n, TOLERANCE).outcome == UNDECIDED
    assert decide.paired(steady, [100.0] * 6, TOLERANCE).outcome == PASSED


def test_independent_sides_carry_both_uncertainties():
    """A precise study against a noisy baseline is not decided: the baseline's own spread
    counts (the old rule compared the study's interval with the baseline's mean alone)."""
    study = [90.0, 90.2, 89.8, 90.1]
    noisy = [70.0, 100.0, 130.0]
    assert decide.independent(study, noisy, TOLERANCE).outcome == UNDECIDED
    steady = [100.0, 100.3, 99.7]
    d = decide.independent(study, steady, TOLERANCE)
    assert d.outcome == REGRESSED and d.high is not None and d.high < 0.95
    # a baseline of two repetitions is enough against three of the study's, not two
    assert decide.independent(study[:3], steady[:2], TOLERANCE).outcome == REGRESSED
    assert decide.independent(study[:2], steady, TOLERANCE).outcome == UNDECIDED


def test_a_window_of_past_checks_predicts_the_next():
    past = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert decide.window(100.2, past, TOLERANCE).outcome == PASSED
    assert decide.window(88.0, past, TOLERANCE).outcome == REGRESSED
    assert decide.window(88.0, [80.0, 120.0, 100.0], TOLERANCE).outcome == UNDECIDED
    assert decide.window(88.0, past[:2], TOLERANCE).outcome == UNDECIDED  # too few checks


def _covers(logs: list[float], plain: bool = False) -> bool:
    """Whether the paired interval over these log ratios (true ratio 1) holds 1; `plain`:
    the Student-t interval that takes the pairs as independent, for comparison."""
    d = decide.paired([100 * math.exp(x) for x in logs], [100.0] * len(logs), TOLERANCE)
    if plain:
        half = decide.critical(len(logs) - 1) * d.spread / math.sqrt(len(logs))
        return abs(math.log(d.ratio)) <= half
    return d.low <= 1 <= d.high


def _moving_together(rng: random.Random, n: int, rho: float) -> list[float]:
    """Pairs' log ratios as an AR(1) series: each pair moves with the one before."""
    x, out = rng.gauss(0, 1), []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, 1)
        out.append(0.1 * x)
    return out


def _bursts(rng: random.Random, n: int) -> list[float]:
    """Runs in ABBA order under bursts of load that last a few runs (on with 15% a run, off
    with 50%, each slowing a run 10-50%), as pairs' log ratios (study over baseline)."""
    on, slow = False, []
    for _ in range(2 * n):
        on = rng.random() >= 0.5 if on else rng.random() < 0.15
        slow.append((-rng.uniform(0.1, 0.5) if on else 0.0) + rng.gauss(0, 0.03))
    return [
        slow[2 * k] - slow[2 * k + 1] if k % 2 == 0 else slow[2 * k + 1] - slow[2 * k]
        for k in range(n)
    ]


@pytest.mark.parametrize("n", [8, 12, 20])
def test_pairs_that_move_together_widen_the_interval(n):
    """Issue 51: neighbouring pairs moving together (lag-1 0.5) left the interval that takes
    them as independent holding the truth 87-90% of the time, for 99%; widened by their
    measured autocorrelation, 95-97% (measured: 1,500 series each). Not 99%: a short
    series tells its autocorrelation roughly (docs/reports.md says so)."""
    rng = random.Random(f"ar-{n}")
    series = [_moving_together(rng, n, 0.5) for _ in range(1500)]
    widened = sum(_covers(s) for s in series) / len(series)
    plain = sum(_covers(s, plain=True) for s in series) / len(series)
    assert widened >= 0.94 and plain <= 0.92, (widened, plain)


@pytest.mark.parametrize("n", [5, 12, 20])
def test_bursts_of_load_keep_the_interval_s_coverage(n):
    rng = random.Random(f"bursts-{n}")
    series = [_bursts(rng, n) for _ in range(1500)]
    assert sum(_covers(s) for s in series) / len(series) >= 0.985
