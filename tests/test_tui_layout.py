"""80x24 is first-class (issue 21, items 5 and 11): on every screen the footer shows every
key it offers whole, and a dialog's question and the help are never cut off."""

from __future__ import annotations

import html
import re

import pytest

from dlscale.engine.session import Session
from dlscale.tui.app import DlscaleApp, help_text
from dlscale.tui.dialogs import ConfirmScreen, HelpScreen
from dlscale.tui.results import METRICS, metric_words
from dlscale.tui.widgets import Plain
from test_tui import answer, until
from tui_text import recorded_study, screen_text

pytestmark = pytest.mark.timeout(300)


def _flat(text: str) -> str:
    return "".join(text.split())


def _screenshot_text(app) -> str:
    """What the terminal shows, modal screens included (the SVG a screenshot saves)."""
    svg = app.export_screenshot()
    cells = re.findall(r">([^<]*)</text>", svg)
    return html.unescape("".join(cells)).replace("\xa0", " ")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_every_footer_key_is_shown_whole(home, size):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=size) as pilot:
        for key, mode in (("f2", "build"), ("f3", "queue"), ("f4", "results")):
            await pilot.press(key)
            await until(pilot, lambda: app.current_mode == mode, what=mode)
            shown = [
                b.binding.description
                for b in app.screen.active_bindings.values()
                if b.binding.show and b.binding.description
            ]

            def footer() -> str:
                return screen_text(app).rstrip("\n").splitlines()[-1]

            # Waited for, not paused for: under load the footer's first paint came later
            # than a fixed pause (3.12 in a rehearsal); a key cut off never shows whole.
            assert shown
            await until(pilot, lambda: all(d in footer() for d in shown), what=f"{mode}'s footer")
            assert "f4 Results" in footer().replace("F4", "f4")


async def test_a_long_question_and_the_help_are_never_cut_off(home):
    app = DlscaleApp(Session(home, "local"), watch=False)
    question = (
        "Cancel run 0123456789ab (pytorch-ddp resnet110 16x4 #2, job 1234567_89, RUNNING) "
        "and the other runs chosen with it, which are queued on partition gpu-long with "
        "with the same job script? The question ends here."
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.current_mode == "build", what="the build screen")
        await pilot.pause(0.3)
        app.push_screen(ConfirmScreen(question))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.pause(0.3)
        # Wrapped in the dialog, each word of it in order (the lines interleave with the
        # screen behind the dialog in the screenshot's text).
        shown, at = _screenshot_text(app), 0
        for word in question.split():
            at = shown.find(word, at)
            assert at >= 0, (word, shown)
            at += len(word)
        assert "ends here." in shown
        await answer(pilot, "n")
        app.push_screen(HelpScreen(help_text))
        await pilot.pause(0.3)
        shown = str(app.screen.query_one(Plain).render())
        flat = " ".join(shown.split())  # each key's words wrap under themselves
        assert all(metric_words(m) in flat for m in METRICS), shown
        assert "  e               the next experiment in the store" in shown  # where e works
