"""A declared framework's interference over its timed steps (issue 50): what else the
machine did while its script measured, from the meter dlscale ran around the script
(trainers/common/metered.py samples interference.py's cumulative counters beside the log's
size, a few times a second, whatever energy it meters).

The window is the one custom_energy finds: it ends where the script's measurement ends
(its log's last measured line, or its summary record's time) and lasts the seconds its
summary says were timed. Each counter is interpolated at both ends on the first task's
timeline, and the shares are the built-in trainers' (interference.Window), written as an
`interference` record after the summary, `metered` saying it was read from outside. A
window the energy could not be read over either (custom_energy.window_problem) is written
with its shares unknown and why.
"""

from __future__ import annotations

import math
from typing import Any

from ...trainers.common import interference
from ...trainers.common.records import RecordWriter
from ..paths import RunPaths
from .custom_energy import METERED, at_time, timelines_in, window_problem
from .store import Store


def _loaded(timeline: dict[str, Any]) -> list[list[Any]] | None:
    load = timeline.get("load")
    if not isinstance(load, list):
        return None
    # written by the meter in the job's own environment: held to its shape, or left out
    ok = [
        s
        for s in load
        if isinstance(s, list)
        and len(s) == 3
        and _finite(s[0])
        and (s[1] is None or (isinstance(s[1], int) and not isinstance(s[1], bool)))
        and isinstance(s[2], dict)
    ]
    return sorted(ok, key=lambda s: float(s[0])) if len(ok) >= 2 else None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _end(load: list[list[Any]], summary: dict[str, Any]) -> float | None:
    """When the script's measurement ended: the first sample whose log held its last
    measured line, else its summary's time."""
    offset = summary.get("log_measured_until_byte")
    if isinstance(offset, int) and not isinstance(offset, bool):
        return next((float(t) for t, size, _ in load if size is not None and size >= offset), None)
    t = summary.get("time")
    return float(t) if isinstance(t, (int, float)) else None


def _reading(load: list[list[Any]], cpus: tuple[int, ...], t: float) -> interference.Reading:
    """Every counter interpolated at `t` (unknown where a sample lacks it)."""
    times = [float(s[0]) for s in load]
    names = [*interference.COUNTERS, *(f"{r}_stall_s" for r in interference.RESOURCES)]
    values: dict[str, object] = {}
    for name in names:
        series = [s[2].get(name) for s in load]
        if all(_finite(v) for v in series):
            values[name] = at_time(times, [float(v) for v in series], t)  # type: ignore[arg-type]
    return interference.from_sample(t, cpus, values)


def window_record(timeline: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The interference record's fields over the summary's timed window."""
    load = _loaded(timeline) or []
    given = timeline.get("cpus")
    cpus = tuple(c for c in given if isinstance(c, int)) if isinstance(given, list) else ()
    elapsed = float(summary.get("elapsed_s") or 0.0)
    base = {"window_s": elapsed, "cpus": list(cpus), "metered": METERED}
    end = _end(load, summary) if load else None
    if end is None:
        return {**base, "unavailable": "the meter around the script did not see when its "
                "measurement ended"}  # fmt: skip
    start = end - elapsed
    problem = window_problem([float(s[0]) for s in load], start, end, str(timeline.get("host")))
    if problem:
        return {**base, "unavailable": problem}
    w = interference.Window()
    w.resume(_reading(load, cpus, start))
    w.pause(_reading(load, cpus, end))
    return {**w.record(), "metered": METERED}


def settle(store: Store, run_id: str) -> bool:
    """Append the interference record of a completed declared run metered around its
    script, once. Returns whether one was written (the caller ingests it)."""
    row = store.run(run_id)
    paths = RunPaths.of(row)
    if not paths.energy.is_dir() or store.records.of(run_id, "interference"):
        return False
    summaries = store.records.of(run_id, "summary")
    found, _ = timelines_in(paths.energy)
    loaded = [tl for tl in found if _loaded(tl)]
    if not summaries or not loaded:
        return False  # a meter from before it read the machine: nothing to say
    with RecordWriter(str(paths.metrics)) as out:
        out.write("interference", **window_record(loaded[0], summaries[-1]))
    return True
