"""Issue 47, item 1: no key acts on a mode it was not typed for. Keys typed right after a key
that changes the mode (`/` opens the filter, `c` a question, F3 another screen, ctrl+p the
palette) go to what that key opened, in order, however busy the machine; a question whose
yes does harm takes only keys typed once it is on screen.

Before, Textual handed every queued key to the widget focused when it was read: on a busy
machine `/cy` on the Queue opened an empty filter while `c` asked to cancel the selected
running job and `y` said yes. The keys that change the mode are found here from the app's
own bindings (every key active in each place a user can be, pressed once: the screen or
the focus moved), so a key added later is tried too. Each is then typed with letters that
are commands elsewhere (c cancel, y yes, s resubmit, e next experiment): in the app
(Pilot, every key queued before the first is handled, which is what a busy machine does),
where the burst must end as the same keys typed one at a time do; and in a real terminal
(tmux) with both cores spinning, where nothing may be cancelled, resubmitted or switched."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass

import fake_slurm
import pytest
from test_tui_conventions import _second_experiment
from textual import events
from textual.screen import ModalScreen
from textual.widgets import Input

from conftest import BIN, HANG_S
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.jobtable import JobTable
from dlscale.tui.logtail import LogTail
from dlscale.tui.results import PointTable
from dlscale.tui.typeahead import Question
from tui_terminal import Terminal
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(900)

# Letters that are commands on the Queue and Results screens: c asks to cancel (Results:
# compare), y says yes (or copies), s asks to resubmit, e shows the next experiment.
TYPED = "cyse"

# Where a user can be, each reached from the app's start (the Queue of the study) by these
# keys (in a terminal; the app's own actions in Pilot, which are quicker), and how to go
# back there in a terminal: escape closes what a key opened, then the same keys again.
BASES = {
    "queue": ("f3", "home"),
    "queue with a log": ("f3", "home", "l"),
    "a run's detail": ("f3", "home", "i"),
    "results": ("f4",),
    "build": ("f2",),
}
RESET = ("escape", "escape", "escape")

# Actions not pressed: each ends the app, hands the terminal to another program, or
# submits a study (tests/test_tui_submit.py has the keys typed after ctrl+r).
NOT_PRESSED = {"quit", "app.quit", "pager", "submit", "suspend_process"}


def store_with_running_jobs(home, state) -> dict[str, str]:
    """The recorded quickstart study, its first three runs RUNNING as Slurm jobs 420-422
    (the fake Slurm reports them running), and a second experiment (for e and compare).
    Returns run id -> state."""
    _second_experiment(home)  # first: the study is the one touched last, shown at start
    recorded_study(home)
    store = Store(home)
    jobs = []
    for i, run in enumerate(store.runs()[:3]):
        store.update_run(run["run_id"], state="RUNNING", backend="slurm", job_id=f"42{i}")
        store.jobs.add("slurm", f"42{i}", run["run_id"], "RUNNING")
        jobs.append({"id": f"42{i}", "comment": "", "array": None, "state": "RUNNING"})
    store.close()
    (state / "jobs.json").write_text(json.dumps(jobs))
    return states(home)


def states(home) -> dict[str, str]:
    store = Store(home)
    try:
        return {r["run_id"]: r["state"] for r in store.runs()}
    finally:
        store.close()


def slurm_acted(state) -> list[str]:
    """The calls that would have changed a job: scancel, sbatch."""
    log = state / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    return [c for c in calls if c.split()[0] in ("scancel", "sbatch")]


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.chdir(tmp_path)  # where a report would be written
    return state, path


# --- in the app -----------------------------------------------------------------------------

CHARACTERS = {"slash": "/", "question_mark": "?", "space": " "}


def key_event(key: str) -> events.Key:
    return events.Key(key, key if len(key) == 1 else CHARACTERS.get(key))


async def settled(pilot) -> None:
    """Every key handled, and what it set off."""
    app = pilot.app
    await pilot.pause()  # the app has taken the keys queued for it
    end = time.monotonic() + HANG_S
    while not app.typeahead.idle and time.monotonic() < end:
        await pilot.pause()
    await pilot.pause()


async def press(pilot, *keys: str) -> None:
    """Keys one at a time, each handled before the next is typed."""
    for key in keys:
        await pilot.press(key)
        await settled(pilot)


async def burst(pilot, *keys: str) -> None:
    """Keys all queued before the first is handled, as a busy machine has them."""
    for key in keys:
        pilot.app.post_message(key_event(key))
    await settled(pilot)


async def to_base(pilot, base: str) -> None:
    """Back at `base` with nothing open, by the app's own actions: every question and
    panel closed on every screen, the Queue unfiltered, the study shown."""
    app = pilot.app
    for name in ("results", "build", "queue"):
        try:
            opened = any(isinstance(s, ModalScreen) for s in app.get_screen_stack(name))
        except KeyError:  # not shown yet
            continue
        if opened:
            await app.switch_mode(name)
            while isinstance(app.screen, ModalScreen):
                await app.pop_screen()
    queue = app.get_screen_stack("queue")[0]
    for _ in range(3):
        queue.action_close()
    app.experiment = "quickstart"
    table = queue.query_one(JobTable)
    table.focus()
    table.move_cursor(row=0)
    if base.startswith("queue") or base == "a run's detail":
        await app.switch_mode("queue")
    await settled(pilot)
    if base == "queue with a log":
        app.screen.action_open_log()
    elif base == "a run's detail":
        app.screen.action_detail()
    elif base == "results":
        await app.switch_mode("results")
        app.screen.query_one(PointTable).focus()
    elif base == "build":
        await app.switch_mode("build")
        app.screen.query_one("#frameworks").focus()
    await settled(pilot)


def mode(app) -> tuple:
    """What the keys typed next would go to: the screen, the focus, whether the Queue's
    log is open."""
    screen, focused = app.screen, app.focused
    logs = tuple(w.display for w in screen.query(LogTail))
    where = focused and (focused.id or type(focused).__name__)
    return (type(screen).__name__, app.current_mode, where, logs)


def looks(app) -> dict:
    """All a burst could have changed: the mode, every field's text, the experiment."""
    return {
        "mode": mode(app),
        "fields": {w.id or type(w).__name__: w.value for w in app.screen.query(Input)},
        "experiment": app.experiment,
        "title": app.title,
    }


@dataclass
class ModeKey:
    base: str
    key: str
    opens: tuple  # the mode after it
    field: str | None  # the text field it focuses, if any
    resets: bool  # in a terminal, RESET and the base's keys bring the base back


async def start(pilot) -> None:
    app = pilot.app
    app.poll_now = lambda: None  # one refresh, below: the rows stay as they are
    app._refresh_queue(app.experiment)
    end = time.monotonic() + HANG_S
    while not (app.snapshot and app.snapshot.rows) and time.monotonic() < end:
        await pilot.pause(0.1)
    await settled(pilot)


async def mode_keys(home, resets: bool = False) -> list[ModeKey]:
    """Every key active in each base whose press alone changes the mode, from the app's
    bindings (the screen's active bindings: its own, its focused widget's, the app's);
    `resets`: whether RESET and the base's keys bring the base back after it (else each
    ModeKey says False)."""
    found = []
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(pilot)
        for base in BASES:
            await to_base(pilot, base)
            home_mode = mode(app)
            active = [
                k
                for k, b in app.screen.active_bindings.items()
                if b.enabled and b.binding.action not in NOT_PRESSED
            ]
            for key in sorted(active):
                await press(pilot, key)
                after, focused = mode(app), app.focused
                if after != home_mode:
                    field = (
                        (focused.id or type(focused).__name__)
                        if isinstance(focused, Input)
                        else None
                    )
                    if resets:
                        await press(pilot, *RESET, *BASES[base])
                    found.append(ModeKey(base, key, after, field, mode(app) == home_mode))
                    await to_base(pilot, base)
                elif app.get_screen_stack("queue")[0].query_one(JobTable).cursor_row != 0:
                    await to_base(pilot, base)  # G or j moved off the running run c asks of
        app.exit()
    return found


# Among the keys found: the ones the issue names (the discovery itself is tested).
NAMED = [
    ("queue", "slash", "queue-filter"),
    ("queue", "c", None),
    ("queue", "i", None),
    ("queue", "l", None),
    ("queue", "enter", None),
    ("queue", "ctrl+p", "CommandInput"),
    ("queue", "f1", None),
    ("queue with a log", "slash", "log-search"),
    ("results", "c", None),
    ("results", "f3", None),
    ("build", "f3", None),
    ("build", "ctrl+o", "path-input"),
]


async def _burst_like_slow(home, cases: list[ModeKey]) -> list[str]:
    wrong = []
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(pilot)
        for case in cases:
            typed = [c for c in TYPED if c != case.key]
            await to_base(pilot, case.base)
            for key in (case.key, *typed):
                # A question takes no key typed before it was shown: in the burst, the
                # letters after the one that asks it were typed before.
                if not isinstance(app.screen, Question):
                    await press(pilot, key)
            slow = looks(app)
            await to_base(pilot, case.base)
            await burst(pilot, case.key, *typed)
            fast = looks(app)
            if fast != slow:
                wrong.append(f"{case.base}: {case.key}+{''.join(typed)}: {fast} != {slow}")
        app.exit()
    return wrong


@pytest.mark.slow  # every key of every place, pressed alone, in a burst and slowly: minutes
def test_a_burst_after_a_mode_change_ends_as_the_same_keys_typed_slowly(home, slurm):
    state, _path = slurm
    before = store_with_running_jobs(home, state)
    cases = asyncio.run(mode_keys(home))
    found = {(k.base, k.key): k.field for k in cases}
    for base, key, field in NAMED:
        assert (base, key) in found and found[base, key] == field, (base, key, found)
    wrong = asyncio.run(_burst_like_slow(home, cases))
    assert not wrong, "\n".join(wrong)
    assert slurm_acted(state) == [] and states(home) == before


# --- in a real terminal, under load --------------------------------------------------------

TMUX_KEYS = {
    "slash": "/",
    "question_mark": "?",
    "space": "Space",
    "enter": "Enter",
    "escape": "Escape",
    "tab": "Tab",
    "shift+tab": "BTab",
    "home": "Home",
    "end": "End",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "pageup": "PPage",
    "pagedown": "NPage",
}


def tmux_key(key: str) -> str:
    if key in TMUX_KEYS:
        return TMUX_KEYS[key]
    if key.startswith("ctrl+"):
        return "C-" + key[5:]
    if key.startswith("f") and key[1:].isdigit():
        return key.upper()
    return key


def _spin(stop) -> None:
    while not stop.is_set():
        pass


class App:
    """dlscale-tui in tmux on the study, at one base."""

    def __init__(self, home, state, path) -> None:
        env = {
            "DLSCALE_HOME": str(home),
            "TERM": "xterm-256color",
            "PATH": path,
            "FAKE_SLURM_DIR": str(state),
        }
        self.term = Terminal([str(BIN / "dlscale-tui")], env, size=(100, 30))
        self.term.wait_for("quickstart", also=("RUNNING", "Cancel"))

    def go(self, *keys: str) -> None:
        for key in keys:
            self.term.keys(tmux_key(key))

    def close(self) -> None:
        self.term.close()


# A terminal sends escape as the first byte of alt+letter: escape followed at once by `c`
# reads as alt+c in any terminal app (the app above has the escape cases).
NOT_IN_A_BURST = {"escape"}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_keys_typed_after_a_mode_change_in_a_real_terminal_under_load(home, slurm):
    """Every key that changes the mode, then `cyse` in the same burst, with two processes
    spinning on the two cores: where the key opens a text field the letters are in it;
    nothing is cancelled or resubmitted, no job submitted, the experiment stays."""
    state, path = slurm
    before = store_with_running_jobs(home, state)
    cases = [c for c in asyncio.run(mode_keys(home, resets=True)) if c.key not in NOT_IN_A_BURST]
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    for p in load:
        p.start()
    wrong: list[str] = []
    app = None
    at = None
    try:
        for case in cases:
            failed = len(wrong)
            if app is None or at != case.base:
                if app is not None:
                    app.close()
                app = App(home, state, path)
                app.go(*BASES[case.base])
                at = case.base
            typed = "".join(c for c in TYPED if c != case.key)
            app.term.burst(tmux_key(case.key), typed)
            time.sleep(1.5)
            screen = app.term.screen()
            if case.field is not None:
                try:
                    screen = app.term.wait_for(typed, timeout=30)
                except AssertionError:
                    wrong.append(f"{case.base}: {case.key}: {typed!r} not in {case.field}")
            title = screen.splitlines()[0]
            if "dlscale" in title and "dlscale: quickstart" not in title:  # (not a view
                # on the whole screen: compare, a full-screen log)
                wrong.append(f"{case.base}: {case.key}: the experiment changed:\n{screen}")
            if slurm_acted(state) or states(home) != before:
                wrong.append(f"{case.base}: {case.key}: {slurm_acted(state)}\n{screen}")
                break
            if case.resets and len(wrong) == failed:
                app.go(*RESET, *RESET, *BASES[case.base])
            else:
                app.close()
                app = None
    finally:
        stop.set()
        for p in load:
            p.join(timeout=5)
        if app is not None:
            app.close()
    assert not wrong, "\n".join(wrong)
