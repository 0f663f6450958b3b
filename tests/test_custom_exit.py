"""A third-party script as a user wraps it (issue 37): it prints its measurement and then dies
at exit, as a PyTorch script on gloo can. Its declaration says when its measurement is
complete, so no run is lost: each is COMPLETED with its repetition counted, marked with how
its job ended in status, results and logs; its declared model is what chart and the MLLOG
export name; its interpreter's versions are recorded and shown. One local study of four runs
of a standard-library script (about 15 s on 2 busy cores) and one of a single failing run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, dlscale
from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching.plan import plan
from dlscale.engine.results import compare
from dlscale.engine.results.report import document as report
from dlscale.engine.tracking import completion
from dlscale.engine.tracking.monitor import finalize_run
from dlscale.engine.tracking.store import Store
from dlscale.trainers.common import interpreter

TORCH = importlib.util.find_spec("torch") is not None
SCRIPT = REPO / "tests" / "fixtures" / "custom" / "dies_at_exit.py"


def study(path: Path, name: str = "dies", how: str = "abort", complete: bool = True) -> Path:
    """Horovod's synthetic benchmark's lines read by patterns (`hvd-like`), and the same
    written as records (`reporting`), at 1 and 2 ranks; no [training] beyond what the
    command uses (steps = 5, and the default warmup_steps = 5 unused)."""
    log_done = "complete_when = '^Total img/sec'" if complete else ""
    records_done = 'complete_when = "records"' if complete else ""
    path.write_text(f"""\
[experiment]
name = "{name}"
frameworks = ["hvd-like", "reporting"]
models = ["mlp"]
datasets = ["synthetic"]
scales = ["1x1", "1x2"]
per_device_batch = [32]
repetitions = 1

[training]
steps = 5

[frameworks.hvd-like]
script = "{SCRIPT}"
command = ["{{python}}", "{{script}}", "{{steps}}", "{how}"]
unit = "images"

[frameworks.hvd-like.log]
throughput = '^Iter #\\d+: ([0-9.]+) img/sec per CPU'
throughput_per = "device"
{log_done}

[frameworks.reporting]
script = "{SCRIPT}"
command = ["{{python}}", "{{script}}", "{{steps}}", "exit3", "--report"]
{records_done}
""")
    return path


def test_a_script_that_dies_after_its_measurement_loses_no_run(tmp_path, home):
    spec = study(tmp_path / "dies.toml")
    done = dlscale("run", str(spec), "--wait", home=home, check=0)
    store = Store(home)
    runs = store.runs("dies")
    assert len(runs) == 4
    python = ".".join(map(str, sys.version_info[:3]))  # the local backend's {python}: ours
    for run in runs:
        assert run["state"] == "COMPLETED", run["reason"]
        code = 134 if run["framework"] == "hvd-like" else 3  # SIGABRT, or exit 3
        assert run["reason"].startswith(f"completed; exited {code} after its measurement")
        # Its software, asked of the interpreter it ran in: for the log's records and added
        # to a script's own env record that gave none.
        env = store.records.last("env", [run["run_id"]])[run["run_id"]]
        assert env["framework_versions"]["python"] == python
        assert ("torch" in env["framework_versions"]) == TORCH
        # what else the machine did, read by the meter around the script: these timed
        # steps (5 of 10 ms; the log's made-up rates say 1.6 s, more than the script ran)
        # cannot be read from outside, and it says why (issue 50)
        (load,) = store.records.of(run["run_id"], "interference")
        assert load["metered"].startswith("around the script") and load["cpus"]
        why = "too short" if run["framework"] == "reporting" else "do not cover"
        assert why in load["unavailable"], load
    # the log's crash line follows the mark, in the line status shows
    hvd = next(r for r in runs if r["framework"] == "hvd-like")
    assert "terminate called without an active exception" in hvd["reason"].split("\n")[0]

    rows = json.loads(dlscale("results", "--format", "json", home=home, check=0).stdout)
    assert sorted((r["framework"], r["ranks"], r["n"], r["state"]) for r in rows) == [
        ("hvd-like", 1, 1, "COMPLETED"),
        ("hvd-like", 2, 1, "COMPLETED"),
        ("reporting", 1, 1, "COMPLETED"),
        ("reporting", 2, 1, "COMPLETED"),
    ]
    for r in rows:  # Horovod's per-CPU lines over 5 steps: 100*world + i, harmonic mean
        rates = [100.0 * r["ranks"] + i for i in range(5)]
        assert abs(r["throughput"] - 5 / sum(1 / x for x in rates)) < 0.2, r
    table = dlscale("results", home=home, check=0).stdout
    assert table.count("is counted: completed; exited") == 4, table
    status = dlscale("status", home=home, check=0).stdout  # shown without --all
    assert status.count("completed; exited 134 after its measurement") == 2, status
    logs = dlscale("logs", hvd["run_id"], home=home, check=0)
    assert "Total img/sec" in logs.stdout
    assert "COMPLETED: completed; exited 134 after its measurement" in logs.stderr

    # The declared model's name: accepted by chart, written by the MLLOG export.
    chart = dlscale("chart", "--model", "mlp", home=home, check=0).stdout
    assert "speedup" in chart and "hvd-like" in chart
    refused = dlscale("chart", "--model", "resnet20", home=home, check=2).stderr
    assert "no model 'resnet20'" in refused and "it has: mlp" in refused
    mllog = dlscale("export", "mllog", hvd["run_id"], home=home, check=0).stdout
    (benchmark,) = [
        json.loads(line.removeprefix(":::MLLOG "))
        for line in mllog.splitlines()
        if '"submission_benchmark"' in line
    ]
    assert benchmark["value"] == "mlp"
    # Nothing to draw says why, not an empty box.
    predicted = dlscale("chart", "--metric", "predicted", home=home, check=0).stdout
    assert "no predicted efficiency (model) to chart: " in predicted, predicted
    assert "script records no step-time breakdown" in predicted and "┌" not in predicted

    # The report's set-up names the software.
    exp = next(e for e in store.experiments() if e["name"] == "dies")
    software = dict(report.setup(store, exp, runs))["software"]
    assert f"python {python}" in software and ("torch 2." in software) == TORCH
    assert "chart" not in done.stderr  # every run completed: no "nothing to chart"


@pytest.mark.slurm
def test_on_slurm_a_run_that_dies_after_its_measurement_is_kept(
    slurm_22_05, tmp_path, home, monkeypatch
):
    """The same study through the Slurm test cluster's srun, sacct's exit codes and the
    node's python3 (asked for its versions in the job)."""
    for name, value in slurm_22_05.env.items():
        monkeypatch.setenv(name, value)
    profile = REPO / "examples" / "clusters" / "test-cluster.toml"
    spec = study(tmp_path / "dies.toml")
    slurm = ["--profile", str(profile), "--backend", "slurm"]
    dlscale("run", str(spec), *slurm, "--wait", home=home, check=0)
    runs = Store(home).runs("dies")
    assert len(runs) == 4
    for run in runs:
        assert run["state"] == "COMPLETED", run["reason"]
        assert run["reason"].startswith("completed; ") and "after its measurement" in run["reason"]
        env = Store(home).records.last("env", [run["run_id"]])[run["run_id"]]
        assert env["framework_versions"]["python"].startswith("3."), env


def test_when_every_run_failed_run_wait_says_why_instead_of_an_empty_chart(tmp_path, home):
    """Without complete_when, the exit status decides: FAILED, as before."""
    spec = study(tmp_path / "fails.toml", name="fails", how="exit3", complete=False)
    text = spec.read_text().replace('scales = ["1x1", "1x2"]', 'scales = ["1x1"]')
    spec.write_text(text.replace('"hvd-like", "reporting"', '"hvd-like"'))
    done = dlscale("run", str(spec), "--wait", home=home, check=1)
    assert "┌" not in done.stdout, done.stdout  # no empty chart box
    assert "1 of 1 runs did not complete, so there is nothing to chart" in done.stderr
    [run] = Store(home).runs("fails")
    assert run["state"] == "FAILED" and f"run {run['run_id']}: " in done.stderr
    logs = dlscale("logs", run["run_id"], home=home, check=0)
    assert f"dlscale: run {run['run_id']} FAILED: " in logs.stderr


def test_compare_names_the_software_that_changed_between_two_sites(tmp_path):
    """The same declared study measured with two Pythons: settled from their logs, their
    env records hold what each interpreter answered, and compare names the change."""
    store = Store(tmp_path / "home")
    lines = "".join(f"Iter #{i}: {100 + i}.0 img/sec per CPU\n" for i in range(5))
    for name, python in (("a", "3.11.7"), ("b", "3.12.3")):
        spec = study(tmp_path / f"{name}.toml", name=name)
        spec.write_text(spec.read_text().replace('"hvd-like", "reporting"', '"hvd-like"'))
        for run in plan(load_spec(spec)).runs:
            store.add_run(run)
            folder = store.runs_dir / run.run_id
            folder.mkdir(parents=True)
            (folder / "run.log").write_text(lines + "Total img/sec on 1 CPU(s): 102.0\n")
            answer = {"interpreter": ["python3"], "versions": {"python": python}}
            (folder / "software.json").write_text(json.dumps(answer))
            store.jobs.add("local", f"j-{run.run_id}", run.run_id, "COMPLETED")
            store.update_run(run.run_id, backend="local", job_id=f"j-{run.run_id}")
            assert finalize_run(store, run.run_id, "COMPLETED") == "COMPLETED"
    differences = compare.compare(store, "a", "b").env_differences
    assert differences["python"] == ("3.11.7", "3.12.3"), differences


def test_only_the_declared_line_or_summary_completes_a_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.log").write_text("Iter #0: 5.0 img/sec per CPU\nSegmentation fault\n")

    def row(decl: dict) -> dict:
        return {"run_id": "r", "run_dir": str(run_dir), "training": json.dumps({"custom": decl})}

    log = {"throughput": "Iter #\\d+: ([0-9.]+)", "complete_when": "^Total img/sec"}
    assert not completion.measured_before_end(row({"log": log}))
    with open(run_dir / "run.log", "a") as fh:
        fh.write("Total img/sec on 1 CPU(s): 5.0\n")
    assert completion.measured_before_end(row({"log": log}))
    assert not completion.measured_before_end(row({"log": {**log, "complete_when": None}}))
    records = {"complete_when": "records"}
    assert not completion.measured_before_end(row(records))
    (run_dir / "metrics.jsonl").write_text('{"kind": "summary", "throughput": 1}\n')
    assert completion.measured_before_end(row(records))
    assert not completion.measured_before_end(row({"complete_when": "exit"}))
    assert not completion.measured_before_end({**row({}), "training": "{}"})  # built-in
    assert completion.after_end("TIMEOUT", None) == "completed; timed out after its measurement"


def test_the_interpreter_is_asked_without_importing_its_libraries():
    found = interpreter.versions()
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))
    assert ("torch" in found) == TORCH  # in the core suite's venvs of other Pythons, none
    # run as the meter runs it: its text, in another interpreter, torch never imported
    source = Path(interpreter.__file__).read_text()
    probe = "import sys; exec(sys.argv[1]); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe, source], capture_output=True, text=True)
    answer, imported = done.stdout.strip().splitlines()
    assert json.loads(answer) == found and imported == "False", done


def test_an_interpreter_that_cannot_answer_is_said_so(tmp_path):
    from dlscale.trainers.common.metered import record_software

    out = tmp_path / "software.json"
    record_software(out, [str(tmp_path / "no-such-python")])
    assert "FileNotFoundError" in json.loads(out.read_text())["unavailable"]
    record_software(out, [sys.executable, "-c", "import sys; sys.exit('broken')", "--"])
    assert json.loads(out.read_text())["unavailable"].startswith("ValueError: it exited 1")
