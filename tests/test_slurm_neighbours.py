"""Issue 50 item 4: a Slurm profile's `exclusive = true` checked against what the job got.
As a run's job ends, accounting is asked which other jobs ran on its nodes while it
measured (engine/backends/slurm/neighbours.py); any makes the run disturbed, naming them.
sacct's answers here are recorded text (a parser's test); the live path on the test cluster,
where Slurm keeps its promise."""

from test_slurm_cluster import profile_copy
from test_store import line, make_run

from conftest import busy_spec, dlscale
from dlscale.engine.backends.slurm import neighbours
from dlscale.engine.backends.slurm.calls import CommandResult
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.config.profile import load_profile
from dlscale.engine.results import disturbed
from dlscale.engine.results.analysis import results
from dlscale.engine.tracking.store import Store
from dlscale.trainers.common.records import RecordWriter

# sacct --allusers -X --noheader --parsable2 --state=RUNNING ... --format=JobID,User,...
ANSWER = "77|root|dlscale-e-1x1|node1\n88_3|bob|train.sh|node[1-2]\n\nnot|a|row\n"


def test_sacct_s_answer_names_every_other_job():
    assert neighbours.others(ANSWER, "77") == [
        {"job": "88_3", "user": "bob", "name": "train.sh", "nodes": "node[1-2]"}
    ]
    assert neighbours.others("", "77") == []
    argv = neighbours.argv("node[1-2]", 1_700_000_000, 1_700_000_060)
    for word in ("--allusers", "-X", "--state=RUNNING", "--nodelist=node[1-2]", "--parsable2"):
        assert word in argv
    assert any(a.startswith("--starttime=20") for a in argv)


class Answers:
    def __init__(self, result: CommandResult) -> None:
        self.result, self.calls = result, []

    def __call__(self, argv, env=None, timeout=None):
        self.calls.append(argv)
        return self.result


def _run(tmp_path):
    store = Store(tmp_path / "home")
    run = make_run()
    store.add_run(run)
    store.update_run(run.run_id, job_id="77", backend="slurm")
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        line("params", framework="pytorch-ddp", model="resnet20", dataset="synthetic-cifar",
             per_device_batch=8, world_size=1)
        + line("summary", status="completed", throughput=100.0, timed_steps=10,
               warmup_steps=1, elapsed_s=1.0)
    )  # fmt: skip
    store.records.ingest(run.run_id, path)
    store.update_run(run.run_id, state="COMPLETED")
    return store, store.run(run.run_id), path


def test_an_exclusive_run_that_shared_its_nodes_is_disturbed_and_names_whom(tmp_path):
    store, row, path = _run(tmp_path)
    whole = load_profile(
        profile_copy(tmp_path, replace=("time_limit", "exclusive = true\ntime_limit"))
    )
    sacct = Answers(CommandResult([], 0, ANSWER, ""))
    found = SlurmCLI(profile=whole, runner=sacct).neighbours(store, row, "node1")
    assert found == {
        "exclusive": True,
        "nodes": "node1",
        "other_jobs": 1,
        "named": [{"job": "88_3", "user": "bob", "name": "train.sh", "nodes": "node[1-2]"}],
    }
    (argv,) = sacct.calls
    assert "--nodelist=node1" in argv
    with RecordWriter(str(path)) as w:
        w.write("neighbours", **found)
    store.records.ingest(row["run_id"], path)
    (point,) = results(store)
    (said,) = point["disturbed"][row["run_id"]]
    assert "exclusive" in said and "job 88_3 (bob)" in said


def test_nothing_promised_nothing_asked_and_a_silent_accounting_judges_nothing(tmp_path):
    store, row, _ = _run(tmp_path)
    shared = load_profile(profile_copy(tmp_path))  # exclusive = false: sharing is expected
    sacct = Answers(CommandResult([], 0, ANSWER, ""))
    assert SlurmCLI(profile=shared, runner=sacct).neighbours(store, row, "node1") is None
    assert sacct.calls == []
    whole = load_profile(
        profile_copy(tmp_path, replace=("time_limit", "exclusive = true\ntime_limit"))
    )
    down = Answers(CommandResult([], 1, "", "sacct: error: Problem talking to the database"))
    found = SlurmCLI(profile=whole, runner=down).neighbours(store, row, "node1")
    assert "Problem talking to the database" in found["unavailable"]
    assert disturbed.shared(found) is None


def _whole(tmp_path):
    return profile_copy(tmp_path, replace=("time_limit", "exclusive = true\ntime_limit"))


def test_an_exclusive_job_on_the_test_cluster_is_checked_and_found_alone(
    slurm_cluster, tmp_path, home
):
    spec = busy_spec(tmp_path / "whole.toml", "whole", 1, 2, "repetitions = 1")
    dlscale(
        "run", str(spec), "--profile", str(_whole(tmp_path)), "--backend", "slurm", "--wait",
        check=0,
    )  # fmt: skip
    store = Store(home)
    (run,) = store.runs("whole")
    (found,) = store.records.of(run["run_id"], "neighbours")
    assert found["exclusive"] is True and found["nodes"].startswith("node"), found
    assert found.get("other_jobs") == 0, found  # Slurm gave the node whole
    assert run["run_id"] not in disturbed.judge(store).disturbed or not any(
        "exclusive" in why for why in disturbed.judge(store).disturbed[run["run_id"]]
    )
