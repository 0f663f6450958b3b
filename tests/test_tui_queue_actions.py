"""The Queue at study size (issue 21, items 6, 9, 10): actions only where they apply (and
said why where they do not), `/` filters the table when no log is open so the letters
typed after it never act as commands, sorting (o, a header), several runs chosen at once,
Home/End, and a run's detail (i) with its whole reason and folder."""

from __future__ import annotations

import fcntl

import pytest
from textual.widgets import DataTable

from dlscale.engine.backends.local.backend import LOCK_NAME
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.dialogs import ConfirmScreen, DetailScreen
from test_tui import answer, until
from tui_text import drawn, recorded_study, screen_text

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def worker_lock(home):
    """Held as a running local worker holds it: the queue's refresh syncs with the local
    backend, which would otherwise settle the edited PENDING and RUNNING jobs (no worker
    owns them: RUNNING becomes FAILED, and a worker it starts takes PENDING), sooner or
    later than the table shows them: the tests' states were a race under load."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_NAME, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _study(home) -> tuple[str, dict[str, str]]:
    """The recorded quickstart study with one run FAILED (a two-line reason), one PENDING
    and one RUNNING; returns the experiment and run id -> state. Tests that refresh the
    queue hold `worker_lock`, so a sync leaves those states as they are."""
    name = recorded_study(home)
    store = Store(home)
    runs = [r["run_id"] for r in store.runs(name)]
    states = dict.fromkeys(runs, "COMPLETED")
    for rid, state in zip(runs, ("FAILED", "PENDING", "RUNNING")):
        row = store.run(rid)
        store.jobs.update(row["backend"], row["job_id"], state=state, ended=None)
        store.update_run(
            rid,
            state=state,
            reason="exit 1: out of memory\nsecond line of the reason" if state == "FAILED" else "",
        )
        states[rid] = state
    store.close()
    return name, states


def _notes(app) -> list[str]:
    """What the app said: on the status line, and any toast (tui/app.py)."""
    return [text for _, text in app.messages]


async def _queue(pilot, app, n):
    await until(pilot, lambda: app.snapshot is not None and app.snapshot.rows)
    if app.current_mode != "queue":
        await pilot.press("2")
    table = app.screen.query_one("#jobs", DataTable)
    await until(pilot, lambda: table.row_count == n, what="every run in the queue")
    table.focus()
    return table


def _select(table, run_id: str) -> None:
    table.move_cursor(row=table.get_row_index(run_id))


async def test_actions_apply_only_where_they_can_and_say_why_not(home, worker_lock):
    _name, states = _study(home)
    app = DlscaleApp(Session(home, "local"), watch=False)
    app.poll_now = lambda: None
    async with app.run_test(size=(140, 40)) as pilot:
        app._refresh_queue(app.experiment)
        table = await _queue(pilot, app, len(states))
        done = next(r for r, s in states.items() if s == "COMPLETED")
        pending = next(r for r, s in states.items() if s == "PENDING")
        _select(table, done)
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("COMPLETED: only a queued, running or waiting run" in m for m in _notes(app)), (
            _notes(app),
            screen_text(app),
        )
        _select(table, pending)
        await pilot.press("s")
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("PENDING: cancel it first" in m for m in _notes(app))
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await answer(pilot, "n")
        # Two completed runs chosen with space: one question for both.
        completed = [r for r, s in states.items() if s == "COMPLETED"]
        _select(table, completed[0])
        await pilot.press("space")
        _select(table, completed[1])
        await pilot.press("space")
        # each marked in its row, counted above the table (issue 36, item 3)
        text = await drawn(pilot, lambda t: "2 chosen (space)" in t)
        marked = [ln for ln in text.splitlines() if ln.startswith(" ●")]
        assert len(marked) == 2 and "2 chosen (space)" in text, text
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        text = await drawn(pilot, lambda t: "Resubmit these 2 runs?" in t)
        assert "Resubmit these 2 runs?" in text
        for run_id in completed[:2]:  # the question lists them, by the words their row shows
            row = table.shown[run_id]
            assert f"job {row.job_id}: pytorch-ddp resnet20 {row.scale} batch 64" in text, text
        await answer(pilot, "n")


async def test_slash_filters_the_table_and_its_letters_are_not_commands(home, worker_lock):
    _name, states = _study(home)
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        app._refresh_queue(app.experiment)
        table = await _queue(pilot, app, len(states))
        await pilot.press("slash", *"s", "c")  # s and c would resubmit and cancel
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("backspace", "backspace", *"of memory")
        await until(pilot, lambda: table.row_count == 1, what="the filtered table")
        assert "exit 1: out of memory" in await drawn(pilot, lambda t: "out of memory" in t)
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == len(states), what="the table unfiltered")


async def test_sorting_home_end_and_detail(home, worker_lock):
    """Issue 36, item 3: by default what needs watching first (running, then pending, then
    finished, the newest first), a sign on the heading sorted by, and enter opens the run's
    detail (as k9s's does) while l opens its log."""
    _name, states = _study(home)
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        app._refresh_queue(app.experiment)
        table = await _queue(pilot, app, len(states))
        # One framework, model and batch in every row: their columns go, named once above.
        await until(
            pilot,
            lambda: "all framework pytorch-ddp, model resnet20" in screen_text(app),
            what="the line naming the columns with one value",
        )
        labels = [str(c.label) for c in table.columns.values()]
        assert "framework" not in labels and "state▾" in labels
        state, job = labels.index("state▾"), labels.index("job")
        shown = [str(table.get_cell_at((r, state))) for r in range(table.row_count)]
        assert "RUNNING" in shown[0] and "PENDING" in shown[1], shown
        finished = [str(table.get_cell_at((r, job))) for r in range(2, table.row_count)]
        assert finished == sorted(finished, key=lambda j: -int(j.split("-")[-1])), finished
        await pilot.press("o")  # by job id
        await pilot.pause(0.2)
        assert "job▾" in [str(c.label) for c in table.columns.values()]
        jobs = [str(table.get_cell_at((r, job))) for r in range(table.row_count)]
        assert jobs == sorted(jobs, key=lambda j: int(j.split("-")[-1]))
        await pilot.press("o")  # the fastest first, the runs without a throughput last
        await pilot.pause(0.2)
        labels = [str(c.label) for c in table.columns.values()]
        speed = next(i for i, label in enumerate(labels) if label.endswith("/s▾"))
        rates = [str(table.get_cell_at((r, speed))) for r in range(table.row_count)]
        known = [float(x.replace(",", "")) for x in rates if x != "-"]
        assert known and known == sorted(known, reverse=True), rates
        assert rates == [*rates[: len(known)], *["-"] * (len(rates) - len(known))], rates
        await pilot.press("o")  # and back to state: the running run first again
        await pilot.pause(0.2)
        assert "RUNNING" in str(table.get_cell_at((0, state)))
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.click("#jobs", offset=(2, 0))  # the job column's header
        await pilot.pause(0.2)
        failed = next(r for r, s in states.items() if s == "FAILED")
        _select(table, failed)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        text = await drawn(pilot, lambda t: "second line of the reason" in t)
        assert "second line of the reason" in text and failed in text
        assert "run folder" in text and "torch" in text  # the env record's versions
        assert "Y: the run id" in text
        await pilot.press("Y")
        assert any(f"copied run id {failed}" in m for m in _notes(app))
        await pilot.press("l")  # the detail closes on the run's log
        await until(pilot, lambda: app.screen.query_one("#log").display, what="the log")
        assert not isinstance(app.screen, DetailScreen)
