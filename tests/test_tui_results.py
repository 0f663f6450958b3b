"""The results screen explains the efficiency (issue 17, item 3): the efficiency model's
prediction beside the measured efficiency, images per joule where energy was measured, a
"-" with the engine's reason where a part was not measured, and both as chart metrics."""

from __future__ import annotations

import json

from dlscale.engine.results import analysis, charts
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.results import ResultsScreen
from test_tui import field, until
from tui_text import drawn, recorded_study, screen_text

ENERGY_J = 0.25  # per image, on the 1-device runs only: 4.0 images per joule


def with_breakdown(run_id: str, lines: list[str]) -> list[str]:
    """The recorded runs as a trainer of today writes them: a step-time breakdown in every
    summary, and energy measured on one device only (the other scale says why not)."""
    devices = json.loads(lines[0])["world_size"]
    out = []
    for line in lines:
        rec = json.loads(line)
        if rec["kind"] == "summary":
            rec.update(compute_time_s=0.5, exposed_comm_s=0.0 if devices == 1 else 0.2)
            if devices == 1:
                rec["energy_per_image_j"] = ENERGY_J
        elif rec["kind"] == "env" and devices > 1:
            rec["energy_unavailable"] = "no RAPL counters readable on this node"
        out.append(json.dumps(rec) + "\n")
    return out


def row_of(app, devices: int) -> dict[str, str]:
    table = field(app, "results")
    labels = [str(c.label) for c in table.columns.values()]
    for i in range(table.row_count):
        cells = dict(zip(labels, map(str, table.get_row_at(i))))
        if cells["scale"] == f"1x{devices}":
            return cells | {"index": str(i)}
    raise AssertionError(f"no {devices}-device row")


async def test_predicted_efficiency_and_images_per_joule_with_their_reasons(home):
    recorded_study(home, edit=with_breakdown)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("f4")
        await until(
            pilot,
            lambda: isinstance(app.screen, ResultsScreen) and field(app, "results").row_count == 2,
            what="two results",
        )
        one, two = row_of(app, 1), row_of(app, 2)
        # One device: the model predicts its own compute (1.00); 4 images per joule.
        assert (one["pred. eff"], one["images/J"]) == ("1.00", f"{1 / ENERGY_J:.1f}")
        assert one["eff."] == "1.00"
        # Two devices: no communication benchmark, no energy: "-", and the engine's reasons
        # on the line under the table once the row is selected.
        assert (two["pred. eff"], two["images/J"]) == ("-", "-")
        assert two["eff."] not in ("-", "")  # measured, beside the missing prediction
        table = field(app, "results")
        table.focus()
        table.move_cursor(row=int(one["index"]))
        await pilot.pause()
        # No "-" to explain on this row: only its step time split, and the two efficiencies.
        await until(pilot, lambda: field(app, "why").display, what="the breakdown shown")
        one_why = str(field(app, "why").render())
        assert "compute" in one_why and "exposed comm" in one_why and "-:" not in one_why
        table.move_cursor(row=int(two["index"]))
        await until(pilot, lambda: "1x2" in str(field(app, "why").render()), what="its reasons")
        why = str(field(app, "why").render())
        assert "pred. eff -: no allreduce time for this scale: no communication benchmark" in why
        assert "images/J -: no RAPL counters readable on this node" in why
        text = await drawn(pilot, lambda t: "pred. eff" in t and "images/J" in t)
        assert "pred. eff" in text and "images/J" in text


async def test_the_chart_offers_predicted_efficiency_and_images_per_joule(home):
    recorded_study(home, edit=with_breakdown)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        await until(
            pilot,
            lambda: isinstance(app.screen, ResultsScreen) and field(app, "results").row_count == 2,
            what="two results",
        )
        seen = []
        for _ in charts.METRICS:
            seen.append(app.screen.metric)
            await pilot.press("m")
            await pilot.pause()
            if app.screen.metric == "predicted":
                # One point has a prediction: the chart draws it, not "no results yet".
                text = await drawn(pilot, lambda t: "predicted efficiency (model)" in t)
                assert "predicted efficiency (model)" in text
                assert "no completed results" not in text
        assert {"predicted", "images-per-joule"} <= set(seen)
        while app.screen.metric != "images-per-joule":
            await pilot.press("m")
        await pilot.pause()
        assert "images per joule" in await drawn(pilot, lambda t: "images per joule" in t)


def test_a_result_without_any_unmeasured_part_explains_nothing(home):
    from dlscale.tui.points import why_missing

    recorded_study(home)
    r = analysis.results(Store(home))[0]
    r.update(predicted_efficiency=0.9, images_per_joule=3.0)
    r["unmeasured"] = {"comm_busbw_gbps": "one device"}
    assert why_missing(r) == ""
    r.update(predicted_efficiency=None)
    r["unmeasured"] = {"predicted_efficiency": "no 1-device baseline point"}
    assert why_missing(r) == "pred. eff -: no 1-device baseline point"


async def test_the_projection_chart_fits_beside_its_held_out_line_at_80x24(home):
    """The projection is drawn by a worker at the chart's size; the held-out line that comes
    with it takes rows, the screen scrolls and its scrollbar takes two columns: the drawing
    wrapped, each chart line spilling onto the next. Now it is drawn again at the new size."""
    from test_projection import make_study

    from dlscale.tui.results import PROJECTED

    make_study(home).close()  # projected past its measured scales
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
        await pilot.press("f4")
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        await until(pilot, lambda: screen.results, what="results")
        while screen.metric != PROJECTED:
            await pilot.press("m")
        await until(pilot, lambda: screen.query_one("#held-out").display, what="held-out line")

        def chart_whole() -> bool:
            top = [line for line in screen_text(app).splitlines() if "┌" in line]
            return bool(top) and top[0].rstrip().endswith("┐")

        await until(pilot, chart_whole, what="the chart whole, its top right corner on its line")
        lines = screen_text(app).splitlines()
        assert not any(line.startswith("─┐") for line in lines), screen_text(app)


async def show_projection(pilot) -> None:
    """The Results screen, its chart switched to the projection (m until it is)."""
    from dlscale.tui.results import PROJECTED

    app = pilot.app
    await pilot.press("f4")
    await until(pilot, lambda: app.screen.results, what="the results")
    while app.screen.metric != PROJECTED:
        await pilot.press("m")


async def test_where_nothing_is_projected_the_chart_says_why_as_dlscale_project_does(home):
    """Issue 47, item 4: the quickstart (1x1 and 1x2, no link measured or stated) has no
    projection: its place says so, with the reason `dlscale project` gives each projected
    row, instead of a chart titled "measured, then projected" with nothing projected."""
    from dlscale.engine.results.projection import project as projection
    from dlscale.tui.results import Chart

    name = recorded_study(home)
    families = projection.of_study(Store(home), name).families
    why = next(r["why"] for r in families[0]["rows"] if r["kind"] == "projected")
    assert why.startswith("no intra-node link")
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await show_projection(pilot)
        chart = app.screen.query_one(Chart)
        await until(pilot, lambda: chart.projected, what="the projection")
        assert chart.projected == f"{families[0]['family']}: not projected: {why}"
        text = " ".join(screen_text(app).split())
        assert f"not projected: {why}" in text  # wrapped, whole
        assert "measured, then projected" not in text


async def test_a_disturbed_run_is_marked_and_said_on_the_results_and_queue_screens(home):
    """Issue 50, item 2: the TUI shows what results and status say of a run other work
    disturbed: the ~ after its point's throughput with the legend above the table, what
    disturbed it under the table when its point is selected, and the run's reason on the
    queue."""
    hit = []

    def disturb(run_id: str, lines: list[str]) -> list[str]:
        if hit or json.loads(lines[0])["world_size"] != 1:
            return lines
        hit.append(run_id)
        load = {"kind": "interference", "schema": 1, "time": 0.0, "window_s": 2.0, "cpus": [0]}
        load.update(others_cpu_share=0.45, run_queue_wait_share=0.4)
        return [*lines, json.dumps(load) + "\n"]

    recorded_study(home, edit=disturb)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
        reasons = {r.run_id: r.reason for r in app.snapshot.rows}
        assert reasons[hit[0]].startswith("disturbed: others took 45% of the run's CPUs")
        await pilot.press("f4")
        await until(
            pilot,
            lambda: isinstance(app.screen, ResultsScreen) and field(app, "results").row_count == 2,
            what="two results",
        )
        one = row_of(app, 1)
        assert one["images/s"].endswith("~"), one
        assert "~ other work disturbed runs" in str(field(app, "results-head").render())
        table = field(app, "results")
        table.focus()
        table.move_cursor(row=int(one["index"]))
        await until(pilot, lambda: "1x1" in str(field(app, "why").render()), what="the point")
        why = str(field(app, "why").render())
        assert f"1 of 3 runs disturbed; run {hit[0]}: others took 45%" in why, why
