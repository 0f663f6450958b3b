"""Store ingest: idempotent, whole lines only, safe against a second ingesting process."""

import json
import multiprocessing

from dlscale.engine.launching.plan import Run
from dlscale.engine.tracking.store import Store

# Racing processes start as separate dlscale commands do: spawned, not forked from a test
# process that holds a store's connection and pytest's threads (3.12+ warns of deadlocks).
SPAWN = multiprocessing.get_context("spawn")


def make_run(**over):
    fields = dict(
        experiment="e",
        framework="pytorch-ddp",
        model="resnet20",
        dataset="synthetic-cifar",
        nodes=1,
        ranks_per_node=1,
        per_device_batch=8,
        global_batch=8,
        scaling="weak",
        precision="fp32",
        loader="native",
        repetition=0,
        training={"steps": 4},
    )
    fields.update(over)
    fields["global_batch"] = fields["per_device_batch"] * fields["nodes"] * fields["ranks_per_node"]
    return Run(**fields)


def line(kind, **fields):
    return json.dumps({"kind": kind, "schema": 1, "time": 0.0, **fields}) + "\n"


INTERVAL = line("interval", step=1, images_per_s=1.0, loss=0.5)


def test_ingest_is_idempotent_and_takes_whole_lines_only(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(INTERVAL * 3 + INTERVAL[:20])  # the last line is still being written
    assert store.records.ingest(run.run_id, metrics) == 3
    assert store.records.ingest(run.run_id, metrics) == 0
    assert len(store.records.of(run.run_id)) == 3
    with open(metrics, "a") as fh:
        fh.write(INTERVAL[20:] + "garbage\n")
    assert store.records.ingest(run.run_id, metrics) == 1
    row = store.run(run.run_id)
    assert (row["ingest_lines"], row["bad_records"]) == (5, 1)
    # a second Store on the same file (another process) sees the same and adds nothing
    assert Store(tmp_path).records.ingest(run.run_id, metrics) == 0
    assert len(store.records.of(run.run_id)) == 4


def _ingest_in_child(home, run_id, path, queue):
    queue.put(Store(home).records.ingest(run_id, path))


def test_concurrent_ingest_never_doubles(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(INTERVAL * 200)
    queue = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_ingest_in_child, args=(tmp_path, run.run_id, metrics, queue))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert sum(queue.get() for _ in procs) == 200
    assert len(store.records.of(run.run_id)) == 200


def test_a_new_attempt_moves_the_old_files_and_records_aside(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    row = store.add_run(run)
    store.start_attempt(run.run_id)
    (tmp_path / "runs" / run.run_id / "metrics.jsonl").write_text(INTERVAL)
    store.records.ingest(run.run_id, tmp_path / "runs" / run.run_id / "metrics.jsonl")
    row = store.start_attempt(run.run_id)
    assert row["attempts"] == 2 and store.records.of(run.run_id) == []
    assert (tmp_path / "runs" / run.run_id / "attempts" / "1" / "metrics.jsonl").exists()


def test_add_run_is_idempotent(tmp_path):
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    store.update_run(run.run_id, state="COMPLETED")
    assert store.add_run(run)["state"] == "COMPLETED"
    assert len(store.runs()) == 1


def test_a_store_from_before_reruns_gains_the_column_and_keeps_its_runs(tmp_path):
    import sqlite3

    store = Store(tmp_path)
    store.add_run(make_run())
    store.close()
    # the runs table as the first release made it: no rerun_of column
    conn = sqlite3.connect(tmp_path / "dlscale.db")
    conn.execute("ALTER TABLE runs DROP COLUMN rerun_of")
    conn.commit()
    conn.close()
    store = Store(tmp_path)
    (row,) = store.runs()
    assert row["run_id"] == make_run().run_id and row["rerun_of"] is None
    again = store.add_rerun(row, "feedfacecafe")
    assert again["rerun_of"] == row["run_id"] and again["state"] == "PLANNED"
    assert again["point_id"] == row["point_id"] and again["run_dir"].endswith("feedfacecafe")
    assert [r["run_id"] for r in store.reruns(row["run_id"])] == ["feedfacecafe"]


def test_a_watchers_stale_news_never_brings_a_settled_run_back(tmp_path):
    """A watcher (`status`) read the job running; the local worker then failed the run at
    its start; the watcher's write comes last and must not make it RUNNING again (it
    stayed RUNNING for ever: no later poll looks at a run whose job has ended)."""
    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    store.update_run(run.run_id, state="PENDING")  # submitted
    store.advance_run(run.run_id, "RUNNING", None)  # pending to running: news of a live run
    assert store.run(run.run_id)["state"] == "RUNNING"
    store.update_run(run.run_id, state="FAILED", reason="cannot lay out the run's folder")
    store.advance_run(run.run_id, "RUNNING", None)
    row = store.run(run.run_id)
    assert row["state"] == "FAILED" and row["reason"] == "cannot lay out the run's folder"
