"""The Build screen follows the store (issue 21, item 3): reopened on a study, it shows that
study, not the defaults; its preview counts again when runs complete, not only when a field
changes."""

from __future__ import annotations

import pytest

from conftest import REPO
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from test_tui import field, until
from tui_text import drawn, recorded_study

pytestmark = pytest.mark.timeout(300)


def _preview(app) -> str:
    return str(field(app, "preview").render())


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_reopened_build_shows_the_study_in_use_and_its_preview_follows_the_store(home):
    name = recorded_study(home)
    store = Store(home)
    runs = store.runs(name)
    store.update_run(runs[0]["run_id"], state="FAILED", reason="boom")
    store.close()
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.current_mode == "queue" and app.experiment == name
        await pilot.press("f2")
        await until(pilot, lambda: field(app, "name").value == name, what="the study in the form")
        await until(pilot, lambda: "1 to run" in _preview(app), what="the preview of the study")
        assert "quickstart" in str(app.title)
        # The failed run completes (a rerun elsewhere, another front end): the next tick's
        # counts change and the preview says so without any field being touched.
        store = Store(home)
        store.update_run(runs[0]["run_id"], state="COMPLETED", reason="")
        store.close()
        app._refresh_queue(app.experiment)
        await until(pilot, lambda: "0 to run" in _preview(app), what="the preview after it")


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_a_spec_that_declares_its_own_script_lists_it_and_previews(home):
    """Issue 25 in the TUI: Build lists a framework the spec declares (with its own model
    and dataset), ticked, and the form previews its runs; the ticks read [x]/[ ]."""
    app = DlscaleApp(Session(home, "local"), str(REPO / "examples/custom/gpt-log.toml"))
    async with app.run_test(size=(120, 50)) as pilot:
        await until(pilot, lambda: app.screen.frameworks_checked, what="the frameworks")
        await until(pilot, lambda: "gpt" in field(app, "frameworks").selected, what="gpt ticked")
        assert "gpt2-tiny" in field(app, "models").selected
        await until(pilot, lambda: "4 runs" in _preview(app), what="the preview")
        text = await drawn(pilot, lambda t: "[x] gpt" in t)
        assert "[x] gpt" in text and "[ ] pytorch-ddp" in text
