"""Charts that do not mislead (issue 49, item 3), as a class: every metric of `dlscale
chart` on several stores, and every report figure of the same stores. Each chart's value
axis starts at zero, its legend covers no data, each series has a mark of its own that reads
without colour, and a series that lacks a point says so under the chart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_efficiency_results import add, add_comm, breakdown

from conftest import dlscale
from dlscale.engine.io.outputs import OutputFolder
from dlscale.engine.results import analysis, charts
from dlscale.engine.results.report import document as reporting
from dlscale.engine.results.report import figures
from dlscale.engine.tracking.store import Store
from tui_text import axis_study, recorded_study


def efficiency_study(home: Path, comm: bool) -> str:
    """pytorch-ddp at 1 and 2 ranks with a step-time breakdown and energy; with `comm` the
    2-rank allreduce benchmark too, else the model's prediction exists only at 1 device."""
    store = Store(home)
    add(store, home, [breakdown(100, 0.07, 0.0, 0.5), breakdown(100, 0.071, 0.0, 0.4)])
    add(store, home, [breakdown(160, 0.075, 0.02, 0.3)], ranks_per_node=2)
    if comm:
        add_comm(store, home, 0.01, 0.5, ranks_per_node=2)
    store.save_experiment("e", str(home / "no" / "spec.toml"), "[experiment]\n", "0")
    store.close()
    return "e"


def with_mfu(run_id: str, lines: list[str]) -> list[str]:
    """The recorded runs as a transformer trainer writes them: MFU and TFLOPS a device in
    each summary (lower at 2 devices, as communication takes its share)."""
    import json

    devices = json.loads(lines[0])["world_size"]
    out = []
    for line in lines:
        rec = json.loads(line)
        if rec["kind"] == "summary":
            rec.update(mfu=0.42 / devices**0.25, achieved_tflops_per_device=12.0 / devices**0.25)
        out.append(json.dumps(rec) + "\n")
    return out


STORES = {
    "quickstart": lambda h: recorded_study(h),
    "quickstart+comm": lambda h: recorded_study(h, comm=True),
    "8 series": axis_study,
    "efficiency": lambda h: efficiency_study(h, comm=True),
    "prediction at 1 device only": lambda h: efficiency_study(h, comm=False),
    "MFU": lambda h: recorded_study(h, edit=with_mfu),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    out = {}
    for name, build in STORES.items():
        home = tmp_path_factory.mktemp(re.sub(r"\W", "-", name))
        experiment = build(home)
        store = Store(home)
        out[name] = (home, experiment, analysis.results(store, experiment))
        store.close()
    return out


BOX_TOP, BOX_BOTTOM = "┌", "└"


def parts(text: str) -> tuple[list[str], list[str], list[str]]:
    """A drawn chart split into its plot rows (inside the box), the lines under the box
    (tick labels, axis labels, legend, notes) and the legend's (mark, name) items."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if BOX_TOP in line)
    bottom = next(i for i, line in enumerate(lines) if BOX_BOTTOM in line)
    plot, under = lines[top + 1 : bottom], lines[bottom + 1 :]
    return plot, under, [line for line in under if re.match(r"^\S \S", line)]


def legend_items(legend_lines: list[str]) -> list[tuple[str, str]]:
    return [(item[0], item[2:]) for line in legend_lines for item in re.split(r" {3}(?=\S )", line)]


def y_ticks(plot: list[str]) -> list[float]:
    return [float(m.group(1)) for row in plot if (m := re.match(r"^\s*([-\d.]+)┤", row))]


def check_drawn(text: str, height: int) -> tuple[list[str], list[str]]:
    """What every terminal chart holds to: the legend under the box (none of its names
    inside it), a mark per series, at least one of them drawn, and a value axis labelled
    from 0. Returns the lines under the box and the legend's names."""
    plot, under, legend = parts(text)
    assert len(text.splitlines()) <= height  # the legend and notes fit the size asked for
    items = legend_items(legend)
    marks = [mark for mark, _ in items]
    assert items and len(set(marks)) == len(marks), items  # a mark per series
    assert "•" not in marks  # the ideal's old dot read as the solid "●" without colour
    drawn = "".join(plot)
    for _, name in items:
        assert name not in drawn, f"legend {name!r} drawn over the data"
    assert any(mark in drawn for mark, _ in items if mark != charts.IDEAL)
    ticks = y_ticks(plot)
    assert ticks and min(ticks) == 0.0, ticks  # the value axis starts at zero, and says so
    return under, [name for _, name in items]


@pytest.mark.parametrize("metric", list(charts.METRICS))
@pytest.mark.parametrize("store", list(STORES))
def test_every_terminal_chart_is_from_zero_with_its_legend_under_it_and_a_mark_per_series(
    stores, store, metric
):
    _, _, rows = stores[store]
    if charts.nothing_to_draw(rows, metric) is not None:
        return  # the command prints a sentence instead (tested elsewhere)
    for height in (14, 24):  # a short chart keeps its 0 too
        under, _ = check_drawn(charts.chart(rows, metric, width=80, height=height), height)
    # a series with fewer points than the chart's scales says which and why, under it
    fields = {
        "efficiency": [("efficiency", ""), ("predicted_efficiency", " (model)")],
        "predicted": [("predicted_efficiency", ""), ("efficiency", " (measured)")],
    }.get(metric, [(charts.METRICS[metric][0], "")])
    drawn = [r for r in rows if any(isinstance(r.get(f), float) for f, _ in fields)]
    devices = {r["ranks"] for r in drawn}
    for field, suffix in fields:
        for name, pts in charts.series(drawn).items():
            if len([r for r in pts if isinstance(r.get(field), float)]) < len(devices):
                said = [line for line in under if line.startswith(f"{name}{suffix} has no point")]
                more = [line for line in under if "more series lack points" in line]
                assert said or more, (name + suffix, under)


def test_a_flat_speedup_stays_flat():
    """1.00x at 1 device, 1.04x at 2: drawn from zero, the line rises by at most a row."""
    rows = [
        {
            "model": "m",
            "framework": "f",
            "ranks": d,
            "speedup": s,
            "noisy": False,
            "baseline": "f 1x1",
            "n": 3,
            "unmeasured": {},
        }
        for d, s in ((1, 1.0), (2, 1.04))
    ]
    plot, _, _ = parts(charts.chart(rows, "speedup", width=80, height=24))
    rows_with_data = [i for i, row in enumerate(plot) if charts.SOLID[0] in row]
    assert rows_with_data and max(rows_with_data) - min(rows_with_data) <= 1


def test_a_prediction_at_one_scale_says_why_the_other_is_missing(stores):
    _, _, rows = stores["prediction at 1 device only"]
    for metric in ("efficiency", "predicted"):
        _, under, legend = parts(charts.chart(rows, metric, width=80, height=24))
        note = [line for line in under if "has no point at 2 devices" in line]
        assert len(note) == 1 and "no allreduce time for this scale" in note[0], under
        names = [name for _, name in legend_items(legend)]
        assert "pytorch-ddp (model)" in names or "pytorch-ddp" in names


def test_the_cli_chart_without_colour_keeps_the_marks_apart(stores, monkeypatch):
    home, experiment, _ = stores["efficiency"]
    monkeypatch.setenv("NO_COLOR", "1")
    out = dlscale("chart", "--metric", "efficiency", "-e", experiment, home=home).stdout
    assert "\x1b[" not in out
    _, _, legend = parts(out)
    marks = dict((name, mark) for mark, name in legend_items(legend))
    assert marks == {"pytorch-ddp": "●", "pytorch-ddp (model)": "○", "ideal": charts.IDEAL}


@pytest.mark.parametrize("families", [1, 3, 7])
@pytest.mark.parametrize("metric", ["efficiency", "speedup", "throughput"])
def test_every_projection_chart_holds_the_same(families, metric):
    """`dlscale project`'s chart and the TUI's projection: measured solid, projected hollow,
    a mark per series, from zero, the legend under it."""
    scale = {"efficiency": 1.0, "speedup": 1.0, "throughput": 100.0}[metric]
    series_list = [
        {
            "name": f"fw{i}",
            "measured": [(1, scale * (1 + i / 10)), (2, scale * (1.9 + i / 10))],
            "projected": [(8, scale * (6 + i / 10)), (64, scale * (40 + i))],
            "stated": i % 2 == 1,
        }
        for i in range(families)
    ]
    for height in (16, 30):
        text = charts.projection_chart(series_list, metric, width=100, height=height)
        _, names = check_drawn(text, height)
        assert len(names) == 2 * families + (metric != "throughput")  # and the ideal


def _inside(box: tuple[float, ...], x: float, y: float) -> bool:
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


@pytest.mark.parametrize("store", list(STORES))
def test_every_report_figure_is_from_zero_with_its_legend_outside_and_a_marker_per_series(
    stores, store, tmp_path
):
    home, experiment, _ = stores[store]
    made = reporting.build(Store(home), experiment, tmp_path / "rep")
    assert made.figures
    for fig in made.figures:
        assert fig.ylim[0] == 0, (fig.name, fig.ylim)
        assert fig.legend_box, fig.name
        ax, lg = fig.axes_box, fig.legend_box
        assert lg[0] >= ax[2] or lg[2] <= ax[0] or lg[1] >= ax[3] or lg[3] <= ax[1], fig.name
        assert not [p for p in fig.points_px if _inside(lg, *p)], fig.name
        shown = [fig.markers[label] for label in fig.legend if label in fig.markers]
        assert len(set(shown)) == len(shown), (fig.name, fig.markers)


def test_a_projected_line_is_the_measured_shape_hollow(tmp_path):
    chart = [
        {
            "name": f"fw{i}",
            "measured": [(1, 1.0, 0.9, 1.0), (2, 0.9, 0.85, 0.95)],
            "projected": [(4, 0.8, 0.7, 0.9)],
            "stated": False,
        }
        for i in range(3)
    ]
    fig = figures.projection_figure(chart, tmp_path, "t")
    assert fig is not None and fig.ylim[0] == 0
    for i in range(3):
        measured, projected = fig.markers[f"fw{i} (measured)"], fig.markers[f"fw{i} (projected)"]
        assert measured[0] == projected[0] == figures.MARKERS[i]
        assert measured[1] == "full" and projected[1] == "none"


def many_series(n: int) -> list[dict]:
    """n models of one framework at 1, 2 and 4 devices: a line each."""
    return [
        {
            "model": f"m{i:02d}",
            "framework": "f",
            "nodes": 1,
            "ranks_per_node": d,
            "ranks": d,
            "throughput": 100.0 * d * (1 + i / 20),
            "throughput_ci95": 1.0,
            "speedup": d * (1 + i / 40),
            "efficiency": 1 + i / 40,
            "noisy": False,
            "baseline": "f 1x1",
            "n": 3,
            "unmeasured": {},
            "time_to_accuracy_s": None,
            "time_to_accuracy_ci95": None,
        }
        for i in range(n)
        for d in (1, 2, 4)
    ]


@pytest.mark.parametrize("n", [16, 20, 34])
def test_past_the_first_shapes_every_series_still_has_its_own_mark(n, tmp_path):
    rows = many_series(n)
    for metric in ("speedup", "throughput"):
        height = 60
        _, names = check_drawn(charts.chart(rows, metric, width=120, height=height), height)
        assert len([x for x in names if x.startswith("f m")]) == n
    with OutputFolder.open(tmp_path) as folder:
        made = figures.draw_all(rows, folder, "many")
    for fig in made:
        if fig.name in ("speedup", "efficiency", "throughput"):
            shown = [fig.markers[label] for label in fig.legend]
            assert len(set(shown)) == len(shown) == n + (fig.name != "throughput"), fig.name
            ax, lg = fig.axes_box, fig.legend_box
            assert lg[0] >= ax[2], fig.name  # beside the plot, whole columns of it


def test_a_transformers_mfu_is_a_chart_of_its_own(stores):
    """m on the Results screen and `dlscale chart --metric mfu` draw MFU against devices,
    one point per scale; a store without it says why instead."""
    _, _, rows = stores["MFU"]
    drawn = charts.chart(rows, "mfu", width=80, height=20)
    assert "MFU (model FLOPs utilisation)" in drawn
    assert charts.nothing_to_draw(rows, "mfu") is None
    _, _, plain = stores["quickstart"]
    assert "no run counted its model's FLOPs" in charts.nothing_to_draw(plain, "mfu")
