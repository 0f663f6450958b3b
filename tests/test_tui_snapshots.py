"""Snapshots of every screen at 80x24 (an SSH terminal's default) and 120x40, from a study
recorded from real runs (tests/fixtures/tui-quickstart). Update after a deliberate change of
look with `scripts/test tests/test_tui_snapshots.py --snapshot-update`, and review the SVGs."""

from __future__ import annotations

import pytest
from test_compare import two_sites  # noqa: F401 (a fixture: two experiments in one store)
from textual.widgets import Input

from conftest import REPO
from dlscale.engine.session import Session
from dlscale.tui.app import DlscaleApp
from test_tui import until
from tui_text import axis_study, recorded_study

SIZES = [(80, 24), (120, 40)]
# Exact renders, of the main environment's libraries: another Python may resolve other
# releases of rich, numpy or scipy. The core suite on the other Pythons runs every other
# TUI test; these stay with the main run.
pytestmark = pytest.mark.framework


@pytest.fixture(autouse=True)
def fixed_home_folder(monkeypatch, tmp_path):
    # Paths on screen are shown from ~, so every run of a snapshot shows the same text.
    monkeypatch.setenv("HOME", str(tmp_path))


async def settle(pilot, condition) -> None:
    """Wait for the workers' answers (test_tui.until: a wait that never holds fails, where
    carrying on to the snapshot hid a wrong condition), then a frame more for the capture."""
    await until(pilot, condition, what=f"line {condition.__code__.co_firstlineno}")
    await pilot.pause(0.3)


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_build_screen(snap_compare, home, size):
    app = DlscaleApp(
        Session(home, "local"), str(REPO / "examples" / "quickstart.toml"), watch=False
    )

    async def preview(pilot):
        await settle(
            pilot,
            lambda: (
                app.screen.query("#preview")
                and "runs" in str(app.screen.query_one("#preview").render())
                and app.screen.frameworks_checked
            ),
        )
        # A blinking cursor is on or off by when the capture lands: a busy machine chose.
        for field in app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=size, run_before=preview)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_queue_screen_with_log(snap_compare, home, size):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))

    async def open_log(pilot):
        await settle(
            pilot,
            lambda: app.screen.query("#jobs") and app.screen.query_one("#jobs").row_count == 6,
        )
        app.screen.query_one("#jobs").focus()
        await pilot.press("down", "l")
        await settle(pilot, lambda: app.screen.query_one("#log-lines").line_count >= 3)

    assert snap_compare(app, terminal_size=size, run_before=open_log)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_results_screen(snap_compare, home, size):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))

    async def results(pilot):
        await settle(pilot, lambda: app.snapshot is not None)
        await pilot.press("f4")
        await settle(
            pilot,
            lambda: (
                app.screen.query("#results") and app.screen.query_one("#results").row_count == 2
            ),
        )

    assert snap_compare(app, terminal_size=size, run_before=results)


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_help_screen(snap_compare, home):
    app = DlscaleApp(Session(home, "local"), watch=False)
    assert snap_compare(app, terminal_size=(80, 24), press=["f1"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dialog", ["cancel", "detail"])
def test_queue_dialogs(snap_compare, home, size, dialog):
    """The yes/no question and a run's detail, whole at both sizes (issue 21, item 11)."""
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))

    async def open_dialog(pilot):
        await settle(
            pilot,
            lambda: app.screen.query("#jobs") and app.screen.query_one("#jobs").row_count == 6,
        )
        app.screen.query_one("#jobs").focus()
        if dialog == "cancel":
            # A completed run says why it cannot be cancelled; a resubmit asks.
            await pilot.press("down", "s")
            await settle(pilot, lambda: app.screen.query("Button"))
        else:
            await pilot.press("down", "enter")
            await settle(pilot, lambda: app.screen.query("#detail"))

    assert snap_compare(app, terminal_size=size, run_before=open_dialog)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_path_dialog(snap_compare, home, size):
    """ctrl+o on Build: the question, the path typed so far and the keys, whole (issue 21,
    item 11)."""
    app = DlscaleApp(Session(home, "local"), watch=False)

    async def ask_for_a_path(pilot):
        await settle(pilot, lambda: app.screen.query("#preview"))
        await pilot.press("ctrl+o")
        await settle(pilot, lambda: app.screen.query("#path-input"))
        await pilot.press(*"studies/scaling.toml")
        field = app.screen.query_one("#path-input", Input)
        field.cursor_blink = False
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=size, run_before=ask_for_a_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_compare_dialog(snap_compare, two_sites, size, monkeypatch):
    """c on Results: this experiment beside the one imported from site beta, its matched
    point's ratio and the environment that differs, and the notes under it (issue 21,
    item 11)."""
    from dlscale.tui.dialogs import CompareScreen

    app = DlscaleApp(Session(two_sites, "local"))

    async def compare(pilot):
        await settle(pilot, lambda: app.snapshot is not None)
        app.experiment = "quickstart"
        await pilot.press("f4")
        await pilot.press("c")
        await settle(
            pilot,
            lambda: (
                isinstance(app.screen, CompareScreen)
                and app.screen.query_one("#compare-table").row_count > 0
            ),
        )

    assert snap_compare(app, terminal_size=size, run_before=compare)


@pytest.mark.parametrize("screen", ["queue", "results"])
def test_a_study_of_four_models_and_two_batches_at_80x24(snap_compare, home, screen):
    """Issue 36, item 2: 4 models x 2 batch sizes x 1 and 2 ranks with an axis of its own
    (`mode = fail/ok`), at 80x24: the queue with a column per varying value and the reason
    of each failure; the results with the chart on screen, of the selected point's model
    and batch, and its baseline alone."""
    axis_study(home)
    app = DlscaleApp(Session(home, "local"))

    async def shown(pilot):
        await settle(pilot, lambda: app.snapshot is not None)
        if screen == "queue":
            await pilot.press("f3")
            await settle(pilot, lambda: app.screen.query_one("#jobs").row_count == 32)
        else:
            await pilot.press("f4")
            await settle(pilot, lambda: app.screen.query_one("#results").row_count == 32)
            await pilot.press("down", "down", "down")  # a measured point: its numbers

    assert snap_compare(app, terminal_size=(80, 24), run_before=shown)


def test_full_screen_log_at_80x24(snap_compare, home):
    """Issue 47, item 3: f on the Queue, the selected run's log on the whole screen: its
    title and path, the lines, the status line and the footer."""
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))

    async def full_screen(pilot):
        from dlscale.tui.logview import LogView

        await settle(pilot, lambda: app.snapshot is not None)
        await pilot.press("f3")
        await settle(pilot, lambda: app.screen.query_one("#jobs").row_count == 6)
        await pilot.press("f")
        await settle(pilot, lambda: app.screen.query_one(LogView).line_count >= 3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=full_screen)


@pytest.mark.parametrize("study", ["projected", "not projected"])
def test_projection_chart_at_80x24(snap_compare, tmp_path, study):
    """Issue 47, item 4: the projection at 80x24, its series told apart by their marks
    (solid measured, hollow projected); where nothing can be projected, the reason
    `dlscale project` gives instead of an empty chart."""
    from test_projection import make_study
    from test_tui_results import show_projection

    from dlscale.tui.results import Chart

    home = tmp_path / "store"
    if study == "projected":
        make_study(home).close()
    else:
        recorded_study(home)
    app = DlscaleApp(Session(home, "local"), watch=False)

    async def projected(pilot):
        await show_projection(pilot)
        await settle(pilot, lambda: app.screen.query_one(Chart).projected)
        await settle(
            pilot,
            lambda: (
                app.screen.query_one(Chart).projected_for == (app.screen.query_one(Chart).fit())
            ),
        )

    assert snap_compare(app, terminal_size=(80, 24), run_before=projected)
