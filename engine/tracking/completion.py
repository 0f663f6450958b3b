"""When a declared framework's run counts as complete though its job did not end well
(engine/config/custom.py's `complete_when`): a script dlscale did not write may print its
last measurement and then die at exit (gloo's "terminate called without an active
exception"), which the user cannot fix without editing it. Its declaration may say when
its measurement is complete: its summary record written (`complete_when = "records"`) or a
line of its log (`log.complete_when`, a pattern). Such a run is kept COMPLETED, its
repetition counted, and marked with how its job ended (`after_end`), which status,
results, logs and the TUI show as its reason.
"""

from __future__ import annotations

import re

from ..paths import RunPaths
from ..runs import RunRow, State, declaration
from .log_patterns import has_summary


def measured_before_end(row: RunRow) -> bool:
    """Whether the run's measurement was complete, by its declaration, whatever its job's
    end: its log holds the log.complete_when line, or (complete_when = "records") its
    records hold a summary."""
    decl = declaration(row)
    if decl is None:
        return False
    paths = RunPaths.of(row)
    final = (decl.get("log") or {}).get("complete_when")
    if final:
        pattern = re.compile(final)
        try:
            with open(paths.log, encoding="utf-8", errors="replace") as fh:
                return any(pattern.search(line) for line in fh)
        except OSError:
            return False
    return decl.get("complete_when") == "records" and has_summary(paths.metrics)


MARK = "completed; "


def marked(reason: str | None) -> bool:
    """Whether a COMPLETED run's reason is the mark of a job that failed after it."""
    return bool(reason) and str(reason).startswith(MARK)


def after_end(state: str, exit_code: int | None) -> str:
    """The mark of a run COMPLETED by its measurement whose job then ended as `state`."""
    if state == State.TIMEOUT:
        how = "timed out"
    elif state == State.NODE_FAIL:
        how = "its node failed"
    else:
        how = f"exited {exit_code}" if exit_code is not None else "failed"
    return f"{MARK}{how} after its measurement"
