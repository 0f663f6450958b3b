"""What a run records as its precision is what computed: `auto` by the GPU's generation, fp32
without TF32, DeepSpeed's mixed precision through its own autocast, and every PyTorch-family
trainer's summary naming the dtype its forward pass really ran in. The CUDA side of this is
in tests/gpu/; here, what holds on CPU."""

import subprocess
import sys

import pytest

from dlscale.trainers.common.entry import TrainerError
from dlscale.trainers.deepspeed_zero.train import deepspeed_config
from dlscale.trainers.torch_ddp.device import COMPUTE_DTYPE, pick_gpu, resolve_precision
from test_frameworks import SMALL, deepspeed_env, env_home, records, run_trainer  # noqa: F401


@pytest.mark.parametrize(
    "requested,capability,ran",
    [
        ("auto", (9, 0), "bf16"),
        ("auto", (8, 0), "bf16"),
        ("auto", (7, 0), "fp16"),
        ("auto", (6, 0), "fp16"),
        ("fp32", (9, 0), "fp32"),
        ("tf32", (8, 6), "tf32"),
        ("fp16", (7, 0), "fp16"),
        ("bf16", (8, 9), "bf16"),
    ],
)
def test_precision_on_a_gpu_follows_its_compute_capability(requested, capability, ran):
    assert resolve_precision(requested, True, capability) == ran


@pytest.mark.parametrize("requested", ["bf16", "tf32"])
def test_a_v100_refuses_what_it_has_no_tensor_cores_for(requested):
    with pytest.raises(TrainerError, match="compute capability 8.0 or newer .* 7.0"):
        resolve_precision(requested, True, (7, 0))


def test_precision_on_cpu():
    assert resolve_precision("auto", False) == "fp32"
    assert resolve_precision("bf16", False) == "bf16"
    for gpu_only in ("fp16", "tf32"):
        with pytest.raises(TrainerError, match="needs a GPU"):
            resolve_precision(gpu_only, False)


def test_ranks_get_their_own_gpu_or_a_reason():
    assert pick_gpu(3, 4, 4, srun_task=False) == 3  # torchrun: the node's GPUs
    assert pick_gpu(3, 4, 1, srun_task=True) == 0  # srun bound one GPU per task
    assert pick_gpu(0, 1, 1, srun_task=False) == 0
    with pytest.raises(TrainerError, match="local rank 2 has no GPU of its own.*2 GPU"):
        pick_gpu(2, 4, 2, srun_task=False)  # more ranks than GPUs
    with pytest.raises(TrainerError, match="local rank 1 has no GPU"):
        pick_gpu(1, 2, 1, srun_task=False)  # never two ranks on one GPU
    with pytest.raises(TrainerError, match="no CUDA device"):
        pick_gpu(0, 1, 0, srun_task=True)


@pytest.mark.parametrize("precision,dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_deepspeed_mixed_precision_is_its_autocast_not_half_parameters(precision, dtype):
    config = deepspeed_config(32, 1, precision)
    assert config["torch_autocast"] == {"enabled": True, "dtype": dtype}
    assert "bf16" not in config and "fp16" not in config  # these would cast the weights


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_deepspeed_full_precision_has_no_autocast(precision):
    assert "torch_autocast" not in deepspeed_config(32, 2, precision)


def _one_rank_torch(tmp_path, precision):
    out = tmp_path / f"{precision}.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.torch_ddp",
            *SMALL,
            "--device",
            "cpu",  # auto means fp32 on a CPU; a GPU machine would run bf16
            "--precision",
            precision,
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return records(out)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["auto", "fp32", "bf16"])
def test_the_recorded_precision_is_the_dtype_the_forward_pass_ran_in(tmp_path, precision):
    recs = _one_rank_torch(tmp_path, precision)
    ran = recs[0]["precision"]
    assert ran == ("fp32" if precision == "auto" else precision)
    assert recs[-1]["compute_dtype"] == COMPUTE_DTYPE[ran]


@pytest.mark.slow
def test_deepspeed_bf16_on_cpu_computes_in_bf16(deepspeed_env, env_home, tmp_path):
    proc, out = run_trainer(
        deepspeed_env, env_home, "deepspeed", tmp_path, *SMALL, "--precision", "bf16", nproc=1
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    assert recs[0]["precision"] == "bf16"
    assert recs[-1]["compute_dtype"] == "bfloat16"
    assert recs[-1]["final_loss"] is not None
