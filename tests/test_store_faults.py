"""Faults of the store and the disk under it (issue 22, item 9): a store locked by another
writer, immutable, on a full disk, a folder in its place or in a home whose path holds `#`
or `?` is one sentence and exit 1 (or a rebuild that works), never an internal error; a
rebuild over hostile run folders names each and keeps every other run."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_hostile_records import finished_run, recorded_lines

from conftest import BIN, HANG_S, dlscale, write_spec
from dlscale.engine import cli
from dlscale.engine.paths import write_run_file
from dlscale.engine.tracking import store as store_module
from dlscale.engine.tracking.store import Store
from dlscale.engine.tracking.store.from_folders import rebuild
from dlscale.engine.tracking.store.health import store_problem


def _main(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        cli.main(list(argv))
    return int(done.value.code or 0), capsys.readouterr().err


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
@pytest.mark.parametrize("argv", [("status",), ("cancel", "4b75ba1fc982"), ("run", "SPEC")])
def test_a_store_locked_by_another_writer_is_a_sentence_after_a_bounded_wait(
    home, tmp_path, monkeypatch, capsys, argv
):
    store, _ = finished_run(home, b"\n".join(recorded_lines()) + b"\n")
    store.conn.execute("UPDATE runs SET state='RUNNING'")
    store.close()
    monkeypatch.setattr(store_module, "BUSY_S", 0.5)  # the real wait is 30 s
    holder = sqlite3.connect(home / "dlscale.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        spec = str(write_spec(tmp_path / "s.toml"))
        code, err = _main(capsys, *[spec if a == "SPEC" else a for a in argv])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 1 and "is busy: another process has held its write lock" in err, err
    assert "internal error" not in err


@contextmanager
def _immutable(path: Path):
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root on a file system with attributes")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_immutable_store_is_a_sentence(home, tmp_path):
    store, run_id = finished_run(home, b"\n".join(recorded_lines()) + b"\n")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    for name in ("dlscale.db-wal", "dlscale.db-shm"):
        (home / name).unlink(missing_ok=True)
    with _immutable(home / "dlscale.db"):
        for argv in (["status"], ["cancel", run_id], ["run", str(write_spec(tmp_path / "s.toml"))]):
            proc = dlscale(*argv, home=home, timeout=HANG_S)
            assert "internal error" not in proc.stderr, (argv, proc.stderr)
            assert proc.returncode in (0, 1, 2), (argv, proc.stderr)


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_a_full_disk_mid_submission_is_a_sentence(home, tmp_path):
    """RLIMIT_FSIZE stands for a full disk: a write past it fails with EFBIG, as ENOSPC
    would (Python ignores SIGXFSZ). 400 kB lets the store take the 60 runs and fails it
    while they are claimed and handed over (an internal error before)."""
    spec = write_spec(tmp_path / "s.toml")
    spec.write_text(spec.read_text().replace("repetitions = 1", "repetitions = 30"))

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, 400_000))

    proc = subprocess.run(
        [str(BIN / "dlscale"), "run", str(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "DLSCALE_HOME": str(home)},
        timeout=HANG_S,
        preexec_fn=small_files,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    assert "dlscale: error: the store" in proc.stderr, proc.stderr
    assert len(Store(home).runs()) == 60  # stored, then stopped: the claims say by whom


def test_a_folder_named_dlscale_db_is_named_and_rebuilt_aside(home):
    store, run_id = finished_run(home, b"\n".join(recorded_lines()) + b"\n")
    store.close()
    for name in ("dlscale.db", "dlscale.db-wal", "dlscale.db-shm"):
        (home / name).unlink(missing_ok=True)
    (home / "dlscale.db").mkdir()
    assert "is a folder" in store_problem(home)
    proc = dlscale("status", home=home, timeout=HANG_S)
    assert proc.returncode == 1 and "is a folder" in proc.stderr, proc.stderr
    done = dlscale("store", "rebuild", home=home, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert Store(home).run(run_id)["state"] == "COMPLETED"


@pytest.mark.parametrize("name", ["h#frag", "h?mode=rwc", "h%23x"])
def test_a_home_path_with_uri_characters_checks_its_own_store(tmp_path, name):
    home = tmp_path / name
    home.mkdir()
    (home / "dlscale.db").write_bytes(b"not a database at all" * 100)
    before = sorted(tmp_path.iterdir())
    problem = store_problem(home)
    assert problem is not None and "damaged" in problem, problem
    assert sorted(tmp_path.iterdir()) == before  # nothing made outside the home


HOSTILE_FOLDERS = {
    "run.json a list": lambda d: (d / "run.json").write_text("[1, 2]"),
    "run.json deep": lambda d: (d / "run.json").write_text("[" * 100_000 + "]" * 100_000),
    "run.json nodes text": lambda d: _edit_run_json(d, nodes="x" * 1000, ranks_per_node=10**9),
    "run.json training list": lambda d: _edit_run_json(d, training=[1]),
    "run.json a FIFO": lambda d: ((d / "run.json").unlink(), os.mkfifo(d / "run.json")),
    "metrics a FIFO": lambda d: ((d / "metrics.jsonl").unlink(), os.mkfifo(d / "metrics.jsonl")),
    "metrics a folder": lambda d: ((d / "metrics.jsonl").unlink(), (d / "metrics.jsonl").mkdir()),
    "rerun_of a FIFO": lambda d: os.mkfifo(d / "rerun_of"),
    "rerun_of junk": lambda d: (d / "rerun_of").write_text("../../etc\n"),
    "attempts a file": lambda d: (d / "attempts").write_text("x"),
}


def _edit_run_json(d: Path, **fields) -> None:
    data = json.loads((d / "run.json").read_text())
    data.update(fields)
    (d / "run.json").write_text(json.dumps(data))


def test_store_rebuild_over_hostile_run_folders_keeps_every_other_run(tmp_path):
    from tui_text import recorded_study

    home = tmp_path / "home"
    recorded_study(home)
    store = Store(home)
    runs = store.runs()
    good = {r["run_id"] for r in runs}
    store.close()
    template = Path(runs[0]["run_dir"])
    for i, make in enumerate(HOSTILE_FOLDERS.values()):
        folder = home / "runs" / f"{i:012x}"
        folder.mkdir()
        for f in template.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        write_run_file({**runs[0], "run_id": folder.name}, folder, "local")
        make(folder)
    out = rebuild(home, force=True)
    kept = {r["run_id"] for r in Store(home).runs()}
    assert good <= kept, good - kept
    named = " ".join(out.unreadable)
    assert "run.json" in named and "metrics.jsonl" in named, out.unreadable
    proc = dlscale("store", "rebuild", "--force", home=home, timeout=HANG_S)
    assert proc.returncode == 0 and "internal error" not in proc.stderr, proc.stderr
