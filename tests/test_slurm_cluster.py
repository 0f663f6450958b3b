"""Against the real Slurm test clusters: submission, watching, results and every fault the
issue names. Slow: each test waits for real jobs. Tests taking `slurm_target` run on Slurm
22.05 and 25.11 through the commands, and on 25.11 through pyslurm (conftest.SLURM_TARGETS);
the others on 22.05."""

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import HANG_S, REPO, dlscale, write_spec
from dlscale.engine import study
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching.plan import plan
from dlscale.engine.tracking import follow
from dlscale.engine.tracking.monitor import sync
from dlscale.engine.tracking.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"
# quickstart-slurm: 10 steps; one interference record for the run's window
RECORDS = {"params": 1, "env": 1, "interval": 2, "interference": 1, "summary": 1}


def profile_copy(tmp_path, extra="", replace=None):
    text = PROFILE.read_text().replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    if replace:
        text = text.replace(*replace)
    path = tmp_path / "cluster.toml"
    path.write_text(text + extra)
    return path


def slurm_says(job_id: str) -> str:
    """The job's state in Slurm's accounting."""
    return subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True
    ).stdout.strip()


def _what_each_says(store, run_id: str, job_id: str) -> str:
    """A failed wait on a live cluster says what the store and Slurm each hold: the only
    trace CI keeps of a state that a rerun may not reach."""
    run, job = store.run(run_id), store.jobs.get("slurm", job_id)
    nodes = subprocess.run(["sinfo", "-N", "-h"], capture_output=True, text=True).stdout
    return (
        f"run {run['state']} ({run['reason']}); job row {job and job['state']}; "
        f"sacct {slurm_says(job_id)!r}; sinfo {nodes!r}"
    )


def wait_for(predicate, timeout=HANG_S, every=1.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def test_quickstart_on_two_nodes_from_the_command_line(slurm_target, home):
    spec = REPO / "examples" / "quickstart-slurm.toml"
    proc = dlscale(
        "run",
        str(spec),
        "--profile",
        str(PROFILE),
        "--backend",
        slurm_target.backend,
        "--wait",
        check=0,
    )
    via = "pyslurm" if slurm_target.backend == "pyslurm" else "Slurm's commands"
    assert "2 submitted" in proc.stdout and f"via {via}" in proc.stdout
    store = Store(home)
    runs = {r["nodes"]: r for r in store.runs("quickstart-slurm")}
    assert {r["state"] for r in runs.values()} == {"COMPLETED"}
    # the same study gives the same runs and records on every release and backend
    assert sorted(r["run_id"] for r in runs.values()) == sorted(
        r.run_id for r in plan(load_spec(spec)).runs
    )
    for r in runs.values():
        kinds = [rec["kind"] for rec in store.records.of(r["run_id"])]
        assert {k: kinds.count(k) for k in set(kinds)} == RECORDS, (r["nodes"], kinds)
        assert store.jobs.get("slurm", r["job_id"])["state"] == "COMPLETED"  # job ids tracked
    env = store.records.of(runs[2]["run_id"], "env")[0]
    assert env["hostnames"] == ["node1", "node2"] and env["launcher"] == "srun"
    assert env["job_id"] == runs[2]["job_id"]
    run_dir = Path(runs[2]["run_dir"])
    for name in ("job.sh", "run.log", "metrics.jsonl", "spec.toml", "profile.toml"):
        assert (run_dir / name).exists(), name
    rows = json.loads(
        dlscale("results", "-e", "quickstart-slurm", "--format", "json", check=0).stdout
    )
    assert [r["ranks"] for r in rows] == [1, 2] and rows[1]["speedup"] is not None
    # state lives in the store: a fresh process still knows every job
    status = dlscale("status", "--all", check=0).stdout
    assert runs[1]["job_id"] in status and runs[2]["job_id"] in status
    # accounting agrees (slurmdbd may lag the controller by a few seconds)
    assert wait_for(
        lambda: (
            subprocess.run(
                ["sacct", "-P", "-n", "-X", "-j", runs[2]["job_id"], "-o", "State,NNodes"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            == "COMPLETED|2"
        ),
    )


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_sbatch_test_only_accepts_the_rendered_scripts(slurm_cluster, tmp_path, home, launcher):
    from dlscale.engine.launching import jobscript

    spec = write_spec(tmp_path / "s.toml", scales='"2x2"')
    prof = load_profile(profile_copy(tmp_path, f'launcher = "{launcher}"\n'))
    run = plan(load_spec(spec)).runs[0]
    script = tmp_path / "job.sh"
    script.write_text(jobscript.render(run, prof, tmp_path, str(spec)))
    proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


def test_torchrun_launcher_trains_across_two_nodes(slurm_cluster, tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", name="torchrun2", scales='"2x1"')
    prof = profile_copy(tmp_path, 'launcher = "torchrun"\n')
    dlscale("run", str(spec), "--profile", str(prof), "--backend", "slurm", "--wait", check=0)
    run = Store(home).runs("torchrun2")[0]
    env = Store(home).records.of(run["run_id"], "env")[0]
    assert env["launcher"] == "torchrun" and env["world_size"] == 2
    assert sorted(env["hostnames"]) == ["node1", "node2"]


@pytest.mark.parametrize(
    "scale,replace,message",
    [
        ('"3x1"', None, "partition debug has 2 node(s); scale 3x1 asks for 3"),
        ('"1x1"', ('name = "debug"', 'name = "gpu"'), None),
        ('"1x1"', ('time_limit = "00:10:00"', 'time_limit = "10 min"'), "time_limit"),
    ],
)
def test_refused_before_anything_is_submitted(
    slurm_cluster, tmp_path, home, scale, replace, message
):
    spec = write_spec(tmp_path / "s.toml", name="refused", scales=scale)
    prof = profile_copy(tmp_path, replace=replace)
    args = ["run", str(spec), "--profile", str(prof), "--backend", "slurm"]
    if replace and "gpu" in replace[1]:
        args += ["--partition", "debug"]
        message = "unknown partition 'debug'; it has gpu, short"

    # No job was added: compared as sets of ids, since jobs of earlier tests may still be
    # leaving the shared queue meanwhile (after == before would race with them).
    def queued() -> set[str]:
        said = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
        assert said.returncode == 0, said.stderr
        return set(said.stdout.split())

    before = queued()
    proc = dlscale(*args, check=2)
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert Store(home).runs() == []
    assert queued() <= before


def test_sbatch_refusal_is_shown_and_nothing_else_is_lost(slurm_target, tmp_path, home):
    good = write_spec(tmp_path / "g.toml", name="kept", scales='"1x1"')
    dlscale(
        "run",
        str(good),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        slurm_target.backend,
        "--wait",
        check=0,
    )
    bad_prof = profile_copy(
        tmp_path,
        replace=(
            'time_limit = "00:10:00"',
            'time_limit = "00:10:00"\nsbatch_extra = ["--gres=nvme:1"]',
        ),
    )
    bad = write_spec(tmp_path / "b.toml", name="refused-by-sbatch")
    proc = dlscale(
        "run", str(bad), "--profile", str(bad_prof), "--backend", slurm_target.backend, check=1
    )
    assert "Invalid generic resource (gres) specification" in proc.stderr
    store = Store(home)
    # not run: PLANNED with sbatch's words, as docs/running.md says (issue 47)
    assert {r["state"] for r in store.runs("refused-by-sbatch")} == {"PLANNED"}
    said = "sbatch: error" if slurm_target.backend == "slurm" else "Invalid generic resource"
    assert all(f"not submitted: {said}" in r["reason"] for r in store.runs("refused-by-sbatch"))
    kept = store.runs("kept")[0]
    assert kept["state"] == "COMPLETED" and store.records.of(kept["run_id"], "summary")


def test_trainer_crash_is_failed_with_the_log_tail(slurm_cluster, tmp_path, home):
    spec = write_spec(
        tmp_path / "s.toml", name="crash", training='inject_fault = "crash@step2"', scales='"2x1"'
    )
    proc = dlscale(
        "run",
        str(spec),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        "slurm",
        "--wait",
        check=1,
    )
    assert "1 of 1 runs did not complete" in proc.stderr
    run = Store(home).runs("crash")[0]
    assert run["state"] == "FAILED"
    assert "injected fault at step 2" in run["reason"] and "  | " in run["reason"]


def test_time_limit_gives_timeout(slurm_cluster, tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", name="timeout", scales='"1x1"', steps=1000000)
    prof = profile_copy(tmp_path, replace=('time_limit = "00:10:00"', 'time_limit = "1"'))
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(prof),
        "--backend",
        "slurm",
        "--partition",
        "short",
        "--wait",
        check=1,
        timeout=400,
    )
    store = Store(home)
    run = store.runs("timeout")[0]
    assert run["state"] == "TIMEOUT"
    assert store.records.of(run["run_id"], "interval")  # partial results were kept


def test_node_lost_mid_run_is_node_fail(slurm_target, tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", name="nodefail", scales='"2x1"', steps=1000000)
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        slurm_target.backend,
        check=0,
    )
    store = Store(home)
    scheduler = slurm_target.scheduler(squeue_every=1)
    assert wait_for(
        lambda: sync(store, scheduler) and store.runs("nodefail")[0]["state"] == "RUNNING"
    )
    # Both ranks training (the step runs on node2 too) before node2 is lost: stopped while
    # srun is still launching, the launch fails and Slurm itself ends the job FAILED.
    metrics = Path(store.runs("nodefail")[0]["run_dir"]) / "metrics.jsonl"
    assert wait_for(lambda: metrics.exists() and '"interval"' in metrics.read_text())
    try:
        slurm_target.cluster("stop-node", "node2")
        assert wait_for(
            lambda: (
                sync(store, scheduler)
                and store.runs("nodefail")[0]["state"] not in ("RUNNING", "PENDING")
            ),
            timeout=240,
            every=2,
        )
    finally:
        slurm_target.cluster("start-node", "node2")
    run = store.runs("nodefail")[0]
    assert run["state"] == "NODE_FAIL", run
    status = dlscale("status", "-e", "nodefail", check=0).stdout
    assert "NODE_FAIL" in status


def test_controller_down_is_reported_then_recovered(slurm_target, tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", name="ctld", scales='"1x1"', steps=1000000)
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        slurm_target.backend,
        check=0,
    )
    store = Store(home)
    scheduler = slurm_target.scheduler(squeue_every=1, max_failures=2)
    run_id = store.runs("ctld")[0]["run_id"]
    job_id = store.run(run_id)["job_id"]
    assert wait_for(
        lambda: sync(store, scheduler).reachable and store.run(run_id)["state"] == "RUNNING"
    )
    # Training under way before the controller goes: a job whose srun has not yet made its
    # step when slurmctld stops cannot make it, and Slurm ends the job FAILED (seen in CI
    # under load: the run was never live again to be cancelled).
    metrics = Path(store.run(run_id)["run_dir"]) / "metrics.jsonl"
    assert wait_for(lambda: metrics.exists() and '"interval"' in metrics.read_text())
    try:
        slurm_target.cluster("stop-ctld")
        ticks = [sync(store, scheduler) for _ in range(3)]
        assert not ticks[-1].reachable
        # one command's one poll: not answering, said with what the table then shows
        said = dlscale("status", check=0).stderr
        assert "did not answer" in said and "states shown as last seen" in said, said
        assert store.run(run_id)["state"] == "RUNNING"  # nothing was lost or guessed
        assert store.jobs.get("slurm", job_id)["state"] == "RUNNING"
    finally:
        slurm_target.cluster("start-ctld")
    assert wait_for(lambda: sync(store, scheduler).reachable)
    if slurm_target.backend == "pyslurm":
        scheduler.watcher.cancel([job_id])  # `dlscale cancel` would use the commands
    else:
        follow.cancel(store, [run_id])
    assert wait_for(lambda: sync(store, scheduler) and store.run(run_id)["state"] == "CANCELLED"), (
        _what_each_says(store, run_id, job_id)
    )
    assert wait_for(lambda: slurm_says(job_id).startswith("CANCELLED"))
    if slurm_target.backend == "pyslurm":  # the run ended when a poll saw the job end
        assert store.jobs.get("slurm", job_id)["state"] == "CANCELLED"


def test_cancel_by_job_id_and_resubmit(slurm_target, tmp_path, home):
    # Jobs that train until cancelled: a short one resubmitted can end on its own before
    # the cancel reaches it (round 5 of issue 54: Slurm said COMPLETED), and this test is
    # of cancelling a job that is still there.
    spec = write_spec(tmp_path / "s.toml", name="resub", scales='"1x1"', steps=1000000)
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        slurm_target.backend,
        check=0,
    )
    store = Store(home)
    first = store.runs("resub")[0]
    scheduler = slurm_target.scheduler()
    metrics = Path(first["run_dir"]) / "metrics.jsonl"
    assert wait_for(lambda: sync(store, scheduler) and metrics.exists())  # training
    dlscale("cancel", first["run_id"], check=0)
    assert wait_for(lambda: slurm_says(first["job_id"]).startswith("CANCELLED"))
    first = store.run(first["run_id"])
    assert first["state"] == "CANCELLED"
    if slurm_target.backend == "slurm":
        out = dlscale("resubmit", first["run_id"], check=0).stdout
        job = out.split("job ")[-1].strip()
    else:  # `dlscale resubmit` and `cancel` talk through the commands; here, the backend
        [(_, job)] = study.resubmit(store, [first["run_id"]], lambda *_: scheduler)
    assert job != first["job_id"]
    assert wait_for(
        lambda: sync(store, scheduler) and store.run(first["run_id"])["state"] == "RUNNING"
    )
    if slurm_target.backend == "slurm":
        assert "cancelled 1 run(s)" in dlscale("cancel", job, check=0).stdout
    else:
        scheduler.watcher.cancel([job])
    assert wait_for(
        lambda: sync(store, scheduler) and store.run(first["run_id"])["state"] == "CANCELLED"
    )
    assert wait_for(lambda: slurm_says(job).startswith("CANCELLED"))
    if slurm_target.backend == "pyslurm":
        assert store.jobs.get("slurm", job)["state"] == "CANCELLED"
    run_dir = Path(first["run_dir"])
    assert (run_dir / "attempts" / "1" / "metrics.jsonl").exists()
    assert (run_dir / "job.sh").read_text() == (run_dir / "attempts" / "1" / "job.sh").read_text()


def test_metacharacters_in_options_are_never_executed(slurm_target, tmp_path, home):
    marker = Path("/tmp/dlscale-pwned")
    marker.unlink(missing_ok=True)
    hostile = (
        "a'; touch /tmp/dlscale-pwned; echo '$(touch /tmp/dlscale-pwned)`touch /tmp/dlscale-pwned`"
    )
    prof = profile_copy(
        tmp_path,
        replace=(
            'time_limit = "00:10:00"',
            f'time_limit = "00:10:00"\n[env]\nDLSCALE_NOTE = "{hostile}\\nline2"',
        ),
    )
    spec = write_spec(
        tmp_path / "s.toml",
        name="meta",
        training='data_dir = "/nowhere/$(touch /tmp/dlscale-pwned); x"',
        scales='"1x1"',
    )
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(prof),
        "--backend",
        slurm_target.backend,
        "--wait",
        check=0,
    )
    assert Store(home).runs("meta")[0]["state"] == "COMPLETED"
    assert not marker.exists()
