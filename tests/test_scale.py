"""The engine at the size of a real study (issue 16): a submission of many runs is stored,
claimed and recorded in a few transactions, not a few per run, and keeps every guarantee of
one run at a time (one claimer, one live job per run); the store reads thousands of runs
and jobs in parts that any SQLite binds; status prints one line per run; the commands
that read results load no report libraries. Timings are benchmarks/engine_scale.py's and
cli_startup.py's, not tests'."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from test_store import make_run

from conftest import BIN, HANG_S
from dlscale.engine import study
from dlscale.engine.backends.local.backend import LocalBackend
from dlscale.engine.backends.local.worker import make_folder
from dlscale.engine.backends.slurm.parsing import parse_sacct
from dlscale.engine.config.spec import load_spec
from dlscale.engine.runs import State
from dlscale.engine.tracking.store import Store

# Racing processes start as separate dlscale commands do: spawned, not forked from a test
# process that holds a store's connection and pytest's threads (3.12+ warns of deadlocks).
SPAWN = multiprocessing.get_context("spawn")

MANY = [make_run(repetition=i % 100, per_device_batch=8 * (1 + i // 100)) for i in range(300)]


def _spec_text(path, name):
    """3 batches x 2 scales x 50 repetitions = 300 runs."""
    path.write_text(f"""[experiment]
name = "{name}"
frameworks = ["pytorch-ddp"]
models = ["resnet20"]
datasets = ["synthetic-cifar"]
scales = ["1x1", "1x2"]
per_device_batch = [8, 16, 24]
precisions = ["fp32"]
repetitions = 50

[training]
steps = 4
warmup_steps = 1
""")
    return path


def _transactions(store: Store) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(lambda sql: seen.append(sql) if sql.startswith("BEGIN") else None)
    return seen


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_a_batched_submission_stores_each_run_with_its_job_and_claim(tmp_path, home):
    spec = _spec_text(tmp_path / "big.toml", "big")
    loaded = load_spec(str(spec))
    store = Store(home)
    began = _transactions(store)
    report = study.submit(store, loaded, LocalBackend(store, start_worker=False))
    runs = store.runs("big")
    assert len(report.submitted) == len(runs) == 300 and not report.failed_to_submit
    # a few writes for the whole submission, not several per run as before
    assert len(began) < 12, len(began)
    jobs = {j["run_id"]: j for j in store.jobs.find("local")}
    me = store.conn.execute("SELECT DISTINCT claimed_by FROM runs").fetchall()
    assert len(me) == 1 and str(os.getpid()) in me[0][0]  # each claimed by this process
    spec_file = home / "specs" / f"{loaded.digest}.toml"
    for r in runs:
        assert r["state"] == "PENDING" and r["attempts"] == 1 and r["reason"] is None
        assert jobs[r["run_id"]]["job_id"] == r["job_id"] and r["backend"] == "local"
        folder = home / "runs" / r["run_id"]
        assert not folder.exists()  # no file per run at submission: made as it starts
        job = jobs[r["run_id"]]
        assert make_folder(store, job, json.loads(job["payload"])) is None  # the worker's
        assert json.loads((folder / "run.json").read_text())["run_id"] == r["run_id"]
        # one spec for every run of it, its text, not a copy per run
        assert (folder / "spec.toml").stat().st_ino == spec_file.stat().st_ino
        assert (folder / "spec.toml").read_text() == spec.read_text()
    assert len({j["job_id"] for j in jobs.values()}) == 300
    # and again: nothing is submitted twice, every run is already queued
    again = study.submit(store, loaded, LocalBackend(store, start_worker=False))
    assert not again.submitted and len(again.active) == 300
    assert len(store.jobs.find("local")) == 300


def _claim_many(home, start, queue):
    store = Store(home)
    start.wait()  # every process begins at the same instant
    queue.put(list(store.claims.take_many([r.run_id for r in MANY], skip=("COMPLETED",))))


def test_racing_batched_claims_take_each_run_exactly_once(tmp_path):
    store = Store(tmp_path)
    store.add_runs(MANY)
    queue = SPAWN.Queue()
    start = SPAWN.Barrier(3)
    procs = [SPAWN.Process(target=_claim_many, args=(tmp_path, start, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    claimed = [rid for _ in procs for rid in queue.get(timeout=HANG_S)]
    for p in procs:
        p.join()
    assert sorted(claimed) == sorted(r.run_id for r in MANY)  # each once, none twice
    assert {r["state"] for r in store.runs()} == {State.SUBMITTING}
    assert {r["attempts"] for r in store.runs()} == {1}


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_two_dlscale_run_of_a_big_spec_at_once_submit_each_run_once(tmp_path, home):
    spec = _spec_text(tmp_path / "big.toml", "big")
    home.mkdir(parents=True)
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    # A live "worker" (its lock held): the jobs stay queued, no trainer starts.
    with open(home / "local-worker.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [
            subprocess.Popen(
                [str(BIN / "dlscale"), "run", str(spec), "--backend", "local"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    store = Store(home)
    per_run = Counter(j["run_id"] for j in store.jobs.find("local"))
    assert len(per_run) == 300 and set(per_run.values()) == {1}
    submitted = [int(o.split(" submitted")[0].rsplit(" ", 1)[-1]) for o, _ in outs]
    assert sum(submitted) == 300, outs
    assert {r["state"] for r in store.runs("big")} == {"PENDING"}


def test_many_ids_are_bound_in_parts_any_sqlite_takes(tmp_path):
    """SQLite builds before 3.32 bind at most 999 values a statement: a watcher of 1,200
    jobs must still read them all."""
    store = Store(tmp_path)
    runs = [make_run(repetition=i % 100, per_device_batch=8 * (1 + i // 100)) for i in range(1200)]
    for i, r in enumerate(runs):
        store.add_run(r)
        store.jobs.add("slurm", str(1000 + i), r.run_id, "PENDING")
    if not hasattr(store.conn, "setlimit"):
        pytest.skip("sqlite3's Connection.setlimit is Python 3.11's: no way to lower the limit")
    store.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    ids = [str(1000 + i) for i in range(1200)]
    assert len(store.jobs.find("slurm", ids)) == 1200
    assert store.records.last("summary", [r.run_id for r in runs]) == {}
    assert store.records.skipped([r.run_id for r in runs]) == {}
    assert len(store.claims.take_many([r.run_id for r in runs])) == 0  # all have live jobs
    assert len(store.db.runs_by_id([r.run_id for r in runs])) == 1200


def test_add_jobs_refuses_only_the_duplicate(tmp_path):
    store = Store(tmp_path)
    a, b = make_run(repetition=0), make_run(repetition=1)
    store.add_runs([a, b])
    store.jobs.add("local", "local-1", a.run_id, "PENDING")
    refused = store.jobs.add_many(
        "local",
        [
            ("local-2", a.run_id, "PENDING", None),
            ("local-3", b.run_id, "PENDING", None),
            ("local-3", b.run_id, "COMPLETED", None),
        ],
    )
    assert refused[0] is not None and "already has a queued or running job" in str(refused[0])
    assert refused[1] is None
    assert refused[2] is not None and "in the store already" in str(refused[2])
    assert store.run(b.run_id)["job_id"] == "local-3"
    assert store.run(b.run_id)["state"] == "PENDING"


def test_status_prints_each_run_on_one_line_with_its_whole_reason(tmp_path, home):
    store = Store(home)
    runs = [make_run(repetition=i) for i in range(30)]
    for r in runs:
        store.add_run(r)
    reason = "not submitted: " + "x" * 40 + " the end of the reason"  # 77: all of it shown
    for r in runs:
        store.update_run(r.run_id, reason=reason)
    env = {**os.environ, "DLSCALE_HOME": str(home), "COLUMNS": "100"}
    out = subprocess.run(
        [str(BIN / "dlscale"), "status"], env=env, capture_output=True, text=True, check=True
    ).stdout
    lines = out.splitlines()
    for r in runs:
        mine = [ln for ln in lines if r.run_id in ln]
        assert len(mine) == 1 and mine[0].endswith("the end of the reason"), out
    assert "30 planned" in out


def test_the_results_commands_load_no_report_libraries():
    """`dlscale results` and `chart` need neither the report's figures (matplotlib) nor
    planning's validation (pydantic): they are typed often, on big stores."""
    code = (
        "import sys, dlscale.engine.cli.results, dlscale.engine.results.explained; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'pydantic', "
        "'textual', 'torch'}); assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-1]


def test_sacct_columns_are_read_by_name_in_any_order():
    fields = "State,JobID,NodeList,ExitCode,Reason,ElapsedRaw,JobIDRaw"
    text = (
        "RUNNING|101|node[1-2]|0:0|None|120|101\n"
        "RUNNING|101.batch|node1|0:0||120|101.batch\n"
        "PENDING|102_[1-3]|None assigned|0:0|Resources|0|102\n"
        "FAILED|103|node1|2:0|None|7|103\n"
        "\n"
    )
    jobs = parse_sacct(text, fields)
    assert sorted(jobs) == ["101", "102_1", "102_2", "102_3", "103"]
    assert jobs["101"].state == "RUNNING" and jobs["101"].nodes == "node[1-2]"
    assert jobs["101"].elapsed_s == 120 and jobs["101"].reason is None
    assert jobs["102_2"].state == "PENDING" and jobs["102_2"].reason == "Resources"
    assert jobs["102_2"].nodes is None
    assert (jobs["103"].state, jobs["103"].exit_code, jobs["103"].signal) == ("FAILED", 2, 0)


class _Queues(LocalBackend):
    """A backend whose jobs the study records (as Slurm's are): ids from a counter, one of
    them a number the store already holds."""

    name = "fake"

    def records_its_jobs(self):
        return False

    def submit_many(self, requests):
        return ["7"] + [str(100 + i) for i in range(len(requests) - 1)]


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_a_batch_of_jobs_is_recorded_and_a_refused_one_said(tmp_path, home):
    spec = _spec_text(tmp_path / "big.toml", "big")
    store = Store(home)
    earlier = make_run(repetition=99, experiment="other")
    store.add_run(earlier)
    store.jobs.add("fake", "7", earlier.run_id, "COMPLETED")  # job 7 is taken
    began = _transactions(store)
    report = study.submit(store, load_spec(str(spec)), _Queues(store, start_worker=False))
    assert len(began) < 12, len(began)
    assert len(report.submitted) == 299 and len(report.failed_to_submit) == 1
    run, why = report.failed_to_submit[0]
    assert why.startswith("not recorded: fake job 7 was submitted but the store refused it")
    assert store.run(run.run_id)["state"] == "FAILED" and store.run(run.run_id)["reason"] == why
    jobs = {j["run_id"]: j["job_id"] for j in store.jobs.find("fake")}
    assert all(store.run(r.run_id)["job_id"] == jobs[r.run_id] for r in report.submitted)
    assert {store.run(r.run_id)["state"] for r in report.submitted} == {"PENDING"}
