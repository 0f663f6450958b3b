"""80x24 is first-class (issue 21, items 5 and 11): on every screen the footer shows every
key it offers whole, and a dialog's question and the help are never cut off."""

from __future__ import annotations

import html
import os
import re
import time

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


def test_unread_bytes_counts_what_a_terminal_holds_unread():
    """What the app's reader has not read yet, from the kernel (FIONREAD); 0 off a tty."""
    import pty
    import tty

    from dlscale.tui.typeahead import unread_bytes

    master, slave = pty.openpty()
    tty.setraw(slave)  # as Textual sets it: bytes are readable as typed, not by the line
    try:
        assert unread_bytes(slave) == 0
        os.write(master, b"yse")
        for _ in range(100):  # the line discipline hands the bytes over at once, or nearly
            if unread_bytes(slave) == 3:
                break
            time.sleep(0.01)
        assert unread_bytes(slave) == 3
        os.read(slave, 3)
        assert unread_bytes(slave) == 0
    finally:
        os.close(master)
        os.close(slave)
    read, write = os.pipe()
    try:
        os.write(write, b"y")
        assert unread_bytes(read) == 0  # not a terminal: nothing typed ahead to drop
    finally:
        os.close(read)
        os.close(write)


async def test_keys_the_terminal_held_unread_when_the_question_was_drawn_never_answer_it(home):
    """Under heavy load the app reads a burst's rest after the question is drawn, later than
    any pause: the bytes the terminal held unread then were typed before it and are
    dropped, however late they are read; the next key answers."""
    from dlscale.tui.typeahead import READ_S

    app = DlscaleApp(Session(home, "local"), watch=False)
    said: list[bool | None] = []
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.current_mode == "build", what="the build screen")
        app.push_screen(ConfirmScreen("Cancel run 0123456789ab?"), said.append)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        screen = app.screen
        await until(pilot, lambda: screen.shown_at is not None, what="drawn")
        screen.unread = 2  # as a terminal holding "y" and "s" when it was drawn says
        for _ in range(2):
            await pilot.pause(READ_S + 0.1)
            await pilot.press("y")
            await pilot.pause()
            assert app.screen is screen and said == []  # dropped, not a yes
        assert "typed before this question" in _screenshot_text(app)
        await pilot.pause(READ_S + 0.1)
        await pilot.press("y")
        await until(pilot, lambda: said == [True], what="the answer")
