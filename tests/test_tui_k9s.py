"""Issue 47, item 3: the habits of k9s and lazygit users. j/k/g/G/ctrl+d/ctrl+u move in
every table and log; the app opens on a list, so q quits; the log takes the whole screen
with one key and gives it back with the same (or escape), with follow, wrap, search and
the time each line was read; messages go to the status line, not to toasts over the rows;
the filter takes several words, -word and column:value; u leaves out every chosen run;
the palette offers every screen's actions, and none of Textual's own."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from dlscale.engine.session import Session
from dlscale.tui.app import DlscaleApp
from dlscale.tui.jobtable import JobTable
from dlscale.tui.logview import LogView
from dlscale.tui.results import PointTable
from dlscale.tui.rowfilter import RowFilter
from test_tui import until
from tui_text import recorded_study, screen_text

pytestmark = pytest.mark.timeout(300)

COLUMNS = ("job", "state", "model", "scale")
CELLS = ("421", "RUNNING", "resnet32", "1x2")


@pytest.mark.parametrize(
    "text, shown",
    [
        ("resnet32 1x2", True),  # every word somewhere in the row, in any cell
        ("resnet32 2x2", False),
        ("RESNET run", True),  # any case
        ("state:running", True),
        ("state:run resnet", True),  # a prefix of the column's value
        ("state:pending", False),
        ("model:1x2", False),  # in that column only
        ("-resnet32", False),
        ("-resnet44 421", True),
        ("nosuch:thing", False),  # not a column: a word like any other
    ],
)
def test_the_filter_takes_words_exclusions_and_columns(text, shown):
    assert RowFilter.parse(text, COLUMNS).matches(CELLS) is shown


async def _queue(pilot, app, rows: int) -> JobTable:
    await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
    await pilot.press("f3")
    table = app.screen.query_one(JobTable)
    await until(pilot, lambda: table.row_count == rows, what="the rows")
    return table


def _longer_log(app, table: JobTable, lines: int = 200) -> None:
    """The selected run's log made longer than a screen (the recorded ones are 3 lines)."""
    path = app.session.log_path(table.selected_run())
    with open(path, "a") as fh:
        fh.writelines(f"step {i}: loss {1 / (i + 1):.4f}\n" for i in range(lines))


async def test_j_k_g_G_move_in_tables_and_logs(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _queue(pilot, app, 6)
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == 5
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("ctrl+d")
        assert table.cursor_row > 0
        await pilot.press("ctrl+u")
        assert table.cursor_row == 0
        # the log: its lines scroll with the same keys
        _longer_log(app, table)
        await pilot.press("f")
        log = app.screen.query_one(LogView)
        await until(pilot, lambda: log.line_count > 100, what="the log's lines")
        await pilot.press("g")
        assert log.scroll_y == 0
        await pilot.press("j")
        assert log.scroll_y == 1
        await pilot.press("G")
        assert log.scroll_y == log.max_scroll_y
        await pilot.press("f")
        # Results: its table too
        await pilot.press("f4")
        points = app.screen.query_one(PointTable)
        await until(pilot, lambda: points.row_count == 2, what="the points")
        await pilot.press("j")
        assert points.cursor_row == 1
        await pilot.press("g")
        assert points.cursor_row == 0


async def test_the_log_takes_the_whole_screen_with_one_key_and_gives_it_back(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _queue(pilot, app, 6)
        _longer_log(app, table)
        await pilot.press("f")  # from the table: the selected run's log, full screen
        log = app.screen.query_one(LogView)
        await until(pilot, lambda: log.line_count > 100, what="the log's lines")
        assert app.screen.maximized is not None
        assert log.size.height >= 20  # the whole screen but its status and footer lines
        assert "step 199: loss" in screen_text(app)  # its tail, followed
        await pilot.press("t")  # the time each line was read, before it
        await until(
            pilot,
            lambda: any(
                line[:8].count(":") == 2 and "step 19" in line
                for line in screen_text(app).splitlines()
            ),
            what="a line after its time",
        )
        await pilot.press("f")
        assert app.screen.maximized is None and table.row_count == 6
        await pilot.press("f")
        assert app.screen.maximized is not None
        await pilot.press("escape")  # escape gives it back too
        assert app.screen.maximized is None


async def test_messages_go_to_the_status_line_not_over_the_rows(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await _queue(pilot, app, 6)
        for _ in range(3):
            await pilot.press("o")
        assert not app._notifications  # no toast stacked over the rows
        status = app.screen.query_one(".status")
        assert "sorted by" in str(status.render())


async def test_the_app_opens_on_a_list_so_q_quits(home):
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.focused is not None, what="the focus")
        assert app.focused.id == "frameworks"
        await pilot.press("q")
        await until(pilot, lambda: app.return_code is not None, what="quitting")


async def test_u_leaves_out_every_chosen_run(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _queue(pilot, app, 6)
        await pilot.press("space", "space", "space")
        assert len(table.marked) == 3 and table.cursor_row == 3  # space moves on too
        await pilot.press("u")
        assert not table.marked


async def test_the_palette_offers_every_screen_s_actions_and_none_of_textual_s(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await _queue(pilot, app, 6)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert not [t for t in titles if t in ("Theme", "Screenshot", "Quit", "Keys")], titles
        assert any(t.startswith("Cancel: ") for t in titles)  # this screen's
        chart = next(c for c in titles if c.startswith("Results: Metric: the next chart"))
        assert any(t.startswith("Build: Submit: ") for t in titles)
        command = next(c for c in app.get_system_commands(app.screen) if c.title == chart)
        command.callback()
        await until(pilot, lambda: app.current_mode == "results", what="the Results screen")
        await until(pilot, lambda: app.screen.metric != "speedup", what="the next chart")
        assert isinstance(app.screen.query_one(PointTable), DataTable)
