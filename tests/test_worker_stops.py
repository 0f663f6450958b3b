"""A local worker that cannot write says why (issue 33): with the home's disk full, or the
store held locked by another process, the worker started for pending runs stops at its
first write; `dlscale status`, `run --wait` (the watcher's tick) and the TUI (the session's
snapshot) say why within seconds, the runs wait pending, and the next command that can
write starts a worker that takes them. The disk is a small tmpfs, mounted as root."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import HANG_S, _stop_workers, dlscale, write_spec
from dlscale.engine import study
from dlscale.engine.backends.local.backend import LocalBackend
from dlscale.engine.config.spec import load_spec
from dlscale.engine.tracking.store import Store

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="the full disk is a small tmpfs, mounted as root"),
]


@pytest.fixture
def disk(tmp_path):
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], check=True)
    yield where
    _stop_workers(where / "home")  # a worker this test started, by its pid
    subprocess.run(["umount", "-l", str(where)])


def pending(home: Path, spec: Path) -> Store:
    """Two runs queued on the local backend, no worker started; their jobs run `true`, so
    a worker that takes them trains nothing. The store stays open (its -wal and -shm there,
    as while any front end has it open) with nothing in its write-ahead log."""
    store = Store(home)
    study.submit(store, load_spec(write_spec(spec)), LocalBackend(store, start_worker=False))
    store.conn.execute(
        """UPDATE jobs SET payload = json_set(payload, '$.argv', json('["true"]'))"""
    )
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store


def fill(disk: Path) -> Path:
    filler = disk / "fill"
    with open(filler, "ab", buffering=0) as fh:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    return filler


@pytest.mark.torch
def test_a_worker_on_a_full_disk_says_why_and_the_runs_wait(disk):
    from dlscale.engine.session import Session
    from dlscale.engine.tracking.monitor import sync

    home = disk / "home"
    store = pending(home, disk / "s.toml")
    filler = fill(disk)
    started = time.monotonic()
    proc = dlscale("status", home=home, timeout=60)
    assert proc.returncode == 0 and "2 pending" in proc.stdout, (proc.stdout, proc.stderr)
    assert "the local worker cannot run" in proc.stderr and "disk" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 30  # seconds, not a silent wait for ever
    # run --wait's tick and the TUI's snapshot carry the same sentence
    tick = sync(store, LocalBackend(store))
    assert tick.problem and "disk holding it is full" in tick.problem, tick
    session = Session.open(str(home), None, None, None, "--home")
    snap = session.refresh(None)
    assert snap.problem and "cannot run" in snap.problem, snap
    assert store.state_counts() == {"PENDING": 2}
    # room again: the next command starts a worker that takes them
    filler.unlink()
    proc = dlscale("status", home=home, timeout=HANG_S)
    assert proc.returncode == 0 and "cannot run" not in proc.stderr, proc.stderr
    deadline = time.monotonic() + HANG_S
    while "PENDING" in store.state_counts() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "PENDING" not in store.state_counts(), store.state_counts()
    store.close()


@pytest.mark.torch
def test_a_store_held_locked_is_named_while_the_worker_waits(disk):
    home = disk / "home"
    pending(home, disk / "s.toml").close()
    holder = sqlite3.connect(home / "dlscale.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write, held
    try:
        proc = dlscale("status", home=home, timeout=HANG_S)
        assert proc.returncode == 0 and "2 pending" in proc.stdout, proc.stderr
        assert "is locked by another process" in proc.stderr, proc.stderr
    finally:
        holder.rollback()
        holder.close()
