"""Terminal charts of results with plotext: one line per framework against devices, the
ideal-scaling line for speedup and efficiency, and noisy points marked. Returns text so the
CLI prints it and the TUI renders it alike.

So that a chart does not mislead: the value axis starts at zero (a flat 1.04x stays flat),
the legend is printed under the plot (plotext's own is drawn over the top rows of data),
every series has a mark of its own that reads without colour, and a series with fewer
points than the chart's scales says under it which are missing and why."""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

import plotext as plt

from .points import throughput_unit
from .rows import ResultRow, number

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Series marks that differ by shape, not by colour alone: solid for what was measured,
# hollow for what a model says (predicted, projected).
# Past the shapes, letters: capitals solid, small hollow ("x" is the noisy mark).
SOLID = ("●", "■", "▲", "◆", "★", "✚", "▼", "◀", "▶", *"ABCDEFGHIJKLMNOPQRSTUVWYZ")
HOLLOW = ("○", "□", "△", "◇", "☆", "✜", "▽", "◁", "▷", *"abcdefghijklmnopqrstuvwyz")
IDEAL = "·"  # not "•": it would read as the solid "●" without colour
NOISY = "x"
NOISY_LABEL = "noisy (CV > 5%)"

METRICS = {
    "speedup": ("speedup", "speedup (vs best 1-device run)"),
    "efficiency": ("efficiency", "scaling efficiency"),
    "throughput": ("throughput", "throughput (images/s)"),
    "tta": ("time_to_accuracy_s", "time-to-accuracy (s)"),
    # The efficiency model (compute + benchmarked allreduce) and the energy, where measured.
    "predicted": ("predicted_efficiency", "predicted efficiency (model)"),
    "images-per-joule": ("images_per_joule", "images per joule"),
    # A transformer's: the model's FLOPs a second per device over the device's peak
    # (trainers/common/mfu.py), as a fraction.
    "mfu": ("mfu", "MFU (model FLOPs utilisation)"),
}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


# What a chart with nothing to draw says, by the field it wanted, when results exist
# (short: plotext drops a title wider than the chart).
_NONE_BECAUSE = {
    "time_to_accuracy_s": "no run evaluated to a target accuracy",
    "images_per_joule": "no run measured its energy",
    "predicted_efficiency": "no point has the model's prediction",
    "mfu": "no run counted its model's FLOPs (the transformer trainers do)",
}


def why_none(results: list[ResultRow], key: str, model: str | None = None) -> str:
    """Why a chart of `key` is empty: no results yet, or results without that metric."""
    if not [r for r in results if model is None or r.get("model") == model]:
        return "no completed results yet"
    return _NONE_BECAUSE.get(key, f"no result has a {key}")


def nothing_to_draw(results: list[ResultRow], metric: str, model: str | None = None) -> str | None:
    """Why a chart of `metric` would be empty, in a sentence a command prints instead of an
    empty box; None where it has something to draw. The reasons are the points' own
    (their `unmeasured` fields), or that no run completed."""
    key, label = METRICS[metric]
    rows = [r for r in results if model is None or r.get("model") == model]
    if any(_finite(r.get(key)) for r in rows):
        return None
    if not rows:
        return f"no {label} to chart: no results yet" + (f" for model {model}" if model else "")
    if not any(r.get("n") for r in rows):  # n: its completed repetitions
        return (
            f"no {label} to chart: none of the {len(rows)} point(s) has a completed run; "
            "`dlscale status` shows why each run failed"
        )
    reasons = sorted({str(why) for r in rows if (why := (r.get("unmeasured") or {}).get(key))})
    why = "; ".join(reasons[:3]) or _NONE_BECAUSE.get(key, f"no result has a {key}")
    more = f" (and {len(reasons) - 3} more reasons)" if len(reasons) > 3 else ""
    return f"no {label} to chart: {why}{more}"


# Besides the framework and a declared framework's axes, what a series is told apart by.
SERIES_BY = (
    "experiment",
    "model",
    "device",
    "precision",
    "per_device_batch",
    "loader",
    "lr_schedule",
)


def series(rows: list[ResultRow]) -> dict[str, list[ResultRow]]:
    """Result rows as lines against devices: one per framework, and per experiment (a report
    of several overlays them), model, precision, device, batch, loader or lr schedule where
    the rows hold more than one, each sorted by devices.
    Terminal charts and report figures draw the same lines under the same names."""
    varying = [k for k in SERIES_BY if len({r.get(k) for r in rows}) > 1]
    # a declared framework's own axes: a line per value of those that vary
    axes = sorted({k for r in rows for k in (r.get("axes") or {})})
    axes = [k for k in axes if len({repr((r.get("axes") or {}).get(k)) for r in rows}) > 1]
    out: dict[str, list[ResultRow]] = {}
    for r in rows:
        name = " ".join(
            [r["framework"]]
            + [f"b{r.get(k)}" if k == "per_device_batch" else str(r.get(k)) for k in varying]
            + [f"{k}={(r.get('axes') or {}).get(k)}" for k in axes]
        )
        out.setdefault(name, []).append(r)
    return {name: sorted(pts, key=lambda r: r["ranks"]) for name, pts in sorted(out.items())}


def _identity(r: ResultRow) -> tuple[Any, ...]:
    """What makes two result rows points of one series, whatever varies among the rows."""
    fields = (r["framework"], *(r.get(k) for k in SERIES_BY))
    return (*fields, repr(sorted((r.get("axes") or {}).items())))


def _why_missing(results: list[ResultRow], like: ResultRow, devices: int, field: str) -> str:
    """Why the series of `like` has no `field` at `devices`: the point's own reason where
    it has one, else that it has no completed run or is not in the study."""
    same = [r for r in results if r["ranks"] == devices and _identity(r) == _identity(like)]
    for r in same:
        if why := (r.get("unmeasured") or {}).get(field):
            return str(why)
    if same and not any(r.get("n") for r in same):
        return "no completed run"
    if same:
        return _NONE_BECAUSE.get(field, f"no {field}")
    return "not in the study"


def _devices(ds: list[int]) -> str:
    return f"{', '.join(map(str, ds))} device{'s' if ds != [1] else ''}"


def legend(items: list[tuple[str, str]], width: int) -> list[str]:
    """`mark name` pairs as lines under a chart, wrapped at `width`: plotext's own legend
    is drawn over the plot's top rows and hides the data there."""
    out: list[str] = []
    line = ""
    for mark, name in items:
        item = f"{mark} {name}"
        if line and len(line) + 3 + len(item) > width:
            out.append(line)
            line = ""
        line = f"{line}   {item}" if line else item
    return out + ([line] if line else [])


def _from_zero(upper: float, height: int) -> None:
    """The value axis from 0 to `upper`, its ticks in round steps chosen here so that 0 is
    always labelled: plotext's own ticks leave it out of a short chart."""
    rows = height - 5  # the title, the box's two edges, the devices and the axis labels
    raw = upper / max(1, min(5, rows // 2))
    tenth = 10 ** math.floor(math.log10(raw))
    step = next(m * tenth for m in (1, 2, 2.5, 5, 10) if m * tenth >= raw)
    ticks = [step * i for i in range(math.floor(upper / step + 1e-9) + 1)]
    labels = [f"{t:,.0f}" if step >= 1 else f"{t:g}" for t in ticks]
    if len(ticks) < 2:  # too short for a round step: 0 and the top
        ticks, labels = [0.0, upper], ["0", f"{upper:,.3g}"]
    plt.ylim(0, upper)
    plt.yticks(ticks, labels)


PLOT_ROWS = 8  # the fewest rows a chart is drawn in, its title and axes included


def _notes(missing: list[str], width: int, room: int) -> list[str]:
    """The lines saying which points each series lacks and why, wrapped at `width` (so the
    rows they take are known: the TUI would wrap them otherwise), as many as `room` rows
    hold; the rest counted in a last line."""
    out: list[str] = []
    for i, line in enumerate(missing):
        rows = textwrap.wrap(line, width, subsequent_indent="  ")
        more = len(missing) - i
        if len(out) + len(rows) + (more > 1) > room:
            return out + [f"and {more} more series lack points (`dlscale results` says why)"]
        out += rows
    return out


def chart(
    results: list[ResultRow],
    metric: str = "speedup",
    model: str | None = None,
    width: int = 80,
    height: int = 22,
    color: bool = False,
) -> str:
    key, ylabel = METRICS[metric]
    if metric == "throughput":  # tokens/s is not images/s
        ylabel = f"throughput ({throughput_unit(results)})"
    drawn = [(key, "")]
    if metric in ("efficiency", "predicted"):
        # Measured and predicted on one chart, so the gap between them reads at a glance.
        other = "predicted_efficiency" if metric == "efficiency" else "efficiency"
        drawn.append((other, " (model)" if metric == "efficiency" else " (measured)"))
    # Only finite numbers are drawn: one NaN would break plotext's axis for every line.
    rows = [
        r
        for r in results
        if any(number(r, f) is not None for f, _ in drawn)
        and (model is None or r["model"] == model)
    ]
    models = sorted({r["model"] for r in rows})
    title_model = model or (models[0] if len(models) == 1 else "all models")
    plt.clear_figure()
    if not color:
        plt.theme("clear")
    if not any(number(r, key) is not None for r in rows):
        plt.plotsize(width, height)
        plt.title(f"{ylabel}: {why_none(results, key, model)}")
        return _ANSI.sub("", plt.build())
    all_devices = sorted({r["ranks"] for r in rows})
    named = series(rows)
    lines: list[tuple[list[int], list[float], str, str]] = []  # xs, ys, mark, label
    noisy: list[tuple[int, float]] = []
    missing: list[str] = []
    for field, suffix in drawn:
        marks = HOLLOW if suffix else SOLID  # told apart without colour too
        for i, (name, pts) in enumerate(named.items()):
            have = [r for r in pts if _finite(r.get(field))]
            lacks = [d for d in all_devices if d not in {r["ranks"] for r in have}]
            if lacks:
                why = _why_missing(results, pts[0], lacks[0], field)
                missing.append(f"{name}{suffix} has no point at {_devices(lacks)}: {why}")
            if not have:
                continue
            xs = [r["ranks"] for r in have]
            ys = [number(r, field) or 0.0 for r in have]
            lines.append((xs, ys, marks[i % len(marks)], name + suffix))
            if not suffix:
                noisy += [(x, y) for x, y, r in zip(xs, ys, have) if r.get("noisy")]
    if metric in ("speedup", "efficiency", "predicted"):
        ideal = [float(d) if metric == "speedup" else 1.0 for d in all_devices]
        lines.append((all_devices, ideal, IDEAL, "ideal"))
    items = [(mark, label) for _, _, mark, label in lines]
    if noisy:
        items.insert(
            len(items) - (metric in ("speedup", "efficiency", "predicted")), (NOISY, NOISY_LABEL)
        )
    under = legend(items, width)
    under += _notes(missing, width, height - PLOT_ROWS - len(under))
    plot_height = max(PLOT_ROWS, height - len(under))
    plt.plotsize(width, plot_height)
    for xs, ys, mark, _ in sorted(lines, key=lambda line: line[2] != IDEAL):
        plt.plot(xs, ys, marker=mark)  # the ideal first: the data is drawn over it
    if noisy:
        plt.scatter([x for x, _ in noisy], [y for _, y in noisy], marker=NOISY)
    # Every value here is a count or a ratio from zero: an axis cut above zero makes a flat
    # 1.04x look like steep growth.
    top = max(y for _, ys, _, _ in lines for y in ys)
    floor = 1.05 if metric in ("efficiency", "predicted") else 0.0  # efficiency reads against 1
    _from_zero(max(floor, top * 1.05) or 1.0, plot_height)
    plt.xticks(all_devices)
    plt.xlabel("devices (ranks)")
    plt.ylabel(ylabel)
    baselines = sorted({b for r in rows if (b := r["baseline"])})
    base = (
        f"; baseline {', '.join(baselines)}"
        if metric in ("speedup", "efficiency") and baselines
        else ""
    )
    plt.title(f"{ylabel} - {title_model}{base}")
    text = plt.build()
    # plotext emits colour resets even with the "clear" theme; pipes and files get plain text
    text = text if color else _ANSI.sub("", text)
    return "\n".join([text.rstrip("\n"), *under])


def projection_chart(
    series_list: list[dict[str, Any]],
    metric: str = "efficiency",
    width: int = 80,
    height: int = 22,
    color: bool = False,
) -> str:
    """The projection (projection.chart_series) against devices: each family's measured
    points as a line, its projection beyond them as a separate series of dots (plotext
    draws no dashes), the held-out check as an x where it missed its interval, and the
    ideal line; from zero, with the legend under the plot."""
    plt.clear_figure()
    if not color:
        plt.theme("clear")
    lines: list[tuple[list[int], list[float], str, str]] = []  # xs, ys, mark, label
    for i, s in enumerate(series_list):
        # Each family its own mark, solid where measured and hollow where projected: the
        # series are told apart without colour.
        solid, hollow = SOLID[i % len(SOLID)], HOLLOW[i % len(HOLLOW)]
        if s["measured"]:
            lines.append(
                (
                    [p[0] for p in s["measured"]],
                    [p[1] for p in s["measured"]],
                    solid,
                    f"{s['name']} ({s.get('measured_as', 'measured')})",
                )
            )
        if s["projected"]:
            pts = sorted(s["measured"][-1:] + s["projected"])  # continue from the last measured
            what = "projected, stated link" if s["stated"] else "projected"
            lines.append(
                ([p[0] for p in pts], [p[1] for p in pts], hollow, f"{s['name']} ({what})")
            )
    if not lines:
        plt.plotsize(width, height)
        plt.title(f"{metric}: nothing to project")
        return _ANSI.sub("", plt.build())
    devices = sorted({x for xs, _, _, _ in lines for x in xs})
    if metric in ("speedup", "efficiency"):
        ideal = [float(d) if metric == "speedup" else 1.0 for d in devices]
        lines.append((devices, ideal, IDEAL, "ideal"))
    under = legend([(mark, label) for _, _, mark, label in lines], width)
    plot_height = max(PLOT_ROWS, height - len(under))
    plt.plotsize(width, plot_height)
    for xs, ys, mark, _ in sorted(lines, key=lambda line: line[2] != IDEAL):
        plt.plot(xs, ys, marker=mark)
    top = max(y for _, ys, _, _ in lines for y in ys)
    _from_zero(max(1.05 if metric == "efficiency" else 0.0, top * 1.05) or 1.0, plot_height)
    if devices[-1] / devices[0] >= 8:
        plt.xscale("log")
    plt.xticks(devices, [str(d) for d in devices])
    plt.xlabel("devices (ranks)")
    plt.ylabel(metric)
    plt.title(f"{metric}: measured, then projected (95% intervals in the table)")
    text = plt.build()
    text = text if color else _ANSI.sub("", text)
    return "\n".join([text.rstrip("\n"), *under])
