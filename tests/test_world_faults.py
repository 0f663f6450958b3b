"""What a user's world can hold that dlscale must survive (issue 22, item 13): a home its
job scripts cannot carry is refused before any run is stored; a damaged store's pid of
2^31 is never passed to a system call; --out or --prefix naming a device or a FIFO is
exit 2; an immutable figures/ is a sentence; and a home copied elsewhere works on its own
folders, never writing into the home it was copied from."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest
from test_local_backend import _running_job

from conftest import HANG_S, REPO, dlscale, write_spec
from dlscale.engine.backends.local.backend import LOCK_NAME
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


def test_a_home_a_job_script_cannot_carry_is_refused_before_runs_are_stored(tmp_path):
    home = tmp_path / "my home"
    spec = write_spec(tmp_path / "s.toml")
    proc = dlscale("run", str(spec), "--profile", str(PROFILE), home=home, timeout=HANG_S)
    assert proc.returncode == 2 and "set DLSCALE_HOME" in proc.stderr, proc.stderr
    assert Store(home).runs() == []


@pytest.mark.parametrize("pid", [2**31, 2**63 - 1, -5, "12x"])
def test_a_damaged_stores_pid_breaks_neither_status_nor_cancel(home, pid):
    run_id = _running_job(home, pid=pid, pid_mark="some-boot 1")
    for argv in (["status"], ["cancel", run_id]):
        proc = dlscale(*argv, home=home, timeout=HANG_S)
        assert proc.returncode == 0 and "internal error" not in proc.stderr, proc.stderr


def test_out_and_prefix_that_are_not_folders_are_refused(tmp_path, home):
    exp = recorded_study(home)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for bad in ("/dev/null", str(fifo), str(loop)):
        for argv in (
            ["export", "mllog", "-e", exp, "--out", bad],
            ["report", "-e", exp, "--out", bad],
            ["env", "create", "pytorch-ddp", "--prefix", bad],
        ):
            proc = dlscale(*argv, home=home, timeout=HANG_S)
            assert proc.returncode == 2 and "not a folder" in proc.stderr, (argv, proc.stderr)


def test_an_immutable_figures_folder_is_a_sentence(tmp_path, home):
    exp = recorded_study(home)
    out = tmp_path / "report"
    dlscale("report", "-e", exp, "--out", str(out), home=home, check=0, timeout=HANG_S)
    figures = out / "figures"
    if subprocess.run(["chattr", "+i", str(figures)], capture_output=True).returncode:
        pytest.skip("chattr +i needs root on a file system with attributes")
    try:
        proc = dlscale("report", "-e", exp, "--out", str(out), home=home, timeout=HANG_S)
    finally:
        subprocess.run(["chattr", "-i", str(figures)], check=True)
    assert "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_resubmitting_in_a_copied_home_writes_only_into_the_copy(tmp_path):
    """The worker is kept from starting (its lock held), so the jobs only queue: what is
    checked is where the resubmission points them and what it moves."""
    first, copy = tmp_path / "first", tmp_path / "copy"
    spec = write_spec(tmp_path / "s.toml", scales='"1x1"')
    with ExitStack() as held:
        for home in (first, copy):
            home.mkdir()
            fcntl.flock(held.enter_context(open(home / LOCK_NAME, "a+")), fcntl.LOCK_EX)
        dlscale("run", str(spec), home=first, check=0, timeout=HANG_S)
        dlscale("cancel", "-e", "t", home=first, check=0, timeout=HANG_S)
        first_store = Store(first)
        (run,) = first_store.runs()
        first_store.close()  # its SQLite files (-wal, -shm) gone now, not when collected
        run_dir = Path(run["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.log").write_text("the first home's log\n")
        shutil.copytree(first, copy, dirs_exist_ok=True)
        before = sorted(p.relative_to(first) for p in first.rglob("*"))
        dlscale("resubmit", run["run_id"], home=copy, check=0, timeout=HANG_S)
        after = sorted(p.relative_to(first) for p in first.rglob("*"))
    assert after == before  # nothing moved or made in the first home
    store = Store(copy)
    row = store.run(run["run_id"])
    assert row["run_dir"] == str(copy / "runs" / run["run_id"]) and row["attempts"] == 2
    payload = store.jobs.get("local", row["job_id"])["payload"]
    assert str(first) + os.sep not in payload, json.loads(payload)
    assert (copy / "runs" / run["run_id"] / "attempts" / "1" / "run.log").is_file()
