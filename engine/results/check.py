"""`dlscale check`: a study's points against a baseline (an experiment in the store or a
bundle), each judged passed, regressed, or not judged (and why), for CI systems.

The rule (after ReFrame's performance references, with the spread of METHOD.md): a point
regressed when the upper bound of its throughput's 95% confidence interval is below the
baseline's mean x (1 - tolerance): a slowdown the repetitions show beyond their noise. A
point is not judged, and says so, when it has no partner in the baseline, fewer than two
completed repetitions (no interval), a CV over `max_cv` on either side, or an interval so
wide that a slowdown of twice the tolerance could pass unseen: then the repetitions it would
need (from its CV, by Student's t) are named.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotFoundError, UserError
from ..runs import State
from ..tracking.store import Store
from . import analysis, bundles
from .bundle_read import read_bundle
from .compare import match_key
from .points import NOISY_CV, Point

PASSED, REGRESSED, SKIPPED = "passed", "regressed", "not judged"
MAX_REPETITIONS = 1000


@dataclass
class Verdict:
    name: str  # the point, in the user's words
    outcome: str  # PASSED, REGRESSED or SKIPPED
    why: str
    point: Point | None
    baseline: Point | None
    threshold: float | None = None  # baseline mean x (1 - tolerance)
    needed: int | None = None  # repetitions a point would need to be judged


@dataclass
class Baseline:
    name: str  # the experiment, or the bundle's NAME@SITE
    source: str  # "experiment in the store" or the bundle's path
    points: list[Point]


def point_name(p: Point) -> str:
    return (
        f"{p.framework} {p.model} {p.dataset} {p.nodes}x{p.ranks_per_node} "
        f"b{p.per_device_batch}{'' if p.scaling == 'weak' else ' strong'} {p.precision} "
        f"{p.loader}" + (f" {p.lr_schedule}" if p.lr_schedule not in (None, "constant") else "")
    )


def load_baseline(store: Store, given: str) -> Baseline:
    """An experiment of the store by name, else a bundle file, read into a store of its own
    that lives only for this call (the user's store is not touched)."""
    if given in store.experiment_names():
        return Baseline(given, "experiment in the store", analysis.points(store, given))
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


def repetitions_needed(cv: float, margin: float) -> int | None:
    """The fewest repetitions whose 95% interval half-width, t(n-1) x cv / sqrt(n) of the
    mean, is at most `margin` (a fraction of the mean); None past MAX_REPETITIONS."""
    from scipy.special import stdtrit

    if cv <= 0:
        return 2
    for n in range(2, MAX_REPETITIONS + 1):
        if float(stdtrit(n - 1, 0.975)) * cv / math.sqrt(n) <= margin:
            return n
    return None


def _needs(cv: float | None, margin: float) -> tuple[int | None, str]:
    if cv is None:
        return None, "at least 2 repetitions (no spread is known yet)"
    n = repetitions_needed(cv, margin)
    if n is None:
        return None, f"over {MAX_REPETITIONS} repetitions at its CV of {100 * cv:.1f}%"
    return n, f"about {n} repetitions at its CV of {100 * cv:.1f}%"


def judge(p: Point, b: Point, tolerance: float, max_cv: float) -> Verdict:
    name = point_name(p)
    mean, half, base = p.throughput.mean, p.throughput.ci95, b.throughput.mean
    if base is None:
        return Verdict(name, SKIPPED, "the baseline has no completed repetition of it", p, b)
    threshold = base * (1 - tolerance)
    # A slowdown twice the tolerance must show: the interval's half-width within
    # tolerance x baseline (as a fraction of this point's mean).
    margin = tolerance * base / mean if mean else tolerance
    if (
        p.throughput.n == 0
        and p.states
        and State.PENDING not in p.states
        and State.RUNNING not in p.states
    ):
        return Verdict(
            name,
            REGRESSED,
            f"no repetition completed ({', '.join(sorted(set(p.states)))}); the baseline's "
            f"mean is {base:,.1f} {p.unit}/s",
            p,
            b,
            threshold,
        )
    if mean is None or half is None:
        needed, text = _needs(b.throughput.cv, margin)
        return Verdict(
            name,
            SKIPPED,
            f"{p.throughput.n} completed repetition(s): no interval to judge by; it needs {text}",
            p,
            b,
            threshold,
            needed,
        )
    for side, s in (("its", p), ("the baseline's", b)):
        if s.throughput.cv is not None and s.throughput.cv > max_cv:
            needed, text = _needs(max(p.throughput.cv or 0, b.throughput.cv or 0), margin)
            return Verdict(
                name,
                SKIPPED,
                f"too noisy to judge: {side} CV is {100 * s.throughput.cv:.1f}% "
                f"(over {100 * max_cv:.1f}%); a quieter machine, or {text}, and a "
                "higher --max-cv",
                p,
                b,
                threshold,
                needed,
            )
    shown = (
        f"{mean:,.1f} ± {half:,.1f} {p.unit}/s against the baseline's {base:,.1f} "
        f"(regressed below {threshold:,.1f})"
    )
    if mean + half < threshold:
        return Verdict(
            name, REGRESSED, f"{shown}: {100 * (1 - mean / base):.1f}% slower", p, b, threshold
        )
    if half > tolerance * base:
        needed, text = _needs(p.throughput.cv, margin)
        return Verdict(
            name,
            SKIPPED,
            f"{shown}: its interval is too wide to tell a {200 * tolerance:.0f}% slowdown; "
            f"it needs {text}",
            p,
            b,
            threshold,
            needed,
        )
    return Verdict(name, PASSED, shown, p, b, threshold)


def check(
    current: list[Point], baseline: Baseline, tolerance: float, max_cv: float = NOISY_CV
) -> list[Verdict]:
    """A verdict for every point of either side: matched points judged, the others not."""
    if not 0 <= tolerance < 1:
        raise UserError(f"--tolerance {tolerance}: a fraction in [0, 1), e.g. 5%")
    pool: dict[tuple, list[Point]] = {}
    for b in baseline.points:
        pool.setdefault(match_key(b), []).append(b)
    out = []
    for p in current:
        candidates = pool.get(match_key(p), [])
        if not candidates:
            out.append(Verdict(point_name(p), SKIPPED, "no such point in the baseline", p, None))
            continue
        b = next((c for c in candidates if c.device == p.device), candidates[0])
        candidates.remove(b)
        out.append(judge(p, b, tolerance, max_cv))
    out += [
        Verdict(point_name(b), SKIPPED, "in the baseline, not measured in this study", None, b)
        for bs in pool.values()
        for b in bs
    ]
    return out
