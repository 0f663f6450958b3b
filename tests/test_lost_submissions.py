"""Issue 22, item 5: one job per run when Slurm's answer to a submission is lost. sbatch that
times out after the controller took the job, and dlscale killed between Slurm's acceptance
and recording the job, both made a second job for the run. Every submission now carries a
token in the job's comment, the queue is asked for it before any retry or resubmission, and
what is found is adopted. Real `dlscale` processes against a fake sbatch/squeue that keeps
the jobs it accepted (tests/fake_slurm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import fake_slurm
import pytest

from conftest import BIN, HANG_S, REPO, dlscale, write_spec
from dlscale.engine.backends.base import JobRequest
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import CommandResult
from dlscale.engine.errors import ControllerUnreachable
from dlscale.engine.tracking.store import Store

PROFILE = str(REPO / "examples" / "clusters" / "test-cluster.toml")


@pytest.fixture
def fake(tmp_path, monkeypatch, home):
    state = tmp_path / "slurm-state"
    state.mkdir()
    fake_slurm.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    return state


def _spec(tmp_path, runs):
    """`runs` repetitions of one scale: one job, or a job array of them."""
    spec = write_spec(tmp_path / "s.toml", scales='"1x1"')
    spec.write_text(spec.read_text().replace("repetitions = 1\n", f"repetitions = {runs}\n"))
    return spec


def _run(spec, *extra):
    return dlscale("run", str(spec), "--backend", "slurm", "--profile", PROFILE, *extra)


def _one_job_per_run(home, state):
    made = fake_slurm.jobs(state)
    recorded = {j["job_id"].split("_")[0] for j in Store(home).jobs.find("slurm")}
    assert {j["id"] for j in made} == recorded, (made, recorded)
    return made


@pytest.mark.parametrize("runs", [1, 3], ids=["job", "array"])
def test_an_sbatch_that_times_out_after_taking_the_job_is_not_retried_blindly(
    tmp_path, home, fake, monkeypatch, runs
):
    monkeypatch.setenv("FAKE_SBATCH", "timeout-once")
    spec = _spec(tmp_path, runs)
    proc = _run(spec)
    assert proc.returncode == 0, proc.stderr
    made = _one_job_per_run(home, fake)
    assert len(made) == 1  # one job (or one array) although sbatch's answer was lost
    assert made[0]["comment"].startswith("dlscale:")
    assert (made[0]["array"] is not None) == (runs > 1)
    assert len(Store(home).runs()) == runs
    assert {r["state"] for r in Store(home).runs()} == {"PENDING"}


def _killed_submission(spec, state, sig):
    """`dlscale run SPEC` killed by `sig` after Slurm took the job, before it recorded it."""
    env = {**os.environ, "FAKE_SBATCH": "hang"}
    proc = subprocess.Popen(
        [str(BIN / "dlscale"), "run", str(spec), "--backend", "slurm", "--profile", PROFILE],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not (state / "accepted").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.pid


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("runs", [1, 3], ids=["job", "array"])
def test_dlscale_killed_between_acceptance_and_recording_adopts_the_job_next_time(
    tmp_path, home, fake, runs, sig
):
    spec = _spec(tmp_path, runs)
    _killed_submission(spec, fake, sig)
    # the job exists, and the store does not know it
    assert len(fake_slurm.jobs(fake)) == 1 and Store(home).jobs.find("slurm") == []
    again = _run(spec)
    assert again.returncode == 0, again.stderr
    assert "adopted" in again.stdout
    made = _one_job_per_run(home, fake)
    assert len(made) == 1
    runs_now = Store(home).runs()
    assert {r["state"] for r in runs_now} == {"PENDING"}
    assert {r["attempts"] for r in runs_now} == {1}
    # and cancel reaches it
    dlscale("cancel", "--experiment", "t", check=0)
    assert {j["state"] for j in fake_slurm.jobs(fake)} == {"CANCELLED"}


@pytest.mark.parametrize("reader", ["status", "results", "report", "session"])
def test_every_reader_of_the_queue_releases_a_dead_submitters_claim(
    tmp_path, home, fake, reader, monkeypatch
):
    """Item 6: after SIGKILL during sbatch, `SUBMITTING ... by dlscale pid N` lived for ever
    where no backend had live jobs (claims were released only inside a sync)."""
    spec = _spec(tmp_path, 1)
    pid = _killed_submission(spec, fake, signal.SIGKILL)
    assert {r["state"] for r in Store(home).runs()} == {"SUBMITTING"}
    if reader == "session":
        from dlscale.engine.session import Session

        rows = Session(home).refresh(None).rows
        assert [q.state for q in rows] == ["PLANNED"]
    elif reader == "report":
        monkeypatch.chdir(tmp_path)
        dlscale(reader, "--out", str(tmp_path / "r"))
    else:
        shown = dlscale(reader, check=0).stdout
        assert reader != "status" or ("PLANNED" in shown and "SUBMITTING" not in shown)
    (row,) = Store(home).runs()
    assert row["state"] == "PLANNED"
    assert f"the submission by dlscale pid {pid} " in row["reason"]
    assert "interrupted" in row["reason"]


def test_a_lost_answer_with_an_unreachable_queue_is_not_retried(tmp_path):
    """Whether the job exists cannot be known: no second sbatch; the error says why."""
    calls = []

    def runner(argv, env=None, timeout=60):
        calls.append(argv[0])
        return CommandResult(argv, 1, "", f"{argv[0]}: error: Socket timed out on send/recv")

    backend = SlurmCLI(runner=runner, sleep=lambda s: None)
    with pytest.raises(ControllerUnreachable, match="not retried"):
        backend.submit(JobRequest("r", tmp_path / "runs" / "r", []))
    assert calls == ["sbatch", "squeue"]


def test_a_real_sbatch_whose_answer_is_lost_makes_one_job(slurm_cluster, tmp_path, home):
    """The issue's case on the real 22.05 test cluster: sbatch takes the job, then its
    answer is lost ("Socket timed out"). The real squeue finds the job by its comment; no
    second job is made. Costs a few seconds once the cluster is up."""
    from test_slurm_cluster import profile_copy

    from dlscale.engine.backends.slurm.common import user_name

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{tmp_path}/timed-out" ]; then exec /usr/bin/sbatch "$@"; fi\n'
        f'touch "{tmp_path}/timed-out"\n'
        '/usr/bin/sbatch "$@" >/dev/null\n'
        'echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv '
        'operation" >&2\nexit 1\n'
    )
    sbatch.chmod(0o755)
    name = f"lost-answer-{time.time_ns()}"  # its jobs told apart from any earlier test's
    spec = write_spec(tmp_path / "s.toml", name=name, scales='"1x1"', steps=100000)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            str(BIN / "dlscale"),
            "run",
            str(spec),
            "--backend",
            "slurm",
            "--profile",
            str(profile_copy(tmp_path)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert proc.returncode == 0, proc.stderr
        (row,) = Store(home).runs(name)
        queue = subprocess.run(
            ["squeue", "--noheader", "--user", user_name(), "--format=%i|%j|%k"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        # every job of the run, by its name (which the script sets, tag or not)
        ours = [ln.split("|")[0] for ln in queue.splitlines() if f"dlscale-{name}-" in ln]
        assert ours == [row["job_id"]], (queue, row["job_id"])
        assert f"dlscale:{row['run_id']}" not in queue and row["run_id"] in queue  # its tag
    finally:
        dlscale("cancel", "--experiment", name, check=0)


def test_only_this_homes_live_tagged_jobs_are_adopted(tmp_path):
    """Tags of another home, finished jobs and other comments are never taken; an array's
    tasks map to runs through its runs.tsv."""
    from dlscale.engine.backends.slurm import tags as slurm_tags
    from dlscale.engine.backends.slurm.parsing import parse_tagged

    home, other = tmp_path / "home", tmp_path / "other"
    (home / "arrays" / "A").mkdir(parents=True)
    (home / "arrays" / "A" / "runs.tsv").write_text("0\tr1\t/x/r1\n1\tr2\t/x/r2\n")
    mine, theirs = slurm_tags.home_tag(home), slurm_tags.home_tag(other)
    squeue = "\n".join(
        [
            f"10|PENDING|dlscale:{mine}:r0:aa",
            f"11|RUNNING|dlscale:{theirs}:r3:bb",  # the same run id from another home
            f"12|COMPLETED|dlscale:{mine}:r4:cc",  # finished: submitted again instead
            f"13|PENDING|dlscale:{mine}:array-A:dd",
            "14|PENDING|someone's | own comment",
            "15|PENDING|",
            "",
            "garbage line",
        ]
    )

    jobs = [slurm_tags.Tagged(*row) for row in parse_tagged(squeue)]
    found = slurm_tags.orphans(jobs, home, ["r0", "r1", "r2", "r3", "r4", "r9"])
    assert found == {"r0": "10", "r1": "13_0", "r2": "13_1"}
    assert slurm_tags.find(jobs, f"dlscale:{mine}:r0:aa") == "10"
    assert slurm_tags.find(jobs, f"dlscale:{mine}:r0:zz") is None
