"""The log panel wraps long lines (`w`) and marks search matches (issue 21, item 10), with
user text shown literally and big logs kept fast: driven by Textual's Pilot."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from dlscale.engine.session import Session
from dlscale.tui.app import DlscaleApp
from dlscale.tui.logtail import KEEP_LINES, LogTail
from dlscale.tui.logview import LogView
from test_tui import until
from tui_text import recorded_study, screen_text

pytestmark = pytest.mark.timeout(300)

LONG = "step 7 " + "x" * 150 + " THE-LINE-ENDS-HERE"
MARKUP = "[b]not bold[/b] a Needle in [@click=app.quit]x[/] 日本語 needle"


async def _open_log(pilot) -> tuple[LogTail, LogView]:
    """l on the first job of the recorded study; its log gets the test's lines."""
    app = pilot.app
    await until(pilot, lambda: app.current_mode == "queue", what="the queue")
    tail, view = app.screen.query_one(LogTail), app.screen.query_one(LogView)
    jobs = app.screen.query_one("#jobs", DataTable)
    await until(pilot, lambda: jobs.row_count == 6, what="the jobs")
    await pilot.press("l")  # the table has the focus
    await until(pilot, lambda: view.line_count > 0, what="the log")
    with open(tail.path, "a") as fh:
        fh.write(f"{LONG}\n{MARKUP}\nthe last line\n")
    await until(pilot, lambda: view.lines[-1] == "the last line", what="the new lines")
    await pilot.pause()
    return tail, view


def _styles_of(view: LogView, text: str) -> list:
    """The styles the log's visible rows draw `text` in."""
    found = []
    for y in range(view.size.height):
        for seg in view.render_line(y):
            if seg.text.lower() == text.lower():
                found.append(seg.style)
    return found


async def test_w_wraps_the_long_lines_and_back(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        tail, view = await _open_log(pilot)
        footer = screen_text(app).rstrip("\n").splitlines()[-1]
        assert "w Wrap" in footer and "f4 Results" in footer, footer  # o Sort made room
        assert "THE-LINE-ENDS-HERE" not in screen_text(app)  # cut at the panel's edge
        await pilot.press("w")
        await pilot.pause()
        assert view.wrap
        shown = screen_text(app)
        assert "THE-LINE-ENDS-HERE" in shown and "the last line" in shown, shown
        # the end of the log stays in view: the tail is followed while wrapped
        with open(tail.path, "a") as fh:
            fh.write("written while wrapped\n")
        await until(pilot, lambda: "written while wrapped" in screen_text(app), what="new line")
        await pilot.press("w")
        await pilot.pause()
        assert not view.wrap and "THE-LINE-ENDS-HERE" not in screen_text(app)
        await pilot.press("o")  # o still sorts while w has its place in the footer
        await pilot.pause()
        assert app.screen.query_one("#jobs").sort_by == "job"  # from the default, state
        await pilot.press("escape")  # the log closed: o Sort is back
        await pilot.pause()
        footer = screen_text(app).rstrip("\n").splitlines()[-1]
        assert "o Sort" in footer and "w Wrap" not in footer, footer


async def test_search_marks_every_match_and_the_current_one_most(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        tail, view = await _open_log(pilot)
        await pilot.press("slash", *"needle", "enter")
        await pilot.pause()
        assert tail.matches == [view.line_count - 2]
        shown = screen_text(app)
        assert "[b]not bold[/b] a Needle in [@click=app.quit]x[/] 日本語 needle" in shown
        styles = _styles_of(view, "needle")
        assert len(styles) == 2, styles  # both, any case, on the current line: most marked
        assert all(s is not None and s.reverse and s.bold and s.underline for s in styles)
        await pilot.press("slash", *"step", "enter")
        await pilot.pause()
        assert len(tail.matches) > 1
        marked = [s for s in _styles_of(view, "step") if s is not None and s.reverse]
        assert any(not s.bold for s in marked) and any(s.bold for s in marked)
        assert not any(s is not None and s.reverse for s in _styles_of(view, "needle"))


async def test_a_full_panel_draws_only_what_is_on_screen(home, tmp_path):
    """KEEP_LINES lines of 200 characters: wrapping, unwrapping and finding draw only the
    lines on screen, never the whole log, so they stay fast however full the panel is (the
    times: benchmarks/tui.py, "log panel")."""
    recorded_study(home)
    big = tmp_path / "big.log"
    big.write_text("".join(f"{i:06d} " + "y" * 193 + "\n" for i in range(KEEP_LINES)))
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        tail, view = await _open_log(pilot)
        tail.open(big, "big")
        await until(pilot, lambda: view.line_count == 500, what="the tail")  # TAIL_LINES
        view.write_lines([f"{i:06d} " + "z" * 193 for i in range(KEEP_LINES)])
        await pilot.pause()
        assert view.line_count == KEEP_LINES
        drawn: list[int] = []
        strip = view._strip
        view._strip = lambda index: drawn.append(index) or strip(index)  # a spy, real draws
        for step in ("wrap", "unwrap", "find"):
            drawn.clear()
            if step == "find":
                tail.find("019999")
            else:
                await pilot.press("w")
            await pilot.pause()
            text = screen_text(app)
            assert drawn, step  # something was drawn for the step
            assert len(set(drawn)) <= view.size.height, (step, len(set(drawn)))
        assert tail.matches == [KEEP_LINES - 1]
        assert "019999" in text  # the match is shown
