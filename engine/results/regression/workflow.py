"""`dlscale check` as the engine runs it, for any front end: a study against a baseline (an
experiment, a bundle, or a window of past checks in the history), the study run first when
asked (rounds until decided, interleaved with the baseline's repeats), each point judged by
decide.py's rule, the history's lines and change points, and the outcome's exit status.
The command line only parses its options into a `Request` and prints the `Outcome`."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from ...errors import UserError
from ...io.outputs import OutputError, writing
from ...tracking.store import Store
from . import history, rounds
from .check import (
    CHOICES,
    PASSED,
    REGRESSED,
    SKIPPED,
    UNDECIDED,
    WALL,
    Baseline,
    Measure,
    Verdict,
    check,
    check_window,
    load_baseline,
    measures_of,
    point_name,
    values_of,
)
from .junit import NOT_JUDGED_TYPE, error_xml, junit_xml

NOT_JUDGED = 3  # the exit status of a check that could not judge every point
ORDER = {REGRESSED: 0, UNDECIDED: 1, SKIPPED: 2, PASSED: 3}


@dataclass(frozen=True)
class Request:
    """What a check was asked: its options, as the command line names them."""

    spec: str
    baseline: str | None = None
    window: int | None = None
    history: str | None = None
    label: str | None = None
    tolerance: float = 0.05
    run: bool = False
    interleave: bool = False
    max_repetitions: int = 10
    max_minutes: float = 10.0
    measure: str = "auto"  # check.CHOICES
    # a pair with a disturbed run: "repeat" (left out) or "count"; None: repeat when judged
    # by wall time, count when by CPU time (what other work moves less), point by point
    disturbed: str | None = None
    backend: str | None = None
    profile_path: str | None = None
    partition: str | None = None

    @property
    def repeats_disturbed(self) -> bool | None:
        """Whether a pair with a disturbed run is left out and repeated; None: as each
        point's measure has it (repeated when judged by wall time)."""
        if self.disturbed is None and self.measure == "auto":
            return None
        return (self.disturbed or ("repeat" if self.measure == "wall" else "count")) == "repeat"


@dataclass(frozen=True)
class Record:
    """The history a check reads and what it adds: its path, its entries as read, this
    check's entries (one a point) and the site they are of."""

    path: str
    kept: history.History
    entries: list[history.Entry]
    site: str


@dataclass
class Outcome:
    """A check's answer: each point's verdict, why the check judged less than everything
    (None when it judged all), the history's lines it adds and the change points in them,
    and its exit status (0 every point passed, 1 any regressed, 3 not every point judged)."""

    name: str  # the study's experiment
    base: Baseline
    tolerance: float
    verdicts: list[Verdict]
    # where the baseline shares no configuration with the study: the fields, with values
    differs: list[str] = field(default_factory=list)
    measure: Measure = WALL
    stopped: str | None = None  # why the runs stopped early (the budget), if they did
    window: int | None = None
    record: Record | None = None
    change_points: list[str] = field(default_factory=list)
    # the two sides' code where it differs beyond the study's spec (baseline_code)
    code: list[str] = field(default_factory=list)
    # by point, the pairs a disturbed run left out, and what disturbed them
    disturbed: list[str] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Whether the baseline shares any configuration with the study."""
        return not self.differs

    @property
    def counts(self) -> dict[str, int]:
        return {o: sum(v.outcome == o and v.in_study for v in self.verdicts) for o in ORDER}

    @property
    def why_not_judged(self) -> str | None:
        counts = self.counts
        if not self.shared:
            return (
                f"nothing judged: the baseline {self.base.name} shares no configuration with "
                f"the study {self.name}: {'; '.join(self.differs)}; give the baseline of "
                "this study"
            )
        if counts[REGRESSED]:
            return None
        if counts[UNDECIDED] or counts[SKIPPED] or not any(v.in_study for v in self.verdicts):
            return (
                f"not every point was judged ({counts[UNDECIDED]} undecided, "
                f"{counts[SKIPPED]} not judged): each says above what would judge it"
            )
        return None

    def next_step(self, asked: Request) -> str | None:
        """One line: the command that would judge the points left undecided (the user's
        spec and baseline quoted as a shell would need them)."""
        if not self.counts[UNDECIDED]:
            return None
        against = (
            f" --baseline {shlex.quote(asked.baseline)}"
            if asked.baseline
            else f" --window {asked.window} --history {shlex.quote(asked.history or '')}"
            if asked.window
            else ""
        )
        command = f"dlscale check {shlex.quote(asked.spec)}{against}"
        # a point no number of the study's repetitions decides: its fixed baseline is the
        # noise (a bundle, a history window), which only a baseline measured again narrows
        stuck = not self.base.runnable and any(
            v.outcome == UNDECIDED and v.in_study and v.needed is None and v.decision
            for v in self.verdicts
        )
        tail = (
            "; a point limited by its baseline's own spread (said above) needs a baseline "
            "with more repetitions"
            if stuck
            else ""
        )
        if not asked.run:
            beside = self.base.runnable  # its runs can be repeated between the study's
            return (
                f"next: {command} --run{' --interleave' if beside else ''} measures each "
                f"undecided point again, a round at a time"
                f"{' between the baseline runs (ABBA)' if beside else ''}, until it is "
                f"decided (at most --max-repetitions {asked.max_repetitions} and "
                f"--max-minutes {asked.max_minutes:g}){tail}"
            )
        return (
            f"next: a larger budget decides more: {command} --run"
            f"{' --interleave' if asked.interleave else ''} --max-repetitions "
            f"{2 * asked.max_repetitions} --max-minutes {2 * asked.max_minutes:g} (each "
            f"undecided point says above what it needs){tail}"
        )

    @property
    def exit_code(self) -> int:
        return 1 if self.counts[REGRESSED] else NOT_JUDGED if self.why_not_judged else 0

    def junit(self, seconds: float) -> bytes:
        """The JUnit XML of this outcome (`seconds`: how long the check took)."""
        if not self.shared:
            # exit 3, not judged (bad input, exit 2, is refused before any outcome)
            return error_xml(self.name, self.why_not_judged or "", seconds, NOT_JUDGED_TYPE)
        props = {
            "baseline": self.base.name,
            "baseline_source": self.base.source,
            "tolerance": f"{self.tolerance:g}",
            "statistic": self.measure.statistic,
            **({"window": str(self.window)} if self.window else {}),
            **({"stopped": self.stopped} if self.stopped else {}),
            **({"code": "; ".join(self.code)} if self.code else {}),
            **({"disturbed": "; ".join(self.disturbed)} if self.disturbed else {}),
        }
        return junit_xml(self.name, self.base.name, self.verdicts, props)


def run_check(
    store: Store,
    asked: Request,
    wait: Callable[[Store, Any, list[str]], None],
    say: Callable[[str], None],
) -> Outcome:
    """The check, whole: bad input refused before anything runs (UserError), the study run
    when asked (`wait` follows its runs, `say` prints each round's line), then judged."""
    from ...config.spec import load_spec
    from ...where import backend_for
    from ..compare import site_of

    if (asked.baseline is None) == (asked.window is None):
        raise UserError("give --baseline EXPERIMENT|BUNDLE or --window N (with --history), one")
    if asked.window is not None and asked.history is None:
        raise UserError("--window N takes its baseline from --history FILE: give that too")
    if asked.interleave and not asked.run:
        raise UserError("--interleave repeats the baseline's runs between the study's: give --run")
    backend = backend_for(asked.backend, asked.profile_path, asked.partition)
    loaded = load_spec(asked.spec)
    name = loaded.spec.experiment.name
    kept = history.read(asked.history) if asked.history else None  # bad lines refused first
    base = _baseline(store, asked, name)
    differs = unshared_fields(loaded, base) if asked.baseline is not None else []
    code = baseline_code(store, base, asked) if asked.interleave else []
    outcome = Outcome(
        name, base, asked.tolerance, [], differs, CHOICES[asked.measure], window=asked.window,
        code=code,
    )  # fmt: skip
    if outcome.shared:
        _judge(store, asked, loaded, base, backend, kept, outcome, wait, say)
    site = site_of(store, name)
    if asked.history:
        assert kept is not None
        entries = _entries(outcome.verdicts, site, asked.label, base.name, name, outcome.measure)
        outcome.record = Record(asked.history, kept, entries, site)
        outcome.change_points = _change_points(
            outcome.record, outcome.verdicts, asked.tolerance, outcome.measure
        )
    return outcome


def _baseline(store: Store, asked: Request, name: str) -> Baseline:
    if asked.baseline is None:
        return Baseline(f"the last {asked.window} checks", f"history {asked.history}", [])
    base = load_baseline(store, asked.baseline)
    if base.name == name:
        raise UserError(
            f"--baseline {asked.baseline}: the study itself ({name}); give an earlier "
            "experiment under another name, or a bundle exported before the change"
        )
    if asked.interleave and not base.runnable:
        raise UserError(
            f"--baseline {asked.baseline}: --interleave repeats the baseline's runs here, and "
            f"these were measured elsewhere ({base.source}); drop --interleave to judge "
            "against their recorded results"
        )
    return base


def baseline_code(store: Store, base: Baseline, asked: Request) -> list[str]:
    """Where the baseline's declared script has changed since it was measured: what its
    repeats will run (the kept copy), one line each. Refused (UserError) where they could
    not run what was measured: an edit in place is never measured as the baseline."""
    from ...launching import kept_code
    from ...runs import declaration

    said: dict[str, str] = {}
    for p in base.points:
        for rid in p.completed_run_ids:
            change = kept_code.change_of(store.home, declaration(store.run(rid)))
            if change is None or str(change.script) in said:
                continue
            if change.kept is None:
                raise UserError(
                    f"--baseline {asked.baseline}: {change.said()}, and no copy of what its "
                    f"runs ran is kept in {store.home / 'code'}, so --interleave would repeat "
                    f"other code as the baseline; put the measured {change.name} back (e.g. "
                    "`git stash`, or check out the baseline's commit) and check again, or "
                    "drop --interleave to judge against the baseline's recorded results"
                )
            said[str(change.script)] = (
                f"the baseline's repeats run {change.name} as it was measured (sha256 "
                f"{change.measured and change.measured[:12]}, kept in {change.kept.parent}); "
                f"the study runs today's {change.script} (sha256 "
                f"{change.now[:12] if change.now else 'unreadable'})"
            )
    return list(said.values())


def _judge(store, asked, loaded, base, backend, kept, outcome, wait, say) -> None:
    """The study's points (run first when asked) judged against the baseline or the
    window, into `outcome`."""
    from ...tracking import follow
    from .. import analysis
    from ..compare import site_of

    name = outcome.name
    done = None
    if asked.run:
        budget = rounds.Budget(asked.max_repetitions, 60 * asked.max_minutes)
        done = _run(store, loaded, base, asked, backend, budget, wait, say)
    else:
        follow.refresh(store)
    current = analysis.points(store, name)
    if not any(p.throughput.n for p in current) and done is None:
        raise UserError(
            f"{asked.spec}: experiment {name} has no completed run in the store "
            f"({store.home}); give --run to run it"
        )
    if asked.window is not None:
        assert kept is not None
        site = site_of(store, name)
        series = {}
        for p in current:
            got = kept.series(site, point_name(p), p.device, outcome.measure.at(p).statistic)
            series[point_name(p)] = [e.value for e in got if e.value]
        where = f"--history {asked.history}"
        outcome.verdicts = check_window(
            current, series, asked.window, asked.tolerance, where, outcome.measure
        )
    else:
        paired = None
        if done is not None and asked.interleave:
            names = {rounds.point_id_of(store, p): point_name(p) for p in current if p.run_ids}
            paired = done.paired(store, names, measures_of(current, base, outcome.measure))
            outcome.disturbed = done.disturbed_lines()
        outcome.verdicts = check(current, base, asked.tolerance, paired, outcome.measure)
    if done is not None:
        outcome.stopped = done.stopped
        took = rounds.seconds_by_point(store, done, current)
        for v in outcome.verdicts:
            v.seconds = took.get(v.name, v.seconds)
            why = done.not_baseline.get(v.name)
            if why is not None:
                v.outcome, v.why = SKIPPED, why


def unshared_fields(loaded, base: Baseline) -> list[str]:
    """Where no configuration of the study is one of the baseline's (before any run), what
    differs: each field whose values the two never share, with those values ("batch: the
    study's 64, the baseline's 128"); [] when a configuration is shared."""
    from ...launching.plan import plan
    from ..compare import MATCH_FIELDS, match_key

    have = {match_key(b) for b in base.points}
    planned = {
        tuple(
            r.training.get("lr_schedule") if f == "lr_schedule" else getattr(r, f)
            for f in MATCH_FIELDS
        )
        for r in plan(loaded).runs
    }
    if planned & have:
        return []

    def values(keys: set[tuple], i: int) -> str:
        return ", ".join(sorted({str(k[i]) for k in keys})) or "none"

    apart = [
        f"{name}: the study's {values(planned, i)}, the baseline's {values(have, i)}"
        for i, name in enumerate(MATCH_FIELDS)
        if not {k[i] for k in planned} & {k[i] for k in have}
    ]
    fields = ", ".join(MATCH_FIELDS)
    return apart or [f"each field has a value on both sides, never in one combination ({fields})"]


def _run(store, loaded, base, asked, backend, budget, wait, say) -> rounds.Rounds:
    """The study's runs: one round against a window, else rounds until decided."""
    from ... import study
    from ...backends.registry import make_backend
    from ...config.profile import load_profile

    profile = load_profile(asked.profile_path) if asked.profile_path else None
    target = make_backend(backend, store, profile, asked.partition)

    def follow_runs(ids: list[str]) -> None:
        wait(store, target, ids)

    if asked.window is not None:  # the window's spread is between checks: one round is all
        report = study.submit(store, loaded, target)
        ids = [r.run_id for r in report.all_runs]
        follow_runs(ids)
        return rounds.Rounds(rounds=1, run_ids=ids)
    return rounds.run_rounds(
        store,
        loaded,
        target,
        base,
        asked.tolerance,
        budget,
        asked.interleave,
        follow_runs,
        lambda name: make_backend(name, store),
        say,
        CHOICES[asked.measure],
        repeat_disturbed=asked.repeats_disturbed,
    )


def _entries(
    verdicts: list[Verdict],
    site: str,
    label: str | None,
    reference: str,
    experiment: str,
    measure: Measure,
) -> list[history.Entry]:
    """This check's lines of the history, one a point (written by `write_records`)."""
    date = history.now()
    entries = []
    for v in verdicts:
        p = v.point
        if p is None:
            continue
        judged_by = v.measure or measure.at(p)  # auto's choice: the series it joins
        values = values_of(p, judged_by)
        d = v.decision
        entries.append(
            history.Entry(
                date=date,
                label=label or date,
                site=site,
                experiment=experiment,
                point=v.name,
                device=p.device,
                unit=p.unit,
                statistic=judged_by.statistic,
                values=values,
                value=fmean(values) if values else None,
                outcome=v.outcome,
                reference=reference,
                ratio=d.ratio if d else None,
                low=d.low if d else None,
                high=d.high if d else None,
                test_slowdown=p.test_slowdown,
            )
        )
    return entries


def _change_points(
    record: Record, verdicts: list[Verdict], tolerance: float, measure: Measure
) -> list[str]:
    """Change points over each point's history at this site (this check's lines included,
    as they will be written), among its last WINDOW checks: bounded work, whatever the
    history's length."""
    from .changepoints import WINDOW, NoChangePointLibrary, change_points

    by_key: dict[tuple, list] = {}  # each point's series, the history read once
    for e in [*record.kept.entries, *record.entries]:
        if e.value:
            by_key.setdefault(e.key, []).append(e)
    lines = []
    for v in verdicts:
        if v.point is None:
            continue
        judged_by = v.measure or measure.at(v.point)  # the series it joined
        series = by_key.get((record.site, v.name, v.point.device, judged_by.statistic), [])
        values = [e.value for e in series]
        try:
            found = change_points(values, tolerance)
        except NoChangePointLibrary as exc:
            return [f"change points: not computed: {exc}"]
        searched = f", the last {WINDOW} searched" if len(values) > WINDOW else ""
        for c in found:
            at = series[c.index]
            lines.append(
                f"change point in the history of {v.name}: at {at.label} ({at.date}, check "
                f"{c.index + 1} of {len(values)}{searched}): {c.before:,.1f} -> "
                f"{c.after:,.1f} {v.point.unit}{judged_by.per} ({100 * c.change:+.1f}%, "
                f"Welch p={c.p:.2g})"
            )
    return lines


def write_records(junit: str | None, data: bytes | None, record: Record | None) -> str | None:
    """The verdict's records as one whole: the JUnit file is written under a temporary
    name, the history's lines appended (whole, after a missing final newline is
    repaired), then the JUnit file renamed into place. A failure before the lines are
    appended leaves neither (OutputError: nothing was written, exit 2); once they are there
    the verdict stands, even if the JUnit file cannot take its place: then the returned
    line says so (None when all was written)."""
    if junit is None or data is None:
        if record is not None:
            history.append(record.path, record.entries)
        return None
    appended = False
    try:
        with writing(junit, "--junit") as fh:
            fh.write(data)
            fh.flush()  # on the disk before the lines: a disk too full for it stops here
            os.fsync(fh.fileno())
            if record is not None:
                history.append(record.path, record.entries)
                appended = True
    except OutputError as exc:
        if not appended or record is None:
            raise
        return f"{exc}; the history's lines were added to {record.path}: the verdict above stands"
    return None
