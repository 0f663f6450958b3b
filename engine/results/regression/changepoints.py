"""Change points in a point's history of checks, as Apache Otava (formerly Hunter; Fleming
et al., ICPE 2023) finds them: a liberal split of the series into segments of steady
mean, then a merge that keeps only the boundaries whose two sides differ beyond the noise
(Welch's t-test, p under MAX_P) and by at least the smallest change that counts.

The split is ruptures' binary segmentation (the `history` extra: `pip install
dlscale[history]`) with a penalty from the series' own noise (the spread of its
first differences), so a noisy series needs a larger step to be split. apache-otava itself
was evaluated and not taken: version 0.8 pins numpy 2.2 and scipy below 1.17 exactly and
brings BigQuery, Postgres and Slack clients; MongoDB's signal-processing-algorithms needs
numpy below 2 and Python 3.11 only. The merge is Otava's, on stats.welch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..stats import welch

MAX_P = 0.001  # Otava's default significance for a change point
MIN_SEGMENT = 4  # the fewest checks on either side of a change point
# The most recent checks of a point that are searched: binary segmentation and the merge
# grow faster than linearly (20,000 checks of one point took 55 s), and a CI job asks what
# changed lately. 500 checks take well under a second; a longer history is cut to its last
# WINDOW, and the lines say so (benchmarks/long_history.py measures it).
WINDOW = 500
EXTRA = "history"  # the extra that brings ruptures


class NoChangePointLibrary(ImportError):
    """ruptures is not installed (the `history` extra)."""


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first entry after the change
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    p: float  # Welch's two-sided p between the two segments

    @property
    def change(self) -> float:
        """after / before - 1: negative is slower."""
        return self.after / self.before - 1 if self.before else math.inf


def _noise(values: list[float]) -> float:
    """The series' noise as a standard deviation, from its first differences' median
    absolute deviation (a step moves one difference; the noise moves them all)."""
    diffs = [b - a for a, b in zip(values, values[1:])]
    if len(diffs) < 2:
        return 0.0
    mid = statistics.median(diffs)
    mad = statistics.median(abs(d - mid) for d in diffs)
    return 1.4826 * mad / math.sqrt(2)


def _split(values: list[float]) -> list[int]:
    """Candidate change points (indices of the first entry after each), liberal on
    purpose: the merge keeps the real ones."""
    try:
        import numpy as np
        import ruptures
    except ImportError as exc:
        raise NoChangePointLibrary(
            f"change points need ruptures: pip install 'dlscale[{EXTRA}]'"
        ) from exc
    sigma = _noise(values) or (statistics.pstdev(values) or 1.0)
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    algo = ruptures.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(signal)
    ends = algo.predict(pen=sigma * sigma * math.log(len(values)))
    return [e for e in ends if e < len(values)]


def _segments(values: list[float], cuts: list[int]) -> list[list[float]]:
    bounds = [0, *cuts, len(values)]
    return [values[a:b] for a, b in zip(bounds, bounds[1:])]


def change_points(
    values: list[float], min_change: float, max_p: float = MAX_P, window: int = WINDOW
) -> list[ChangePoint]:
    """The change points of a series (its order is time's) among its last `window` values:
    each splits it where the segments either side differ significantly (p < max_p) by at
    least `min_change` (a fraction, e.g. the check's tolerance); its index is the whole
    series'. Raises NoChangePointLibrary without ruptures."""
    skipped = max(0, len(values) - window)
    values = values[skipped:]
    if len(values) < 2 * MIN_SEGMENT:
        return []
    return [
        ChangePoint(c.index + skipped, c.before, c.after, c.p)
        for c in _found(values, min_change, max_p)
    ]


def _found(values: list[float], min_change: float, max_p: float) -> list[ChangePoint]:
    cuts = _split(values)
    while cuts:
        segs = _segments(values, cuts)
        scored = []
        for i, cut in enumerate(cuts):
            left, right = segs[i], segs[i + 1]
            test = welch(left, right)
            p = test.p if test is not None else 1.0
            before, after = statistics.fmean(left), statistics.fmean(right)
            size = abs(after / before - 1) if before else math.inf
            scored.append((cut, p, size, before, after))
        # Otava's merge: drop the weakest (least significant, then smallest) and look again
        weak = [s for s in scored if s[1] >= max_p or s[2] < min_change]
        if not weak:
            return [ChangePoint(cut, before, after, p) for cut, p, _, before, after in scored]
        worst = max(weak, key=lambda s: (s[1], -s[2]))
        cuts.remove(worst[0])
    return []
