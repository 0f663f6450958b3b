"""Job arrays and accounting-less following, on recorded output and plain files: the job
shape, the array script and its index, scontrol's answer, the exit marker."""

import subprocess
from pathlib import Path

import pytest

from dlscale.engine.backends.base import JobRequest
from dlscale.engine.backends.slurm import arrays as slurm_arrays
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import CommandResult, accounting_disabled
from dlscale.engine.backends.slurm.parsing import parse_exit_marker, parse_scontrol_jobs

FIXTURES = Path(__file__).parent / "fixtures" / "slurm-22.05-noacct"
SCRIPT = """#!/bin/bash
# dlscale job for run {rid}: x
#SBATCH --job-name=dlscale-t-{rid}
#SBATCH --partition=debug
#SBATCH --nodes={nodes}
#SBATCH --time=00:10:00
#SBATCH --output={out}/run.log
#SBATCH --open-mode=append
set -euo pipefail
echo "ran {rid} in $PWD with task ${{SLURM_ARRAY_TASK_ID:-none}}"
"""


def test_runs_differing_only_in_name_and_log_share_a_shape():
    a = SCRIPT.format(rid="a", nodes=1, out="/x/a")
    b = SCRIPT.format(rid="b", nodes=1, out="/x/b")
    c = SCRIPT.format(rid="c", nodes=2, out="/x/c")
    assert slurm_arrays.shape(a) == slurm_arrays.shape(b) != slurm_arrays.shape(c)
    assert "#SBATCH --partition=debug" in slurm_arrays.shape(a)


@pytest.mark.parametrize("name", ["plain", "has space", "quote'dollar$(touch PWNED)"])
def test_each_array_task_runs_its_own_run_from_the_index(tmp_path, name):
    """The array script, run by bash as Slurm would run task i, finds run i's folder in
    runs.tsv and runs that run's job.sh; a folder's name is never run as shell."""
    runs = tmp_path / "home" / "runs"
    requests = []
    for i in range(3):
        d = runs / f"{name}{i}"
        d.mkdir(parents=True)
        (d / "job.sh").write_text(SCRIPT.format(rid=f"r{i}", nodes=1, out="/x"))
        requests.append(JobRequest(f"r{i}", d, ["sbatch"]))
    shape = slurm_arrays.shape((runs / f"{name}0" / "job.sh").read_text())
    script = slurm_arrays.write_array(requests, shape)
    for i in range(3):
        out = subprocess.run(
            ["bash", str(script)],
            capture_output=True,
            text=True,
            env={"SLURM_ARRAY_TASK_ID": str(i), "PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr
        assert f"ran r{i} in" in out.stdout and f"task {i}" in out.stdout
        assert (script.parent / "logs" / f"{i}.log").resolve() == (
            runs / f"{name}{i}" / "run.log"
        ).resolve()
    assert not (tmp_path / "PWNED").exists()
    lost = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        env={"SLURM_ARRAY_TASK_ID": "7", "PATH": "/usr/bin:/bin"},
    )
    assert lost.returncode == 2 and "has no run" in lost.stderr


def test_scontrol_answers_without_accounting():
    jobs = parse_scontrol_jobs((FIXTURES / "scontrol-show-job.txt").read_text())
    assert jobs["54"].state == "COMPLETED" and jobs["54"].exit_code == 0
    assert jobs["55"].state == "FAILED" and jobs["55"].exit_code == 3
    assert [jobs[f"56_{i}"].state for i in range(5)] == ["PENDING"] * 5  # held array
    assert jobs["56_0"].reason == "JobHeldUser"
    assert jobs["57"].state == "RUNNING" and jobs["57"].nodes
    assert parse_scontrol_jobs("No jobs in the system\n") == {}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("exit 0\n", ("COMPLETED", 0)),
        ("exit 3\n", ("FAILED", 3)),
        ("exit 143", ("FAILED", 143)),
        ("signal TERM\n", ("CANCELLED", None)),
        ("", None),
        ("exit", None),
        ("exit x", None),
    ],
)
def test_exit_marker(text, expected):
    assert parse_exit_marker(text) == expected


class Replay:
    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, argv, env=None, timeout=60):
        self.calls.append(argv)
        rc, out, err = self.answers[argv[0]]
        return CommandResult(argv, rc, out, err)


def test_a_cluster_without_accounting_is_followed_through_scontrol(tmp_path):
    replay = Replay(
        {
            "sacct": (1, "", (FIXTURES / "sacct.stderr").read_text()),
            "scontrol": (0, (FIXTURES / "scontrol-show-job.txt").read_text(), ""),
            "squeue": (0, "", ""),
        }
    )
    s = SlurmCLI(runner=replay)
    out = s.watcher.poll(["55", "56_3", "99"])
    assert out["55"].state == "FAILED" and out["55"].exit_code == 3
    assert out["56_3"].state == "PENDING" and "99" not in out and s.watcher.last_poll_ok
    assert s.watcher.accounting is False
    replay.calls.clear()
    s.watcher.poll(["56_3", "99"])  # from now on one scontrol call per poll, no sacct
    assert [c[0] for c in replay.calls] == ["scontrol"]
    # a job the controller forgot ends as its marker says
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    row = {"run_id": "r", "run_dir": str(run_dir), "job_id": "99"}
    assert s.watcher.last_word(row) is None
    (run_dir / "job.exit").write_text("exit 7\n")
    status = s.watcher.last_word(row)
    assert status.state == "FAILED" and status.exit_code == 7
    (run_dir / "job.exit").write_text("signal TERM\n")
    assert s.watcher.last_word(row).state == "CANCELLED"
    assert SlurmCLI(runner=replay, accounting=True).watcher.last_word(row) is None  # sacct knows
    assert accounting_disabled("sacct: error: Slurm accounting storage is disabled")
