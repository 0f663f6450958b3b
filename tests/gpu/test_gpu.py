"""The PyTorch family on a real CUDA device: every precision finishes and computes in the dtype
it records, a rank never shares or invents a GPU, step timing holds few events, DALI decodes
on the GPU, and a small model reaches its accuracy target. Frameworks and loaders whose
environment is not on this machine are skipped with that reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlscale.engine.datasets import write_imagenet_sample
from dlscale.trainers.torch_ddp.device import COMPUTE_DTYPE, CudaTimer

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
PRECISIONS = ["bf16", "fp16", "fp32", "tf32", "auto"]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def trainer(
    module: str,
    tmp_path: Path,
    *args: str,
    ranks: int = 1,
    python=sys.executable,
    env: dict | None = None,
) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "metrics.jsonl"
    launch = (
        [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        if ranks > 1
        else [python]
    )
    proc = subprocess.run(
        [*launch, "-m", module, *args, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )
    return proc, out


def importable(name: str) -> bool:
    return (
        subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode
        == 0
    )


FAMILY = {
    "pytorch-ddp": "dlscale.trainers.torch_ddp",
    "deepspeed": "dlscale.trainers.deepspeed_zero",
    "horovod-pytorch": "dlscale.trainers.horovod_torch",
}
NEEDS = {"deepspeed": "deepspeed", "horovod-pytorch": "horovod.torch"}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("framework", sorted(FAMILY))
def test_each_precision_computes_in_the_dtype_it_records(framework, precision, tmp_path):
    if framework in NEEDS and not importable(NEEDS[framework]):
        pytest.skip(f"{framework}: {NEEDS[framework]} does not import in this python")
    proc, out = trainer(FAMILY[framework], tmp_path, *SMALL, "--precision", precision)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    ran = params["precision"]
    capability = torch.cuda.get_device_capability(0)
    if precision == "auto":
        assert ran == ("bf16" if capability >= (8, 0) else "fp16")
    else:
        assert ran == precision
    assert summary["compute_dtype"] == COMPUTE_DTYPE[ran]
    assert params["device"] == "cuda" and params["tf32"] == (ran == "tf32")
    assert params["cudnn_benchmark"] is (ran != "fp32") and params["fused_sgd"] is True
    assert summary["final_loss"] is not None and summary["throughput"] > 0
    assert env["devices"] == [torch.cuda.get_device_name(0)]
    assert env["framework_versions"]["cuda"] and env["framework_versions"]["cudnn"]
    # NVML's energy counter over the timed steps, or the reason it could not be read
    if env["energy_source"] == "nvml":
        assert summary["energy_per_image_j"] > 0 and 0 <= summary["device_util"] <= 1
    else:
        assert env["energy_unavailable"] and summary["energy_j"] is None


def test_more_ranks_than_gpus_is_refused_with_the_count(tmp_path):
    n = torch.cuda.device_count()
    proc, _ = trainer(FAMILY["pytorch-ddp"], tmp_path, *SMALL, ranks=n + 1)
    assert proc.returncode != 0
    assert f"local rank {n} has no GPU of its own" in proc.stderr + proc.stdout


def test_two_ranks_on_two_gpus_use_nccl_and_agree(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: NCCL across two needs two")
    proc, out = trainer(FAMILY["pytorch-ddp"], tmp_path, *SMALL, ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    assert recs[1]["backend"] == "nccl" and recs[1]["framework_versions"]["nccl"]
    digests = recs[-1]["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]


def test_cuda_step_timer_keeps_only_the_steps_since_the_last_interval():
    timer = CudaTimer()
    x = torch.randn(512, 512, device="cuda")
    for step in range(1, 201):
        timer.begin()
        x = (x @ x).tanh()
        timer.end()
        if step % 10 == 0:
            float(x.sum())  # the loop's loss read at an interval boundary synchronises
            timer.collect()
            assert timer.pending <= 1
    times = timer.times()
    assert len(times) == 200 and all(t > 0 for t in times) and timer.pending == 0


def test_resnet20_reaches_its_digits_target_on_the_gpu(tmp_path):
    proc, out = trainer(
        FAMILY["pytorch-ddp"],
        tmp_path,
        "--model",
        "resnet20",
        "--dataset",
        "digits",
        "--per-device-batch",
        "64",
        "--epochs",
        "30",
        "--target-accuracy",
        "0.9",
        "--lr",
        "0.05",
        "--device",
        "cuda",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = records(out)[-1]
    assert summary["reached_target"] and summary["best_top1"] >= 0.9
    assert summary["time_to_accuracy_s"] > 0


@pytest.fixture(scope="module")
def imagenet_sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "imagenet-sample"
    write_imagenet_sample(root, classes=4, per_class=16, val_per_class=4)
    return root


def test_dali_on_the_gpu_gives_the_native_loaders_epoch(imagenet_sample):
    if not importable("nvidia.dali"):
        pytest.skip("NVIDIA DALI is not installed in this python")
    code = """
import json, sys, torch
from collections import Counter
from dlscale.trainers.common.args import build_parser
from dlscale.trainers.torch_ddp import loaders
out = {}
for loader in ("native", "dali"):
    args = build_parser("t").parse_args(["--model", "resnet50", "--dataset", "imagenet",
        "--data-dir", sys.argv[1], "--per-device-batch", "8", "--steps", "1",
        "--loader", loader, "--device", "cuda"])
    data = loaders.build(args, 1, 0, 0, torch.device("cuda", 0), True, "pytorch-ddp")
    batches = list(data.epoch(0))
    out[loader] = {"steps": len(batches), "devices": sorted({str(x.device) for x, _ in batches}),
                   "labels": dict(Counter(int(v) for _, y in batches for v in y)),
                   "shape": list(batches[0][0].shape)}
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(imagenet_sample)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["native"]["steps"] == r["dali"]["steps"] == 64 // 8
    assert r["native"]["labels"] == r["dali"]["labels"]  # the same images per epoch
    assert r["dali"]["devices"] == ["cuda:0"] and r["dali"]["shape"] == [8, 3, 224, 224]


def test_nvjpeg_decodes_on_the_gpu_with_the_native_crops(imagenet_sample):
    """nvJPEG's batch and Pillow's decode of the same files, through the same crops: the
    same images within a few levels (two JPEG decoders' IDCTs round apart)."""
    if not importable("torchvision"):
        pytest.skip("torchvision is not installed in this python")
    code = """
import json, random, sys, torch
from dlscale.trainers.common.imagenet import read_folders
from dlscale.trainers.torch_ddp import gpu_jpeg
from dlscale.trainers.torch_ddp.batches import Normalise
dev = torch.device("cuda", 0)
folders = read_folders(sys.argv[1])
datas = [torch.frombuffer(bytearray(open(p, "rb").read()), dtype=torch.uint8)
         for p, _ in folders.train[:16]]
decode, versions = gpu_jpeg.nvjpeg_decoder(dev)
norm = Normalise((0, 0, 0), (1 / 255,) * 3, dev, False)
gpu = gpu_jpeg.Augment(norm, random.Random(0))(decode(datas))
cpu = gpu_jpeg.Augment(norm, random.Random(0))([gpu_jpeg.pillow_decode(d) for d in datas])
print(json.dumps({"device": str(gpu.device), "shape": list(gpu.shape), "versions": versions,
                  "diff": float((gpu - cpu.to(dev)).abs().mean())}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(imagenet_sample)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["device"] == "cuda:0" and r["shape"] == [16, 3, 224, 224]
    assert r["versions"]["decoder"] == "nvjpeg"
    assert r["diff"] < 4.0, r


def test_resnet50_trains_from_jpegs_decoded_on_the_gpu(imagenet_sample, tmp_path):
    if not importable("torchvision"):
        pytest.skip("torchvision is not installed in this python")
    args = ["--model", "resnet50", "--dataset", "imagenet", "--data-dir", str(imagenet_sample)]
    args += ["--per-device-batch", "8", "--steps", "12", "--warmup-steps", "2", "--log-every"]
    args += ["4", "--device", "cuda", "--loader", "nvjpeg", "--loader-workers", "2"]
    proc, out = trainer(FAMILY["pytorch-ddp"], tmp_path, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    env = next(r for r in recs if r["kind"] == "env")
    assert env["framework_versions"]["decoder"] == "nvjpeg"
    assert recs[-1]["throughput"] > 0 and recs[-1]["timed_steps"] == 10


def test_a_compiled_run_records_the_dtype_it_computed_in(tmp_path):
    args = [*SMALL, "--precision", "bf16", "--compile"]
    for mode in ("default", "reduce-overhead"):
        proc, out = trainer(FAMILY["pytorch-ddp"], tmp_path, *args, "--compile-mode", mode)
        assert proc.returncode == 0, proc.stderr[-3000:]
        params, summary = records(out)[0], records(out)[-1]
        assert params["compile"] and params["compile_mode"] == mode
        assert summary["compute_dtype"] == "bfloat16" and summary["throughput"] > 0
        out.unlink()


def test_your_own_script_is_metered_on_the_gpu(tmp_path):
    """examples/custom/gpt-gpu.toml through `dlscale run`: NVML's energy over the script's
    timed steps, metered around it, in its results."""
    repo = Path(__file__).resolve().parents[2]
    spec = tmp_path / "gpt-gpu.toml"
    text = (repo / "examples" / "custom" / "gpt-gpu.toml").read_text()
    spec.write_text(text.replace("repetitions = 2", "repetitions = 1"))
    (tmp_path / "gpt.py").write_text((repo / "examples" / "custom" / "gpt.py").read_text())
    home = tmp_path / "home"
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    dlscale = [str(Path(sys.executable).parent / "dlscale")]
    run = subprocess.run(
        [*dlscale, "run", str(spec), "--wait"], capture_output=True, text=True, env=env, timeout=900
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    res = subprocess.run(
        [*dlscale, "results", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    (row,) = json.loads(res.stdout)
    assert row["images_per_joule"] > 0, row
