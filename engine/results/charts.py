"""Terminal charts of results with plotext: one line per framework against devices, the
ideal-scaling line for speedup and efficiency, and noisy points marked. Returns text so the
CLI prints it and the TUI renders it alike."""

from __future__ import annotations

import math
import re
from typing import Any

import plotext as plt

from .points import throughput_unit
from .rows import ResultRow, number

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Series marks that differ by shape, not by colour alone: solid for what was measured,
# hollow for what a model says (predicted, projected).
SOLID = ("●", "■", "▲", "◆", "★", "✚")
HOLLOW = ("○", "□", "△", "◇", "☆", "✜")

METRICS = {
    "speedup": ("speedup", "speedup (vs best 1-device run)"),
    "efficiency": ("efficiency", "scaling efficiency"),
    "throughput": ("throughput", "throughput (images/s)"),
    "tta": ("time_to_accuracy_s", "time-to-accuracy (s)"),
    # The efficiency model (compute + benchmarked allreduce) and the energy, where measured.
    "predicted": ("predicted_efficiency", "predicted efficiency (model)"),
    "images-per-joule": ("images_per_joule", "images per joule"),
}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


# What a chart with nothing to draw says, by the field it wanted, when results exist
# (short: plotext drops a title wider than the chart).
_NONE_BECAUSE = {
    "time_to_accuracy_s": "no run evaluated to a target accuracy",
    "images_per_joule": "no run measured its energy",
    "predicted_efficiency": "no point has the model's prediction",
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


def series(rows: list[ResultRow]) -> dict[str, list[ResultRow]]:
    """Result rows as lines against devices: one per framework, and per experiment (a report
    of several overlays them), model, precision, device, batch, loader or lr schedule where
    the rows hold more than one, each sorted by devices.
    Terminal charts and report figures draw the same lines under the same names."""
    varying = [
        k
        for k in (
            "experiment",
            "model",
            "device",
            "precision",
            "per_device_batch",
            "loader",
            "lr_schedule",
        )
        if len({r.get(k) for r in rows}) > 1
    ]
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
    # Only finite numbers are drawn: one NaN would break plotext's axis for every line.
    rows = [
        r for r in results if number(r, key) is not None and (model is None or r["model"] == model)
    ]
    models = sorted({r["model"] for r in rows})
    title_model = model or (models[0] if len(models) == 1 else "all models")
    plt.clear_figure()
    plt.plotsize(width, height)
    if not color:
        plt.theme("clear")
    if not rows:
        plt.title(f"{ylabel}: {why_none(results, key, model)}")
        return _ANSI.sub("", plt.build())
    all_devices = sorted({r["ranks"] for r in rows})
    drawn = [(key, "")]
    if metric in ("efficiency", "predicted"):
        # Measured and predicted on one chart, so the gap between them reads at a glance.
        other = "predicted_efficiency" if metric == "efficiency" else "efficiency"
        drawn.append((other, " (model)" if metric == "efficiency" else " (measured)"))
    top = 0.0
    for field, suffix in drawn:
        drawn_rows = [r for r in rows if _finite(r.get(field))]
        for i, (name, pts) in enumerate(series(drawn_rows).items()):
            xs = [r["ranks"] for r in pts]
            ys = [number(r, field) or 0.0 for r in pts]
            top = max(top, *ys)
            marks = HOLLOW if suffix else SOLID  # told apart without colour too
            plt.plot(xs, ys, label=name + suffix, marker=marks[i % len(marks)])
            noisy = [(x, y) for x, y, r in zip(xs, ys, pts) if r.get("noisy") and not suffix]
            if noisy:
                plt.scatter(
                    [x for x, _ in noisy],
                    [y for _, y in noisy],
                    marker="x",
                    label="noisy (CV > 5%)",
                )
    if metric in ("speedup", "efficiency", "predicted"):
        ideal = [float(d) if metric == "speedup" else 1.0 for d in all_devices]
        plt.plot(all_devices, ideal, label="ideal", marker="dot")
    if metric in ("efficiency", "predicted"):
        plt.ylim(0, max(1.05, top * 1.05))  # efficiency reads against 0 and 1
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
    return text if color else _ANSI.sub("", text)


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
    ideal line."""
    plt.clear_figure()
    plt.plotsize(width, height)
    if not color:
        plt.theme("clear")
    xs_all: set[int] = set()
    for i, s in enumerate(series_list):
        # Each family its own mark, solid where measured and hollow where projected: the
        # series are told apart without colour.
        solid, hollow = SOLID[i % len(SOLID)], HOLLOW[i % len(HOLLOW)]
        if s["measured"]:
            xs = [p[0] for p in s["measured"]]
            xs_all.update(xs)
            plt.plot(
                xs,
                [p[1] for p in s["measured"]],
                label=f"{s['name']} ({s.get('measured_as', 'measured')})",
                marker=solid,
            )
        if s["projected"]:
            pts = sorted(s["measured"][-1:] + s["projected"])  # continue from the last measured
            xs_all.update(p[0] for p in pts)
            what = "projected, stated link" if s["stated"] else "projected"
            plt.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                label=f"{s['name']} ({what})",
                marker=hollow,
            )
    if not xs_all:
        plt.title(f"{metric}: nothing to project")
        return _ANSI.sub("", plt.build())
    devices = sorted(xs_all)
    if metric in ("speedup", "efficiency"):
        plt.plot(
            devices,
            [float(d) if metric == "speedup" else 1.0 for d in devices],
            label="ideal",
            marker="dot",
        )
    if devices[-1] / devices[0] >= 8:
        plt.xscale("log")
    plt.xticks(devices, [str(d) for d in devices])
    plt.xlabel("devices (ranks)")
    plt.ylabel(metric)
    plt.title(f"{metric}: measured, then projected (95% intervals in the table)")
    text = plt.build()
    return text if color else _ANSI.sub("", text)
