"""One job per run (issue 11, item 3): claiming a run for submission is one transaction, the
schema refuses a second live job for a run, and cancel reaches every live job of a run. And
(item 14) a submission that fails part-way leaves no run half-submitted: it is released
with the reason, and the CLI says so."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from test_store import make_run

from conftest import BIN, HANG_S, dlscale, write_spec
from dlscale.engine.errors import StoreError
from dlscale.engine.runs import State
from dlscale.engine.tracking.store import Store

# Racing processes start as separate dlscale commands do: spawned, not forked from a test
# process that holds a store's connection and pytest's threads (3.12+ warns of deadlocks).
SPAWN = multiprocessing.get_context("spawn")

RUNS = [make_run(repetition=i) for i in range(40)]


def _claim_all(home, start, queue):
    store = Store(home)
    start.wait()  # every process begins at the same instant
    got = [r.run_id for r in RUNS if store.claims.take(r.run_id, skip=("COMPLETED",))]
    queue.put(got)


def test_racing_processes_claim_each_run_exactly_once(tmp_path):
    store = Store(tmp_path)
    for r in RUNS:
        store.add_run(r)
    queue = SPAWN.Queue()
    start = SPAWN.Barrier(4)
    procs = [SPAWN.Process(target=_claim_all, args=(tmp_path, start, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    claimed = [rid for _ in procs for rid in queue.get(timeout=HANG_S)]
    for p in procs:
        p.join()
    assert sorted(claimed) == sorted(r.run_id for r in RUNS)  # each once, none twice
    assert {r["state"] for r in store.runs()} == {State.SUBMITTING}
    assert {r["attempts"] for r in store.runs()} == {1}


def test_the_schema_refuses_a_second_live_job_for_a_run(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    store.jobs.add("local", "local-1", run.run_id, "PENDING")
    with pytest.raises(StoreError, match="already has a queued or running job"):
        store.jobs.add("local", "local-2", run.run_id, "PENDING")
    with pytest.raises(sqlite3.IntegrityError):  # the schema itself, not only jobs.add
        store.conn.execute(
            "INSERT INTO jobs (backend, job_id, run_id, state) VALUES "
            "('slurm', '99', ?, 'RUNNING')",
            (run.run_id,),
        )
    store.jobs.update("local", "local-1", state="COMPLETED")
    store.jobs.add("local", "local-2", run.run_id, "PENDING")  # one live job again is fine
    assert store.claims.take(run.run_id) is None  # and it is not claimable while it lives


def _older_store_with_duplicates(home):
    """A store as the race left it before the guard: a run with two live jobs, and a run
    whose row says COMPLETED while a duplicate job still runs."""
    store = Store(home)
    a, b = make_run(repetition=0), make_run(repetition=1)
    for run in (a, b):
        store.add_run(run)
    store.conn.execute("DROP INDEX jobs_one_live_per_run")
    store.jobs.add("local", "local-1", a.run_id, "RUNNING")
    store.jobs.add("local", "local-2", a.run_id, "PENDING")
    store.jobs.add("local", "local-3", b.run_id, "RUNNING")
    store.jobs.add("local", "local-4", b.run_id, "COMPLETED")
    store.update_run(b.run_id, state="COMPLETED")
    store.close()
    return a.run_id, b.run_id


def test_cancel_reaches_every_live_job_of_a_run_in_an_older_store(home):
    a, b = _older_store_with_duplicates(home)
    store = Store(home)  # opens: the guard cannot be made while duplicates live
    assert len(store.jobs.live()) == 3
    out = dlscale("cancel", "--experiment", "e", check=0).stdout
    assert "cancelled 2 run(s)" in out
    assert store.jobs.live() == []
    assert {j["job_id"]: j["state"] for j in store.jobs.find("local")} == {
        "local-1": "CANCELLED",
        "local-2": "CANCELLED",
        "local-3": "CANCELLED",
        "local-4": "COMPLETED",
    }
    Store(home)  # the next open makes the guard
    with pytest.raises(StoreError, match="already has a queued or running job"):
        s = Store(home)
        s.jobs.add("local", "local-5", a, "PENDING")
        s.jobs.add("local", "local-6", a, "PENDING")


def test_a_claim_whose_process_died_is_released_with_the_reason(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.conn.execute(
        "UPDATE runs SET state=?, claimed_by=? WHERE run_id=?",
        (State.SUBMITTING, f"{socket.gethostname()} {dead.pid} 12345", run.run_id),
    )
    assert store.claims.take(run.run_id) is not None  # a dead claimer's run is taken over
    store.claims.release(run.run_id, "PLANNED", "not submitted: test")
    store.conn.execute(
        "UPDATE runs SET state=?, claimed_by=? WHERE run_id=?",
        (State.SUBMITTING, f"{socket.gethostname()} {dead.pid} 12345", run.run_id),
    )
    assert store.claims.release_stale() == [run.run_id]
    row = store.run(run.run_id)
    assert row["state"] == "PLANNED"
    assert f"the submission by dlscale pid {dead.pid}" in row["reason"]
    # a live claim (this process) is neither released nor taken over
    assert store.claims.take(run.run_id) is not None
    assert store.claims.release_stale() == []
    assert store.claims.take(run.run_id) is None


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
@pytest.mark.parametrize("blocker", ["file", "symlink-loop"])
def test_a_run_folder_that_cannot_be_made_is_not_left_half_submitted(tmp_path, home, blocker):
    """Something in the way of a run's folder (the class: anything raised between the
    claim and the scheduler): the run is released as PLANNED with the reason, the others
    are not tried, the CLI says so on stderr with exit 1, and `status` shows it."""
    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan

    spec = write_spec(tmp_path / "s.toml", scales='"1x1"', steps=100000)
    first = plan(load_spec(spec)).runs[0].run_id
    (home / "runs").mkdir(parents=True)
    in_the_way = home / "runs" / first
    if blocker == "file":
        in_the_way.write_text("not a folder\n")
    else:
        in_the_way.symlink_to(in_the_way)
    proc = dlscale("run", str(spec), check=1)
    assert "not submitted" in proc.stderr and "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr
    row = Store(home).run(first)
    assert row["state"] == "PLANNED" and row["reason"].startswith("not submitted: ")
    assert Store(home).jobs.live() == []
    status = dlscale("status", check=0).stdout
    assert "PLANNED" in status and "not submitted" in status
    # out of the way, the same command submits it
    in_the_way.unlink()
    assert "1 submitted" in dlscale("run", str(spec), check=0).stdout
    dlscale("cancel", "--experiment", "t", check=0)


@pytest.mark.slow
def test_two_dlscale_runs_of_one_spec_make_one_job_per_run(tmp_path, home):
    """The issue's own case: two `dlscale run` of a spec with many runs, started together,
    made 22 and 23 jobs for 20 runs. Real processes on the local backend."""
    spec = write_spec(tmp_path / "s.toml", "repetitions = 60", scales='"1x1", "1x2"', steps=100000)
    spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    procs = [
        subprocess.Popen(
            [str(BIN / "dlscale"), "run", str(spec)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    try:
        assert [p.returncode for p in procs] == [0, 0], outs
        store = Store(home)
        per_run = Counter(j["run_id"] for j in store.jobs.find("local"))
        assert len(per_run) == 120 and set(per_run.values()) == {1}, per_run.most_common(3)
        submitted = sum(int(o.split(" submitted")[0].split()[-1]) for o, _ in outs)
        assert submitted == 120, outs
    finally:
        out = dlscale("cancel", "--experiment", "t", check=0).stdout
    assert "cancelled 120 run(s)" in out
    assert Store(home).jobs.live() == []
