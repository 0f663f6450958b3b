"""`dlscale check --run`: the study's runs made a round at a time until every point is
decided or the budget is spent (sequential testing, decide.py's rule at each look).

Against a fixed baseline (a bundle, an experiment measured earlier) the first round runs
the spec's repetitions and each later round adds one to each undecided point. With
`interleave` (a baseline measured in this store, whose runs can be repeated from their
records), each round runs one repetition of the study's point and one repeat of the
baseline's run next to it, in ABBA order (A B, then B A; which comes first in each two
rounds at random), so the machine's drift and other load hit both sides alike; the pairs
are judged. A baseline's run repeated now must still be the baseline: where its repeat
reports other software or another device than the original (a library upgraded in place),
that point is not judged. A pair one of whose runs other work disturbed (its interference
record past results/disturbed.py's thresholds) is left out of the judging, so the point
stays undecided and gets another round in its place, within the same budget; the check
says how many were left out and why (`--disturbed count` counts them instead).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...backends.base import Backend
from ...config.spec import LoadedSpec
from ...launching.plan import plan
from ...runs import UNSUBMITTED, State
from ...study import rerun, submit
from ...tracking.store import Store
from .. import analysis, disturbed
from ..compare import differences, env_facts, partners
from ..points import Point
from .check import (
    UNDECIDED,
    WALL,
    Baseline,
    Measure,
    check,
    measures_of,
    point_name,
    run_value,
)

# What a baseline's run and its repeat may differ in and still measure the same thing:
# where the job ran (node names) and dlscale's own version. Anything else (device,
# driver, library versions, launcher) is another baseline.
MAY_DIFFER = ("nodes", "dlscale")


@dataclass(frozen=True)
class Budget:
    repetitions: int  # most repetitions a side of one point (pairs, interleaved)
    seconds: float  # most wall time for the rounds; a round that would pass it is not begun


@dataclass
class Rounds:
    rounds: int = 0
    seconds: float = 0.0
    stopped: str = "every point was decided"
    # by point id: the study's runs made in this check, and the baseline's repeats
    ours: dict[str, list[str]] = field(default_factory=dict)
    theirs: dict[str, list[str]] = field(default_factory=dict)
    not_baseline: dict[str, str] = field(default_factory=dict)  # point name: why
    run_ids: list[str] = field(default_factory=list)  # every run this check made
    # Each two rounds are A B then B A (drift hits both sides alike), the block's order at
    # random: load with a rhythm of its own (another check beside this one) cannot line
    # up with one side, round after round.
    flips: list[bool] = field(default_factory=list)
    # pairs left out because a run in them was disturbed: point name -> each pair's reasons
    repeat_disturbed: bool | None = True  # None: as each point's measure has it
    left_out: dict[str, list[list[str]]] = field(default_factory=dict)

    def study_first(self) -> bool:
        block, second = divmod(self.rounds, 2)
        while len(self.flips) <= block:
            self.flips.append(random.random() < 0.5)
        return self.flips[block] == bool(second)

    def paired(
        self, store: Store, names: dict[str, str], measures: dict[str, Measure] | None = None
    ) -> dict[str, tuple]:
        """By point name, the values (by the point's measure in `measures`, by name; else
        the clock) of the pairs whose two runs both completed and measured it."""
        ids = [i for d in (self.ours, self.theirs) for rids in d.values() for i in rids]
        summaries = analysis.summaries_of(store, ids)

        def value(rid: str, measure: Measure) -> float | None:
            row = store.run(rid)
            if row["state"] != State.COMPLETED:
                return None
            return run_value(summaries.get(rid) or {}, measure)

        judged = disturbed.judge(store, ids) if self.repeat_disturbed is not False else None
        out = {}
        self.left_out = {}
        for pid, mine in self.ours.items():
            name = names.get(pid, pid)
            measure = (measures or {}).get(name, WALL)
            # None: as the point's measure has it (the clock is what other work moves)
            repeat = (
                measure.name == "wall" if self.repeat_disturbed is None else self.repeat_disturbed
            )
            kept = []
            for x, y in zip(mine, self.theirs.get(pid, [])):
                a, b = value(x, measure), value(y, measure)
                if a is None or b is None:
                    continue
                said = (
                    [w for r in (x, y) for w in judged.disturbed.get(r, [])]
                    if judged and repeat
                    else []
                )
                if said:
                    self.left_out.setdefault(name, []).append(said)
                    continue
                kept.append((a, b))
            out[name] = ([a for a, _ in kept], [b for _, b in kept])
        return out

    def disturbed_lines(self) -> list[str]:
        """One line a point whose pairs a disturbed run left out: how many, and the first
        pair's reasons."""
        return [
            f"{name}: {len(pairs)} pair(s) left out and repeated, a run in each disturbed "
            f"by other work (the first: {'; '.join(pairs[0])})"
            for name, pairs in sorted(self.left_out.items())
        ]


def _with_repetitions(loaded: LoadedSpec, n: int) -> LoadedSpec:
    exp = loaded.spec.experiment.model_copy(update={"repetitions": n})
    return loaded.model_copy(update={"spec": loaded.spec.model_copy(update={"experiment": exp})})


def point_id_of(store: Store, p: Point) -> str:
    return str(store.run(p.run_ids[0])["point_id"])


def run_rounds(
    store: Store,
    loaded: LoadedSpec,
    backend: Backend,
    baseline: Baseline,
    tolerance: float,
    budget: Budget,
    interleave: bool,
    wait: Callable[[list[str]], None],
    backend_for: Callable[[str], Backend],
    say: Callable[[str], None],
    measure: Measure = WALL,
    repeat_disturbed: bool | None = True,
) -> Rounds:
    """Rounds of runs until every matched point is decided (by `measure`) or the budget is
    spent."""
    name = loaded.spec.experiment.name
    out = Rounds(repeat_disturbed=repeat_disturbed)
    start = time.monotonic()
    if interleave:  # each point's first repetition stored (planned): the points to pair
        first = [r for r in plan(loaded).runs if r.repetition == 0 and not r.comm_benchmark]
        store.add_runs(first, rows=False)
    else:  # the spec's own repetitions first, all at once
        report = submit(store, loaded, backend)
        ids = [r.run_id for r in report.all_runs]
        say(f"round 1: the spec's {len(ids)} run(s)")
        _round(wait, out, start, ids)
    while True:
        current = analysis.points(store, name)
        pairs, _, _ = partners(current, baseline.points)
        names = {point_id_of(store, p): point_name(p) for p, _ in pairs}
        paired = (
            out.paired(store, names, measures_of(current, baseline, measure))
            if interleave
            else None
        )
        if interleave:
            out.not_baseline.update(_repeats_changed(store, out.theirs, names))
        verdicts = {v.name: v for v in check(current, baseline, tolerance, paired, measure)}
        todo = []
        for p, b in pairs:
            pid, v = point_id_of(store, p), verdicts[point_name(p)]
            made = len(out.ours.get(pid, [])) if interleave else _made(store, name, pid)
            first_round = interleave and pid not in out.ours
            if point_name(p) in out.not_baseline or made >= budget.repetitions:
                continue
            if first_round or v.outcome == UNDECIDED:
                todo.append((p, b, pid))
        if not todo:
            if any(v.outcome == UNDECIDED for v in verdicts.values()):
                out.stopped = f"the budget of {budget.repetitions} repetitions a side was spent"
            return out
        pace = out.seconds / out.rounds if out.rounds else 0.0
        if out.rounds and time.monotonic() - start + pace > budget.seconds:
            out.stopped = (
                f"another round would pass the time budget ({budget.seconds / 60:g} minutes)"
            )
            return out
        ids = _submit_round(store, loaded, backend, todo, interleave, backend_for, out)
        say(
            f"round {out.rounds + 1}: {len(todo)} point(s) undecided, {len(ids)} run(s)"
            + (", the baseline's repeated between the study's" if interleave else "")
        )
        _round(wait, out, start, ids)


def _made(store: Store, experiment: str, point_id: str) -> int:
    """The point's runs handed to the backend, whatever became of them (failed ones count:
    a budget is of attempts)."""
    return sum(
        r["point_id"] == point_id and r["state"] not in UNSUBMITTED for r in store.runs(experiment)
    )


def _round(wait: Callable[[list[str]], None], out: Rounds, start: float, ids: list[str]) -> None:
    out.run_ids += ids
    if ids:
        wait(ids)
    out.rounds += 1
    out.seconds = time.monotonic() - start


def _submit_round(
    store: Store,
    loaded: LoadedSpec,
    backend: Backend,
    todo: list[tuple[Point, Point, str]],
    interleave: bool,
    backend_for: Callable[[str], Backend],
    out: Rounds,
) -> list[str]:
    """One more repetition of each point (and, interleaved, a repeat of the baseline's run
    beside it: A B this round, B A the next), in the queue's order."""
    ids: list[str] = []
    name = loaded.spec.experiment.name
    for _, b, pid in todo:
        have = _made(store, name, pid)
        more = _with_repetitions(loaded, have + 1)
        rid = next(r.run_id for r in plan(more).runs if r.point_id == pid and r.repetition == have)

        def study_side(more: LoadedSpec = more, rid: str = rid, pid: str = pid) -> None:
            if submit(store, more, backend, only={rid}).all_runs:
                out.ours.setdefault(pid, []).append(rid)
                ids.append(rid)

        def baseline_side(b: Point = b, pid: str = pid) -> None:
            originals = b.completed_run_ids
            k = len(out.theirs.get(pid, []))
            new_id, _ = rerun(store, originals[k % len(originals)], backend_for)
            out.theirs.setdefault(pid, []).append(new_id)
            ids.append(new_id)

        sides: list[Callable[[], None]] = [study_side]
        if interleave and b.completed_run_ids:
            sides.append(baseline_side)
        for side in sides if out.study_first() else sides[::-1]:
            side()
    return ids


def _repeats_changed(
    store: Store, theirs: dict[str, list[str]], names: dict[str, str]
) -> dict[str, str]:
    """Points whose baseline runs, repeated now, report other software or another device
    than when they were measured: the repeat no longer measures the baseline."""
    out = {}
    for pid, repeats in theirs.items():
        done = [r for r in repeats if store.run(r)["state"] == State.COMPLETED]
        if not done:
            continue
        originals = [str(store.run(r)["rerun_of"]) for r in done]
        changed = {
            k: v
            for k, v in differences(env_facts(store, originals), env_facts(store, done)).items()
            if k not in MAY_DIFFER
        }
        if changed:
            out[names.get(pid, pid)] = (
                "the baseline's runs, repeated now, report other software or another "
                "device than when they were measured ("
                + "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
                + "): changed in place, so repeating them no longer measures the baseline; "
                "check against its recorded results (without --interleave) or the history "
                "(--window)"
            )
    return out


def seconds_by_point(store: Store, rounds: Rounds, current: list[Point]) -> dict[str, float]:
    """By point name, the wall time of the runs this check made for it (both sides): what
    a run's trainer measured of itself, else its job's time from start to end (a declared
    framework read from its log measures no wall time of its own)."""
    made = set(rounds.run_ids)
    summaries = store.records.last("summary", list(made))

    def seconds(rid: str) -> float:
        wall = (summaries.get(rid) or {}).get("total_wall_s")
        if isinstance(wall, (int, float)):
            return float(wall)
        row = store.run(rid)
        job = store.jobs.get(row["backend"], row["job_id"]) or {}
        if isinstance(job.get("elapsed"), (int, float)):  # the scheduler's own count
            return float(job["elapsed"])  # type: ignore[arg-type]
        started, ended = job.get("started"), job.get("ended")
        return max(0.0, ended - started) if started and ended else 0.0

    out = {}
    for p in current:
        pid = point_id_of(store, p) if p.run_ids else None
        ids = [r for r in p.run_ids if r in made] + rounds.theirs.get(pid or "", [])
        out[point_name(p)] = sum(seconds(r) for r in ids)
    return out
