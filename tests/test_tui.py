"""dlscale-tui driven by Textual's Pilot: the form refuses bad values at the field, a study
built in the form is submitted, its jobs appear, a log tail follows, and results and a chart
appear: against the local backend (real trainer runs) and the real Slurm test cluster."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
from textual.widgets import DataTable, Input, Static

from conftest import HANG_S, REPO, write_spec
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.dialogs import ConfirmScreen, HelpScreen
from dlscale.tui.logtail import TAIL_LINES, LogTail
from dlscale.tui.logview import LogView
from dlscale.tui.typeahead import READ_S, Question
from tui_text import drawn, recorded_study, screen_text

pytestmark = pytest.mark.timeout(600)


async def until(pilot, condition, timeout: float = HANG_S, what: str = "") -> None:
    """Let the app run until `condition()` holds (real jobs take real seconds). The timeout
    only calls a wait hung: one that holds returns at once, and the other Pythons' suite,
    niced beside the main run, starved waits of 10 to 20 s past their end."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(
                f"timed out waiting for {what or condition}:\n" + screen_text(pilot.app)
            )
        await pilot.pause(0.2)


async def answer(pilot, key: str) -> None:
    """A question's answer as a user gives it: once the question is drawn and read
    (tui/typeahead.py takes no answer typed in one go with the key before it)."""
    await until(pilot, lambda: isinstance(pilot.app.screen, Question) and pilot.app.screen.shown_at)
    await pilot.pause(READ_S)
    await pilot.press(key)


async def type_into(pilot, wid: str, text: str) -> None:
    """Replace a field's text with keystrokes, as a user would: home, kill to end, type."""
    pilot.app.screen.query_one(f"#{wid}", Input).focus()
    await pilot.press("home", "ctrl+k", *text)


def field(app, wid: str):
    return app.screen.query_one(f"#{wid}")


# --- the build form ----------------------------------------------------------------------


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_build_form_refuses_bad_values_at_the_field(home):
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 40)) as pilot:
        await until(
            pilot,
            lambda: app.screen.query("#preview") and "runs" in str(field(app, "preview").render()),
            what="the first preview",
        )
        await type_into(pilot, "scales", "1x1, 2y2")
        await type_into(pilot, "batch", "64, lots")
        await type_into(pilot, "repetitions", "0")
        # Wait for the marks of the values typed, not for any mark: each field is invalid
        # already while emptied and half typed (rounds of 2026-11-29, under load, read
        # "give one whole number", the empty field's, before "0" was judged).
        said = {
            "scales": "'2y2' is not NODESxRANKS",
            "batch": "not a whole number",
            "repetitions": "greater than or equal to 1",
        }
        await until(
            pilot,
            lambda: all(
                field(app, w).has_class("invalid") and text in (field(app, w).border_subtitle or "")
                for w, text in said.items()
            ),
            what="each field's mark for its typed value",
        )
        assert not field(app, "name").has_class("invalid")
        assert field(app, "submit").disabled
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert Store(home).runs() == []  # nothing submitted
        # Fixing the fields clears the marks and enables submission.
        await type_into(pilot, "scales", "1x1, 1x2")
        await type_into(pilot, "batch", "8")
        await type_into(pilot, "repetitions", "2")
        # the preview of the values typed, not of a half-typed form that happened to be valid
        await until(
            pilot,
            lambda: (
                not field(app, "submit").disabled
                and "4 runs" in str(field(app, "preview").render())
            ),
            what="submit enabled, the fixed form previewed",
        )
        assert not any(field(app, w).has_class("invalid") for w in ("scales", "batch"))


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_plan_refusal_is_shown_before_submitting(home):
    """A valid spec the backend cannot run (more ranks than cores) is refused in the panel."""
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 40)) as pilot:
        await type_into(pilot, "scales", "1x64")
        # "1x6", half typed, is refused too (6 ranks on 2 cores): wait for 1x64's refusal
        await until(
            pilot,
            lambda: (
                "Cannot submit" in (text := str(field(app, "preview").render()))
                and "64 ranks" in text
            ),
            what="1x64 refused",
        )
        assert field(app, "submit").disabled


async def test_choosing_a_cluster_profile_in_the_form(home, tmp_path):
    """2 nodes cannot run here, but can on the test cluster: the profile field decides, and a
    profile that does not validate is refused at the field."""
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 40)) as pilot:
        await type_into(pilot, "scales", "2x1")
        await until(pilot, lambda: "needs 2 nodes" in str(field(app, "preview").render()))
        bad = tmp_path / "bad-cluster.toml"
        bad.write_text('name = "x"\n[[partitions]]\nname = "p"\nnodes = "two"\n')
        await type_into(pilot, "profile", str(bad))
        # a half-typed path is invalid too (no such file): wait for the whole path's mark
        await until(
            pilot,
            lambda: "partitions[0].nodes" in (field(app, "profile").border_subtitle or ""),
            what="the bad profile's mark",
        )
        assert field(app, "submit").disabled
        await type_into(pilot, "profile", str(REPO / "examples/clusters/test-cluster.toml"))
        # the emptied field (this machine) is submittable too: wait for the cluster itself
        await until(
            pilot,
            lambda: (
                not field(app, "submit").disabled and "slurm test-cluster:debug" in app.sub_title
            ),
            what="the cluster chosen",
        )
        assert app.session.backend == "slurm"
        assert "at most" in str(field(app, "preview").render())  # device-hours at the limit


async def test_a_spec_that_fails_validation_opens_with_the_error(home, tmp_path):
    spec = write_spec(tmp_path / "bad.toml", training="lr = -1")
    app = DlscaleApp(Session(home, "local"), str(spec))
    async with app.run_test(size=(100, 40)) as pilot:
        await until(
            pilot,
            lambda: "does not validate" in str(field(app, "preview").render()),
            what="the file's error",
        )
        text = str(field(app, "preview").render())
        assert f"{spec}:" in text and "training.lr" in text
        # The rest of the file was loaded into the form.
        assert field(app, "scales").value == "1x1, 1x2"
        assert field(app, "submit").disabled


async def test_unusable_frameworks_say_why_and_cannot_be_chosen(home):
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: app.screen.frameworks_checked, what="the environment check")
        fw = field(app, "frameworks")
        choices = {c.name: c for c in app.session.framework_choices()}
        for i in range(fw.option_count):
            opt = fw.get_option_at_index(i)
            assert opt.disabled == (not choices[opt.value].usable)
            if opt.disabled:
                assert choices[opt.value].why in str(opt.prompt)


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_save_and_load_round_trip(home, tmp_path):
    target = tmp_path / "saved.toml"
    source = tmp_path / "with-options.toml"  # a table the form has no field for
    source.write_text(
        (REPO / "examples" / "quickstart.toml").read_text()
        + "\n[options.deepspeed]\nzero_stage = 2\n"
    )
    app = DlscaleApp(Session(home, "local"), str(source))
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: not field(app, "submit").disabled)
        await type_into(pilot, "scales", "1x2")
        await type_into(pilot, "path", str(target))
        await pilot.press("ctrl+s")
        await until(pilot, target.exists, what="the saved file")
    from dlscale.engine.config.spec import load_spec

    saved = load_spec(target).spec
    assert [str(s) for s in saved.experiment.scales] == ["1x2"]
    # Keys the form does not show survive: the quickstart's warm-up and threads.
    assert saved.training.warmup_steps == 5 and saved.training.threads_per_rank == 1
    assert saved.experiment.precisions == ["fp32"]
    assert saved.options_for("deepspeed") == {"zero_stage": 2}


# --- queue, log, results from a recorded study -------------------------------------------


async def test_reopening_shows_the_study_from_the_store(home, monkeypatch):
    name = recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: (
                app.current_mode == "queue"
                and app.screen.query_one("#jobs", DataTable).row_count == 6
            ),
        )
        assert app.experiment == name
        assert "6 completed" in str(field(app, "queue-summary").render())
        await pilot.press("f4")
        await until(
            pilot,
            lambda: app.screen.query_one("#results", DataTable).row_count == 2,
            what="results rows",
        )
        text = await drawn(pilot, lambda t: "resnet20 1x1 batch 64: baseline" in t)
        assert "speedup (vs best 1-device run)" in text and "ideal" in text
        assert "resnet20 1x1 batch 64: baseline pytorch-ddp 1x1, run " in text  # its own
        await pilot.press("m")
        await until(pilot, lambda: "scaling efficiency" in screen_text(app), what="the chart")
        await pilot.press("m", "m")
        # Results exist, without this metric: the chart says why, not that none exist.
        await until(
            pilot,
            lambda: "time-to-accuracy (s): no run evaluated to a target" in screen_text(app),
            what="the chart's reason",
        )
        # w writes the report of the study shown, as `dlscale report` would.
        monkeypatch.chdir(home)
        await pilot.press("w")
        page = home / f"report-{name}" / "report.html"
        await until(pilot, page.exists, what="the report")
        assert "<img" in page.read_text()


async def test_log_tail_follows_pauses_and_searches(home):
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(
            pilot,
            lambda: (
                app.current_mode == "queue"
                and app.screen.query_one("#jobs", DataTable).row_count == 6
            ),
        )
        app.screen.query_one("#jobs", DataTable).focus()
        await pilot.press("l")
        tail = app.screen.query_one(LogTail)
        await until(pilot, lambda: tail.query_one(LogView).line_count > 0, what="log lines")
        path = tail.path
        with open(path, "a") as fh:
            fh.write("a new line written while the tail is open\n")
        await until(
            pilot,
            lambda: "a new line written" in tail.query_one(LogView).lines[-1],
            what="the followed line",
        )
        await pilot.press("p")
        with open(path, "a") as fh:
            fh.write("held while paused\n")
        await until(pilot, lambda: tail.held, what="a held line")
        assert "held while paused" not in "\n".join(tail.query_one(LogView).lines)
        await pilot.press("p")
        assert "held while paused" in tail.query_one(LogView).lines[-1]

        def status() -> str:
            return str(tail.query_one("#log-status", Static).render())

        await pilot.press("slash", *"images_per_s", "enter")
        await until(
            pilot,
            lambda: status().startswith("match 1/") or "not found" in status(),
            what="the search's answer",
        )
        await pilot.press("slash", *"no such text anywhere", "enter")
        await until(pilot, lambda: "not found" in status(), what="not found")


@contextlib.asynccontextmanager
async def log_tail_of_recorded_study(home):
    """The queue screen of the recorded study, with its log panel shown."""
    recorded_study(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.current_mode == "queue" and app.screen.query(LogTail))
        tail = app.screen.query_one(LogTail)
        tail.display = True
        yield pilot, tail


async def test_missing_log_is_shown_and_picked_up_when_it_appears(home, tmp_path):
    async with log_tail_of_recorded_study(home) as (pilot, tail):
        late = tmp_path / "late.log"
        tail.open(late, "a job not started")
        await until(
            pilot, lambda: "no log yet" in str(tail.query_one("#log-status", Static).render())
        )
        late.write_text("first line\n")
        await until(pilot, lambda: tail.query_one(LogView).lines == ["first line"])


async def test_huge_log_opens_at_its_tail(home, tmp_path):
    big = tmp_path / "big.log"
    with open(big, "wb") as fh:  # 64 MB of lines, then a last line to look for
        block = b"".join(b"step %08d images_per_s 123.4\n" % i for i in range(20_000))
        for _ in range(64 * 2**20 // len(block)):
            fh.write(block)
        fh.write(b"the very last line\n")
    async with log_tail_of_recorded_study(home) as (pilot, tail):
        tail.open(big, "big")  # benchmarks/tui.py measures how long this takes at 1 GB
        await until(pilot, lambda: tail.query_one(LogView).line_count > 0)
        assert tail.query_one(LogView).lines[-1] == "the very last line"
        assert tail.query_one(LogView).line_count == TAIL_LINES


async def test_controller_unreachable_shows_a_banner(home):
    """A Slurm backend whose commands fail: the queue says so in a banner, no traceback."""
    from dlscale.engine.backends.slurm.commands import SlurmCLI
    from dlscale.engine.backends.slurm.common import CommandResult

    recorded_study(home)
    store = Store(home)
    run = store.runs()[0]
    store.update_run(run["run_id"], state="RUNNING", backend="slurm", job_id="4242")
    store.jobs.add("slurm", "4242", run["run_id"], "RUNNING")
    session = Session(home, "slurm", str(REPO / "examples/clusters/test-cluster.toml"))

    def down(argv, env=None, timeout=30):
        return CommandResult(
            argv,
            1,
            "",
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
        )

    session._followers["slurm"] = SlurmCLI(runner=down, max_failures=1)
    app = DlscaleApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.warning and "unreachable" in app.warning, what="the banner")
        banner = app.screen.query_one("#banner", Static)
        assert banner.has_class("shown")
        assert "Unable to contact slurm controller" in str(banner.render())
        # The last known state is still shown.
        assert any(
            "RUNNING" in str(c)
            for c in app.screen.query_one("#jobs", DataTable).get_row(run["run_id"])
        )


async def test_a_job_that_vanishes_from_the_queue_is_shown(home):
    """Slurm answers, but knows nothing of the job (recorded empty answers): the row says so
    and keeps the last known state."""
    from dlscale.engine.backends.slurm.commands import SlurmCLI
    from dlscale.engine.backends.slurm.common import CommandResult
    from dlscale.engine.tracking.monitor import VANISHED

    recorded_study(home)
    store = Store(home)
    run = store.runs()[0]
    store.jobs.add("slurm", "777", run["run_id"], "PENDING")
    session = Session(home, "slurm", str(REPO / "examples/clusters/test-cluster.toml"))
    session._followers["slurm"] = SlurmCLI(
        runner=lambda argv, env=None, timeout=30: CommandResult(argv, 0, "", "")
    )
    app = DlscaleApp(session)
    async with app.run_test(size=(160, 30)) as pilot:
        await until(
            pilot,
            lambda: app.snapshot and any(r.reason == VANISHED for r in app.snapshot.rows),
            what="the vanished reason",
        )
        await until(
            pilot,
            lambda: "the scheduler no longer knows this job" in screen_text(app),
            what="the vanished reason on screen",
        )
        assert app.snapshot.counts.get("PENDING") == 1
        assert not app.warning


async def test_help_screen_and_keyboard_navigation(home):
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        assert app.current_mode == "build"
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("f3")
        assert app.current_mode == "queue"
        await pilot.press("f4")
        assert app.current_mode == "results"
        await pilot.press("2")
        assert app.current_mode == "queue"
        await pilot.press("q")
    assert app.return_code in (0, None)


# --- the whole path, with real jobs ------------------------------------------------------


def _no_follow_threads() -> bool:
    return not [
        t for t in threading.enumerate() if "_follow" in t.name or "_refresh_queue" in t.name
    ]


async def _build_submit_watch(pilot, app, home, scales: str, nodes_expected: str) -> None:
    await until(pilot, lambda: app.screen.frameworks_checked, what="the environment check")
    await type_into(pilot, "name", "tui-study")
    await type_into(pilot, "scales", scales)
    await type_into(pilot, "batch", "8")
    await type_into(pilot, "repetitions", "1")
    await type_into(pilot, "steps", "6")  # more than the default warm-up (5)
    # the preview of the form as typed (it is drawn after the form validates)
    await until(
        pilot,
        lambda: (
            not field(app, "submit").disabled and "2 runs" in str(field(app, "preview").render())
        ),
        what="a submittable form, previewed",
    )
    await pilot.press("ctrl+r")
    await until(pilot, lambda: app.current_mode == "queue", what="the queue after submitting")
    table = app.screen.query_one("#jobs", DataTable)
    await until(pilot, lambda: table.row_count == 2, what="two jobs in the queue")
    table.focus()
    await pilot.press("l")
    tail = app.screen.query_one(LogTail)
    await until(pilot, lambda: tail.query_one(LogView).line_count > 0, what="the log tail")
    await until(
        pilot,
        lambda: app.snapshot and app.snapshot.counts.get("COMPLETED") == 2,
        420,
        "both runs completed",
    )
    assert (
        any(
            "summary" in line or "images/s" in line or "images_per_s" in line
            for line in tail.query_one(LogView).lines
        )
        or tail.query_one(LogView).line_count > 1
    )
    text = await drawn(pilot, lambda t: nodes_expected in t)
    assert nodes_expected in text, text
    await pilot.press("f4")
    results = app.screen.query_one("#results", DataTable)
    await until(pilot, lambda: results.row_count == 2, what="results rows")
    rows = app.session.results("tui-study")
    assert all(r["throughput"] for r in rows)
    text = await drawn(pilot, lambda t: f"{rows[1]['speedup']:.2f}" in t)
    assert "speedup (vs best 1-device run)" in text
    assert f"{rows[1]['speedup']:.2f}" in text


@pytest.mark.slow
async def test_build_submit_follow_results_on_the_local_backend(home):
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(120, 40)) as pilot:
        await _build_submit_watch(pilot, app, home, "1x1, 1x2", "localhost")
    await asyncio.sleep(1.0)
    assert _no_follow_threads()
    # Reopening shows the same study.
    app2 = DlscaleApp(Session(home, "local"))
    async with app2.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app2.snapshot is not None)
        assert app2.experiment == "tui-study"
        assert app2.snapshot.counts == {"COMPLETED": 2}


@pytest.mark.slow
@pytest.mark.slurm
async def test_build_submit_follow_results_on_the_slurm_cluster(home, slurm_cluster):
    session = Session(home, "slurm", str(REPO / "examples/clusters/test-cluster.toml"))
    app = DlscaleApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        assert "slurm test-cluster:debug" in app.sub_title
        await _build_submit_watch(pilot, app, home, "1x1, 2x1", "node[1-2]")
    jobs = Store(home).jobs.find("slurm")
    assert len(jobs) == 2 and all(j["state"] == "COMPLETED" for j in jobs)


@pytest.mark.slow
async def test_cancel_and_resubmit_ask_first(home, tmp_path):
    spec = write_spec(tmp_path / "long.toml", name="long", scales='"1x1"', steps=100000)
    app = DlscaleApp(Session(home, "local"), str(spec))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: not field(app, "submit").disabled)
        await type_into(pilot, "repetitions", "1")
        await until(pilot, lambda: "1 run: " in str(field(app, "preview").render()))
        await pilot.press("ctrl+r")
        await until(
            pilot, lambda: app.current_mode == "queue" and app.snapshot and app.snapshot.rows
        )
        app.screen.query_one("#jobs", DataTable).focus()
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await answer(pilot, "n")
        await pilot.pause(0.5)
        assert Store(home).runs()[0]["state"] in ("PENDING", "RUNNING")
        # (y typed in one go with c is no answer: tests/test_tui_typeahead.py types such
        # bursts in a real terminal; Pilot hands keys over one at a time, each after the
        # screen settled, so under load its y arrives once the question is on screen.)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await answer(pilot, "y")
        await until(pilot, lambda: Store(home).runs()[0]["state"] == "CANCELLED")
        await until(pilot, lambda: app.snapshot.counts == {"CANCELLED": 1})
        # Resubmit the cancelled run: it asks, then the same run goes back in the queue.
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await answer(pilot, "y")
        await until(
            pilot,
            lambda: Store(home).runs()[0]["state"] in ("PENDING", "RUNNING"),
            what="the resubmitted run",
        )
        assert Store(home).runs()[0]["attempts"] == 2
        await pilot.press("c")
        await answer(pilot, "y")
        await until(pilot, lambda: Store(home).runs()[0]["state"] == "CANCELLED")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "slurm"], "--backend slurm needs --profile"),
        (["no-such-spec.toml"], "no-such-spec.toml: no such file"),
        (["--profile", "README.md"], "README.md:3:1: invalid TOML"),
    ],
)
def test_bad_command_line_exits_2_with_one_line(home, args, message):
    import subprocess

    from conftest import BIN

    proc = subprocess.run(
        [str(BIN / "dlscale-tui"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        timeout=HANG_S,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
