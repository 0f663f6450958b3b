"""Records trusted by type (issue 11, items 10 and 11): a metric line of the wrong type or a
torn one is skipped and counted, every front end names its run, file and line, and the rest
of the store reads as before: in a store made now, and in one an older dlscale filled."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from test_store import line, make_run

from conftest import dlscale
from dlscale.engine.results import analysis, charts
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study

BASELINE = "4b75ba1fc982"  # the quickstart's best 1x1 run: its summary stays good


def _bad_study(home) -> dict[str, str]:
    """The recorded quickstart with one damaged line in four of its six runs; returns
    {run_id: what its note must say}."""
    runs = sorted(
        json.loads(
            (Path(__file__).parent / "fixtures" / "tui-quickstart" / "jobs.json").read_text()
        )
    )
    victims = [r for r in runs if r != BASELINE][:4]
    expect = {}

    def set_field(lines, kind, field, value):
        for i, text in enumerate(lines):
            rec = json.loads(text)
            if rec["kind"] == kind:
                rec[field] = value
                lines[i] = json.dumps(rec) + "\n"
                return i + 1
        raise AssertionError(kind)

    def edit(run_id, lines):
        if run_id == victims[0]:  # a string where a number belongs
            n = set_field(lines, "interval", "images_per_s", "abc")
            expect[run_id] = (
                f"metrics.jsonl line {n} skipped: interval.images_per_s is "
                "'abc', not a finite number >= 0"
            )
        elif run_id == victims[1]:  # NaN throughput
            n = set_field(lines, "summary", "throughput", float("nan"))
            expect[run_id] = f"metrics.jsonl line {n} skipped: summary.throughput is NaN"
        elif run_id == victims[2]:  # null throughput
            n = set_field(lines, "summary", "throughput", None)
            expect[run_id] = f"metrics.jsonl line {n} skipped: summary.throughput is null"
        elif run_id == victims[3]:  # a torn line, as a killed writer leaves one
            lines.insert(3, lines[3][:40] + "\n")
            expect[run_id] = "metrics.jsonl line 4 skipped: not JSON"
        return lines

    recorded_study(home, edit)
    return expect


def test_a_bad_line_is_skipped_kept_with_its_line_and_counted(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        line("interval", step=1, images_per_s=1.0, loss=0.5)
        + line("interval", step=2, images_per_s="abc", loss=0.5)
        + '{"kind": "interval", "st\n'
        + line("interval", step=3, images_per_s=2.0, loss=0.5)
    )
    assert store.records.ingest(run.run_id, metrics) == 2
    assert store.run(run.run_id)["bad_records"] == 2
    assert [(s["line"], s["file"]) for s in store.records.skipped()[run.run_id]] == [
        (2, "m.jsonl"),
        (3, "m.jsonl"),
    ]
    notes = store.records.skipped_notes()
    assert notes[0] == (
        f"run {run.run_id}: m.jsonl line 2 skipped: interval.images_per_s "
        "is 'abc', not a finite number >= 0: 0, or from 1e-9 (one in 30 years) to 2^53 a second"
    )
    assert "m.jsonl line 3 skipped: not JSON" in notes[1]
    # a new attempt starts clean
    store.start_attempt(run.run_id)
    assert store.records.skipped() == {}


def test_status_results_chart_and_report_name_the_bad_lines(home, tmp_path):
    expect = _bad_study(home)
    status = dlscale("status", "--all", check=0)
    for run_id, note in expect.items():
        assert f"run {run_id}: {note}" in status.stdout, status.stdout
    assert "Traceback" not in status.stderr and status.stdout.count("COMPLETED") >= 6
    table = dlscale("results", check=0)
    assert "resnet20" in table.stdout and "1x2" in table.stdout
    for run_id, note in expect.items():
        assert f"run {run_id}: {note}" in table.stdout
    rows = json.loads(dlscale("results", "--format", "json", check=0).stdout)
    assert all(r["throughput"] is None or math.isfinite(r["throughput"]) for r in rows)
    assert sum(r["n"] for r in rows) == 4  # the two runs without a usable summary are out
    assert "speedup" in dlscale("chart", check=0).stdout
    assert "throughput" in dlscale("chart", "--metric", "throughput", check=0).stdout
    dlscale("report", "--out", str(tmp_path / "rep"), check=0)
    page = (tmp_path / "rep" / "report.md").read_text()
    for run_id, note in expect.items():
        assert f"run {run_id}: {note}" in page


def test_a_store_from_before_type_checks_is_checked_once_when_opened(home):
    """Records an older dlscale stored by shape alone (NaN, null and text throughputs, a
    count of torn lines without their numbers) are moved aside when the store is opened,
    and every command reads the rest."""
    recorded_study(home)
    store = Store(home)
    runs = [r["run_id"] for r in store.runs() if r["run_id"] != BASELINE]
    store.close()
    conn = sqlite3.connect(home / "dlscale.db")
    bodies = {}
    for run_id, bad in zip(runs, (float("nan"), None, "abc")):
        body, number = conn.execute(
            "SELECT body, line FROM records WHERE run_id=? AND kind='summary'", (run_id,)
        ).fetchone()
        rec = json.loads(body)
        rec["throughput"] = bad
        conn.execute(
            "UPDATE records SET body=? WHERE run_id=? AND line=?", (json.dumps(rec), run_id, number)
        )
        bodies[run_id] = number + 1
    # a torn line an older ingest counted and dropped, its number not kept
    torn = runs[3]
    metrics = home / "runs" / torn / "metrics.jsonl"
    text = metrics.read_text().splitlines(keepends=True)
    text.insert(2, '{"kind": "inter\n')
    metrics.write_text("".join(text))
    conn.execute(
        "UPDATE runs SET bad_records=1, ingest_offset=? WHERE run_id=?",
        (metrics.stat().st_size, torn),
    )
    conn.execute("DROP TABLE skipped_records")
    conn.execute("PRAGMA user_version=0")
    conn.commit()
    conn.close()

    status = dlscale("status", "--all", check=0)
    assert "Traceback" not in status.stderr
    for run_id, number in bodies.items():
        assert (
            f"run {run_id}: metrics.jsonl line {number} skipped: summary.throughput"
            in status.stdout
        )
    assert f"run {torn}: metrics.jsonl line 3 skipped: not JSON" in status.stdout
    rows = json.loads(dlscale("results", "--format", "json", check=0).stdout)
    assert sum(r["n"] for r in rows) == 3
    dlscale("chart", check=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), None, "abc", True])
def test_analysis_and_charts_survive_values_that_slipped_in(tmp_path, value):
    """Defence in depth: a summary row that is not a finite number never reaches a mean, a
    table cell or plotext (a store written by hand, or a future field)."""
    store = Store(tmp_path)
    good, bad = make_run(repetition=0), make_run(repetition=1)
    for run, throughput in ((good, 10.0), (bad, value)):
        store.add_run(run)
        store.update_run(run.run_id, state="COMPLETED")
        body = {"kind": "summary", "throughput": throughput, "status": "completed"}
        store.conn.execute(
            "INSERT INTO records VALUES (?,?,?,?)", (run.run_id, 0, "summary", json.dumps(body))
        )
    (row,) = analysis.results(store)
    assert row["n"] == 1 and row["throughput"] == 10.0
    assert "no completed results" not in charts.chart(
        [row, {**row, "throughput": value}], "throughput"
    )
    assert queue.rows(store)[1].images_per_s is None
