"""The local backend signals only what it started, and nothing of a run outlives it.

Real processes throughout: unrelated `sleep`s stand for processes that were handed a
recorded pid, and a real 2-rank PyTorch DDP run stands for a job whose worker is killed."""

import ast
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HANG_S, dlscale, write_spec
from dlscale.engine.backends.local.processes import TOKEN_VAR, process_mark
from dlscale.engine.launching.plan import Run
from dlscale.engine.paths import RunPaths
from dlscale.engine.tracking.store import Store
from dlscale.trainers.common.records import RecordWriter

REPO = Path(__file__).resolve().parents[1]


def _run() -> Run:
    return Run(
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


def _running_job(home: Path, **job) -> str:
    """A run whose local job the store says is RUNNING, with no worker alive: what a worker
    killed outright (or a reboot) leaves behind."""
    store = Store(home)
    run = _run()
    row = store.add_run(run)
    store.jobs.add(
        "local",
        "local-1",
        run.run_id,
        "PENDING",
        {
            "argv": ["true"],
            "env": {},
            "run_dir": row["run_dir"],
            "log": str(Path(row["run_dir"]) / "run.log"),
        },
    )
    store.jobs.update("local", "local-1", state="RUNNING", started=time.time(), **job)
    store.update_run(run.run_id, state="RUNNING")
    Path(row["run_dir"]).mkdir(parents=True, exist_ok=True)
    Path(row["run_dir"], "run.log").write_text("dlscale: local job local-1 started\n")
    store.close()
    return run.run_id


@pytest.fixture
def bystander():
    """An unrelated process leading a group of its own, as a reused pid would be."""
    procs = []

    def start(**kw):
        procs.append(subprocess.Popen(["sleep", "300"], start_new_session=True, **kw))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _ended_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _alive(proc: subprocess.Popen) -> bool:
    time.sleep(0.2)  # a signal, had one been sent, has landed by now
    return proc.poll() is None


@pytest.mark.parametrize("mark", ["another start", None], ids=["other-start", "old-store"])
def test_status_never_signals_a_stale_pid_and_says_the_worker_was_lost(home, bystander, mark):
    other = bystander()
    worker = _ended_pid()
    fields = {"pid": other.pid}
    if mark:
        fields.update(pid_mark=f"{process_mark(other.pid).split()[0]} 1", worker_pid=worker)
    run_id = _running_job(home, **fields)
    if not mark:  # a store from before marks were kept: the pid alone proves nothing
        conn = sqlite3.connect(home / "dlscale.db")
        for column in ("pid_mark", "worker_pid", "token"):
            conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        conn.commit()
        conn.close()
    out = dlscale("status", "--all", home=home, check=0)
    assert _alive(other), "status signalled a process dlscale did not start"
    run = Store(home).run(run_id)
    assert run["state"] == "FAILED"
    head = run["reason"].split("\n")[0]
    pid = f" (pid {worker} ended)" if mark else ""
    assert head == f"the local worker was lost{pid}; this job's ranks were stopped"
    assert "worker was lost" in out.stdout


def test_cancel_never_signals_a_stale_pid(home, bystander):
    other = bystander()
    run_id = _running_job(home, pid=other.pid, pid_mark="some-boot 1")
    out = dlscale("cancel", "-e", "e", home=home, check=0).stdout
    assert _alive(other)
    # asked first, the local scheduler finds the job's worker gone: the run failed (how it
    # ended), it is not recorded as cancelled
    assert "cancelled 0 run(s)" in out and f"run {run_id} is FAILED" in out, out
    assert Store(home).run(run_id)["state"] == "FAILED"


@pytest.mark.parametrize("ended", ["COMPLETED", "FAILED", "TIMEOUT"])
def test_cancel_keeps_how_a_job_that_ended_on_its_own_ended(home, ended):
    # The job ended (its scheduler recorded it) after the last poll: the run's row still
    # says RUNNING. Cancel asks the scheduler first; recording it CANCELLED would lose a
    # completed run's results (issue 54's round 5, on Slurm).
    run_id = _running_job(home)
    store = Store(home)
    if ended == "COMPLETED":  # it measured: its summary is in its records
        with RecordWriter(str(RunPaths.of(store.run(run_id)).metrics)) as w:
            w.write(
                "summary",
                status="ok",
                throughput=100.0,
                timed_steps=4,
                warmup_steps=1,
                elapsed_s=1.0,
            )
    store.jobs.update("local", "local-1", state=ended, ended=time.time(), exit_code=0)
    out = dlscale("cancel", run_id, home=home, check=0).stdout
    assert "cancelled 0 run(s)" in out and f"run {run_id} is {ended}" in out, out
    assert Store(home).run(run_id)["state"] == ended


def test_a_live_pid_that_leads_no_group_breaks_neither_status_nor_results(home):
    # Its own child, in the test's group: even its true mark must not get its group signalled.
    child = subprocess.Popen(["sleep", "300"])
    try:
        run_id = _running_job(home, pid=child.pid, pid_mark=process_mark(child.pid))
        for command in ("status", "results"):
            proc = dlscale(command, home=home)
            assert proc.returncode == 0 and "internal error" not in proc.stderr, proc.stderr
        assert _alive(child)
        assert Store(home).run(run_id)["reason"].startswith("the local worker was lost")
    finally:
        child.kill()
        child.wait()


def test_what_is_left_of_a_lost_job_is_stopped_and_nothing_else(home, bystander):
    token = "f" * 32
    rank = bystander(env={**os.environ, TOKEN_VAR: token})  # a rank in a session of its own
    launcher = bystander(env={**os.environ, TOKEN_VAR: token})
    unrelated = bystander(env={**os.environ, TOKEN_VAR: "e" * 32})
    _running_job(home, pid=launcher.pid, pid_mark=process_mark(launcher.pid), token=token)
    dlscale("status", home=home, check=0)
    for p in (rank, launcher):
        assert p.wait(timeout=HANG_S) == -signal.SIGKILL
    assert _alive(unrelated)


def test_spawned_ranks_die_with_their_spawner(tmp_path):
    pids = tmp_path / "pids"
    spawner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.common.spawn",
            "--ranks",
            "2",
            "--",
            "sh",
            "-c",
            # outlives any wait below, so a rank left behind is seen, not timed out
            f"echo $$ >> {pids}; exec sleep 3600",
        ],
        start_new_session=True,
    )
    deadline = time.time() + HANG_S
    while time.time() < deadline and len(_read_pids(pids)) < 2:
        time.sleep(0.1)
    ranks = _read_pids(pids)
    assert len(ranks) == 2
    spawner.kill()
    spawner.wait()
    try:
        assert _all_gone(ranks), "a rank outlived the spawner that started it"
    finally:
        for pid in ranks:  # the test's own sleeps, if the spawner left them (not a reused pid)
            with contextlib.suppress(OSError):
                if b"3600" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


def _read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _all_gone(pids: list[int], within: float = HANG_S) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if not [p for p in pids if process_mark(p) and not _zombie(p)]:
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


def _run_processes(run_id: str) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", "--", f"--run-id {run_id}"], capture_output=True, text=True
    ).stdout
    return [int(p) for p in out.split()]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_worker_leaves_no_rank_training(tmp_path, home, sig):
    spec = write_spec(
        tmp_path / "s.toml", scales='"1x2"', steps=100000, name=f"lost-{sig.name.lower()}"
    )
    dlscale("run", str(spec), home=home, check=0)
    store = Store(home)
    (run,) = store.runs()
    metrics = Path(run["run_dir"], "metrics.jsonl")
    deadline = time.time() + HANG_S
    while time.time() < deadline and not metrics.exists():  # both ranks are training
        time.sleep(0.2)
    assert metrics.exists()
    ranks = {p: process_mark(p) for p in _run_processes(run["run_id"])}
    try:
        assert len(ranks) >= 3  # torchrun and its two ranks
        worker = int(
            subprocess.run(
                ["pgrep", "-f", f"local.worker {home}"], capture_output=True, text=True
            ).stdout.split()[0]
        )
        os.kill(worker, sig)
        dlscale("status", home=home, check=0)
        assert _all_gone(list(ranks)), f"ranks still alive: {_run_processes(run['run_id'])}"
        deadline = time.time() + HANG_S
        while time.time() < deadline and store.run(run["run_id"])["state"] == "RUNNING":
            dlscale("status", home=home)
            time.sleep(0.5)
        row = store.run(run["run_id"])
        assert row["state"] == "FAILED"
        what = "was lost" if sig == signal.SIGKILL else "was stopped by SIGTERM"
        assert row["reason"].startswith(f"the local worker {what} (pid {worker}")
        assert row["reason"].split("\n")[0].endswith("; this job's ranks were stopped")
        size = metrics.stat().st_size
        time.sleep(2)
        assert metrics.stat().st_size == size  # nothing writes records for the ended run
    finally:  # what this test started, should the code under test have left it running
        for pid, mark in ranks.items():
            if mark and process_mark(pid) == mark:
                os.kill(pid, signal.SIGKILL)


def test_claiming_a_job_goes_through_the_store(home):
    store = Store(home)
    run = _run()
    store.add_run(run)
    store.jobs.add("local", "local-1", run.run_id, "PENDING", {})
    job = store.jobs.claim_next("local", nodes="localhost", worker_pid=42, token="t")
    assert (job["state"], job["worker_pid"], job["token"]) == ("RUNNING", 42, "t")
    assert job["started"] and store.run(run.run_id)["state"] == "RUNNING"
    assert store.jobs.claim_next("local") is None


def test_only_the_store_runs_sql():
    """The store's tables change only through the store's own modules (its connection, its
    methods and parts, health checks and rebuild)."""
    sql = ("execute", "executemany", "executescript", "transaction")
    found = []
    store = REPO / "engine" / "tracking" / "store"
    for path in (REPO / "engine").rglob("*.py"):
        if path.is_relative_to(store):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in sql:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "sqlite3" in ast.dump(node):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: sqlite3")
    assert found == []


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_a_queued_local_run_has_its_folder_made_when_it_starts(tmp_path, home):
    """Submission writes no file per run (folders_at_start): while the worker is busy the
    queued runs have no folder; when one starts it gets run.json and its spec, and a run
    whose place was taken meanwhile (a file there) fails at its start, saying why, while
    the others still run. A real worker and real trainers."""
    import fcntl
    import json

    from dlscale.engine.backends.local.backend import LOCK_NAME

    spec = write_spec(tmp_path / "s.toml", scales='"1x1", "1x2"', steps=2)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_NAME, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a busy "worker": nothing starts yet
        assert "2 submitted" in dlscale("run", str(spec), check=0).stdout
        rows = sorted(Store(home).runs(), key=lambda r: r["ranks_per_node"])
        assert all(r["state"] == "PENDING" for r in rows)
        assert not any(Path(r["run_dir"]).exists() for r in rows)
        blocked, free = Path(rows[0]["run_dir"]), Path(rows[1]["run_dir"])
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.write_text("someone else's file\n")
    dlscale("status", check=0)  # finds the queue with no worker: starts one
    deadline = time.time() + 300
    while time.time() < deadline:
        states = {r["run_id"]: r for r in Store(home).runs()}
        if all(r["state"] in ("COMPLETED", "FAILED") for r in states.values()):
            break
        time.sleep(1)
    first, second = states[rows[0]["run_id"]], states[rows[1]["run_id"]]
    assert first["state"] == "FAILED" and "cannot lay out the run's folder" in first["reason"]
    assert blocked.read_text() == "someone else's file\n"  # not touched
    assert second["state"] == "COMPLETED", second["reason"]
    record = json.loads((free / "run.json").read_text())
    assert record["run_id"] == rows[1]["run_id"] and record["backend"] == "local"
    assert record["spec_path"] == str(spec.resolve())
    assert (free / "spec.toml").read_text() == spec.read_text()
