"""TensorFlow, Horovod + TensorFlow and MXNet on a real CUDA device, each in its GPU environment
(`dlscale env create FRAMEWORK --gpu`, found in DLSCALE_HOME's envs.json or built from the
machine's DLSCALE_ENV_CACHE): every precision computes in the dtype it records, XLA
compiles, real data goes through the GPU input pipeline, a rank never shares or invents a
GPU, and planning's refusals hold where the GPUs are real. A framework whose GPU
environment is not on this machine is skipped with that reason."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from dlscale.engine.launching import envs, gpus
from dlscale.engine.launching.envs import recipes
from dlscale.engine.tracking.store import default_home
from dlscale.trainers.common.gpu import COMPUTE_DTYPE

SMALL = [
    "--model",
    "resnet20",
    "--dataset",
    "synthetic-cifar",
    "--per-device-batch",
    "64",
    "--steps",
    "20",
    "--warmup-steps",
    "5",
    "--log-every",
    "5",
    "--device",
    "cuda",
]
MODULES = {
    "tensorflow": "dlscale.trainers.tf_keras",
    "horovod-tensorflow": "dlscale.trainers.horovod_tf",
    "mxnet": "dlscale.trainers.mxnet_gluon",
}


def capability() -> tuple[int, int]:
    return torch.cuda.get_device_capability(0)


def gpu_env(framework: str) -> envs.EnvStatus:
    """The framework's GPU environment here, or a skip that says why there is none."""
    home = Path(os.environ.get("DLSCALE_HOME") or default_home())
    status = envs.resolve(framework, home, device="cuda")
    if not status.ok or status.device != "cuda" or not status.cuda:
        pytest.skip(
            f"{framework}: no GPU environment here ({status.problem or status.source}"
            f"); build one with `dlscale env create {framework} --gpu`"
        )
    return status


def trainer(framework: str, tmp_path: Path, *args: str, ranks: int = 1):
    status = gpu_env(framework)
    home = Path(os.environ.get("DLSCALE_HOME") or default_home())
    out = tmp_path / "metrics.jsonl"
    from dlscale.engine.launching.launch import local_command_for

    argv, extra = local_command_for(
        framework, ranks, status, home, tmp_path, [*args, "--output", str(out)]
    )
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, **extra, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    return proc, out


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def expected(framework: str, precision: str) -> str | None:
    """What `precision` runs as here, or None where the trainer refuses it."""
    ampere = capability() >= (8, 0)
    if framework == "mxnet":
        return {"auto": "fp16", "bf16": None, "tf32": "tf32" if ampere else None}.get(
            precision, precision
        )
    if precision == "auto":
        return "bf16" if ampere else "fp16"
    return None if precision in ("bf16", "tf32") and not ampere else precision


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16", "auto"])
@pytest.mark.parametrize("framework", sorted(MODULES))
def test_each_precision_computes_in_the_dtype_it_records(framework, precision, tmp_path):
    proc, out = trainer(framework, tmp_path, *SMALL, "--precision", precision)
    ran = expected(framework, precision)
    if ran is None:
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert "bf16" in proc.stderr or "compute capability 8.0" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["device"] == "cuda" and params["precision"] == ran
    assert params["tf32"] == (ran == "tf32")
    assert summary["compute_dtype"] == COMPUTE_DTYPE[ran]
    assert summary["final_loss"] is not None and summary["throughput"] > 0
    assert env["framework_versions"].get("cuda")
    if framework == "mxnet":
        assert params["multi_precision"] == (ran == "fp16")
    else:
        assert params["loss_scaling"] == (ran == "fp16")
        assert env["devices"] == [torch.cuda.get_device_name(0)]
    if env["energy_source"] == "nvml":
        assert summary["energy_per_image_j"] > 0
    else:
        assert env["energy_unavailable"]


@pytest.mark.parametrize("framework", ["tensorflow", "horovod-tensorflow"])
def test_xla_compiles_the_step_on_the_gpu(framework, tmp_path):
    proc, out = trainer(framework, tmp_path, *SMALL, "--compile")
    assert proc.returncode == 0, proc.stderr[-3000:]
    params, summary = records(out)[0], records(out)[-1]
    assert params["xla"] is True and summary["throughput"] > 0


@pytest.mark.parametrize("framework", sorted(MODULES))
def test_digits_train_through_the_gpu_input_pipeline(framework, tmp_path):
    proc, out = trainer(
        framework,
        tmp_path,
        "--model",
        "resnet20",
        "--dataset",
        "digits",
        "--per-device-batch",
        "64",
        "--epochs",
        "30",
        "--lr",
        "0.05",
        "--target-accuracy",
        "0.9",
        "--device",
        "cuda",
        "--precision",
        "fp32",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = records(out)[-1]
    assert summary["reached_target"] and summary["best_top1"] >= 0.9


@pytest.mark.parametrize("framework", sorted(MODULES))
def test_more_ranks_than_gpus_is_refused_with_the_count(framework, tmp_path):
    n = torch.cuda.device_count()
    proc, _ = trainer(framework, tmp_path, *SMALL, ranks=n + 1)
    assert proc.returncode != 0
    assert f"local rank {n} has no GPU of its own" in proc.stderr + proc.stdout


@pytest.mark.parametrize("framework", sorted(MODULES))
def test_two_ranks_on_two_gpus_agree(framework, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: two ranks need two")
    proc, out = trainer(framework, tmp_path, *SMALL, "--precision", "fp32", ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    backend = {"tensorflow": "tf-nccl", "horovod-tensorflow": "horovod-nccl", "mxnet": "ps-lite"}[
        framework
    ]
    assert recs[1]["backend"] == backend
    digests = recs[-1]["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]


def test_planning_sees_this_machines_gpus():
    shown = gpus.local_gpus()
    assert len(shown) == torch.cuda.device_count()
    assert shown[0].name == torch.cuda.get_device_name(0)
    if shown[0].arch is not None:
        assert shown[0].arch == capability()
    assert gpus.plan_device()[0] == "cuda"


def test_horovod_gpu_environments_have_nccl():
    for framework in ("horovod-pytorch", "horovod-tensorflow"):
        status = gpu_env(framework)
        _, _, facts = envs.probe_facts(
            status.python, recipes.recipe_for(framework, (), "cuda"), full_import=True
        )
        assert facts["nccl"] is True and facts["cuda"]


def test_mxnet_refuses_hoppers_and_newer_and_runs_below():
    """MXNet 1.9.1's kernels end at sm_86: on a Hopper it fails, as planning says it would."""
    status = gpu_env("mxnet")
    code = (
        "import mxnet as mx; a = mx.nd.ones((64, 64), ctx=mx.gpu(0)); "
        "print(float(mx.nd.dot(a, a).sum().asscalar()))"
    )
    proc = subprocess.run([status.python, "-c", code], capture_output=True, text=True, timeout=300)
    runs = gpus.GPU_BUILD_ARCHS["mxnet"].runs_on(capability())
    assert (proc.returncode == 0) is runs, (capability(), proc.stderr[-2000:])
    if runs:
        assert float(proc.stdout.split()[-1]) == 64.0**3
    else:
        assert "no kernel image" in proc.stderr or "cudaError" in proc.stderr
