"""The report's figures as PNG files, drawn with matplotlib (Agg: no display on a login node).

Every figure draws result rows from analysis.results as they are: nothing is recomputed
here. What each figure shows (its series, their points, the ideal line) is read back from
the drawn axes into a `Figure`, so a test or a reader can check the picture says what the
tables say.

So that no figure misleads: value axes start at zero, the legend sits outside the plot
(beside it, never over a point), and every series has a marker (or a bar hatch) of its own
that reads without colour: hollow where projected.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # before pyplot: a headless backend, whatever the user's default is
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.container import BarContainer, ErrorbarContainer  # noqa: E402

from ...io.outputs import OutputFolder
from ...runs import scale_label
from ..charts import METRICS, series
from ..points import throughput_unit
from ..rows import PROJECTED, ResultRow, number

IDEAL = "ideal"
NOISY = "noisy (CV > 5%)"
# A shape per series, in order; "x" and "+" are kept for noisy points and held-out checks.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "8", "d", "H")
FILLS = ("full", "left", "right", "bottom", "top")  # past the shapes, the half-filled ones
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++", "**", "||")


def _marker(i: int) -> dict[str, Any]:
    """The i-th series' marker: a shape of its own for 75 series (hollow is the projected)."""
    return {
        "marker": MARKERS[i % len(MARKERS)],
        "fillstyle": FILLS[(i // len(MARKERS)) % len(FILLS)],
    }


def _legend_outside(ax: Any, **kw: Any) -> None:
    """The legend to the right of the plot: inside, it covers points wherever they fall.
    A column per 16 entries, so a long one stays within the figure's height."""
    ncols = 1 + (len(ax.get_legend_handles_labels()[1]) - 1) // 16
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1),
        borderaxespad=0,
        fontsize="small",
        ncols=ncols,
        **kw,
    )


@dataclass
class Figure:
    name: str  # file stem, e.g. "speedup"
    path: Path
    title: str
    xlabel: str
    ylabel: str
    # label -> [(x, y), ...] as drawn: lines, error-bar lines and bars alike
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    legend: list[str] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)  # label -> hex colour as drawn
    xscale: str = "linear"
    ylim: tuple[float, float] = (0.0, 0.0)
    # label -> (marker, fillstyle, linestyle) as drawn, or ("hatch", pattern, "") for bars
    markers: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # pixel boxes (x0, y0, x1, y1) of the plot area and the legend; points in pixels
    axes_box: tuple[float, ...] = ()
    legend_box: tuple[float, ...] = ()
    points_px: list[tuple[float, float]] = field(default_factory=list, repr=False)
    png: bytes = field(default=b"", repr=False)  # as drawn; written by draw_all

    @property
    def file(self) -> str:
        return self.path.name


def _read_back(fig: Any, ax: Any, name: str, path: Path) -> Figure:
    """What the axes hold, taken from the artists themselves rather than from our inputs."""
    out = Figure(
        name, path, ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), xscale=ax.get_xscale()
    )
    fig.canvas.draw()  # lays the figure out, so the boxes below are where they are drawn
    out.ylim = tuple(float(v) for v in ax.get_ylim())  # type: ignore[assignment]
    out.axes_box = tuple(ax.get_window_extent().extents)
    for line in ax.get_lines():
        xy = np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)
        out.points_px += [(float(x), float(y)) for x, y in ax.transData.transform(xy)]
        label = line.get_label()
        if label.startswith("_"):  # matplotlib's unlabelled helpers (error-bar caps...)
            continue
        out.markers[label] = (
            str(line.get_marker()),
            line.get_fillstyle(),
            str(line.get_linestyle()),
        )
        xs, ys = line.get_xdata(), line.get_ydata()
        out.series[label] = [(float(x), float(y)) for x, y in zip(xs, ys)]
        out.colors[label] = matplotlib.colors.to_hex(line.get_color())
    for container in ax.containers:
        label = container.get_label()
        if not label or label.startswith("_"):
            continue
        if isinstance(container, ErrorbarContainer):
            line = container.lines[0]
            xs, ys = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            out.series[label] = [(float(x), float(y)) for x, y in zip(xs, ys)]
            out.colors[label] = matplotlib.colors.to_hex(line.get_color())
            out.markers[label] = (
                str(line.get_marker()),
                line.get_fillstyle(),
                str(line.get_linestyle()),
            )
        elif isinstance(container, BarContainer):
            out.markers[label] = ("hatch", container.patches[0].get_hatch() or "", "")
            out.series[label] = [
                (float(p.get_x() + p.get_width() / 2), float(p.get_height()))
                for p in container.patches
            ]
            out.colors[label] = matplotlib.colors.to_hex(container.patches[0].get_facecolor())
    for coll in ax.collections:
        label = coll.get_label()
        if not label.startswith("_") and label not in out.series:
            out.series[label] = [(float(x), float(y)) for x, y in coll.get_offsets()]
    legend = ax.get_legend()
    out.legend = [t.get_text() for t in legend.get_texts()] if legend else []
    out.legend_box = tuple(legend.get_window_extent().extents) if legend else ()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    out.png = png.getvalue()
    return out


def _against_devices(
    rows: list[ResultRow], metric: str, out_dir: Path, title: str
) -> Figure | None:
    key, ylabel = METRICS[metric]
    rows = [r for r in rows if r.get(key) is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    devices = sorted({r["ranks"] for r in rows})
    noisy_x, noisy_y = [], []
    for i, (label, pts) in enumerate(series(rows).items()):
        mark = _marker(i)
        xs = [r["ranks"] for r in pts]
        ys = [number(r, key) or 0.0 for r in pts]
        if metric == "throughput":
            err = [r["throughput_ci95"] or 0.0 for r in pts]
            ax.errorbar(xs, ys, yerr=err, capsize=3, label=label, **mark)
        elif metric == "tta":
            err = [r["time_to_accuracy_ci95"] or 0.0 for r in pts]
            ax.errorbar(xs, ys, yerr=err, capsize=3, label=label, **mark)
        else:
            ax.plot(xs, ys, label=label, **mark)
        noisy_x += [x for x, r in zip(xs, pts) if r["noisy"]]
        noisy_y += [y for y, r in zip(ys, pts) if r["noisy"]]
    if metric in ("speedup", "efficiency"):
        ideal = [float(d) if metric == "speedup" else 1.0 for d in devices]
        ax.plot(devices, ideal, linestyle="--", color="grey", label=IDEAL)
    if noisy_x:
        ax.scatter(noisy_x, noisy_y, marker="x", s=80, color="red", zorder=3, label=NOISY)
    if len(devices) > 1 and devices[-1] / devices[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(devices, [str(d) for d in devices])
    ax.set_xlabel("devices (ranks)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)  # from zero: a flat 1.04x must not look like steep growth
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _read_back(fig, ax, metric, out_dir / f"{metric}.png")


def _framework_bars(rows: list[ResultRow], out_dir: Path, title: str) -> Figure | None:
    """Throughput per framework side by side at each scale: which one is fastest where."""
    rows = [r for r in rows if r.get("throughput") is not None]
    # a bar per framework, and per device where CPU and GPU points share the figure
    devices = len({r.get("device") for r in rows}) > 1

    def bar(r: ResultRow) -> str:
        return f"{r['framework']} on {r.get('device') or '-'}" if devices else r["framework"]

    frameworks = sorted({bar(r) for r in rows})
    if not rows:
        return None
    scales = sorted({(r["ranks"], r["nodes"], r["ranks_per_node"]) for r in rows})
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    width = 0.8 / len(frameworks)
    for i, fw in enumerate(frameworks):
        xs, ys, errs = [], [], []
        for j, (_, n, rpn) in enumerate(scales):
            # The best configuration of this framework at this scale (a bar per framework).
            at = [r for r in rows if bar(r) == fw and (r["nodes"], r["ranks_per_node"]) == (n, rpn)]
            if at:
                best = max(at, key=lambda r: r["throughput"] or 0.0)
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(best["throughput"] or 0.0)
                errs.append(best["throughput_ci95"] or 0.0)
        hatch = HATCHES[i % len(HATCHES)]  # told apart without colour
        ax.bar(xs, ys, width=width * 0.95, yerr=errs, capsize=3, label=fw, hatch=hatch)
    ax.set_xticks(range(len(scales)), [f"{n}x{rpn}\n({d} dev)" for d, n, rpn in scales])
    ax.set_xlabel("scale (nodes x ranks per node)")
    ax.set_ylabel(f"throughput ({throughput_unit(rows)})")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    _legend_outside(ax)
    return _read_back(fig, ax, "frameworks", out_dir / "frameworks.png")


# The parts of a step, stacked in this order, each in one colour at every scale.
PARTS = (
    ("compute_time_s", "compute", "#4c72b0"),
    ("exposed_comm_s", "exposed communication", "#dd8452"),
    ("other_s", "the rest", "#8c8c8c"),
)
PREDICTED = "predicted step (model)"
MEASURED = "measured step"


def _efficiency_bars(rows: list[ResultRow], out_dir: Path, title: str) -> Figure | None:
    """Where the efficiency goes: each point's step as stacked bars (compute, the
    communication not hidden behind it, the rest), the measured step marked on it (below
    the bar's top where the probe's steps ran slower than the timed ones) and the model's
    predicted step beside. Drawn for a study that benchmarked its communication
    (comm_benchmark = true): the explanation it asked for; the report's table shows any
    study's breakdown."""
    if not any(r.get("comm_busbw_gbps") is not None for r in rows):
        return None
    rows = [
        r
        for r in rows
        if r.get("step_time_s") is not None
        and r.get("compute_time_s") is not None
        and r.get("exposed_comm_s") is not None
    ]
    if not rows:
        return None
    names = series(rows)
    bars = [(name, r) for name, pts in names.items() for r in pts]
    fig, ax = plt.subplots(figsize=(max(8.5, 0.9 * len(bars) + 4), 4.5), layout="constrained")
    xs = list(range(len(bars)))
    bottom = [0.0] * len(bars)
    for (key, label, colour), hatch in zip(PARTS, HATCHES):
        # a negative rest draws nothing
        heights = [1000 * max(0.0, number(r, key) or 0.0) for _, r in bars]
        ax.bar(xs, heights, bottom=bottom, width=0.6, color=colour, label=label, hatch=hatch)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.plot(
        xs,
        [1000 * (r["step_time_s"] or 0.0) for _, r in bars],
        linestyle="none",
        marker="_",
        markersize=24,
        markeredgewidth=2,
        color="#c44e52",
        label=MEASURED,
    )
    predicted = [
        (x, 1000 * step)
        for x, (_, r) in zip(xs, bars)
        if (step := r["predicted_step_s"]) is not None
    ]
    if predicted:
        ax.plot(
            [x for x, _ in predicted],
            [y for _, y in predicted],
            linestyle="none",
            marker="D",
            color="black",
            label=PREDICTED,
        )
    several = len(names) > 1
    ax.set_xticks(
        xs,
        [
            f"{scale_label(r['nodes'], r['ranks_per_node'])}" + (f"\n{name}" if several else "")
            for name, r in bars
        ],
        fontsize="small",
    )
    ax.set_xlabel("scale (nodes x ranks per node)")
    ax.set_ylabel("time per step (ms)")
    tops = bottom + [
        float(y) for line in ax.get_lines() for y in np.asarray(line.get_ydata(), float)
    ]
    ax.set_ylim(0, 1.05 * max(tops) or 1.0)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    _legend_outside(ax, markerscale=0.6)
    return _read_back(fig, ax, "efficiency-breakdown", out_dir / "efficiency-breakdown.png")


def _accuracy_per_schedule(
    curves: dict[str, list[tuple[float, float]]], out_dir: Path, title: str
) -> Figure | None:
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    for i, (name, pts) in enumerate(curves.items()):
        ax.plot([e for e, _ in pts], [a for _, a in pts], label=name, **_marker(i))
    ax.set_xlabel("epoch")
    ax.set_ylabel("top-1 accuracy (mean over repetitions)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend_outside(ax, title="lr schedule")
    return _read_back(fig, ax, "accuracy-per-schedule", out_dir / "accuracy-per-schedule.png")


HELD_OUT = "held-out check"


def projection_figure(
    chart: list[dict[str, Any]], out_dir: Path, title: str, metric: str = "efficiency"
) -> Figure | None:
    """projection.chart_series drawn: measured points with their intervals, the projection
    as a dashed line from the last measured point with its 95% band, the ideal line, and
    each held-out check (red x where the measurement fell outside its interval)."""
    chart = [s for s in chart if s["measured"] or s["projected"]]
    if not any(s["projected"] for s in chart):
        return None
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    devices: set[float] = set()
    for i, s in enumerate(chart):
        mark = _marker(i)  # the family's shape: hollow where projected
        m = sorted(s["measured"])
        line = ax.errorbar(
            [p[0] for p in m],
            [p[1] for p in m],
            yerr=[[p[1] - p[2] for p in m], [p[3] - p[1] for p in m]],
            capsize=3,
            label=f"{s['name']} ({s.get('measured_as', 'measured')})",
            **mark,
        )
        pts = sorted(m[-1:] + s["projected"])
        what = "projected, stated link" if s["stated"] else PROJECTED
        color = line.lines[0].get_color()
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            linestyle="--",
            marker=mark["marker"],
            fillstyle="none",
            color=color,
            label=f"{s['name']} ({what})",
        )
        ax.fill_between(
            [p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.15
        )
        devices.update(p[0] for p in m + pts)
        held = s.get("held_out") or {}
        if "projected_throughput" in held and metric == "throughput":
            miss = held["outside_interval"]
            ax.scatter(
                [held["ranks"]],
                [held["projected_throughput"]["value"]],
                marker="x" if miss else "+",
                s=80,
                color="red" if miss else "black",
                zorder=3,
                label=f"{HELD_OUT}" + (" (missed)" if miss else ""),
            )
    xs = sorted(devices)
    if metric in ("speedup", "efficiency"):
        ax.plot(xs, [x if metric == "speedup" else 1.0 for x in xs], ":", color="grey", label=IDEAL)
    if xs[-1] / xs[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(int(x)) for x in xs])
    ax.set_xlabel("devices (ranks)")
    ax.set_ylabel(METRICS[metric][1])
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _read_back(fig, ax, f"projection-{metric}", out_dir / f"projection-{metric}.png")


def draw_all(
    rows: list[ResultRow],
    folder: OutputFolder,
    experiment: str,
    curves: dict[str, list[tuple[float, float]]] | None = None,
    projected: list[dict[str, Any]] | None = None,
    projected_throughput: list[dict[str, Any]] | None = None,
) -> list[Figure]:
    """Every figure that the rows can fill, written into `folder` by the one writer; empty
    ones are skipped. `curves`: top-1 against epoch per lr schedule
    (analysis.accuracy_curves)."""
    out_dir = folder.path
    baselines = sorted({b for r in rows if (b := r["baseline"])})
    base = f"\nbaseline: best 1-device run ({', '.join(baselines)})" if baselines else ""
    made = [
        _against_devices(rows, "speedup", out_dir, f"{experiment}: speedup{base}"),
        _against_devices(rows, "efficiency", out_dir, f"{experiment}: scaling efficiency{base}"),
        _against_devices(rows, "throughput", out_dir, f"{experiment}: throughput (mean, 95% CI)"),
        _against_devices(rows, "tta", out_dir, f"{experiment}: time-to-accuracy"),
        _framework_bars(
            rows,
            out_dir,
            f"{experiment}: throughput per framework\n(its best configuration at each scale)",
        ),
        _efficiency_bars(
            rows,
            out_dir,
            f"{experiment}: where the efficiency goes\n(the "
            "measured step split by the step-time breakdown)",
        ),
        _accuracy_per_schedule(
            curves or {}, out_dir, f"{experiment}: top-1 against epoch per lr schedule"
        ),
        projection_figure(
            projected or [],
            out_dir,
            f"{experiment}: scaling beyond what was measured\n(dashed: projected, "
            "band: 95% interval)",
        ),
        projection_figure(
            projected_throughput or [],
            out_dir,
            f"{experiment}: throughput, measured and projected\n(x/+: held-out check)",
            "throughput",
        ),
    ]
    drawn = [f for f in made if f is not None]
    for f in drawn:
        folder.write(f.file, f.png)
    return drawn
