"""Records that would break a store, and files that would hang it (issue 22, items 7 and
8): each hostile line is skipped, counted and named while the run's good lines are kept;
a finished run's unterminated last line and a file separated only by \\r are read; a
records file or log that is a folder, a FIFO, a link or a link loop is named, never read,
and never stops `status`, `results`, `report` or `export` for the rest of the store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_store import line

from conftest import HANG_S, dlscale
from dlscale.engine.tracking.monitor import finalize_run
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study

GOOD = Path(__file__).parent / "fixtures" / "tui-quickstart"

HOSTILE = {
    "200k-deep": "[" * 200_000 + "]" * 200_000 + "\n",
    "1e400": line("interval", step=9, images_per_s=1.0, loss=0.5).replace("0.5", "1e400"),
    "kind-list": json.dumps({"kind": ["summary"], "time": 1.0}) + "\n",
    "kind-object": json.dumps({"kind": {"a": 1}, "time": 1.0}) + "\n",
    "interval-no-time": json.dumps({"kind": "interval", "step": 3, "images_per_s": 1.0, "loss": 1})
    + "\n",
    "eval-no-time": json.dumps({"kind": "eval", "step": 3, "epoch": 0, "top1": 0.1, "elapsed_s": 1})
    + "\n",
    "devices-objects": line(
        "env",
        framework_versions={"torch": "2"},
        hostnames=["a"],
        devices=[{"x": 1}],
        world_size=1,
        dlscale_version="0",
    ),
    "throughput-1.7e308": line(
        "summary", status="ok", throughput=1.7e308, timed_steps=1, warmup_steps=1, elapsed_s=1.0
    ),
    "5000-digit-int": line("interval", step=1, images_per_s=1.0, loss=0.5).replace(
        '"step": 1', '"step": ' + "9" * 5000
    ),
    "huge-count": line("interval", step=10**400, images_per_s=1.0, loss=0.5),
}


def _inject(bad: str):
    """A recorded_study edit: the bad line goes before the last line of every run."""

    def edit(run_id, lines):
        return [*lines[:-1], bad, lines[-1]]

    return edit


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_record_is_skipped_named_and_the_run_still_reads(tmp_path, name):
    name_exp = recorded_study(tmp_path, _inject(HOSTILE[name]))
    store = Store(tmp_path)
    runs = store.runs(name_exp)
    assert all(r["bad_records"] == 1 for r in runs), [r["bad_records"] for r in runs]
    assert all(store.records.of(r["run_id"], "summary") for r in runs)
    notes = store.records.skipped_notes()
    assert len(notes) == len(runs) and all("metrics.jsonl line" in n for n in notes), notes
    # the readers that crashed on these: results' analysis, the report's figures, mllog
    from dlscale.engine.results import analysis
    from dlscale.engine.results.report import mllog

    assert analysis.results(store, name_exp)
    for r in runs:
        assert mllog.lines(store, r["run_id"])


def test_every_hostile_record_at_once_through_the_cli(tmp_path):
    home = tmp_path / "home"
    exp = recorded_study(home, _inject("".join(HOSTILE.values())))
    for argv in (
        ["status", "--all"],
        ["results", "-e", exp],
        ["report", "-e", exp, "--out", str(tmp_path / "report")],
        ["export", "mllog", "-e", exp, "--out", str(tmp_path / "mllog")],
    ):
        proc = dlscale(*argv, home=home, timeout=HANG_S)
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        assert "internal error" not in proc.stderr + proc.stdout


def finished_run(
    home: Path, metrics: bytes = b"", state: str = "COMPLETED", place=None
) -> tuple[Store, str]:
    """A run whose job just ended with these metrics, settled as the watcher does;
    `place(run_dir)` may put the job's other files there first."""
    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan

    store = Store(home)
    run = plan(load_spec(GOOD / "spec.toml")).runs[0]
    store.add_run(run)
    row = store.start_attempt(run.run_id)
    (Path(row["run_dir"]) / "metrics.jsonl").write_bytes(metrics)
    if place is not None:
        place(Path(row["run_dir"]))
    store.jobs.add("local", "1", run.run_id, state)
    finalize_run(store, run.run_id, state)
    return store, run.run_id


def recorded_lines() -> list[bytes]:
    run = sorted((GOOD / "runs").iterdir())[0]
    return (run / "metrics.jsonl").read_bytes().splitlines()


def test_a_finished_runs_unterminated_last_line_is_taken(tmp_path):
    lines = recorded_lines()
    store, run_id = finished_run(tmp_path, b"\n".join(lines))  # no final \n
    assert store.run(run_id)["state"] == "COMPLETED"
    assert len(store.records.of(run_id)) == len(lines)


def test_a_finished_runs_torn_last_line_is_skipped_and_counted(tmp_path):
    lines = recorded_lines()
    store, run_id = finished_run(tmp_path, b"\n".join([*lines, b'{"kind": "inter']))
    assert store.run(run_id)["bad_records"] == 1
    assert f"line {len(lines) + 1} skipped: not JSON" in store.records.skipped_notes()[0]


@pytest.mark.parametrize("sep", [b"\r", b"\r\n"])
def test_records_separated_by_carriage_returns_are_read(tmp_path, sep):
    lines = recorded_lines()
    store, run_id = finished_run(tmp_path, sep.join(lines) + sep)
    assert store.run(run_id)["state"] == "COMPLETED", store.run(run_id)["reason"]
    assert len(store.records.of(run_id)) == len(lines)
    assert store.run(run_id)["bad_records"] == 0


def _replace(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-loop":
        path.symlink_to(path.name)
    elif kind == "link-out":
        path.symlink_to("/etc/passwd")


@pytest.mark.parametrize("kind", ["folder", "fifo", "link-loop", "link-out"])
def test_a_runs_files_that_are_not_its_own_regular_files_stop_no_command(tmp_path, kind):
    home = tmp_path / "home"
    lines = recorded_lines()
    store, run_id = finished_run(home, b"\n".join(lines) + b"\n")
    run_dir = Path(store.run(run_id)["run_dir"])
    # the run is running again, its records file and log replaced by something hostile
    store.update_run(run_id, state="RUNNING")
    store.conn.execute("UPDATE jobs SET state='RUNNING' WHERE job_id='1'")
    store.conn.execute("UPDATE runs SET ingest_offset=0, ingest_lines=0 WHERE run_id=?", (run_id,))
    store.conn.execute("DELETE FROM records WHERE run_id=?", (run_id,))
    _replace(run_dir / "metrics.jsonl", kind)
    _replace(run_dir / "run.log", kind)
    store.records.ingest(run_id, run_dir / "metrics.jsonl")
    store.records.ingest(run_id, run_dir / "metrics.jsonl")  # noted once
    assert store.run(run_id)["bad_records"] == 1
    note = store.records.skipped_notes()[0]
    assert "metrics.jsonl not read: " in note and "not a regular file" in note, note
    finalize_run(store, run_id, "FAILED")
    reason = store.run(run_id)["reason"]
    assert "root:" not in reason and "run.log" in reason, reason
    for argv in (["status", "--all"], ["logs", run_id], ["results"]):
        proc = dlscale(*argv, home=home, timeout=HANG_S)
        assert "internal error" not in proc.stderr and "root:" not in proc.stdout, proc
        assert proc.returncode in (0, 1, 2), proc
    assert dlscale("logs", run_id, home=home, timeout=HANG_S).returncode == 1
