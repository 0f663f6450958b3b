"""Every action is in the help (F1) and the command palette (ctrl+p), both made from the key
bindings, so neither can drift from what the keys do (issue 36, item 4): the palette lacked
metric, model, compare, detail, cancel, resubmit, copy, pager and wrap; the help lacked `c`
on Results."""

from __future__ import annotations

import re

import pytest

from dlscale.engine.session import Session
from dlscale.tui import keys
from dlscale.tui.app import DlscaleApp, help_text
from dlscale.tui.build import BuildScreen
from dlscale.tui.dialogs import DetailScreen
from dlscale.tui.jobtable import JobTable
from dlscale.tui.logview import LogView
from dlscale.tui.queue import QueueScreen
from dlscale.tui.results import PointTable, ResultsScreen
from test_tui import until
from tui_text import recorded_study

SECTIONS = {
    "Anywhere": [DlscaleApp],
    "Build": [BuildScreen],
    "Queue": [JobTable, QueueScreen],
    "A run's detail": [DetailScreen],
    "Results": [PointTable, ResultsScreen],
    "A log (l on the Queue)": [LogView],
}


@pytest.mark.parametrize("section", SECTIONS)
def test_every_binding_says_what_it_does_and_is_in_the_help(section):
    """Each key of each screen has its words (the binding's tooltip) and its line in its
    screen's section of the help, whatever key is added later."""
    text = help_text()
    start = text.index(f"\n{section}")
    wrapped = text[start : text.index("\n\n", start + 1)]
    lines: list[str] = []  # each key's line whole: its words wrap under themselves
    for x in wrapped.splitlines():
        if x.startswith(" " * 18) and lines:
            lines[-1] += " " + x.strip()
        else:
            lines.append(x)
    body = "\n".join(lines)
    assert all(len(x) <= 76 for x in wrapped.splitlines()), wrapped
    for b in keys.bindings_of(SECTIONS[section]):
        assert b.tooltip, f"{section}: {b.key} ({b.action}) says nothing of what it does"
        words = b.tooltip.format(metrics="")
        line = next((x for x in body.splitlines() if words.split(":")[0] in x), None)
        assert line is not None, (section, b.key, body)
        assert re.search(
            rf"(^|, | or ){re.escape(keys.key_name(b.key))}( or |,|\s{{2,}})", line.strip() + "  "
        ), (
            b.key,
            line,
        )


def _palette(app) -> dict[str, str]:
    """This screen's entries, by the name before the words: the key they say."""
    return {
        title.split(":")[0]: help for title, help, _ in keys.commands(app, app.screen, metrics="")
    }


async def test_the_palette_offers_what_each_screen_s_keys_do(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the queue")
        await pilot.press("f3")
        await until(pilot, lambda: app.screen.query_one(JobTable).row_count == 6, what="rows")
        queue = _palette(app)
        for title in ("Detail", "Cancel", "Resubmit", "Copy job id", "Copy run id"):
            assert title in queue, sorted(queue)
        assert "Log in $PAGER" in queue and "Sort" in queue and "Find" in queue
        assert queue["Cancel"] == "c"
        await pilot.press("l")  # with the log open, wrap and the log's keys come in
        await until(pilot, lambda: app.screen.query_one("#log").display, what="the log")
        assert {"Wrap", "Pause", "Sort"} <= set(_palette(app))
        await pilot.press("f4")
        await until(pilot, lambda: app.screen.query_one(PointTable).row_count == 2, what="points")
        results = _palette(app)
        for title in ("Metric", "Model", "Batch", "Compare", "Report", "Detail"):
            assert title in results, sorted(results)
        assert results["Compare"] == "c"
        # A palette entry does what its key does.
        before = app.screen.metric
        entry = next(cb for t, _, cb in keys.commands(app, app.screen) if t.startswith("Metric:"))
        entry()
        await until(pilot, lambda: app.screen.metric != before, what="the next metric")
