"""Job arrays, waves and clusters without accounting, against real Slurm test clusters: the
shared ones (accounting, arrays limited by the profile) and those
`tests/slurm/cluster [--slurm 25.11] --no-accounting up` starts (no slurmdbd, MaxArraySize
10)."""

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HANG_S, REPO, dlscale, skip_without_pyslurm, start_release, write_spec
from dlscale.engine import study
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import run_command
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.runs import ACTIVE, State
from dlscale.engine.tracking import follow
from dlscale.engine.tracking.monitor import sync
from dlscale.engine.tracking.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


def profile_copy(tmp_path, top=""):
    """The test cluster's profile; `top` lines go before its first table."""
    text = PROFILE.read_text().replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    text = text.replace('time_limit = "00:10:00"\n', f'time_limit = "00:10:00"\n{top}\n')
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


class Counting:
    """The real runner, counting what it ran."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv, env=None, timeout=60):
        self.calls.append(list(argv))
        return run_command(argv, env, timeout)

    def sbatch(self):
        return [c for c in self.calls if c[0] == "sbatch"]


def wait_for(predicate, timeout=600, every=2.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def settle(store, backend, experiment, timeout=900):
    """Sync (which submits waves) until no run of the experiment is queued, running or
    waiting."""
    assert wait_for(
        lambda: (
            sync(store, backend, experiment)
            and not [r for r in store.runs(experiment) if r["state"] in ACTIVE + (State.WAITING,)]
        ),
        timeout,
    ), {r["run_id"]: r["state"] for r in store.runs(experiment)}


def assert_own_records(store, row):
    kinds = [rec["kind"] for rec in store.records.of(row["run_id"])]
    assert kinds.count("params") == 1 and kinds.count("env") == 1, kinds
    assert kinds.count("summary") == 1 and kinds.count("interval") >= 1, kinds
    env = store.records.of(row["run_id"], "env")[0]
    assert env["job_id"] == row["job_id"]  # the array task, as dlscale tracks it
    log = (Path(row["run_dir"]) / "run.log").read_text()
    assert f"of run {row['run_id']} on" in log  # its own log, in its own folder


# (release, backend) pairs the tests of clusters without accounting run on: pyslurm only
# through the command line, a process of its own (pyslurm binds to the first cluster its
# process imports it with)
NOACCT_TARGETS = [("22.05", "slurm"), ("25.11", "slurm"), ("25.11", "pyslurm")]


@pytest.fixture(scope="module")
def noacct_clusters():
    """Each release's cluster without slurmdbd, with MaxArraySize 10, apart from the
    shared ones (its own state dir and ports), started when a test first needs it."""
    started: dict[str, object] = {}

    def start(release):
        if release not in started:
            started[release] = start_release(release, "--no-accounting")
        return started[release]

    return start


@pytest.fixture
def noacct(request, noacct_clusters, monkeypatch):
    """The backend's name on a cluster without accounting (22.05 and the commands unless
    parametrized), its environment set for this test."""
    release, backend = getattr(request, "param", ("22.05", "slurm"))
    if backend == "pyslurm":
        skip_without_pyslurm()
    for name, value in noacct_clusters(release).env.items():
        monkeypatch.setenv(name, value)
    return backend


def each_noacct_target(test):
    return pytest.mark.parametrize(
        "noacct", NOACCT_TARGETS, indirect=True, ids=[f"{r}-{b}" for r, b in NOACCT_TARGETS]
    )(test)


def test_twelve_runs_go_as_arrays_and_one_cancelled_task_stays_cancelled(
    slurm_cluster, tmp_path, home
):
    # two job shapes (1 node x 1 rank, 1 node x 2 ranks), 6 runs each; arrays of 4 at most,
    # one task of each at a time (so a task cancelled just after submission has not started)
    spec = write_spec(
        tmp_path / "s.toml",
        name="twelve",
        scales='"1x1", "1x2"',
        steps=2,
        experiment="repetitions = 6\nmax_concurrent = 1",
    )
    spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    store = Store(home)
    runner = Counting()
    backend = SlurmCLI(
        profile=load_profile(profile_copy(tmp_path, "max_array_size = 4")),
        home=store.home,
        runner=runner,
    )
    report = study.submit(store, load_spec(spec), backend)
    assert len(report.submitted) == 12 and not report.waiting and not report.failed_to_submit
    calls = runner.sbatch()
    assert len(calls) == 2 * math.ceil(6 / 4)  # per shape: ceil(runs / array limit)
    sizes = sorted(int(c[c.index("--array") + 1].split("%")[0].split("-")[1]) + 1 for c in calls)
    assert sizes == [2, 2, 4, 4]
    assert all(c[c.index("--array") + 1].endswith("%1") for c in calls)  # the throttle
    rows = store.runs("twelve")
    assert all("_" in r["job_id"] for r in rows)
    assert len({r["job_id"] for r in rows}) == 12
    # one run mid-array: its task alone is cancelled
    victim = next(r for r in rows if r["job_id"].endswith("_2"))
    assert follow.cancel(store, [victim["run_id"]]) == [victim["run_id"]]
    settle(store, backend, "twelve")
    rows = {r["run_id"]: r for r in store.runs("twelve")}
    assert rows.pop(victim["run_id"])["state"] == "CANCELLED"
    assert {r["state"] for r in rows.values()} == {"COMPLETED"}
    for row in rows.values():
        assert_own_records(store, row)
    # it never ran (22.05 keeps no accounting row of its own for a task cancelled before it
    # left the array's pending remainder), while the tasks after it did
    said = subprocess.run(  # checked: a failed sacct's empty answer would prove nothing
        ["sacct", "-n", "-X", "-P", "-j", victim["job_id"], "-o", "State"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "COMPLETED" not in said and "RUNNING" not in said, said
    assert not (Path(victim["run_dir"]) / "metrics.jsonl").exists()


def test_waves_respect_max_array_size_and_the_job_limit(noacct, tmp_path, home):
    spec = write_spec(
        tmp_path / "s.toml", name="waves", scales='"1x1"', steps=2, experiment="repetitions = 16"
    )
    spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    store = Store(home)
    runner = Counting()
    backend = SlurmCLI(
        profile=load_profile(profile_copy(tmp_path, "max_jobs = 12")),
        home=store.home,
        runner=runner,
        wave_every=0,
    )
    report = study.submit(store, load_spec(spec), backend)
    # the site's MaxArraySize (10) splits the first wave; the job limit (12) ends it
    assert len(report.submitted) == 12 and len(report.waiting) == 4
    waiting = store.runs("waves", states=(State.WAITING,))
    assert len(waiting) == 4 and all("MaxArraySize 10" in r["reason"] for r in waiting)
    # a waiting run cancelled is never submitted
    skipped = waiting[-1]
    assert follow.cancel(store, [skipped["run_id"]]) == [skipped["run_id"]]
    settle(store, backend, "waves")
    rows = {r["run_id"]: r for r in store.runs("waves")}
    assert rows.pop(skipped["run_id"])["state"] == "CANCELLED"
    assert {r["state"] for r in rows.values()} == {"COMPLETED"}
    for row in rows.values():
        assert_own_records(store, row)
    tasks = []
    for c in runner.sbatch():
        first, last = (
            c[c.index("--array") + 1].split("%")[0].split("-") if "--array" in c else ("0", "0")
        )
        tasks.append(int(last) - int(first) + 1)
    assert max(tasks) <= 10 and sum(tasks) == 15
    assert len(tasks) > math.ceil(15 / 10)  # more than one wave was needed


@each_noacct_target
def test_quickstart_without_accounting(noacct, home):
    spec = REPO / "examples" / "quickstart-slurm.toml"
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(PROFILE),
        "--backend",
        noacct,
        "--wait",
        check=0,
        timeout=400,
    )
    store = Store(home)
    rows = store.runs("quickstart-slurm")
    assert len(rows) == 2 and {r["state"] for r in rows} == {"COMPLETED"}
    for r in rows:
        assert store.jobs.get("slurm", r["job_id"])["state"] == "COMPLETED"
        assert (Path(r["run_dir"]) / "job.exit").read_text().strip() == "exit 0"
        assert len(store.records.of(r["run_id"], "summary")) == 1


def ended_and_forgotten(row) -> Path:
    """Waits until the run's job has written its end marker and the controller has
    forgotten the job (MinJobAge 10 s on the test clusters); the marker's path.

    Forgotten is proven, not inferred: the controller must answer for this job id that it
    has no such job. An scontrol that failed (a controller slow under load: "Socket timed
    out") printed nothing, which an absent job id in its output could not tell from a
    forgotten job; the sync after it then still found the job in the queue, settled it
    from there and never asked whether the cluster keeps accounting (issue 22, item 14)."""
    marker = Path(row["run_dir"]) / "job.exit"
    assert wait_for(marker.exists, HANG_S, every=1)

    def forgotten() -> bool:
        said = subprocess.run(
            ["scontrol", "-o", "show", "job", str(row["job_id"])], capture_output=True, text=True
        )
        return said.returncode != 0 and "Invalid job id" in said.stderr

    assert wait_for(forgotten, HANG_S)
    return marker


# One sync through pyslurm in a process of its own; prints whether it found accounting.
SYNC_BY_PYSLURM = """
import sys
from dlscale.engine.backends.slurm.pyslurm.backend import PyslurmBackend
from dlscale.engine.tracking.monitor import sync
from dlscale.engine.tracking.store import Store
store = Store(sys.argv[1])
backend = PyslurmBackend(home=store.home)
sync(store, backend)
print(backend.watcher.accounting)  # None: nothing made it ask
"""


def state_after_sync(store, run_id, backend) -> tuple[str, str]:
    """The run's state after a sync in a fresh process, which learns from the cluster, not
    from this test, that there is no accounting: through pyslurm for pyslurm, else
    `dlscale status`. With what pyslurm found of accounting."""
    if backend != "pyslurm":
        dlscale("status", "--all", check=0)
        return store.run(run_id)["state"], ""
    found = subprocess.run(
        [sys.executable, "-c", SYNC_BY_PYSLURM, str(store.home)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    return store.run(run_id)["state"], found.stdout.strip()


@each_noacct_target
def test_failed_and_cancelled_runs_without_accounting(noacct, tmp_path, home):
    crash = write_spec(
        tmp_path / "c.toml", name="crash", scales='"1x1"', training='inject_fault = "crash@step2"'
    )
    slow = write_spec(tmp_path / "l.toml", name="slow", scales='"1x1"', steps=1000000)
    prof = str(profile_copy(tmp_path))

    def submit(spec):
        dlscale("run", str(spec), "--profile", prof, "--backend", noacct, check=0)

    store = Store(home)
    submit(slow)
    [cancelled] = store.runs("slow")
    assert wait_for(
        lambda: state_after_sync(store, cancelled["run_id"], noacct)[0] == "RUNNING", 180
    )
    assert "cancelled 1 run(s)" in dlscale("cancel", cancelled["run_id"], check=0).stdout
    # The crash goes in only now: every sync above settles every live run, and one that saw
    # the crash end while the controller still held it would never need to ask about
    # accounting (the CI failure of 2026-11-26 under load).
    submit(crash)
    [failed] = store.runs("crash")
    # the crash ends; nobody asks until the controller has forgotten it (MinJobAge 10 s):
    # its end comes from the marker its job script wrote
    marker = ended_and_forgotten(failed)
    assert store.run(failed["run_id"])["state"] in ACTIVE  # nothing settled it yet
    state, accounting = state_after_sync(store, failed["run_id"], noacct)
    assert state == "FAILED", store.run(failed["run_id"])
    if noacct == "pyslurm":  # learnt from the controller's config, not the profile
        assert accounting == "False"
    code = int(marker.read_text().split()[1])
    assert code != 0 and store.jobs.get("slurm", failed["job_id"])["exit_code"] == code
    assert "injected fault at step 2" in store.run(failed["run_id"])["reason"]
    assert wait_for(
        lambda: state_after_sync(store, cancelled["run_id"], noacct)[0] == "CANCELLED", 60
    )


ON_25_11 = [("25.11", "slurm"), ("25.11", "pyslurm")]


@pytest.mark.parametrize(
    "slurm_target", ON_25_11, indirect=True, ids=[f"{r}-{b}" for r, b in ON_25_11]
)
def test_arrays_waves_and_one_cancelled_task_on_25_11(slurm_target, tmp_path, home):
    """The same arrays, waves and per-task cancel on Slurm 25.11, by its commands and by
    pyslurm (the 60-run study above runs on 22.05): 12 runs of one shape, arrays of 5 at
    most, 8 queued jobs at most, 2 tasks of an array running at once."""
    spec = write_spec(
        tmp_path / "s.toml",
        name="arr",
        scales='"1x1"',
        steps=2,
        experiment="repetitions = 12\nmax_concurrent = 2",
    )
    spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    store = Store(home)
    # room for 8 more than whatever else this user has queued on the shared cluster
    others = slurm_target.scheduler().queued_tasks()
    backend = slurm_target.scheduler(
        profile=load_profile(
            profile_copy(tmp_path, f"max_array_size = 5\nmax_jobs = {others + 8}")
        ),
        home=store.home,
        wave_every=0,
    )
    report = study.submit(store, load_spec(spec), backend)
    assert len(report.submitted) == 8 and len(report.waiting) == 4, report.failed_to_submit
    rows = [r for r in store.runs("arr") if r["job_id"]]
    sizes: dict[str, int] = {}
    for r in rows:
        sizes[r["job_id"].split("_")[0]] = sizes.get(r["job_id"].split("_")[0], 0) + 1
    assert sorted(sizes.values()) == [3, 5]  # one array of 5, then 3 until the job limit
    # the last task of the array of 5 (throttled: not started yet) is cancelled alone
    big = next(a for a, n in sizes.items() if n == 5)
    victim = next(r for r in rows if r["job_id"] == f"{big}_4")
    assert follow.cancel(store, [victim["run_id"]]) == [victim["run_id"]]
    settle(store, backend, "arr")
    rows_by_id = {r["run_id"]: r for r in store.runs("arr")}
    assert rows_by_id.pop(victim["run_id"])["state"] == "CANCELLED"
    assert {r["state"] for r in rows_by_id.values()} == {"COMPLETED"}
    for row in rows_by_id.values():
        assert_own_records(store, row)
    arrays = {r["job_id"].split("_")[0] for r in rows_by_id.values()}
    assert len(arrays) >= 3  # the 4 waiting runs went in a later wave
    assert not (Path(victim["run_dir"]) / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "slurm_target", [("25.11", "pyslurm")], indirect=True, ids=["25.11-pyslurm"]
)
def test_pyslurm_follows_jobs_without_accounting(slurm_target, tmp_path, home):
    """pyslurm where the profile says `accounting = false`: the controller while it
    remembers a job, then the marker the job wrote as it ended (MinJobAge 10 s here). A
    run that crashes is FAILED with its exit code, one cancelled is CANCELLED, one that
    finishes is COMPLETED; the database is never asked."""
    crash = write_spec(
        tmp_path / "c.toml", name="crash", scales='"1x1"', training='inject_fault = "crash@step2"'
    )
    slow = write_spec(tmp_path / "l.toml", name="slow", scales='"1x1"', steps=1000000)
    fine = write_spec(tmp_path / "f.toml", name="fine", scales='"1x1"', steps=2)
    store = Store(home)
    backend = slurm_target.scheduler(
        profile=load_profile(profile_copy(tmp_path, "accounting = false")), home=store.home
    )
    assert backend.watcher.accounting is False
    asked = []
    backend.watcher._from_database = lambda ids: asked.append(ids) or True  # must not be reached
    for spec in (crash, slow, fine):
        assert len(study.submit(store, load_spec(spec), backend).submitted) == 1
    [failed], [cancelled], [done] = store.runs("crash"), store.runs("slow"), store.runs("fine")
    assert wait_for(
        lambda: (
            sync(store, backend) is not None
            and store.run(cancelled["run_id"])["state"] == "RUNNING"
        ),
        180,
    )
    assert follow.cancel(store, [cancelled["run_id"]]) == [cancelled["run_id"]]
    # nobody asks until the controller has forgotten the crash: the marker decides
    marker = ended_and_forgotten(failed)
    settle(store, backend, "crash")
    settle(store, backend, "slow")
    settle(store, backend, "fine")
    row = store.run(failed["run_id"])
    assert row["state"] == "FAILED", row
    code = int(marker.read_text().split()[1])
    assert code != 0 and store.jobs.get("slurm", failed["job_id"])["exit_code"] == code
    assert "injected fault at step 2" in row["reason"]
    assert store.run(cancelled["run_id"])["state"] == "CANCELLED"
    assert store.run(done["run_id"])["state"] == "COMPLETED"
    assert asked == []
