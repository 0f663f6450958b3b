"""A damaged store (issue 11, item 12): an empty or damaged dlscale.db says what is wrong
and how to recover, never taken as empty and never an internal error; `dlscale store
rebuild` keeps the damaged file aside and re-ingests every run folder, with real files."""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import dlscale, write_spec
from dlscale.engine import study
from dlscale.engine.backends.local.backend import LocalBackend
from dlscale.engine.backends.local.worker import make_folder
from dlscale.engine.config.spec import load_spec
from dlscale.engine.tracking import follow
from dlscale.engine.tracking.store import Store
from dlscale.engine.tracking.store.health import fault_message
from tui_text import recorded_study

FIXTURE = Path(__file__).parent / "fixtures" / "tui-quickstart"
HINT = "dlscale store rebuild"


def _results(home, experiment):
    rows = json.loads(
        dlscale("results", "-e", experiment, "--format", "json", home=home, check=0).stdout
    )
    return [(r["ranks"], r["n"], round(r["throughput"], 6)) for r in rows]


def _study_of_every_kind(home, tmp_path) -> None:
    """Runs of three vintages: the quickstart recorded by an older dlscale (folders with
    only metrics and log); the same study's runs as a Slurm folder keeps them (spec.toml,
    job.sh, no run.json) under another home; and runs submitted now (run.json)."""
    recorded_study(home)
    fresh = write_spec(tmp_path / "fresh.toml", name="fresh", scales='"1x1", "1x2"')
    store = Store(home)
    for _ in range(6):  # recorded_study gave its jobs local-1..6 without the counter
        store.jobs.next_counter("local_job")
    report = study.submit(store, load_spec(fresh), LocalBackend(store, start_worker=False))
    assert len(report.submitted) == 2, report.failed_to_submit
    _started(store)
    metrics = sorted((FIXTURE / "runs").glob("*/metrics.jsonl"))
    for row, source in zip(store.runs("fresh"), metrics):
        shutil.copy(source, Path(row["run_dir"]) / "metrics.jsonl")
        store.records.ingest(row["run_id"], Path(row["run_dir"]) / "metrics.jsonl")
        store.update_run(row["run_id"], state="COMPLETED")
    store.close()


def _started(store: Store) -> None:
    """What the local worker does first as each queued job starts: lay out its folder."""
    for job in store.jobs.live():
        assert make_folder(store, job, json.loads(job["payload"])) is None


def _break(home, how: str) -> None:
    db = home / "dlscale.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        (home / f"dlscale.db{suffix}").unlink(missing_ok=True)
    if how == "empty":
        db.write_bytes(b"")
    elif how == "header":
        data = bytearray(db.read_bytes())
        data[:16] = b"not a database!!"
        db.write_bytes(bytes(data))
    else:  # every page after the first two: what a failing disk leaves
        fill = {
            "pages": lambda n: b"\xff" * n,
            "zeros": lambda n: b"\x00" * n,
            "noise": random.Random(0).randbytes,
        }[how]
        data = bytearray(db.read_bytes())
        for page in range(2, len(data) // 4096):
            data[page * 4096 + 8 : page * 4096 + 64] = fill(56)
        db.write_bytes(bytes(data))


# Which damage a query notices depends on SQLite's version: some reads return NULLs or
# garbage instead of an error, and those must be called damage too, not a bug.
@pytest.mark.parametrize("how", ["empty", "header", "pages", "zeros", "noise"])
def test_a_broken_store_says_what_is_wrong_and_how_to_recover(home, how):
    recorded_study(home)
    _break(home, how)
    before = (home / "dlscale.db").read_bytes()
    for command in (["status"], ["results"], ["chart"], ["logs", "4b75ba1fc982"]):
        proc = dlscale(*command, check=1)
        assert HINT in proc.stderr and "internal error" not in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert proc.stderr.startswith("dlscale: error: ")
    assert (home / "dlscale.db").read_bytes() == before  # nothing written over it
    if how == "empty":
        assert "is empty (0 bytes)" in proc.stderr and "6 run folder(s)" in proc.stderr


@pytest.mark.parametrize("error", [TypeError("can only concatenate str"), KeyError("run_dir")])
def test_an_error_over_a_damaged_store_is_the_damage_and_over_a_sound_one_a_bug(home, error):
    recorded_study(home)
    assert fault_message(error, home) is None  # a sound store: the error is dlscale's own
    _break(home, "pages")
    said = fault_message(error, home)
    assert said is not None and HINT in said and "is damaged" in said and str(error) in said
    assert fault_message(OSError("not about the store"), home) is None


def test_an_empty_file_without_run_folders_is_a_new_store(home):
    home.mkdir()
    (home / "dlscale.db").write_bytes(b"")
    assert "no runs yet" in dlscale("status", check=0).stdout


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
@pytest.mark.parametrize("how", ["empty", "pages"])
def test_rebuild_recovers_every_run_folder_and_keeps_the_file_aside(home, tmp_path, how):
    _study_of_every_kind(home, tmp_path)
    slurm_home = tmp_path / "slurm-home"  # the quickstart as Slurm run folders keep it
    for run in (FIXTURE / "runs").iterdir():
        folder = slurm_home / "runs" / run.name
        shutil.copytree(run, folder)
        shutil.copy(FIXTURE / "spec.toml", folder / "spec.toml")
        (folder / "job.sh").write_text("#!/bin/bash\n")
    quickstart = _results(home, "quickstart")
    fresh = _results(home, "fresh")
    _break(home, how)
    broken = (home / "dlscale.db").read_bytes()
    (slurm_home / "dlscale.db").write_bytes(b"")

    proc = dlscale("store", "rebuild", check=0)
    assert "kept aside:" in proc.stdout and "recovered 8 run(s)" in proc.stdout, proc.stdout
    assert "8 completed" in proc.stdout
    (aside,) = [p for p in home.glob("dlscale.db.damaged-*") if p.name[-4:] not in ("-wal", "-shm")]
    assert aside.read_bytes() == broken  # kept as it was, for whoever wants to look
    # Runs submitted now come back exactly (run.json); the older local folders hold
    # neither run.json nor their spec, and come back under `recovered` with their numbers.
    assert _results(home, "fresh") == fresh
    assert _results(home, "recovered") == quickstart
    assert "6 run(s) had neither run.json nor their spec" in proc.stdout
    assert dlscale("status", "--all", check=0).stdout.count("COMPLETED") == 8
    # A Slurm folder keeps its spec: those runs come back under their own experiment.
    proc = dlscale("store", "rebuild", home=slurm_home, check=0)
    assert "recovered 6 run(s) of 1 experiment(s)" in proc.stdout
    assert _results(slurm_home, "quickstart") == quickstart
    exp = Store(slurm_home).experiments()[0]
    assert exp["name"] == "quickstart" and "repetitions = 3" in exp["spec_text"]
    assert {r["backend"] for r in Store(slurm_home).runs()} == {"slurm"}


def test_rebuild_refuses_a_healthy_store_unless_forced(home, tmp_path):
    recorded_study(home)
    proc = dlscale("store", "rebuild", check=2)
    assert "opens and checks fine" in proc.stderr and "--force" in proc.stderr
    assert not list(home.glob("dlscale.db.damaged-*"))
    assert "recovered 6 run(s)" in dlscale("store", "rebuild", "--force", check=0).stdout
    assert list(home.glob("dlscale.db.damaged-*"))


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_every_attempt_keeps_run_json_naming_its_spec(home, tmp_path):
    """run.json is written at each submission, and a resubmission keeps the spec its
    first attempt named (resubmit has no spec in hand)."""
    spec = write_spec(tmp_path / "s.toml", name="kept", scales='"1x1"')
    store = Store(home)
    quiet = LocalBackend(store, start_worker=False)
    study.submit(store, load_spec(spec), quiet)
    (row,) = store.runs("kept")
    assert not Path(row["run_dir"]).exists()  # queued: laid out when it starts
    _started(store)
    first = json.loads((Path(row["run_dir"]) / "run.json").read_text())
    assert first["spec_path"] == str(spec.resolve()) and first["experiment"] == "kept"
    assert first["backend"] == "local" and first["training"]["steps"] == 4
    follow.cancel(store, [row["run_id"]])
    study.resubmit(store, [row["run_id"]], lambda name: quiet)
    again = json.loads((Path(row["run_dir"]) / "run.json").read_text())
    assert again["spec_path"] == first["spec_path"] and again["spec_digest"]
    assert (Path(row["run_dir"]) / "attempts" / "1" / "run.json").is_file()
    assert (Path(row["run_dir"]) / "spec.toml").read_text() == spec.read_text()
    follow.cancel(store, [row["run_id"]])
    # Cancelled while queued, its folder never made: the resubmission still names its spec.
    never = write_spec(tmp_path / "n.toml", name="never", scales='"1x1"')
    study.submit(store, load_spec(never), quiet)
    (queued,) = store.runs("never")
    follow.cancel(store, [queued["run_id"]])
    assert not Path(queued["run_dir"]).exists()
    study.resubmit(store, [queued["run_id"]], lambda name: quiet)
    record = json.loads((Path(queued["run_dir"]) / "run.json").read_text())
    assert record["spec_path"] == str(never.resolve()) and record["experiment"] == "never"
    assert (Path(queued["run_dir"]) / "spec.toml").read_text() == never.read_text()
    follow.cancel(store, [queued["run_id"]])


@pytest.mark.parametrize("field,value", [("per_device_batch", "many"), ("world_size", 2**40)])
def test_a_folder_whose_records_say_nonsense_is_named_and_the_rebuild_goes_on(home, field, value):
    """A folder placed from its records alone (no run.json, no spec) whose params fail the
    row's check is named as unreadable; the rebuild once crashed numbering its repetition."""
    recorded_study(home)
    source = sorted((FIXTURE / "runs").glob("*/metrics.jsonl"))[0]
    lines = source.read_text().splitlines()
    params = json.loads(lines[0])
    assert params["kind"] == "params"
    folder = home / "runs" / "abcdef012345"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(
        "\n".join([json.dumps({**params, field: value}), *lines[1:]]) + "\n"
    )
    proc = dlscale("store", "rebuild", "--force", check=0)
    assert "abcdef012345" in proc.stdout and "recovered 6 run(s)" in proc.stdout, proc.stdout
    assert dlscale("status", "--all", check=0).stdout.count("COMPLETED") == 6


def test_damage_the_check_itself_cannot_read_still_names_the_error(home, monkeypatch):
    """Over some damage SQLite's quick_check raises instead of listing what is wrong (seen
    in CI's core suite on Python 3.10): the sentence still names the error that was hit."""
    from dlscale.engine.tracking.store import health as store_health

    recorded_study(home)

    def unreadable(db):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(store_health, "_quick_check", unreadable)
    error = TypeError("can only concatenate str")
    said = fault_message(error, home)
    assert said is not None and HINT in said and "is damaged" in said, said
    assert "database disk image is malformed" in said and str(error) in said, said


@pytest.mark.framework  # real local runs of pytorch-ddp
def test_status_after_a_rebuild_shows_the_jobs_ids_nodes_and_elapsed_it_showed_before(
    home, tmp_path
):
    """A store made by real local runs, one completed and one failed: `status --all` after
    `store rebuild` is what it was before (each finished job's id, nodes and elapsed time,
    from the job.json its run folder keeps), and the next job takes a fresh id."""
    ok = write_spec(tmp_path / "ok.toml", name="ok", scales='"1x1"')
    bad = write_spec(tmp_path / "bad.toml", name="bad", scales='"1x1"')
    bad.write_text(
        bad.read_text().replace("[training]", '[training]\ninject_fault = "crash@step2"')
    )
    dlscale("run", str(ok), "--wait", timeout=300, check=0)
    dlscale("run", str(bad), "--wait", timeout=300)
    before = dlscale("status", "--all", check=0).stdout
    assert "local-1" in before and "local-2" in before and "FAILED" in before, before
    assert before.count("localhost") == 2  # each job's nodes
    assert len(re.findall(r"localhost +\d+:\d\d ", before)) == 2, before  # and elapsed
    dlscale("store", "rebuild", "--force", check=0)
    assert dlscale("status", "--all", check=0).stdout == before
    again = write_spec(tmp_path / "again.toml", name="again", scales='"1x1"', steps=2)
    dlscale("run", str(again), "--wait", timeout=300, check=0)
    (row,) = Store(home).runs("again")
    assert row["job_id"] == "local-3"  # not local-1 again: the counter kept its place


def test_a_job_json_that_is_not_a_jobs_is_named_and_the_run_kept(home):
    """job.json held to what a job row holds: one of another backend, a state no job ends
    in, or a time that is no number is named in a note; its run is kept without its job."""
    recorded_study(home)
    folders = sorted((home / "runs").iterdir())
    bad = [
        {"backend": "slurm", "job_id": "7", "state": "COMPLETED"},
        {"backend": "local", "job_id": "local-9", "state": "RUNNING"},
        {"backend": "local", "job_id": "local-9", "state": "COMPLETED", "ended": "soon"},
        {"backend": "local", "job_id": "local-9", "state": "FAILED", "run_state": "FINE"},
        [1, 2],
    ]
    for folder, data in zip(folders, bad):
        (folder / "job.json").write_text(json.dumps(data))
    out = dlscale("store", "rebuild", "--force", check=0).stdout
    assert out.count("its job is not kept") == len(bad), out
    store = Store(home)
    assert len(store.runs()) == 6 and all(r["job_id"] is None for r in store.runs())
