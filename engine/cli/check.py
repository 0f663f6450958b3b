"""`dlscale check`: a study against a baseline, for CI. Exit 0 when every point of the study
passed, 1 when any regressed, 2 on bad input, 3 when none regressed but not every point
could be judged (undecided within the budget, or nothing to judge it against): a check
that judged nothing never passes; 4 when the check could not be made (a fault of the
world: the store, the disk, the scheduler) and 70 on an internal error, so that neither
reads as a regression. A JUnit XML file for every outcome, bad input included; the history
of checks (`--history`) gains a line per point, and names change points. The history's
lines and the JUnit file are written as one whole with the verdict (`_record`)."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import click

from ..config.quantities import MINUTES
from ..errors import DlscaleError, UserError
from ..io.outputs import OutputError, writing
from ..results.regression.check import (
    PASSED,
    REGRESSED,
    SKIPPED,
    STATISTIC,
    UNDECIDED,
    Verdict,
    point_name,
    values_of,
)
from ..results.regression.decide import LEVEL, rule_text
from ..results.regression.junit import error_xml, junit_xml, write_junit
from ..tracking.store.health import fault_message
from ..where import given_as
from .console import err, out
from .options import InputName, InputPath, OutputPath, store_of
from .runs import backend_options

_SHOWN = 20  # lines of points a summary shows (regressions always all)
NOT_JUDGED = 3  # the exit status of a check that could not judge every point
NOT_CHECKED = 4  # a fault of the world stopped the check: not a regression
ORDER = {REGRESSED: 0, UNDECIDED: 1, SKIPPED: 2, PASSED: 3}


def fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """5%, 0.05 or 5 percent, as a fraction in [0, 0.5): the rule asks whether a slowdown
    of twice the tolerance is ruled out (results/decide.py)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", value or "")
    number = float(m[1]) / (100 if m[2] else 1) if m else None
    if number is None or not 0 <= number < 0.5:
        raise click.BadParameter(
            f"{value!r} (from {given_as(ctx, param.name or '')}): give a percentage like 5% "
            "or a fraction like 0.05, below 50% (a pass rules out twice it)",
            ctx,
            param,
        )
    return number


def _junit_in(args: list[str]) -> str | None:
    """--junit's value from a command line that did not parse (its JUnit file says why)."""
    for i, a in enumerate(args):
        if a == "--junit" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--junit="):
            return a.split("=", 1)[1]
    return None


class CheckCommand(click.Command):
    """A command line that does not parse is bad input too: its JUnit file says so."""

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        given = list(args)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            path = _junit_in(given)
            if path and exc.exit_code == 2:
                _write_error(path, "the command line", exc.format_message())
            raise


def _write_error(path: str, what: str, message: str) -> None:
    try:
        write_junit(path, error_xml(what, message))
    except UserError:
        pass  # the error already said is the one to show


@click.command(cls=CheckCommand)
@click.argument("spec", type=InputPath(dir_okay=False))
@click.option(
    "--baseline",
    type=InputName(),
    default=None,
    help="an experiment in the store, or a bundle file from `dlscale export bundle`",
)
@click.option(
    "--window",
    type=click.IntRange(3, 10_000),
    default=None,
    help="instead of --baseline: each point against its last N checks in --history",
)
@click.option(
    "--history",
    type=OutputPath(read=True),
    default=None,
    help="a file of every check's results (one JSON line a point): appended to, and read "
    "for --window and for change points",
)
@click.option(
    "--label", default=None, help="this check's name in the history (a commit, a version)"
)
@click.option(
    "--tolerance",
    default="5%",
    show_default=True,
    callback=fraction,
    help="the slowdown where the rule is indifferent: regressed when the ratio is below "
    f"1 - this and its {100 * LEVEL:g}% interval below 1; passed when it is at or above "
    "1 - this and its interval above 1 - twice this (below 50%)",
)
@click.option(
    "--run",
    "run_study",
    is_flag=True,
    help="run the study first, a round at a time, until every point is decided or the "
    "budget is spent; else judge its completed results",
)
@click.option(
    "--interleave",
    is_flag=True,
    help="with --run and a baseline experiment measured in this store: repeat its runs "
    "between the study's (ABBA) and judge the pairs",
)
@click.option(
    "--max-repetitions",
    type=click.IntRange(2, 1000),
    default=10,
    show_default=True,
    help="with --run: the most repetitions (pairs, interleaved) a point gets",
)
@click.option(
    "--max-minutes",
    type=MINUTES.option(),
    default=10.0,
    show_default=True,
    help="with --run: no round begins that would end past this",
)
@click.option("--junit", type=OutputPath(), default=None, help="write JUnit XML here")
@backend_options
@click.pass_context
def check_cmd(ctx: click.Context, spec: str, junit: str | None, **options: Any) -> None:
    """Check a study against a baseline for CI: exit 0 when every point passed, 1 when any
    regressed, 2 on bad input, 3 when not every point could be judged, 4 when the check
    could not be made, 70 on an internal error; a JUnit XML file (for every outcome) and a
    one-screen summary.

    \b
    Exit status:
      0  every point passed
      1  a point regressed
      2  bad input (refused before any work; the JUnit file says why)
      3  not every point could be judged (undecided within the budget, or nothing
         to judge it against): a check that judged nothing never passes
      4  the check could not be made: a fault of the world (the store locked or full,
         the disk full, the scheduler unreachable), said in one line
      70 an internal error (a bug; its traceback is saved, the line says where)
      130 interrupted (ctrl+c)
    """
    start = time.monotonic()
    try:
        code = _check(ctx, spec, junit, start, **options)
    except DlscaleError as exc:
        if junit and exc.exit_code in (1, 2):
            _write_error(junit, spec, str(exc))
        if exc.exit_code == 1:  # the world's fault, not a regression
            exc.exit_code = NOT_CHECKED
        raise
    except Exception as exc:
        from ..tracking.store import default_home

        home = (ctx.find_root().obj or {}).get("home")
        fault = fault_message(exc, Path(home) if home else default_home())
        if junit:
            _write_error(junit, spec, fault or f"internal error: {type(exc).__name__}: {exc}")
        if fault is None:
            raise  # a bug: the command line's internal error (exit 70)
        failed = DlscaleError(fault)
        failed.exit_code = NOT_CHECKED
        raise failed from None
    sys.exit(code)


def _check(
    ctx: click.Context,
    spec: str,
    junit: str | None,
    start: float,
    baseline: str | None,
    window: int | None,
    history: str | None,
    label: str | None,
    tolerance: float,
    run_study: bool,
    interleave: bool,
    max_repetitions: int,
    max_minutes: float,
    backend: str | None,
    profile_path: str | None,
    partition: str | None,
) -> int:
    from ..config.spec import load_spec
    from ..results import analysis
    from ..results.compare import site_of
    from ..results.regression import history as past
    from ..results.regression import rounds as check_runs
    from ..results.regression.check import Baseline, check, check_window, load_baseline
    from ..tracking import follow
    from ..where import backend_for

    if (baseline is None) == (window is None):
        raise UserError("give --baseline EXPERIMENT|BUNDLE or --window N (with --history), one")
    if window is not None and history is None:
        raise UserError("--window N takes its baseline from --history FILE: give that too")
    if interleave and not run_study:
        raise UserError("--interleave repeats the baseline's runs between the study's: give --run")
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec)
    name = loaded.spec.experiment.name
    store = store_of(ctx)
    kept = past.read(history) if history else None  # bad lines refused before any run
    if baseline is not None:
        base = load_baseline(store, baseline)
        if base.name == name:
            raise UserError(
                f"--baseline {baseline}: the study itself ({name}); give an earlier "
                "experiment under another name, or a bundle exported before the change"
            )
        if interleave and not base.runnable:
            raise UserError(
                f"--baseline {baseline}: --interleave repeats the baseline's runs here, and "
                f"these were measured elsewhere ({base.source}); drop --interleave to judge "
                "against their recorded results"
            )
    else:
        base = Baseline(f"the last {window} checks", f"history {history}", [])
    shared = _shared(loaded, base) if baseline is not None else True
    verdicts: list[Verdict]
    stopped = None
    if not shared:
        verdicts = []
    else:
        if run_study:
            budget = check_runs.Budget(max_repetitions, 60 * max_minutes)
            where = (backend, profile_path, partition)
            rounds = _run(store, loaded, base, tolerance, window, interleave, where, budget)
        else:
            follow.refresh(store)
            rounds = None
        current = analysis.points(store, name)
        if not any(p.throughput.n for p in current) and rounds is None:
            raise UserError(
                f"{spec}: experiment {name} has no completed run in the store ({store.home}); "
                "give --run to run it"
            )
        site = site_of(store, name)
        if window is not None:
            assert kept is not None
            series = {}
            for p in current:
                got = kept.series(site, point_name(p), p.device)
                series[point_name(p)] = [e.value for e in got if e.value]
            verdicts = check_window(current, series, window, tolerance, f"--history {history}")
        else:
            paired = None
            if rounds is not None and interleave:
                names = {
                    check_runs.point_id_of(store, p): point_name(p) for p in current if p.run_ids
                }
                paired = rounds.paired(store, names)
            verdicts = check(current, base, tolerance, paired)
        if rounds is not None:
            stopped = rounds.stopped
            took = check_runs.seconds_by_point(store, rounds, current)
            for v in verdicts:
                v.seconds = took.get(v.name, v.seconds)
                why = rounds.not_baseline.get(v.name)
                if why is not None:
                    v.outcome, v.why = SKIPPED, why
    site = site_of(store, name)
    record = None
    if history:
        assert kept is not None
        record = Record(history, kept, _entries(verdicts, site, label, base.name, name), site)
    return _report(name, base, verdicts, tolerance, shared, stopped, junit, start, window, record)


def _shared(loaded, base) -> bool:
    """Whether any configuration of the study is one of the baseline's (before any run)."""
    from ..launching.plan import plan
    from ..results.compare import MATCH_FIELDS, match_key

    have = {match_key(b) for b in base.points}
    for r in plan(loaded).runs:
        key = tuple(
            r.training.get("lr_schedule") if f == "lr_schedule" else getattr(r, f)
            for f in MATCH_FIELDS
        )
        if key in have:
            return True
    return False


def _run(store, loaded, base, tolerance, window, interleave, where, budget):
    """The study's runs: one round against a window, else rounds until decided."""
    from .. import study
    from ..backends.registry import make_backend
    from ..config.profile import load_profile
    from ..results.regression import rounds as check_runs
    from .console import wait_with_progress

    backend, profile_path, partition = where
    profile = load_profile(profile_path) if profile_path else None
    target = make_backend(backend, store, profile, partition)

    def wait(ids: list[str]) -> None:
        try:
            wait_with_progress(store, target, ids)
        except KeyboardInterrupt:
            sys.exit(130)

    if window is not None:  # the window's spread is between checks: one round is all
        report = study.submit(store, loaded, target)
        ids = [r.run_id for r in report.all_runs]
        wait(ids)
        return check_runs.Rounds(rounds=1, run_ids=ids)
    return check_runs.run_rounds(
        store,
        loaded,
        target,
        base,
        tolerance,
        budget,
        interleave,
        wait,
        lambda name: make_backend(name, store),
        lambda line: out.print(line, soft_wrap=True),
    )


def _entries(verdicts, site, label, reference, experiment) -> list:
    """This check's lines of the history, one a point (written by `_record`)."""
    from statistics import fmean

    from ..results.regression import history as past

    date = past.now()
    entries = []
    for v in verdicts:
        p = v.point
        if p is None:
            continue
        values = values_of(p)
        d = v.decision
        entries.append(
            past.Entry(
                date=date,
                label=label or date,
                site=site,
                experiment=experiment,
                point=v.name,
                device=p.device,
                unit=p.unit,
                statistic=STATISTIC,
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


class Record(NamedTuple):
    """The history a check reads and what it adds: its path, its entries as read, this
    check's entries (one a point) and the site they are of."""

    path: str
    kept: Any  # results.regression.history.History
    entries: list
    site: str


def _report(
    name, base, verdicts, tolerance, shared, stopped, junit, start, window, record: Record | None
) -> int:
    counts = {o: sum(v.outcome == o and v.in_study for v in verdicts) for o in ORDER}
    out.print(
        f"check of {name} against {base.name} ({base.source}): tolerance "
        f"{100 * tolerance:g}%; each point judged on {STATISTIC}: {rule_text(tolerance)}",
        soft_wrap=True,
    )
    shown = sorted(verdicts, key=lambda v: ORDER[v.outcome])
    limit = max(_SHOWN, counts[REGRESSED])
    for v in shown[:limit]:
        out.print(f"{v.outcome.upper():>10}  {v.name}: {v.why}", soft_wrap=True)
    if len(shown) > limit:
        out.print(f"... and {len(shown) - limit} more (all in the JUnit file)")
    if record is not None:
        for line in _change_points(record, verdicts, tolerance):
            out.print(line, soft_wrap=True)
    study = [v for v in verdicts if v.in_study]
    out.print(
        f"{len(study)} points: {counts[PASSED]} passed, {counts[REGRESSED]} regressed, "
        f"{counts[UNDECIDED]} undecided, {counts[SKIPPED]} not judged"
        + (f" (the runs stopped: {stopped})" if stopped else ""),
        soft_wrap=True,
    )
    if not shared:
        why = (
            f"nothing judged: the baseline {base.name} shares no configuration with the study "
            f"{name} (framework, model, dataset, scale, batch, precision, loader, schedule); "
            "give the baseline of this study"
        )
    elif counts[REGRESSED]:
        why = None
    elif counts[UNDECIDED] or counts[SKIPPED] or not study:
        why = (
            f"not every point was judged ({counts[UNDECIDED]} undecided, {counts[SKIPPED]} "
            "not judged): each says above what would judge it"
        )
    else:
        why = None
    if why:
        out.print(f"exit {NOT_JUDGED}: {why}", soft_wrap=True)
    data = None
    if junit:
        props = {
            "baseline": base.name,
            "baseline_source": base.source,
            "tolerance": f"{tolerance:g}",
            "statistic": STATISTIC,
            **({"window": str(window)} if window else {}),
            **({"stopped": stopped} if stopped else {}),
        }
        if not shared:
            data = error_xml(name, why or "", time.monotonic() - start)
        else:
            data = junit_xml(name, base.name, verdicts, props)
    code = 1 if counts[REGRESSED] else NOT_JUDGED if why else 0
    _record(junit, data, record, code)
    return code


def _record(junit: str | None, data: bytes | None, record: Record | None, code: int) -> None:
    """The verdict's records as one whole: the JUnit file is written under a temporary
    name, the history's lines appended (whole, after a missing final newline is
    repaired), then the JUnit file renamed into place. A failure before the lines are
    appended leaves neither (OutputError: nothing was written, exit 2); once they are
    there the verdict stands (its exit status), even if the JUnit file cannot take its
    place, which is said."""
    from ..results.regression import history as past

    if junit is None or data is None:
        if record is not None:
            past.append(record.path, record.entries)
        return
    appended = False
    try:
        with writing(junit, "--junit") as fh:
            fh.write(data)
            fh.flush()  # on the disk before the lines: a disk too full for it stops here
            os.fsync(fh.fileno())
            if record is not None:
                past.append(record.path, record.entries)
                appended = True
    except OutputError as exc:
        if not appended or record is None:
            raise
        err.print(
            f"dlscale: {exc}; the history's lines were added to {record.path}: the verdict "
            f"above stands (exit {code})",
            soft_wrap=True,
        )
        return
    out.print(f"JUnit XML: {junit}", soft_wrap=True)


def _change_points(record: Record, verdicts: list[Verdict], tolerance: float) -> list[str]:
    """Change points over each point's history at this site (this check's lines included,
    as they will be written), among its last WINDOW checks: bounded work, whatever the
    history's length."""
    from ..results.regression.changepoints import WINDOW, NoChangePointLibrary, change_points

    by_key: dict[tuple, list] = {}  # each point's series, the history read once
    for e in [*record.kept.entries, *record.entries]:
        if e.value:
            by_key.setdefault(e.key, []).append(e)
    lines = []
    for v in verdicts:
        if v.point is None:
            continue
        series = by_key.get((record.site, v.name, v.point.device), [])
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
                f"{c.after:,.1f} {v.point.unit}/s ({100 * c.change:+.1f}%, Welch p={c.p:.2g})"
            )
    return lines
