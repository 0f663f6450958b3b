"""MLLOG export of the frameworks beyond PyTorch judged by MLCommons' own tools: a real
TensorFlow (Keras) and MXNet run on digits that reaches its target, exported with
`dlscale export mllog`, passes the compliance checker (training 4.0.0, open division), and
MLPerf's result summarizer's score is dlscale's time-to-accuracy. PyTorch's runs are
checked alike in test_report.py; each framework runs in its own environment (test_frameworks)."""

import pytest
from test_report import TTA_SPEC  # PyTorch's target run: digits, 2 epochs, 1 and 2 ranks

from conftest import dlscale, mlperf_check, mlperf_score_s
from dlscale.engine.results.report import mllog
from dlscale.engine.tracking.store import Store
from test_frameworks import env_home, mxnet_env, tf_env  # noqa: F401

# framework -> its environment's fixture
FRAMEWORKS = {"tensorflow": "tf_env", "mxnet": "mxnet_env"}


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_target_run_passes_mlcommons_checker_with_its_time_to_accuracy(
    request, env_home, tmp_path, framework
):
    request.getfixturevalue(FRAMEWORKS[framework])
    name = f"{framework}-tta"
    spec = tmp_path / "tta.toml"
    spec.write_text(
        TTA_SPEC.replace('name = "tta"', f'name = "{name}"').replace(
            '"pytorch-ddp"', f'"{framework}"'
        )
    )
    dlscale("run", str(spec), "--wait", home=env_home, check=0, timeout=1200)
    store = Store(env_home)
    runs = store.runs(name)
    assert {r["state"] for r in runs} == {"COMPLETED"} and len(runs) == 2
    out = tmp_path / "ml"
    dlscale("export", "mllog", "-e", name, "--out", str(out), home=env_home, check=0)
    for run in runs:
        path = out / f"{run['run_id']}.mllog"
        passed, output = mlperf_check(path, tmp_path)
        assert passed, output
        summary = store.records.of(run["run_id"], "summary")[0]
        assert summary["reached_target"] and summary["time_to_accuracy_s"] > 0
        assert mlperf_score_s(path) == pytest.approx(summary["time_to_accuracy_s"], rel=0.01)
        events = [mllog.parse(line) for line in path.read_text().splitlines()]
        assert [e["value"] for e in events if e["key"] == "dlscale_framework"] == [framework]
        evals = store.records.of(run["run_id"], "eval")
        assert [e["value"] for e in events if e["key"] == "eval_accuracy"] == [
            r["top1"] for r in evals
        ]
        (stop,) = [e for e in events if e["key"] == "run_stop"]
        assert stop["metadata"]["status"] == "success"
