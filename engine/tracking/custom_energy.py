"""A declared framework's energy over its timed steps, from the meter dlscale ran around its
script (trainers/common/metered.py): the built-in trainers meter their own timed steps; a
script dlscale did not write is metered from outside, and its timed window is found after
the run from what it reported.

The window ends where the script's measurement ends: its summary record's time (records it
wrote itself), or the moment its log's last measured line was written (log patterns: the
first log-size sample that holds that line). It lasts the seconds the summary says were
timed. Each device's cumulative counter is interpolated at both ends; the run's energy is
the sum over the devices and nodes metered. Written as an `energy` record after the
summary (records.py), so a rebuilt store reads the same; a window the samples do not cover,
one shorter than MIN_INTERVALS of the meter's sampling intervals, or a counter that failed,
leaves the energy unknown with the reason.
"""

from __future__ import annotations

import bisect
import statistics
from pathlib import Path
from typing import Any

from ...trainers.common.records import RecordWriter
from ..io.reading import load_json, read_bounded
from ..paths import RunPaths
from .store import Store

METERED = "around the script (dlscale.trainers.common.metered)"
# A timeline is a few numbers a sample, at most 20,000 samples a device (metered.py).
TIMELINE_BYTES = 32 << 20
# A window shorter than this many sampling intervals would take most of its energy from the
# counters' movement outside it, where the script warms up or exits: 30 timed steps of a
# small model on an H200 (0.14 s, sampled every 0.25 s) read 144 W.
MIN_INTERVALS = 4
_SCALE = {"mJ": 1e-3, "uJ": 1e-6}  # the counters' units, in joules
SHARED_CPU = "the node's first task meters the CPU packages it shares"


def timelines_in(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The timelines in `folder` (regular files only) and why any could not be read."""
    out, problems = [], []
    try:
        names = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    except OSError:
        return [], []
    for path in names:
        try:
            data = load_json(read_bounded(path, TIMELINE_BYTES, follow=False), TIMELINE_BYTES)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        if isinstance(data, dict) and isinstance(data.get("samples"), list):
            out.append(data)
        else:
            problems.append(f"{path.name}: not a timeline")
    return out, problems


def _unwrapped(samples: list[list[Any]], wraps: list[int]) -> list[list[float]]:
    """Each device's counter as a non-decreasing series (RAPL's wrap once per wrap)."""
    devices = len(samples[0][1])
    series: list[list[float]] = []
    for d in range(devices):
        values, extra, last = [], 0.0, None
        for s in samples:
            v = float(s[1][d])
            if last is not None and v < last:
                extra += wraps[d] if d < len(wraps) and wraps[d] else 0
            values.append(v + extra)
            last = v
        series.append(values)
    return series


def at_time(times: list[float], values: list[float], t: float) -> float:
    i = bisect.bisect_left(times, t)
    if i == 0:
        return values[0]
    if i >= len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
    return values[i - 1] + f * (values[i] - values[i - 1])


def log_time(timelines: list[dict[str, Any]], offset: int) -> float | None:
    """When the log first held `offset` bytes: the first sample that saw it so long."""
    best = None
    for tl in timelines:
        for t, _, _, size in tl["samples"]:
            if size is not None and size >= offset:
                best = t if best is None else min(best, t)
                break
    return best


def window_problem(times: list[float], start: float, end: float, host: str) -> str | None:
    """Why a meter's samples (their times, sorted) cannot be read over [start, end], the
    timed steps: they do not cover it, or it lasts under MIN_INTERVALS of their sampling
    intervals; None when they can."""
    slack = 2 * (times[1] - times[0]) if len(times) > 1 else 1.0
    if times[0] > start + slack or times[-1] < end - slack:
        return (
            f"the meter's samples do not cover the timed steps ({host}: {times[0]:.1f} to "
            f"{times[-1]:.1f}, steps {start:.1f} to {end:.1f})"
        )
    gaps = [b - a for a, b in zip(times, times[1:])]
    every = statistics.median(gaps) if gaps else 0.0
    if end - start < MIN_INTERVALS * every:
        return (
            f"the timed steps lasted {end - start:.2f} s, under {MIN_INTERVALS} of the "
            f"meter's sampling intervals ({every:.2f} s): too short to meter from outside "
            "the script; time more steps"
        )
    return None


def energy_over(
    timelines: list[dict[str, Any]], start: float, end: float, units: float
) -> dict[str, Any]:
    """The energy fields over [start, end] (epoch seconds) for `units` units done in it."""
    metered = [tl for tl in timelines if tl.get("source") and tl["samples"]]
    silent = [
        tl.get("unavailable") or "no samples"
        for tl in timelines
        if not (tl.get("source") and tl["samples"]) and tl.get("unavailable") != SHARED_CPU
    ]
    failed = [tl["unavailable"] for tl in metered if tl.get("unavailable")]
    why = (failed or silent or [None])[0]
    if not metered or why:
        return {"energy_unavailable": why or "the meter around the script recorded nothing"}
    joules, utils, names = 0.0, [], []
    for tl in metered:
        samples = sorted(tl["samples"], key=lambda s: s[0])
        times = [float(s[0]) for s in samples]
        problem = window_problem(times, start, end, str(tl.get("host")))
        if problem:
            return {"energy_unavailable": problem}
        scale = _SCALE.get(str(tl.get("unit")), 1.0)
        for series in _unwrapped(samples, tl.get("wraps") or []):
            joules += (at_time(times, series, end) - at_time(times, series, start)) * scale
        for t, _, util, _ in samples:
            if util and start <= t <= end:
                utils.extend(util)
        names += [str(n) for n in tl.get("devices") or []]
    seconds = end - start
    return {
        "energy_j": joules,
        "energy_per_image_j": joules / units if units > 0 else None,
        "mean_power_w": joules / seconds if seconds > 0 else None,
        "device_util": sum(utils) / len(utils) if utils else None,
        "energy_source": metered[0]["source"],
        "energy_window_s": seconds,
        "devices_metered": names,
    }


def settle(store: Store, run_id: str) -> bool:
    """Append the energy record of a completed declared run metered around its script, once.
    Returns whether one was written (the caller ingests it)."""
    row = store.run(run_id)
    paths = RunPaths.of(row)
    if not paths.energy.is_dir() or store.records.of(run_id, "energy"):
        return False
    summaries = store.records.of(run_id, "summary")
    if not summaries:
        return False
    summary = summaries[-1]
    if summary.get("energy_j") is not None:
        return False  # the script reported its own energy: that stands
    timelines, problems = timelines_in(paths.energy)
    elapsed = float(summary.get("elapsed_s") or 0.0)
    units = float(summary.get("throughput") or 0.0) * elapsed
    offset = summary.get("log_measured_until_byte")
    end = log_time(timelines, int(offset)) if offset is not None else summary.get("time")
    if problems:
        fields: dict[str, Any] = {"energy_unavailable": "; ".join(problems)[:500]}
    elif timelines and not any(tl.get("source") and tl["samples"] for tl in timelines):
        fields = energy_over(timelines, 0.0, 0.0, units)  # nothing was metered: why not, not when
    elif end is None or not timelines:
        fields = {
            "energy_unavailable": "the meter around the script did not see when its "
            "measurement ended"
        }
    else:
        fields = energy_over(timelines, float(end) - elapsed, float(end), units)
    with RecordWriter(str(paths.metrics)) as out:
        out.write("energy", metered=METERED, **fields)
    return True
