"""80x24 is first-class for a real study (issue 36, item 2): on a study of 4 models x 2
batch sizes with an axis of its own (`mode = fail/ok`), a new user reads the throughput,
the efficiency, the chart and the failure reasons without resizing. Columns that do not fit
whole go, the least important first: no number is cut to meaningless digits."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from rich.text import Text

from dlscale.engine.session import Session
from dlscale.tui.app import DlscaleApp
from dlscale.tui.columns import GAP, fit, stretch_width
from dlscale.tui.jobtable import JobTable
from dlscale.tui.results import PointTable
from test_tui import until
from tui_text import axis_study, drawn, screen_text


@pytest.mark.parametrize(
    "room, chosen",
    [
        (80, ["state", "job", "scale", "rate", "reason", "model", "mode", "batch"]),
        # model does not fit: mode, after it, does (the room is used)
        (60, ["state", "job", "scale", "rate", "reason", "mode"]),
        (35, ["state", "job", "scale", "mode"]),
    ],
)
def test_columns_fit_whole_the_least_important_going_first(room, chosen):
    widths = {"state": 9, "job": 8, "scale": 5, "rate": 8, "reason": 40, "model": 11}
    widths |= {"mode": 4, "batch": 5, "nodes": 9}
    priority = ["state", "job", "scale", "rate", "reason", "model", "mode", "batch", "nodes"]
    got = fit(widths, priority, room, stretch="reason", least=8)
    assert got == chosen
    used = sum(widths[c] + GAP for c in got if c != "reason")
    if "reason" in got:  # the reason takes what is left, at least 8 cells
        left = stretch_width(widths, got, "reason", room)
        assert left >= 8 and used + left + GAP <= room


def _lines(app) -> list[str]:
    return screen_text(app).splitlines()


async def _settled_whole(pilot, app, table) -> None:
    """_whole once the layout has settled: a loaded machine draws a frame mid-layout (the
    columns still narrow); it fails only if it never settles."""

    def whole_now() -> bool:
        try:
            _whole(app, table)
        except AssertionError:
            return False
        return True

    try:
        await until(pilot, whole_now, what="every cell whole")
    except AssertionError:
        pass
    _whole(app, table)  # its own message, if it never did


def _whole(app, table) -> None:
    """Each row on screen shows every cell of its shown columns whole (the reason is cut
    with `…`, and shown whole by enter)."""
    labels = [str(c.label) for c in table.columns.values()]
    lines = _lines(app)
    top = table.region.y + 1  # under the heading
    shown = 0
    for i in range(min(table.row_count, table.region.height - 1)):
        line = lines[top + i]
        shown += 1
        for label, cell in zip(
            labels, (Text.from_markup(str(c)).plain for c in table.get_row_at(i))
        ):
            if label != "reason" and cell:
                assert f" {cell} " in f"{line} ", (label, cell, line)
    assert shown >= 4


def _whole_on_first_draw(app, table) -> None:
    """The Results table filled anew and drawn at once, before its idle pass (a loaded login
    node draws a frame first): every cell whole. With Textual's auto widths that first frame
    showed "gpt2-" and "PLANN", and stayed cached so (tui/columns.py)."""
    app.screen.fill()  # no await from here: no idle pass between
    labels = [str(c.label) for c in table.columns.values()]
    for i in range(table.region.height - 1):
        line = table.render_line(i + 1).text  # under the heading
        for label, cell in zip(labels, (Text(str(c)).plain for c in table.get_row_at(i))):
            if label != "reason" and cell:
                assert f" {cell} " in f"{line} ", (label, cell, line)


async def test_the_queue_at_80x24_shows_what_tells_runs_apart_and_why_they_failed(home):
    axis_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
        await pilot.press("f3")
        table = app.screen.query_one(JobTable)
        await until(pilot, lambda: table.row_count == 32, what="every run")
        await _settled_whole(pilot, app, table)
        head = next(ln for ln in _lines(app) if " job " in ln)
        for column in ("state▾", "job", "model", "mode", "scale", "batch", "tokens/s", "reason"):
            assert f" {column}" in head, head
        assert max(cell_len(ln.rstrip()) for ln in _lines(app)) <= 80
        failed = [ln for ln in _lines(app) if " FAILED " in ln]
        assert failed and all("RuntimeE" in ln for ln in failed), failed
        # the key columns stay when the table scrolls sideways
        assert table.fixed_columns >= 2
        assert "all framework gpt" in screen_text(app)


async def test_results_at_80x24_show_the_chart_of_the_selected_model_and_batch(home):
    axis_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
        await pilot.press("f4")
        table = app.screen.query_one(PointTable)
        await until(pilot, lambda: table.row_count == 32, what="every point")
        await _settled_whole(pilot, app, table)
        _whole_on_first_draw(app, table)
        text = screen_text(app)
        labels = [str(c.label) for c in table.columns.values()]
        for column in ("model", "mode", "scale", "tokens/s", "± CI95", "speedup", "eff."):
            assert column in labels, labels
        assert "┌" in text and "devices (ranks)" in text  # the chart, with the table
        # the selected point's baseline, not a "baseline of ..." line per model and batch
        assert "baseline of" not in text and ": no baseline (" in text, text
        assert "all framework gpt" in text
        first = app.screen.selected()
        assert f"of {first['model']}, batch {first['per_device_batch']}" in text
        await pilot.press("o")  # the next model, at the same batch
        await pilot.pause(0.3)
        now = app.screen.selected()
        assert now["model"] != first["model"]
        assert now["per_device_batch"] == first["per_device_batch"]
        assert f"- {now['model']}" in await drawn(pilot, lambda t: f"- {now['model']}" in t)
        await pilot.press("b")  # the next batch of that model
        await pilot.pause(0.3)
        after = app.screen.selected()
        assert after["model"] == now["model"]
        assert after["per_device_batch"] != now["per_device_batch"]
        await pilot.press("enter")  # the point in full: every number, its baseline
        # every column of the results table under its full heading, why a number is missing
        await until(pilot, lambda: "speedup (own)" in screen_text(app), what="the point")
        text = screen_text(app)
        for heading in ("model", "scale", "tokens/s", "CI95", "speedup", "efficiency"):
            assert f"  {heading} " in text, text  # the column's full heading, then its cell
