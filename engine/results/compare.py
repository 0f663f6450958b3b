"""Two experiments side by side (from this site or imported from a bundle): their points
matched by configuration, not by site or name, and for each pair the throughput of each
with its CI95, the ratio B/A with a 95% interval, whether the difference is significant,
speedup and efficiency of each, and the environment differences that might explain it.

The statistics (stated wherever they are shown, see METHOD):
- ratio interval: Fieller's theorem for the ratio of two independent means, with the
  Welch-Satterthwaite degrees of freedom; unbounded when A's mean is not significantly
  above zero (then `high` is None).
- significance: Welch's two-sided t-test on the repetitions' throughputs (unequal
  variances), at 5%; it needs two repetitions on each side.
Both are stats.py's (the one home of the statistics).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from ..tracking.store import Store
from . import analysis
from .points import POINT_FIELDS, Point
from .rows import CompareRow, SideBySide
from .stats import Ratio, Welch, fieller, welch

# What makes two points the same measurement at two sites (not the experiment's name, the
# site or the device: those are what is compared).
MATCH_FIELDS = (*(f for f in POINT_FIELDS if f != "experiment"), "lr_schedule")
# The environment facts that may explain a difference, from each run's env record.
ENV_FACTS = {
    "device": "$.devices[0]",
    "driver": "$.driver_version",
    "versions": "$.framework_versions",
    "launcher": "$.launcher",
    "comm_backend": "$.backend",
    "nodes": "$.nodes",
    "dlscale": "$.dlscale_version",
}
ALPHA = 0.05
RATIO_METHOD = "Fieller's 95% interval (Welch-Satterthwaite df)"
TEST_METHOD = "Welch's two-sided t-test on the repetitions, 5% level"


def match_key(p: Point) -> tuple:
    return tuple(getattr(p, f) for f in MATCH_FIELDS)


def partners(
    current: list[Point], baseline: list[Point]
) -> tuple[list[tuple[Point, Point]], list[Point], list[Point]]:
    """Points matched with a baseline's (another experiment's) by configuration, the same
    device first: (pairs, those without a partner, the baseline's without one)."""
    pool: dict[tuple, list[Point]] = {}
    for b in baseline:
        pool.setdefault(match_key(b), []).append(b)
    pairs, lonely = [], []
    for p in current:
        candidates = pool.get(match_key(p), [])
        if not candidates:
            lonely.append(p)
            continue
        b = next((c for c in candidates if c.device == p.device), candidates[0])
        candidates.remove(b)
        pairs.append((p, b))
    return pairs, lonely, [b for bs in pool.values() for b in bs]


@dataclass
class Pair:
    a: Point | None
    b: Point | None
    ratio: Ratio | None = None
    test: Welch | None = None
    env_differences: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class Comparison:
    a: str
    b: str
    sites: tuple[str, str]
    pairs: list[Pair]  # matched first, then A's unmatched, then B's
    env_differences: dict[str, tuple[str, str]]  # over the whole experiments

    @property
    def matched(self) -> list[Pair]:
        return [p for p in self.pairs if p.a is not None and p.b is not None]


def env_facts(store: Store, run_ids: list[str]) -> dict[str, str]:
    """Each fact's distinct values over these runs, as one text each."""
    seen: dict[str, set[str]] = {}
    for env in store.records.last_fields("env", ENV_FACTS, run_ids).values():
        for fact, value in env.items():
            if value is None:
                continue
            if fact == "versions":
                for lib, v in json.loads(value).items():
                    if v is not None:
                        seen.setdefault(lib, set()).add(str(v))
            elif fact == "nodes":
                names = json.loads(value)
                seen.setdefault("nodes", set()).add(f"{len(names)}: {','.join(names)}")
            else:
                seen.setdefault(fact, set()).add(str(value))
    return {k: ", ".join(sorted(v)) for k, v in seen.items()}


def differences(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {k: (a.get(k, "-"), b.get(k, "-")) for k in sorted({*a, *b}) if a.get(k) != b.get(k)}


def site_of(store: Store, experiment: str) -> str:
    """An experiment's site: its bundle's, or this site's name for one measured here."""
    from .bundles import site_measured_at

    row = next((e for e in store.experiments() if e["name"] == experiment), None)
    if row is not None and row.get("site"):
        return row["site"]
    runs = store.runs(experiment)
    imported = next((r["site"] for r in runs if r.get("site")), None)  # a rebuilt store's
    return imported or site_measured_at(runs)


def compare(store: Store, a: str, b: str) -> Comparison:
    pa, pb = analysis.points(store, a), analysis.points(store, b)
    matched, alone, left = partners(pa, pb)
    pairs = [
        Pair(
            p,
            q,
            fieller(p.throughputs, q.throughputs),
            welch(p.throughputs, q.throughputs),
            differences(
                env_facts(store, p.completed_run_ids), env_facts(store, q.completed_run_ids)
            ),
        )
        for p, q in matched
    ]
    lonely_a = [Pair(p, None) for p in alone]
    lonely_b = [Pair(None, q) for q in left]
    overall = differences(
        env_facts(store, [r for p in pa for r in p.completed_run_ids]),
        env_facts(store, [r for p in pb for r in p.completed_run_ids]),
    )
    return Comparison(
        a, b, (site_of(store, a), site_of(store, b)), pairs + lonely_a + lonely_b, overall
    )


def rows(c: Comparison) -> list[CompareRow]:
    """One plain dict per pair (the JSON output, and what a front end shows side by side):
    both points' numbers, the ratio B/A with its interval, the test and env differences."""
    out = []
    for pair in c.pairs:
        one = pair.a or pair.b
        assert one is not None
        row: dict[str, Any] = {f: getattr(one, f) for f in MATCH_FIELDS}  # CompareRow's
        row["matched"] = pair.a is not None and pair.b is not None
        for side, p, site in (("a", pair.a, c.sites[0]), ("b", pair.b, c.sites[1])):
            d = p.as_dict() if p is not None else {}
            row[side] = (
                {
                    "experiment": p.experiment,
                    "site": site,
                    "device": p.device,
                    "n": d["n"],
                    "throughput": d["throughput"],
                    "throughput_ci95": d["throughput_ci95"],
                    "throughput_cv": d["throughput_cv"],
                    "noisy": d["noisy"],
                    "speedup": d["speedup"],
                    "efficiency": d["efficiency"],
                    "state": d["state"],
                    "test_slowdown": d["test_slowdown"],
                }
                if p is not None
                else None
            )
        row["ratio"] = pair.ratio.value if pair.ratio else None
        row["ratio_low"] = pair.ratio.low if pair.ratio else None
        row["ratio_high"] = pair.ratio.high if pair.ratio else None
        row["p_value"] = pair.test.p if pair.test else None
        row["significant"] = pair.test.significant(ALPHA) if pair.test else None
        row["env_differences"] = {k: list(v) for k, v in pair.env_differences.items()}
        out.append(cast("CompareRow", row))
    return out


def side_by_side(store: Store, a: str, b: str) -> SideBySide:
    """Everything a front end (the TUI's Results screen) needs to show two experiments side
    by side, as plain data: the experiments, their sites, the methods named, one row per
    point pair (rows()), and the environment differences over the whole experiments."""
    c = compare(store, a, b)
    return {
        "a": c.a,
        "b": c.b,
        "sites": list(c.sites),
        "ratio_method": RATIO_METHOD,
        "test_method": TEST_METHOD,
        "rows": rows(c),
        "env_differences": {k: list(v) for k, v in c.env_differences.items()},
    }
