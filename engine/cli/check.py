"""`dlscale check`: a study against a baseline, for CI: exit 0 when no point regressed, 1
when one did, 2 on bad input; a JUnit XML file and a one-screen summary (check.py's rule)."""

from __future__ import annotations

import re
import sys

import click

from .. import study
from ..backends.registry import make_backend
from ..config.profile import load_profile
from ..config.spec import load_spec
from ..errors import NotFoundError, UserError
from ..results import analysis
from ..results.check import PASSED, REGRESSED, SKIPPED, check, load_baseline
from ..results.junit import junit_xml, write_junit
from ..results.points import NOISY_CV
from ..tracking import follow as following
from ..where import backend_for, given_as
from .console import out, wait_with_progress
from .options import InputPath, OutputPath, store_of
from .runs import backend_options

_SHOWN = 20  # lines of points a summary shows (regressions always all)


def fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """5%, 0.05 or 5 percent, as a fraction in [0, 1)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", value or "")
    number = float(m[1]) / (100 if m[2] else 1) if m else None
    if number is None or not 0 <= number < 1:
        raise click.BadParameter(
            f"{value!r} (from {given_as(ctx, param.name or '')}): give a percentage like 5% "
            "or a fraction like 0.05, below 100%",
            ctx,
            param,
        )
    return number


@click.command()
@click.argument("spec", type=InputPath(dir_okay=False))
@click.option(
    "--baseline",
    required=True,
    help="an experiment in the store, or a bundle file from `dlscale export bundle`",
)
@click.option(
    "--tolerance",
    default="5%",
    show_default=True,
    callback=fraction,
    help="a point regressed when its CI95's upper bound is below baseline x (1 - this)",
)
@click.option(
    "--max-cv",
    default=f"{100 * NOISY_CV:g}%",
    show_default=True,
    callback=fraction,
    help="points noisier than this (CV, either side) are reported as not judged",
)
@click.option(
    "--run",
    "run_study",
    is_flag=True,
    help="run the study first (as `dlscale run --wait`); else use its completed results",
)
@click.option("--junit", type=OutputPath(), default=None, help="write JUnit XML here")
@backend_options
@click.pass_context
def check_cmd(
    ctx: click.Context,
    spec: str,
    baseline: str,
    tolerance: float,
    max_cv: float,
    run_study: bool,
    junit: str | None,
    backend: str | None,
    profile_path: str | None,
    partition: str | None,
) -> None:
    """Compare a study with a baseline for CI: exit 0 when no point regressed, 1 when any
    did, 2 on bad input; a JUnit XML file and a one-screen summary."""
    backend = backend_for(backend, profile_path, partition)
    loaded = load_spec(spec)
    name = loaded.spec.experiment.name
    store = store_of(ctx)
    base = load_baseline(store, baseline)  # bad input is refused before anything runs
    if base.name == name:
        raise UserError(
            f"--baseline {baseline}: the study itself ({name}); give an earlier experiment "
            "under another name, or a bundle exported before the change"
        )
    if run_study:
        profile = load_profile(profile_path) if profile_path else None
        target = make_backend(backend, store, profile, partition)
        report = study.submit(store, loaded, target)
        try:
            wait_with_progress(store, target, [r.run_id for r in report.all_runs])
        except KeyboardInterrupt:
            sys.exit(130)
    else:
        following.refresh(store)
    current = analysis.points(store, name)
    if not any(p.throughput.n for p in current):
        raise NotFoundError(
            f"{spec}: experiment {name} has no completed run in the store ({store.home}); "
            "give --run to run it"
        )
    verdicts = check(current, base, tolerance, max_cv)
    counts = {o: sum(v.outcome == o for v in verdicts) for o in (PASSED, REGRESSED, SKIPPED)}
    out.print(
        f"check of {name} against {base.name} ({base.source}): tolerance "
        f"{100 * tolerance:g}%, max CV {100 * max_cv:g}%; a point regressed when its CI95's "
        "upper bound is below baseline x (1 - tolerance)",
        soft_wrap=True,
    )
    order = {REGRESSED: 0, SKIPPED: 1, PASSED: 2}
    shown = sorted(verdicts, key=lambda v: order[v.outcome])
    limit = max(_SHOWN, counts[REGRESSED])
    for v in shown[:limit]:
        out.print(f"{v.outcome.upper():>10}  {v.name}: {v.why}", soft_wrap=True)
    if len(shown) > limit:
        out.print(f"... and {len(shown) - limit} more (all in the JUnit file)")
    out.print(
        f"{len(verdicts)} points: {counts[PASSED]} passed, {counts[REGRESSED]} regressed, "
        f"{counts[SKIPPED]} not judged",
        soft_wrap=True,
    )
    if junit:
        props = {
            "baseline": base.name,
            "baseline_source": base.source,
            "tolerance": f"{tolerance:g}",
            "max_cv": f"{max_cv:g}",
        }
        write_junit(junit, junit_xml(name, base.name, verdicts, props))
        out.print(f"JUnit XML: {junit}", soft_wrap=True)
    sys.exit(1 if counts[REGRESSED] else 0)
