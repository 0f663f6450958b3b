"""`dlscale`: the command line over the engine. Bad input exits 2 with one clear message per
problem; failures of the world exit 1; an internal error (a bug) exits 70 with one line
naming the file its traceback was saved to (internal.py); none prints a traceback.

Commands live in modules by concern and are imported only when used, so `dlscale --help`
and `dlscale status` start without loading what `results` or `run` need (scipy, matplotlib,
pydantic, jinja2)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ..errors import DlscaleError
from ..leaving import leave_now
from .lazy import LazyGroup
from .options import NamedPath, home_callback

_chosen: dict[str, str | None] = {"home": None}  # for messages outside a command

# name: (module, attribute, the short help `dlscale --help` shows without importing it)
COMMANDS = {
    "plan": (
        "runs",
        "plan_cmd",
        "Dry run: the runs a spec makes, grouped, with their device-hours.",
    ),
    "run": ("runs", "run", "Submit the runs of SPEC that have not completed yet."),
    "status": (
        "watch",
        "status",
        "Runs, their jobs and states (live ones first asked of the scheduler).",
    ),
    "results": (
        "results",
        "results",
        "Throughput (mean ± CI95), speedup, efficiency and time-to-accuracy per point.",
    ),
    "chart": (
        "results",
        "chart",
        "A terminal chart of a metric against devices, with the ideal line.",
    ),
    "project": (
        "project",
        "project",
        "Project scaling past the measured scales, or from stated figures, with honest intervals.",
    ),
    "logs": ("watch", "logs", "The log of a run (unique id prefixes work)."),
    "cancel": ("runs", "cancel", "Cancel queued or running runs."),
    "resubmit": (
        "runs",
        "resubmit",
        "Submit finished, failed or cancelled runs again, with the same job script.",
    ),
    "rerun": (
        "runs",
        "rerun",
        "Repeat a finished run exactly, from its record, as a new run to compare with it.",
    ),
    "report": (
        "report",
        "report",
        "Write up an experiment: set-up, tables, figures, MLLOG exports.",
    ),
    "export": ("report", "export", "Stored runs in other formats."),
    "compare": (
        "compare",
        "compare",
        "Two experiments (from this site or imported) point by point: throughput with CI95, "
        "the ratio B/A with its interval, Welch's test, speedup, efficiency, env differences.",
    ),
    "import": (
        "bundles",
        "import_cmd",
        "Add a bundle from `dlscale export bundle` to this store, under NAME@SITE: all of "
        "it, or nothing if any part fails its checks. Importing it again changes nothing.",
    ),
    "check": (
        "check",
        "check_cmd",
        "Check a study against a baseline for CI: exit 0 when every point passed, 1 when "
        "any regressed, 2 on bad input, 3 when not every point could be judged, 4 when the "
        "check could not be made, 70 on an internal error; a JUnit XML file (for every "
        "outcome) and a one-screen summary.",
    ),
    "data": (
        "data",
        "data",
        "Real datasets: fetch CIFAR-10, check an ImageNet folder, write a small one.",
    ),
    "env": (
        "env",
        "env",
        "Per-framework software environments (their pins conflict, so each has its own).",
    ),
    "doctor": (
        "env",
        "doctor",
        "Per framework: does its environment import, which versions "
        "and build (CUDA, Horovod's NCCL), and (--smoke) does a 2-rank run train; and "
        "which way the Slurm backend talks to Slurm here. Exits 1 when a framework with "
        "a trainer cannot run.",
    ),
    "store": (
        "store",
        "store",
        "The store (DLSCALE_HOME/dlscale.db): rebuild it from the run folders.",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy={n: (f"{__name__}.{m}", a, h) for n, (m, a, h) in COMMANDS.items()},
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--home",
    envvar="DLSCALE_HOME",
    type=NamedPath(),
    callback=home_callback,
    help="where the store and run folders live (default ~/.dlscale)",
)
@click.version_option(package_name="dlscale")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Measure how deep-learning training scales: frameworks x models x scales.

    Exit status: 0 done; 1 a run or the scheduler failed, or a fault of the world (the
    store locked, damaged or on a full disk); 2 bad input, refused before any work; 70 an
    internal error (a bug: its traceback is saved, and the line says where); 130
    interrupted (ctrl+c). `dlscale check --help` says what check's own statuses mean.
    """
    ctx.obj = {"home": home}
    _chosen["home"] = home


def _say(line: str) -> None:
    from .console import err  # rich: loaded only once there is something to say

    err.print(line, soft_wrap=True)


def _not_utf8(argv: list[str]) -> str | None:
    """The first argument (or DLSCALE_HOME) that is not UTF-8 text, named: a path or an id
    that is not cannot be stored, looked up or shown as it is."""
    from ..io.text import is_utf8, printable

    home = os.environ.get("DLSCALE_HOME")
    for n, arg in enumerate(argv, 1):
        if not is_utf8(arg):
            return f"argument {n} ({printable(arg)})"
    if home is not None and not is_utf8(home):
        return f"DLSCALE_HOME ({printable(home)})"
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    bad = _not_utf8(args)
    if bad is not None:
        _say(
            f"dlscale: error: {bad} is not UTF-8 text; dlscale takes names and paths in "
            "UTF-8 (rename the file, or link to it under a UTF-8 name)"
        )
        sys.exit(2)
    try:
        cli.main(args=args, prog_name="dlscale", standalone_mode=False)
    except click.exceptions.Abort as exc:
        _say("aborted")
        if isinstance(exc.__context__, KeyboardInterrupt):  # click's word for ctrl+c
            leave_now(130)  # ctrl+c: the prompt back now
        sys.exit(130)  # a prompt that met the end of its input
    except click.ClickException as exc:
        import io  # click's own words (usage, the value given), through the printer

        shown = io.StringIO()
        exc.show(file=shown)
        for line in shown.getvalue().rstrip("\n").splitlines():
            _say(line)
        sys.exit(exc.exit_code)
    except DlscaleError as exc:  # a spec's problems, a bundle's: a line each, else one line
        from ..io.text import printable

        for line in exc.shown():
            _say(f"dlscale: error: {printable(line)}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        leave_now(130)
    except Exception as exc:  # a bug: say so in one line; DLSCALE_DEBUG=1 shows where
        # ...unless it is the world's fault: SQLite found a damaged page only now, the
        # store is locked, read-only or full, a disk is full
        from ..tracking.store import default_home
        from ..tracking.store.health import fault_message

        fault = fault_message(exc, Path(_chosen["home"] or default_home()))
        if fault is not None:
            _say(f"dlscale: error: {fault}")
            sys.exit(1)
        if os.environ.get("DLSCALE_DEBUG"):
            raise
        from .internal import EXIT, save_traceback

        saved = save_traceback(exc, Path(_chosen["home"] or default_home()))
        where = f"its traceback is in {saved}" if saved else "set DLSCALE_DEBUG=1 for it"
        _say(
            f"dlscale: internal error: {type(exc).__name__}: {exc} ({where}; a bug in "
            "dlscale, please report it)"
        )
        sys.exit(EXIT)
