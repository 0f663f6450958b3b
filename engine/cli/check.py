"""`dlscale check`: a study against a baseline, for CI. Exit 0 when every point of the study
passed, 1 when any regressed, 2 on bad input, 3 when none regressed but not every point
could be judged (undecided within the budget, or nothing to judge it against): a check
that judged nothing never passes; 4 when the check could not be made (a fault of the
world: the store, the disk, the scheduler) and 70 on an internal error, so that neither
reads as a regression. A JUnit XML file for every outcome, bad input included; the history
of checks (`--history`) gains a line per point, and names change points. The history's
lines and the JUnit file are written as one whole with the verdict. The check itself is
the engine's (results/regression/workflow.py): this module parses and prints."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..config.quantities import MINUTES
from ..errors import DlscaleError, UserError
from ..results.regression.check import CHOICES, PASSED, REGRESSED, SKIPPED, UNDECIDED
from ..results.regression.decide import LEVEL, rule_text
from ..results.regression.junit import error_xml, write_junit
from ..results.regression.workflow import NOT_JUDGED, ORDER, Outcome
from ..tracking.store.health import fault_message
from ..where import given_as
from .console import err, out, wait_with_progress
from .options import InputName, InputPath, OutputPath, store_of
from .runs import backend_options

_SHOWN = 20  # lines of points a summary shows (regressions always all)
NOT_CHECKED = 4  # a fault of the world stopped the check: not a regression


def fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """5%, 0.05 or 5 percent, as a fraction in [0, 0.5): the rule asks whether a slowdown
    of twice the tolerance is ruled out (results/regression/decide.py)."""
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
@click.option(
    "--measure",
    type=click.Choice(sorted(CHOICES)),
    default="auto",
    show_default=True,
    help="what each run is judged by: wall (its throughput over its timed steps), cpu (its "
    "units per CPU second of rank 0, which a busy machine moves less; it does not see waits "
    "for I/O, other ranks or a device) or auto (cpu for a point of one rank on CPUs whose "
    "runs all record it, wall otherwise; each verdict says which and why): "
    "docs/reports.md says which to use when",
)
@click.option(
    "--disturbed",
    type=click.Choice(["repeat", "count"]),
    default=None,
    help="with --interleave: a pair one of whose runs other work disturbed (its interference "
    "record; docs/measuring.md) is left out and another made in its place (within "
    "--max-repetitions), or counted like any other. Default, point by point: repeat when "
    "judged by wall time, which other work moves directly; count when by CPU time, the "
    "measure for a machine that is busy all the time",
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


def _check(ctx: click.Context, spec: str, junit: str | None, start: float, **kw: Any) -> int:
    from ..results.regression.workflow import Request, run_check, write_records

    def wait(store, target, ids: list[str]) -> None:
        try:
            wait_with_progress(store, target, ids)
        except KeyboardInterrupt:
            sys.exit(130)

    kw["run"] = kw.pop("run_study")
    asked = Request(spec, **kw)
    outcome = run_check(store_of(ctx), asked, wait, lambda line: out.print(line, soft_wrap=True))
    _print(outcome)
    step = outcome.next_step(asked)
    if step:
        out.print(step, soft_wrap=True)
    data = outcome.junit(time.monotonic() - start) if junit else None
    failed = write_records(junit, data, outcome.record)
    if failed:
        err.print(f"dlscale: {failed} (exit {outcome.exit_code})", soft_wrap=True)
    elif junit:
        out.print(f"JUnit XML: {junit}", soft_wrap=True)
    return outcome.exit_code


def _print(outcome: Outcome) -> None:
    counts = outcome.counts
    base = outcome.base
    out.print(
        f"check of {outcome.name} against {base.name} ({base.source}): tolerance "
        f"{100 * outcome.tolerance:g}%; each point judged on {outcome.measure.statistic}: "
        f"{rule_text(outcome.tolerance)}",
        soft_wrap=True,
    )
    shown = sorted(outcome.verdicts, key=lambda v: ORDER[v.outcome])
    limit = max(_SHOWN, counts[REGRESSED])
    for v in shown[:limit]:
        out.print(f"{v.outcome.upper():>10}  {v.name}: {v.why}", soft_wrap=True)
    if len(shown) > limit:
        out.print(f"... and {len(shown) - limit} more (all in the JUnit file)")
    for line in outcome.change_points + outcome.code + outcome.disturbed:
        out.print(line, soft_wrap=True)
    study = [v for v in outcome.verdicts if v.in_study]
    out.print(
        f"{len(study)} points: {counts[PASSED]} passed, {counts[REGRESSED]} regressed, "
        f"{counts[UNDECIDED]} undecided, {counts[SKIPPED]} not judged"
        + (f" (the runs stopped: {outcome.stopped})" if outcome.stopped else ""),
        soft_wrap=True,
    )
    why = outcome.why_not_judged
    if why:
        out.print(f"exit {NOT_JUDGED}: {why}", soft_wrap=True)
