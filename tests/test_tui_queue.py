"""The queue at scale (issue 16, item 5): the engine rebuilds only the rows of runs that
changed (QueueReader), and the table shows every change correctly whatever the order of
drawing and widening, through Textual's public API only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.coordinate import Coordinate
from textual.geometry import Region

from dlscale.engine.launching.plan import Run
from dlscale.engine.session import Session, Snapshot
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.queue import QUEUE_COLUMNS, QueueReader, QueueRow
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.jobtable import ROWS_PER_FRAME, JobTable
from test_tui import until
from tui_text import drawn, screen_text

# --- the engine's rows, tick after tick ----------------------------------------------------


def _study(home: Path, n: int = 6, name: str = "big") -> Store:
    store = Store(home)
    store.save_experiment(name, f"{name}.toml", "", "0")
    for i in range(n):
        run = Run(
            name,
            "pytorch-ddp",
            "resnet50",
            "synthetic-imagenet",
            1 + i % 2,
            4,
            64,
            256,
            "weak",
            "fp32",
            "native",
            i,
            {"steps": 100},
        )
        store.add_run(run)
        store.update_run(run.run_id, state="PENDING", backend="local", job_id=f"{name}-{i}")
        store.jobs.add("local", f"{name}-{i}", run.run_id, "PENDING")
    return store


def _record(store: Store, run_id: str, kind: str = "interval", **fields) -> None:
    """Append a metric line to the run's file and ingest it, as the watcher does."""
    rd = Path(store.run(run_id)["run_dir"])
    rd.mkdir(parents=True, exist_ok=True)
    line = (
        {
            "schema": 1,
            "kind": "interval",
            "time": 1.0,
            "step": 10,
            "images_per_s": 800.0,
            "loss": 6.9,
            "lr": 0.1,
            "step_time_ms": 80.0,
            **fields,
        }
        if kind == "interval"
        else {
            "schema": 1,
            "time": 1.0,
            "kind": kind,
            "status": "completed",
            "timed_steps": 20,
            "warmup_steps": 5,
            "elapsed_s": 9.0,
            **fields,
        }
    )
    with open(rd / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps(line) + "\n")
    store.records.ingest(run_id, rd / "metrics.jsonl")


def _by_id(rows: list[QueueRow]) -> dict[str, QueueRow]:
    return {r.run_id: r for r in rows}


@pytest.mark.parametrize(
    "change",
    [
        "job state",
        "pending reason",
        "run reason",
        "new record",
        "summary record",
        "skipped line",
        "resubmitted",
        "job started (clock)",
        "job ended",
    ],
)
def test_a_reader_makes_anew_only_the_rows_that_changed(home, change):
    """Each kind of change to a run shows in its row on the next read, exactly as a
    one-off read (`dlscale status`) shows it, while every other row keeps its object."""
    store = _study(home)
    ids = [r["run_id"] for r in store.runs()]
    target, now = ids[2], 1_000_000.0
    _record(store, ids[4], images_per_s=123.0)
    if change == "resubmitted":
        _record(store, target, images_per_s=456.5)
    reader = QueueReader()
    first = _by_id(reader.rows(store, "big", now=now))
    again = _by_id(reader.rows(store, "big", now=now + 1))
    assert all(again[i] is first[i] for i in ids)  # nothing changed: the same objects
    if change == "job state":
        store.jobs.update("local", "big-2", state="RUNNING", nodes="node3")
        store.update_run(target, state="RUNNING")
    elif change == "pending reason":
        store.jobs.update("local", "big-2", reason="Resources")
    elif change == "run reason":
        store.update_run(target, reason="not submitted: no room\nsecond line")
    elif change == "new record":
        _record(store, target, images_per_s=456.5, step=20)
    elif change == "summary record":
        _record(store, target, images_per_s=456.5, step=20)
        _record(store, target, kind="summary", throughput=999.0)
    elif change == "skipped line":
        _record(store, target, images_per_s="fast")  # the wrong type: skipped, with why
    elif change == "resubmitted":
        store.start_attempt(target)  # its records move aside
    elif change == "job started (clock)":
        store.jobs.update("local", "big-2", state="RUNNING", started=now - 65)
        store.update_run(target, state="RUNNING")
    elif change == "job ended":
        store.jobs.update("local", "big-2", state="COMPLETED", started=now - 65, ended=now - 5)
        store.update_run(target, state="COMPLETED")
    after = reader.rows(store, "big", now=now + 2)
    assert after == queue.rows(store, "big", now=now + 2)
    after_by_id = _by_id(after)
    assert after_by_id[target] != first[target]
    assert [i for i in ids if after_by_id[i] is not first[i]] == [target]
    row = after_by_id[target]
    expected = {
        "job state": ("RUNNING", "node3"),
        "pending reason": ("PENDING", None),
        "new record": (456.5, 20),
        "summary record": (999.0, None),
        "resubmitted": (None, None),
        "job started (clock)": ("RUNNING", "1:07"),
        "job ended": ("COMPLETED", "1:00"),
    }
    if change == "job state":
        assert (row.state, row.nodes) == expected[change]
    elif change == "pending reason":
        assert row.reason == "Resources"
    elif change == "run reason":
        assert row.reason == "not submitted: no room"
    elif change in ("new record", "summary record", "resubmitted"):
        assert (row.images_per_s, row.step) == expected[change]
    elif change == "skipped line":
        assert "line 1 skipped" in row.reason and "images_per_s" in row.reason
    else:
        assert (row.state, row.cells()[QUEUE_COLUMNS.index("elapsed")]) == expected[change]


def test_a_running_jobs_clock_moves_every_read(home):
    store = _study(home, 3)
    store.jobs.update("local", "big-0", state="RUNNING", started=1_000.0)
    reader = QueueReader()
    one = reader.rows(store, now=1_010.0)
    two = reader.rows(store, now=1_070.0)
    assert (one[0].elapsed_s, two[0].elapsed_s) == (10.0, 70.0)
    assert one[1] is two[1] and one[2] is two[2]


def test_a_reader_follows_the_experiment_it_is_asked_for(home):
    store = _study(home, 3, "one")
    _study(home, 2, "two")
    reader = QueueReader()
    assert {r.experiment for r in reader.rows(store, "one")} == {"one"}
    assert {r.experiment for r in reader.rows(store, "two")} == {"two"}
    assert len(reader.rows(store)) == 5


def test_a_reader_sees_every_kind_of_write_from_another_process(home):
    """The class: whatever writes the store between two reads (another connection, as the
    watcher, the local worker or a `dlscale` command are; every Store method that writes
    runs or jobs), the reader's rows equal a one-off read's, in order. 300 random writes,
    a read after each one, seeded."""
    import random

    rng = random.Random(16)
    _study(home, 8)
    writer, reading = Store(home), Store(home)
    reader = QueueReader()
    made = [0]

    def pick() -> str:
        return rng.choice([r["run_id"] for r in writer.runs()])

    def job_of(run_id: str) -> tuple[str, str] | None:
        row = writer.run(run_id)
        return (row["backend"], row["job_id"]) if row["job_id"] else None

    def new_runs() -> None:
        for _ in range(rng.randint(1, 3)):
            made[0] += 1
            run = Run(
                "big", "pytorch-ddp", "resnet20", "synthetic-cifar", 1, 1, 8, 8, "weak",
                "fp32", "native", 100 + made[0], {"steps": 4},
            )  # fmt: skip
            writer.add_runs([run])

    def job_write() -> None:
        rid = pick()
        job = job_of(rid)
        if job:
            fields = rng.choice(
                [
                    {"state": "RUNNING", "started": 1000.0 + rng.random(), "nodes": "node1"},
                    {"reason": rng.choice(["Resources", "Priority", "QOSMaxJobsPerUserLimit"])},
                    {"state": "COMPLETED", "ended": 2000.0, "elapsed": 60.0},
                    {"pid": rng.randint(2, 99999)},  # not shown: no change on screen
                ]
            )
            writer.jobs.update(*job, **fields)

    def run_write() -> None:
        writer.update_run(
            pick(), **rng.choice([{"state": "FAILED", "reason": "x\ny"}, {"state": "PENDING"}])
        )

    def resubmit() -> None:
        rid = pick()
        job = job_of(rid)
        if job:
            writer.jobs.update(*job, state="CANCELLED", ended=3000.0)
        claimed = writer.claims.take(rid)
        if claimed is None:
            return
        writer.start_attempt(rid)
        new_id = f"j{writer.jobs.next_counter('test_job')}"
        writer.jobs.add_many("local", [(new_id, rid, "PENDING", {})])

    def release() -> None:
        rid = pick()
        if writer.claims.take(rid) is not None:
            writer.claims.release(rid, "PLANNED", "not submitted: test")

    def record() -> None:
        _record(writer, pick(), images_per_s=rng.uniform(1, 1000), step=rng.randint(1, 99))

    def rerun() -> None:
        row = writer.run(pick())
        writer.add_rerun(row, f"{made[0]:012x}")
        made[0] += 1

    writes = [new_runs, job_write, job_write, run_write, resubmit, release, record, rerun]
    for step in range(300):
        rng.choice(writes)()
        now = 5000.0 + step
        got = reader.rows(reading, "big", now=now)
        assert got == queue.rows(reading, "big", now=now), f"after write {step}"


def test_a_store_from_before_revisions_gains_them_and_is_followed(home):
    """A store made by an earlier dlscale (no rev columns, triggers or counter) keeps its
    runs when opened, and a reader follows changes to them."""
    store = _study(home, 4)
    for sql in (
        "DROP TRIGGER runs_rev",
        "DROP TRIGGER jobs_rev",
        "DROP INDEX runs_by_rev",
        "DROP INDEX jobs_by_rev",
        "ALTER TABLE runs DROP COLUMN rev",
        "ALTER TABLE jobs DROP COLUMN rev",
        "DELETE FROM counters WHERE name='rev'",
    ):
        store.conn.execute(sql)
    store.close()
    store = Store(home)
    reader = QueueReader()
    assert len(reader.rows(store, now=10.0)) == 4
    store.jobs.update("local", "big-1", state="RUNNING", nodes="node9")
    store.update_run(store.jobs.get("local", "big-1")["run_id"], state="RUNNING")
    (row,) = [r for r in reader.rows(store, now=11.0) if r.job_id == "big-1"]
    assert (row.state, row.nodes) == ("RUNNING", "node9")
    assert reader.rows(store, now=12.0) == queue.rows(store, now=12.0)


# --- the table ------------------------------------------------------------------------------


def _rows(n: int, **changes) -> list[QueueRow]:
    """n pending jobs; changes = {index: {field: value}}."""
    out = []
    for i in range(n):
        r = QueueRow(
            f"run{i:05d}",
            "big",
            "pytorch-ddp",
            "resnet20",
            "1x2",
            64,
            i,
            "local",
            f"job-{i:04d}",
            "PENDING",
            "Priority",
            None,
            None,
            None,
            None,
        )
        out.append(QueueRow(**{**r.__dict__, **changes.get(i, {})}))
    return out


def _lines(app) -> dict[str, str]:
    """The table's visible rows as text, by job id (the first cell)."""
    return {
        line.split()[0]: line
        for line in screen_text(app).splitlines()
        if line.strip().startswith("job-")
    }


def _check_shown(app, rows: list[QueueRow]) -> int:
    """Every visible row shows each of its cells whole, between the column gaps (a column
    with one value in every row is hidden, its value named in the summary line)."""
    lines = _lines(app)
    hidden = app.screen.query_one(JobTable).constants
    checked = 0
    for r in rows:
        line = lines.get(r.cells()[0])
        if line is None:
            continue  # scrolled out of view
        for col, cell in zip(QUEUE_COLUMNS, r.cells()):
            if col in hidden:
                assert hidden[col] == cell
                continue
            assert f" {cell} " in f" {line} ", (col, cell, line)
        checked += 1
    return checked


async def _table(app, pilot) -> JobTable:
    await pilot.press("f3")
    return app.screen.query_one(JobTable)


def _draw_before_idle(table: JobTable) -> None:
    """Draw the table now, before it is next idle: a frame can land between a change and
    DataTable's idle-time work, and whatever it draws then is kept in its caches."""
    table.render_lines(Region(0, 0, table.size.width, table.size.height))


@pytest.mark.parametrize(
    "sequence",
    [
        "reason widens",
        "job id widens",
        "nodes widen then narrow",
        "state narrows",
        "state narrows and widens",
        "elapsed widens past the label",
    ],
)
async def test_changed_cells_show_whole_after_narrowing_and_widening(home, sequence):
    """A cell that narrows or widens, drawn before or after DataTable is idle, shows whole
    on every visible row: no row left cropped to an old width, no old text left over."""
    steps = {
        "reason widens": [
            {3: {"reason": "ReqNodeNotAvail, UnavailableNodes:node[001-128]"}},
            {4: {"reason": "[bold red]not markup[/] C:\\runs\\"}},
        ],
        "job id widens": [{0: {"job_id": "job-0000_[1-1000%50]"}}],
        "nodes widen then narrow": [
            {i: {"state": "RUNNING", "nodes": "node[001-064]"} for i in range(5)},
            {i: {"state": "RUNNING", "nodes": "n1"} for i in range(5)},
        ],
        "state narrows": [
            {i: {"state": "SUBMITTING"} for i in range(8)},
            {i: {"state": "FAILED"} for i in range(8)},
        ],
        "state narrows and widens": [
            {1: {"state": "SUBMITTING"}},
            {1: {"state": "RUNNING"}},
            {1: {"state": "NODE_FAIL", "reason": "node7 died"}},
        ],
        "elapsed widens past the label": [
            {2: {"state": "RUNNING", "elapsed_s": 5.0}},
            {2: {"state": "RUNNING", "elapsed_s": 400000.0}},
        ],
    }[sequence]
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(200, 40)) as pilot:
        table = await _table(app, pilot)
        rows = _rows(40)
        table.show_rows(rows)
        await pilot.pause()
        assert _check_shown(app, rows) > 20
        for step in steps:
            rows = [QueueRow(**{**r.__dict__, **step.get(i, {})}) for i, r in enumerate(rows)]
            table.show_rows(rows)
            _draw_before_idle(table)
            await pilot.pause()
            assert _check_shown(app, rows) > 20
        assert table.row_count == 40


async def test_another_experiment_replaces_the_rows(home):
    """Many rows gone at once (another experiment shown) are replaced, not removed one by
    one; a few gone are removed and the cursor stays where the user left it."""
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(200, 40)) as pilot:
        table = await _table(app, pilot)
        table.show_rows(_rows(300))
        table.focus()
        await pilot.press("down", "down", "down")
        assert table.selected_run() == "run00003"
        table.show_rows(_rows(300)[:5] + _rows(300)[6:])  # one run gone
        await pilot.pause()
        assert table.row_count == 299 and table.selected_run() == "run00003"
        others = [
            QueueRow(
                **{
                    **r.__dict__,
                    "run_id": f"oth{i:05d}",
                    "experiment": "other",
                    "job_id": f"job-9{i:03d}",
                }
            )
            for i, r in enumerate(_rows(150))
        ]
        t = time.perf_counter()
        table.show_rows(others)
        assert time.perf_counter() - t < 5  # removing 299 rows one by one is quadratic
        await pilot.pause()
        assert table.row_count == 150 and set(table.shown) == {r.run_id for r in others}
        assert _check_shown(app, others) > 20


async def test_the_queue_screen_shows_a_big_snapshot(home):
    """2,500 jobs through the app's reactive: the first screenful at once, the rest frame by
    frame (DataTable measures each new row); a tick that lands meanwhile, with 100 jobs
    changing state, shows too, and the table ends with every job, running ones first."""
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("f3")
        rows = _rows(2500)
        app.snapshot = Snapshot("big", rows, {"PENDING": 2500}, experiments=["big"])
        table = app.screen.query_one(JobTable)
        assert table.row_count == ROWS_PER_FRAME  # the rest come in the next frames
        rows = [
            QueueRow(**{**r.__dict__, "state": "RUNNING", "nodes": "node1"}) if i % 25 == 0 else r
            for i, r in enumerate(rows)
        ]
        app.snapshot = Snapshot("big", rows, {"PENDING": 2400, "RUNNING": 100}, experiments=["big"])
        await until(pilot, lambda: table.row_count == 2500, what="every row")
        # what needs watching first: the running jobs, then the pending ones, each in
        # job order (issue 36, item 3); a table this big sorts a tick's changes every
        # few seconds (JobTable.order)
        want = [r.run_id for r in rows if r.state == "RUNNING"]
        want += [r.run_id for r in rows if r.state == "PENDING"]
        await until(
            pilot,
            lambda: (
                [table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(2500)]
                == want
            ),
            what="the running jobs first",
        )
        assert "2400 pending, 100 running" in str(app.screen.query_one("#queue-summary").render())
        assert _check_shown(app, rows) > 20
        for i in (0, 1000, 2475):
            assert "RUNNING" in str(table.get_row(rows[i].run_id))


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "node[001-128]",
        "[bold red]not markup[/]",
        "C:\\runs\\",
        "[a] b\\",
        "\\",
        "x\\\\",
        "a\\[bold]b",
        "[/]",
        "[link=file:///etc]x[/link]",
    ],
)
def test_a_cell_shows_its_text_as_it_is(text):
    """Whatever a reason, a node list or a job id holds, the cell shows it literally: no
    tag read from it, no backslash doubled (a trailing one was, before). A state the
    scheduler made up shows as it is too; a known one in its colour."""
    from rich.text import Text

    from dlscale.tui.jobtable import STATE_STYLE, cell_markup

    state = QUEUE_COLUMNS.index("state")
    for col in range(len(QUEUE_COLUMNS)):
        assert Text.from_markup(cell_markup(col, text, text)).plain == text
    for known in STATE_STYLE:
        shown = Text.from_markup(cell_markup(state, known, known))
        assert shown.plain == known and shown.spans[0].style == STATE_STYLE[known]


async def test_a_communication_benchmark_is_named_in_the_queue(home):
    """Issue 21, item 7: the comm benchmark run trains nothing (its summary says 0 images/s);
    its row says what it is and what it measured, never `images/s 0.0` as if training."""
    store = _study(home, n=2, name="comm")
    bench = Run(
        "comm",
        "pytorch-ddp",
        "resnet50",
        "synthetic-imagenet",
        2,
        4,
        64,
        256,
        "weak",
        "fp32",
        "native",
        0,
        {"steps": 100, "comm_benchmark": True},
    )
    store.add_run(bench)
    store.update_run(bench.run_id, state="PENDING", backend="local", job_id="comm-9")
    store.jobs.add("local", "comm-9", bench.run_id, "PENDING")
    ids = [r["run_id"] for r in store.runs("comm")]
    for run_id in ids:
        store.update_run(run_id, state="COMPLETED")
        if run_id != bench.run_id:
            _record(store, run_id, "summary", throughput=512.0)
    _record(store, bench.run_id, "summary", throughput=0.0, comm_busbw_gbps=1.25)
    rows = _by_id(queue.rows(store, "comm"))
    trained, comm = rows[ids[0]].cells(), rows[bench.run_id].cells()
    at = {c: QUEUE_COLUMNS.index(c) for c in ("rep", "throughput", "reason")}
    assert (trained[at["rep"]], trained[at["throughput"]], trained[at["reason"]]) == (
        "0",
        "512.0",
        "",
    )
    assert (comm[at["rep"]], comm[at["throughput"]]) == ("comm", "-")
    assert comm[at["reason"]] == "communication benchmark, busbw 1.25 GB/s"
    store.update_run(bench.run_id, state="FAILED", reason="gloo: connection refused")
    failed = _by_id(queue.rows(store, "comm"))[bench.run_id].cells()[at["reason"]]
    assert failed == "communication benchmark: gloo: connection refused"

    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        rows = queue.rows(store, "comm")
        app.snapshot = Snapshot("comm", rows, queue.counts(rows), experiments=["comm"])
        text = await drawn(pilot, lambda t: "comm-9" in t)
        (line,) = [ln for ln in text.splitlines() if "comm-9" in ln]
        # at 80 columns the reason is cut: the rep column says it too
        assert line.split()[:4] == ["comm-9", "FAILED", "2x4", "comm"], line
        assert "communica" in line
        table = app.screen.query_one(JobTable)
        table.move_cursor(row=table.get_row_index(bench.run_id))
        await pilot.press("l")
        await until(pilot, lambda: "(job comm-9)" in screen_text(app), what="the log's title")
        assert "pytorch-ddp resnet50 2x4 communication benchmark (job comm-9)" in screen_text(app)


@pytest.mark.parametrize("unit", ["tokens", "[/b]frames", "[b]x[/b]", "\x1b]0;t\x07"])
async def test_the_throughput_heading_names_the_rows_unit_as_written(home, unit):
    """The heading is the runs' unit (tokens/s is not images/s), read from the store: a
    damaged or hand-edited one may hold any text there, shown as written, never markup."""
    from dlscale.engine.io.text import signs

    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(200, 40)) as pilot:
        table = await _table(app, pilot)
        table.show_rows([QueueRow(**{**r.__dict__, "unit": unit}) for r in _rows(3)])
        head = await _heading_when(pilot, f" {signs(unit)}/s ")
        assert f" {signs(unit)}/s " in f"{head} ", head
        table.show_rows(_rows(3))  # runs of the built-in trainers: images again
        head = await _heading_when(pilot, " images/s ")
        assert " images/s " in f"{head} ", head


async def _heading_when(pilot, words: str) -> str:
    """The table's heading line once it shows `words` (or as it is after the wait)."""

    def heading(text: str) -> str:
        return next((f"{x} " for x in text.splitlines() if " state▾ " in x), "")

    return heading(await drawn(pilot, lambda t: words in heading(t)))
