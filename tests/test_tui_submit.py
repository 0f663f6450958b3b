"""The TUI's submit path (issue 11, item 14) and its view of skipped records (item 10),
driven by Textual's Pilot: a submission that fails part-way says so, the queue shows the
run as not submitted with the reason, ctrl+r works again; a slow submission never freezes
the queue; records of the wrong type are named, not crashed on."""

from __future__ import annotations

import os
import re
import threading

import pytest
from test_bad_records import _bad_study
from textual.widgets import DataTable

from conftest import HANG_S, REPO, write_spec
from dlscale.engine.backends.local.backend import LocalBackend
from dlscale.engine.backends.registry import make_backend
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import CommandResult, run_command
from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching.plan import plan
from dlscale.engine.session import Session
from dlscale.engine.tracking import follow
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from test_tui import field, until
from tui_text import screen_text

pytestmark = pytest.mark.timeout(600)


def notes(app) -> list[str]:
    return [text for _, text in app.messages]  # each titled "title: message" (tui/app.py)


def recorded_notes(app) -> list[str]:
    """Every notification the app is asked to show, kept: `notes` lists only those not yet
    expired (5 s by default), and under load a test may look later than that."""
    said: list[str] = []
    show = app.notify

    def notify(message, *args, **kwargs):
        said.append(f"{kwargs.get('title', '')}: {message}")
        return show(message, *args, **kwargs)

    app.notify = notify
    return said


class RefusesEverything(LocalBackend):
    """The local backend with a bug in its submit: not a DlscaleError, not expected. (A
    study's runs go through submit_many, which the local backend batches.)"""

    def submit(self, request):
        raise RuntimeError("the scheduler fell over")

    def submit_many(self, requests):
        raise RuntimeError("the scheduler fell over")


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
@pytest.mark.parametrize("failure", ["folder in the way", "scheduler raises"])
async def test_a_submission_that_fails_part_way_is_said_shown_and_can_be_retried(
    home, tmp_path, failure
):
    spec = write_spec(tmp_path / "s.toml", name="fails", scales='"1x1"', steps=100000)
    run_id = plan(load_spec(spec)).runs[0].run_id
    session = Session(home, "local")
    in_the_way = home / "runs" / run_id
    if failure == "folder in the way":
        in_the_way.parent.mkdir(parents=True)
        in_the_way.write_text("not a folder\n")
        why = "something else is in the way"
    else:
        session.submitter = lambda name, store, *_: RefusesEverything(store)
        why = "RuntimeError: the scheduler fell over"
    app = DlscaleApp(session, str(spec))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(
            pilot,
            lambda: (
                app.screen.frameworks_checked
                and app.screen.preview
                and app.screen.preview.ok
                and not field(app, "submit").disabled
            ),
            what="a submittable form",
        )
        await pilot.press("ctrl+r")
        await until(
            pilot,
            lambda: any("not" in n and why in n for n in notes(app)),
            what="the failure's notification",
        )
        # The queue shows the study's run, not "no runs yet": PLANNED, with the reason.
        await until(
            pilot,
            lambda: app.current_mode == "queue" and app.snapshot and app.snapshot.rows,
            what="the run in the queue",
        )
        (row,) = app.snapshot.rows
        assert row.state == "PLANNED" and row.reason.startswith("not submitted: ")
        assert why in row.reason
        await until(
            pilot,
            lambda: "PLANNED" in screen_text(app) and "not submitted" in screen_text(app),
            what="the planned run on screen",
        )
        assert "no runs yet" not in screen_text(app)
        # Fixed, a second ctrl+r on the Build screen submits it.
        if failure == "folder in the way":
            in_the_way.unlink()
        else:
            session.submitter = make_backend
        await pilot.press("f2")
        await until(pilot, lambda: not field(app, "submit").disabled, what="submit again")
        await pilot.press("ctrl+r")
        await until(
            pilot,
            lambda: Store(home).run(run_id)["state"] in ("PENDING", "RUNNING"),
            what="the run submitted the second time",
        )
        assert Store(home).run(run_id)["attempts"] == 2
        follow.cancel(Store(home), [run_id])


@pytest.mark.slow
@pytest.mark.slurm
async def test_a_slow_submission_leaves_the_queue_live(home, slurm_cluster):
    """sbatch that takes its time (a busy controller): the queue keeps refreshing and shows
    the run as SUBMITTING, a second ctrl+r says a submission is under way, and when sbatch
    answers the job is queued once."""
    go = threading.Event()

    def slow_sbatch(argv, env=None, timeout=60):
        if argv[0] == "sbatch":
            go.wait(HANG_S)
        return run_command(argv, env, timeout)

    session = Session(home, "slurm", str(REPO / "examples/clusters/test-cluster.toml"))
    session.submitter = lambda name, store, profile=None, partition=None: SlurmCLI(
        runner=slow_sbatch, profile=profile, partition=partition, home=store.home
    )
    app = DlscaleApp(session)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: app.screen.frameworks_checked, what="frameworks")
            await pilot.press("home")
            for wid, text in (
                ("name", "slow"),
                ("scales", "1x1"),
                ("repetitions", "1"),
                ("steps", "100000"),
            ):
                app.screen.query_one(f"#{wid}").focus()
                await pilot.press("home", "ctrl+k", *text)
            await until(pilot, lambda: not field(app, "submit").disabled, what="submittable")
            await pilot.press("ctrl+r")
            await pilot.pause(0.5)
            assert app.current_mode == "queue"  # shown at once (issue 47)
            await pilot.press("f2", "ctrl+r")
            assert any("a submission is under way" in n for n in notes(app)), notes(app)
            await pilot.press("f3")
            await until(
                pilot,
                lambda: (
                    app.snapshot
                    and app.snapshot.experiment == "slow"
                    and [r.state for r in app.snapshot.rows] == ["SUBMITTING"]
                ),
                what="the run shown as SUBMITTING while sbatch waits",
            )
            assert "being submitted by dlscale" in app.snapshot.rows[0].reason
            go.set()
            await until(
                pilot,
                lambda: app.snapshot.rows[0].state in ("PENDING", "RUNNING"),
                what="the job queued",
            )
            assert len(Store(home).jobs.find("slurm")) == 1
    finally:
        go.set()
        follow.cancel(Store(home), [r["run_id"] for r in Store(home).runs()])


async def test_bad_records_are_named_in_the_queue_and_results(home):
    expect = _bad_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(
            pilot,
            lambda: (
                app.current_mode == "queue"
                and app.screen.query_one("#jobs", DataTable).row_count == 6
            ),
            what="the queue",
        )
        reasons = {r.run_id: r.reason for r in app.snapshot.rows}
        for run_id, note in expect.items():
            assert reasons[run_id].startswith(note[:60]), (reasons[run_id], note)
        await pilot.press("f4")
        await until(
            pilot,
            lambda: app.screen.query_one("#results", DataTable).row_count == 2,
            what="results rows",
        )
        await until(
            pilot, lambda: "speedup (vs best 1-device run)" in screen_text(app), what="the chart"
        )
        head = str(app.screen.query_one("#results-head").render())
        assert f"({len(expect)} notes: enter)" in head, head
        await pilot.press("enter")  # the point in full, the notes under it
        await until(pilot, lambda: "metrics.jsonl line" in screen_text(app), what="the notes")
        shown = screen_text(app)
        for run_id in expect:
            assert f"run {run_id}: metrics.jsonl line" in shown, shown
        await pilot.press("escape")
        await until(
            pilot, lambda: "metrics.jsonl line" not in screen_text(app), what="the results again"
        )
        for _ in range(3):  # every metric's chart draws
            await pilot.press("m")
            await pilot.pause(0.2)
        assert not app._exit_renderables


async def test_an_unreachable_controller_is_said_at_once_and_given_up_on_in_bounded_time(
    home, tmp_path
):
    """Issue 21, item 4: ctrl+r towards a controller that does not answer says at once that
    the controller is being asked, gives up within Session.REACH_S with the reason on
    screen, and stores nothing (no run left FAILED 'not submitted')."""
    asked = []

    def down(argv, env=None, timeout=60):
        asked.append(argv[:2])
        assert argv[:2] == ["scontrol", "ping"], argv  # nothing else is tried
        return CommandResult(argv, 1, "Slurmctld(primary) at ctl is DOWN\n", "")

    spec = write_spec(tmp_path / "s.toml", name="unreachable", scales='"1x1"', steps=4)
    session = Session(home, "slurm", str(REPO / "examples/clusters/test-cluster.toml"))
    session.submitter = lambda name, store, profile=None, partition=None: SlurmCLI(
        runner=down, profile=profile, partition=partition, home=store.home
    )
    app = DlscaleApp(session, str(spec), watch=False)
    said = recorded_notes(app)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(
            pilot,
            lambda: (
                app.screen.preview and app.screen.preview.ok and not field(app, "submit").disabled
            ),
            what="a submittable form",
        )
        shown: list[tuple[object, int]] = []  # each submission state, and the notes by then
        app.watch(app, "submission", lambda now: shown.append((now, len(said))), init=False)
        await pilot.press("ctrl+r")
        # said at once, before any answer: the Queue, its run being submitted (issue 47)
        assert app.current_mode == "queue"
        assert shown[0][0] is not None and shown[0][1] == 0, shown
        assert "submitting 1 run(s) to slurm" in shown[0][0].doing()
        await until(
            pilot,
            lambda: any("not submitted" in n and "did not answer" in n for n in said),
            session.REACH_S + 5,
            "the reason it was not submitted",
        )
    assert asked == [["scontrol", "ping"]]
    assert Store(home).runs() == []


async def submit_when_ready(pilot) -> None:
    """ctrl+r once the form has been checked and may be submitted."""
    app = pilot.app
    await until(
        pilot,
        lambda: app.screen.preview and app.screen.preview.ok and not field(app, "submit").disabled,
        what="a submittable form",
    )
    await pilot.press("ctrl+r")


def _slow_slurm(tmp_path, monkeypatch, delays: str, sbatch: str = "ok"):
    """The fake Slurm on PATH, each command answering after its delay; a copy of the test
    cluster's profile whose commands may take 7 s (the steps must say the profile's)."""
    import fake_slurm

    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("FAKE_SLURM_DELAY", delays)
    monkeypatch.setenv("FAKE_SBATCH", sbatch)
    monkeypatch.setenv("FAKE_SLURM_MAX_SUBMIT", "100")  # a limit: the queue is asked
    source = REPO / "examples/clusters/test-cluster.toml"
    profile = tmp_path / "cluster.toml"
    text = source.read_text().replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    profile.write_text(
        text.replace('time_limit = "00:10:00"', 'time_limit = "00:10:00"\ncommand_timeout = 7', 1)
    )
    return state, str(profile)


async def _summaries(pilot, app, done, seen: list[str]) -> None:
    """Every line the Queue's summary shows until `done()`, each once, in order."""
    import time

    end = time.monotonic() + HANG_S
    while not done() and time.monotonic() < end:
        if app.current_mode == "queue":
            text = str(field(app, "queue-summary").render())
            if not seen or seen[-1] != text:
                seen.append(text)
        await pilot.pause(0.05)


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_a_slow_slurm_submission_is_said_step_by_step(home, tmp_path, monkeypatch):
    """Issue 47, item 2: with each Slurm command slow, ctrl+r shows the Queue at once with
    the study's runs SUBMITTING (never "no runs yet"), says each step as it happens with
    its time and the profile's timeout (7 s here), then the jobs as not yet seen by Slurm
    until a poll has asked about them, then PENDING."""
    _state, profile = _slow_slurm(tmp_path, monkeypatch, "scontrol=2,sacctmgr=2,squeue=2,sbatch=2")
    spec = write_spec(tmp_path / "s.toml", name="slow", scales='"1x1", "2x1"', steps=4)
    session = Session(home, "slurm", profile)
    app = DlscaleApp(session, str(spec))
    async with app.run_test(size=(200, 40)) as pilot:
        await submit_when_ready(pilot)
        assert app.current_mode == "queue"
        seen: list[str] = []
        table = app.screen.query_one("#jobs", DataTable)
        states: list[list[str]] = []

        def done() -> bool:
            rows = [str(table.get_row_at(i)) for i in range(table.row_count)]
            if not states or states[-1] != rows:
                states.append(rows)
            return app.submission is None and all("PENDING" in r for r in rows) and len(rows) == 2

        await _summaries(pilot, app, done, seen)
    said = "\n".join(seen)
    assert "no runs yet" not in said, said
    # every step said, with its time and the profile's timeout while it runs (a loaded
    # machine may draw a short one only once it is done)
    for step in (
        "asking the controller (scontrol ping)",
        "the queue: your jobs (squeue)",
        "handing the jobs to Slurm (sbatch)",
    ):
        assert re.search(re.escape(step) + r"( x\d)?: (\d+ s \(at most 7 s\)|done in)", said), (
            step,
            said,
        )
    assert len(re.findall(r": \d+ s \(at most 7 s\)", said)) >= 3, said
    # the runs were on screen from the first frames on: SUBMITTING, then not yet seen
    assert any(len(rows) == 2 and all("SUBMITTING" in r for r in rows) for rows in states), states
    assert any(all("not yet seen by Slurm" in r for r in rows) for rows in states if rows), states


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_a_refused_submission_is_planned_with_slurm_s_words(home, tmp_path, monkeypatch):
    """Issue 47, item 2: a submission Slurm refuses leaves its runs PLANNED (as the docs
    say: they did not run), and what is said is what sbatch said, nothing added."""
    import fake_slurm

    _slow_slurm(tmp_path, monkeypatch, "", sbatch="refuse")
    spec = write_spec(tmp_path / "s.toml", name="refused", scales='"1x1"', steps=4)
    app = DlscaleApp(Session(home, "slurm", str(tmp_path / "cluster.toml")), str(spec))
    said = recorded_notes(app)
    async with app.run_test(size=(200, 40)) as pilot:
        await submit_when_ready(pilot)
        await until(pilot, lambda: any("not submitted" in n for n in said), what="the refusal")
        await until(pilot, lambda: "PLANNED" in screen_text(app), what="the run PLANNED")
    run = Store(home).runs("refused")[0]
    assert run["state"] == "PLANNED" and run["reason"] == f"not submitted: {fake_slurm.REFUSED}"
    assert fake_slurm.REFUSED in "\n".join(said) and "Socket" not in "\n".join(said)
