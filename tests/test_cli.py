"""The `dlscale` command end to end on the local backend, with real trainer runs."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, HANG_S, dlscale, write_spec
from dlscale.engine.tracking.store import Store

REQUIRED = {
    "run_id",
    "experiment",
    "framework",
    "model",
    "dataset",
    "nodes",
    "ranks",
    "per_device_batch",
    "precision",
    "state",
    "throughput",
    "throughput_ci95",
    "speedup",
    "efficiency",
    "baseline_run_id",
    "time_to_accuracy_s",
}


@pytest.mark.slow
def test_run_wait_results_chart_logs_and_rerun(tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", "repetitions = 2")
    spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    proc = dlscale("run", str(spec), "--wait", check=0)
    assert "4 submitted" in proc.stdout
    # piped, with no bar drawn: a line as each run ends (the README's quickstart log)
    ended = [line for line in proc.stderr.splitlines() if re.match(r"[1-4]/4 pytorch-ddp ", line)]
    assert len(ended) == 4 and ended[-1].startswith("4/4 ") and "COMPLETED (" in ended[-1], (
        proc.stderr
    )
    assert "speedup" in proc.stdout and "ideal" in proc.stdout  # table and chart
    rows = json.loads(dlscale("results", "--format", "json", check=0).stdout)
    assert len(rows) == 2 and all(REQUIRED <= set(r) for r in rows)
    one, two = sorted(rows, key=lambda r: r["ranks"])
    assert one["state"] == two["state"] == "COMPLETED" and one["n"] == two["n"] == 2
    assert two["baseline_run_id"] == one["run_id"] == two["run_ids"][0][:0] + one["run_ids"][0]
    assert two["speedup"] == pytest.approx(two["throughput"] / one["throughput"])
    assert two["efficiency"] == pytest.approx(two["speedup"] / 2)
    assert one["throughput_ci95"] is not None
    csv_out = dlscale("results", "--format", "csv", check=0).stdout.splitlines()
    assert csv_out[0].startswith("run_id,") and len(csv_out) == 3
    chart = dlscale("chart", "--metric", "efficiency", check=0).stdout
    assert "efficiency" in chart and "ideal" in chart
    log = dlscale("logs", one["run_id"][:8], check=0)
    assert "dlscale-torch-ddp: resnet20 x1" in log.stdout and "last" not in log.stderr
    short = dlscale("logs", one["run_id"][:8], "-n", "2", check=0)  # says it is a tail
    assert len(short.stdout.splitlines()) == 2
    assert "dlscale: the last 2 lines of" in short.stderr and "--lines N" in short.stderr
    # again: everything is finished, nothing is submitted
    again = dlscale("run", str(spec), "--wait", check=0)
    assert "0 submitted" in again.stdout and "4 completed earlier" in again.stdout
    status = dlscale("status", "--all", check=0).stdout
    assert status.count("COMPLETED") == 4
    # without --all, as its help says, completed runs are counted, not listed, but for
    # those with something to say (here: other work disturbed them, on a busy machine)
    brief = dlscale("status", check=0).stdout
    listed = [line for line in brief.splitlines() if " COMPLETED " in line]
    assert all("disturbed: " in line for line in listed), brief
    hidden = 4 - len(listed)
    assert not hidden or f"{hidden} completed not listed: --all lists them" in brief, brief


@pytest.mark.slow
def test_a_crashing_run_fails_alone_with_its_log_tail(tmp_path, home):
    good = write_spec(tmp_path / "good.toml", name="good")
    bad = write_spec(tmp_path / "bad.toml", name="bad", training='inject_fault = "crash@step2"')
    dlscale("run", str(good), check=0)  # queued first, runs after the bad one? no: in order
    proc = dlscale("run", str(bad), "--wait", check=1)
    assert "2 of 2 runs did not complete" in proc.stderr
    store = Store(home)
    bad_runs = store.runs("bad")
    assert {r["state"] for r in bad_runs} == {"FAILED"}
    reason = bad_runs[0]["reason"]
    assert reason.startswith("dlscale-torch-ddp: error: rank 0: TrainerError: injected fault")
    assert "  | " in reason  # followed by the last lines of the log
    # the other experiment's runs went on and completed, their records kept
    deadline = time.time() + 300
    while time.time() < deadline and any(r["state"] != "COMPLETED" for r in store.runs("good")):
        dlscale("status")
        time.sleep(1)
    assert all(r["state"] == "COMPLETED" for r in store.runs("good"))
    assert all(store.records.of(r["run_id"], "summary") for r in store.runs("good"))
    status = dlscale("status", "-e", "bad", check=0).stdout
    assert "FAILED" in status and "injected fault" in status


@pytest.mark.slow
def test_interrupting_wait_keeps_the_store_and_rerun_resumes(tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", steps=60)
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    # A shell that runs the suite in the background (`nohup scripts/test &`) hands its
    # children SIGINT ignored, and Python then installs no KeyboardInterrupt handler: give
    # the command Ctrl-C's default, as a terminal would.
    proc = subprocess.Popen(
        [str(BIN / "dlscale"), "run", str(spec), "--wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    store = Store(home)

    def training():
        # The trainer's own first record, not the store's RUNNING: --wait polls with a
        # backoff, and on a loaded machine a short run can pass between two polls.
        return any(Path(r["run_dir"], "metrics.jsonl").exists() for r in store.runs())

    deadline = time.time() + HANG_S
    while time.time() < deadline and not training():
        time.sleep(0.1)
    assert proc.poll() is None, "the runs finished before the test could interrupt the wait"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    assert "stopped waiting" in err and "Traceback" not in err
    states = [r["state"] for r in store.runs()]
    assert set(states) <= {"PENDING", "RUNNING", "COMPLETED"} and len(states) == 2
    again = dlscale("run", str(spec), "--wait", check=0)
    assert "0 submitted" in again.stdout
    assert [r["state"] for r in store.runs()] == ["COMPLETED", "COMPLETED"]


@pytest.mark.slow
def test_cancel_stops_a_running_run(tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", steps=100000)
    dlscale("run", str(spec), check=0)
    store = Store(home)
    deadline = time.time() + HANG_S
    while time.time() < deadline and not store.runs(states=("RUNNING",)):
        time.sleep(0.2)
    out = dlscale("cancel", "--experiment", "t", check=0).stdout
    assert "cancelled 2 run(s)" in out
    deadline = time.time() + HANG_S
    while time.time() < deadline and store.jobs.find("local", states=("RUNNING",)):
        time.sleep(0.5)
    assert not store.jobs.find("local", states=("RUNNING",))
    assert {r["state"] for r in store.runs()} == {"CANCELLED"}
    # The job is marked at once; its processes take a moment to go (SIGTERM, then torchrun
    # stops its ranks), and must all be gone within the launcher's grace period.
    pattern = f"--run-id {store.runs()[0]['run_id']}"
    deadline = time.time() + HANG_S
    while time.time() < deadline and subprocess.run(["pgrep", "-f", "--", pattern]).returncode == 0:
        time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", "--", pattern]).returncode == 1


def test_exit_codes(tmp_path, home):
    assert dlscale("frobnicate").returncode == 2
    assert dlscale("results", "--format", "xml").returncode == 2
    proc = dlscale("logs", "nosuchrun", check=2)
    assert "no run 'nosuchrun'" in proc.stderr
    spec = write_spec(tmp_path / "s.toml", scales='"1x512"')
    proc = dlscale("run", str(spec), check=2)
    assert "512 ranks x 1 thread(s) need 512 cores" in proc.stderr
    spec.write_text(spec.read_text().replace('"1x512"', '"2x1"'))
    assert "needs 2 nodes" in dlscale("plan", str(spec), check=2).stderr
    assert dlscale("results", check=0).stdout  # an empty store is not an error
    assert dlscale("cancel").returncode == 2


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_plan_counts_runs_without_submitting(tmp_path, home):
    spec = write_spec(tmp_path / "s.toml")
    out = dlscale("plan", str(spec), check=0).stdout
    assert "2 runs: 2 to run, 0 completed earlier; 3 devices in all" in out
    assert "time unknown" in out
    assert Store(home).runs() == []
