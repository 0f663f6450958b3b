"""The TensorFlow and MXNet trainers' GPU logic, as far as it runs on a CPU: which GPU a rank
takes in NVML's numbering, the precisions refused without a GPU (and MXNet's bf16 on one),
`--device cuda` in a CPU environment naming the GPU one, Keras' bf16 policy and XLA, and
the tf.data pipeline the GPU path feeds. On a real GPU: tests/gpu/test_gpu_frameworks.py."""

import json
import os
import subprocess
import sys

import pytest

from conftest import HANG_S
from dlscale.engine.launching import envs
from test_frameworks import SMALL, env_home, mxnet_env, records, tf_env  # noqa: F401


def test_a_rank_finds_its_gpu_in_nvml_by_what_cuda_visible_devices_names(monkeypatch):
    from dlscale.trainers.common.gpu import driver_shows_gpus, nvml_gpu

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert vars(nvml_gpu(1)) == {"index": 1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")  # srun's per-task binding, or a user's
    assert vars(nvml_gpu(0)) == {"index": 3} and vars(nvml_gpu(1)) == {"index": 1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-9a8b7c6d-1e2f,GPU-5d3c")
    assert vars(nvml_gpu(1)) == {"uuid": "5d3c"}  # the meter adds NVML's GPU- prefix back
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert driver_shows_gpus() is False


def _trainer(status, home, module, tmp_path, *args):
    out = tmp_path / "metrics.jsonl"
    proc = subprocess.run(
        [status.python, "-m", module, *SMALL, *args, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", **envs.launch_env(status, home)},
    )
    return proc, out


@pytest.mark.parametrize("module", ["dlscale.trainers.tf_keras", "dlscale.trainers.mxnet_gluon"])
@pytest.mark.parametrize(
    "args,said",
    [
        (["--precision", "fp16"], "precision fp16 needs a GPU"),
        (["--precision", "tf32"], "precision tf32 needs a GPU"),
    ],
)
def test_gpu_precisions_are_refused_on_cpu(module, args, said, tmp_path):
    """Before the framework is imported: the trainer modules import neither at load."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            *SMALL,
            "--device",
            "cpu",
            *args,
            "--output",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    if "mxnet" in module:
        said = f"{args[1]}: the MXNet trainer runs fp32 on CPU (fp16 and tf32 on GPUs)"
    assert said in proc.stderr


def test_mxnet_refuses_bf16_on_a_gpu_with_the_reason(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.mxnet_gluon",
            *SMALL,
            "--device",
            "cuda",
            "--precision",
            "bf16",
            "--output",
            str(tmp_path / "m.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 1
    assert (
        "precision bf16: MXNet 1.9 has no bf16 kernels on GPUs; use fp16 (multi-precision "
        "SGD) or fp32" in proc.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture,module",
    [("tf_env", "dlscale.trainers.tf_keras"), ("mxnet_env", "dlscale.trainers.mxnet_gluon")],
)
def test_device_cuda_in_a_cpu_environment_names_the_gpu_one(
    request, env_home, tmp_path, fixture, module
):
    status = request.getfixturevalue(fixture)
    proc, _ = _trainer(status, env_home, module, tmp_path, "--device", "cuda")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    framework = "tensorflow" if "tf" in fixture else "mxnet"
    assert "sees no GPU: this environment's" in proc.stderr
    assert f"build the GPU one with `dlscale env create {framework} --gpu`" in proc.stderr


@pytest.mark.slow
def test_tensorflow_bf16_with_xla_computes_in_bf16_on_cpu(tf_env, env_home, tmp_path):
    """Keras' mixed_bfloat16 policy and a jit-compiled forward pass run on CPUs too: the
    code the GPU path runs, measured here where it can be."""
    proc, out = _trainer(
        tf_env, env_home, "dlscale.trainers.tf_keras", tmp_path, "--precision", "bf16", "--compile"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, summary = recs[0], recs[-1]
    assert params["precision"] == "bf16" and params["xla"] is True and params["tf32"] is False
    assert params["device"] == "cpu" and params["loss_scaling"] is False
    assert summary["compute_dtype"] == "bfloat16" and summary["final_loss"] is not None


@pytest.mark.slow
def test_the_gpu_input_pipeline_gives_the_cpu_ones_batches(tf_env, env_home, tmp_path):
    """tf.data from the arrays' generator, with prefetch (the GPU path), against the arrays
    fed directly (the CPU path): the same batches, epoch by epoch, run where TensorFlow runs
    without a GPU."""
    code = """
import json, sys
import numpy as np, tensorflow as tf
from dlscale.trainers.common.args import build_parser
from dlscale.trainers.common.arrays import ArrayData
from dlscale.trainers.tf_keras.device import pipeline
args = build_parser("t").parse_args(["--model", "resnet20", "--dataset", "digits",
    "--per-device-batch", "64", "--epochs", "2", "--seed", "3"])
def take(cuda):
    data, out, ends = ArrayData(args, 2, 1, channels_last=True), [], 0
    stream = pipeline(tf, data, 64, cuda)
    while ends < 2:
        item = next(stream)
        if item is None:
            ends += 1
            out.append(None)
        else:
            out.append((item[0].numpy(), item[1].numpy()))
    return out
a, b = take(False), take(True)
same = len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None
    and np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])) for x, y in zip(a, b))
ends = [i for i, x in enumerate(a) if x is None]
print(json.dumps({"batches": len(a), "same": same, "ends": ends}))
"""
    proc = subprocess.run(
        [tf_env.python, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **envs.launch_env(tf_env, env_home), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["same"] and r["ends"] == [11, 23] and r["batches"] == 24  # 1438 // 128 = 11
