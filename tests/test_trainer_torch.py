"""The PyTorch DDP trainer for real: 2 ranks on gloo, under torchrun and under plain
Slurm-style variables, with its records, its failure path and time-to-accuracy."""

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import HANG_S

pytestmark = pytest.mark.slow

SMALL = [
    "--model",
    "resnet20",
    "--dataset",
    "synthetic-cifar",
    "--per-device-batch",
    "8",
    "--steps",
    "4",
    "--warmup-steps",
    "1",
    "--log-every",
    "2",
]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def torchrun(tmp_path, *args, nproc=2):
    out = tmp_path / "metrics.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            "-m",
            "dlscale.trainers.torch_ddp",
            *args,
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


def test_two_ranks_end_with_identical_weights_and_full_records(tmp_path):
    proc, out = torchrun(tmp_path, *SMALL)
    assert proc.returncode == 0, proc.stderr
    recs = records(out)
    kinds = [r["kind"] for r in recs]
    assert kinds[0] == "params" and kinds[1] == "env" and kinds[-1] == "summary"
    assert "interval" in kinds
    env, summary = recs[1], recs[-1]
    assert env["world_size"] == 2 and len(env["hostnames"]) == 2 and env["backend"] == "gloo"
    assert env["framework_versions"]["torch"].startswith("2.")
    assert env["dlscale_version"] != "unknown"
    assert recs[0]["parameters"] == 269_722 and recs[0]["global_batch"] == 16
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert summary["timed_steps"] == 4 and summary["warmup_steps"] == 1
    assert summary["throughput"] > 0 and summary["images_timed"] == 4 * 16
    assert summary["step_time_median_s"] > 0
    # exactly one writer: rank 1 wrote nothing, so each record appears once
    assert kinds.count("params") == 1 and kinds.count("summary") == 1
    # the log says how training goes while it trains: one line per interval, rank 0 only
    progress = [line for line in proc.stdout.splitlines() if " images/s, ETA " in line]
    steps = [r["step"] for r in recs if r["kind"] == "interval"]
    assert [line.split("step ")[1].split("/")[0] for line in progress] == [str(s) for s in steps]
    assert progress[-1].startswith("dlscale-torch-ddp: step 5/5 (100%), epoch 0, loss ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plain_slurm_variables_launch_two_ranks(tmp_path):
    """srun starts one task per device and sets SLURM_*; the job script exports the
    rendezvous. Two processes with exactly those variables must train together."""
    out = tmp_path / "metrics.jsonl"
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE"))}
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURMD_NODENAME=f"node{rank + 1}",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dlscale.trainers.torch_ddp", *SMALL, "--output", str(out)],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    recs = records(out)
    env = next(r for r in recs if r["kind"] == "env")
    assert env["launcher"] == "srun" and env["hostnames"] == ["node1", "node2"]
    digests = recs[-1]["weights_digest_per_rank"]
    assert digests[0] == digests[1]


def test_failure_exits_nonzero_with_a_one_line_reason(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.torch_ddp",
            *SMALL,
            "--inject-fault",
            "crash@step3",
            "--output",
            str(tmp_path / "m"),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "dlscale-torch-ddp: error: rank 0: TrainerError: injected fault at step 3"
    )
    assert "Traceback" not in proc.stderr
    kinds = [r["kind"] for r in records(tmp_path / "m")]
    assert "summary" not in kinds and kinds[:2] == ["params", "env"]


def test_bad_flags_exit_2_in_one_line():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.torch_ddp",
            "--model",
            "resnet20",
            "--dataset",
            "synthetic-cifar",
            "--per-device-batch",
            "0",
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dlscale-torch-ddp: error: argument --per-device-batch: must be a positive integer, got 0"
    )


def test_digits_reach_the_target_and_report_time_to_accuracy(tmp_path):
    out = tmp_path / "m.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.torch_ddp",
            "--model",
            "resnet20",
            "--dataset",
            "digits",
            "--per-device-batch",
            "32",
            "--epochs",
            "8",
            "--lr",
            "0.05",
            "--lr-base-batch",
            "32",
            "--lr-schedule",
            "cosine",
            "--target-accuracy",
            "0.9",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    recs = records(out)
    evals = [r for r in recs if r["kind"] == "eval"]
    summary = recs[-1]
    assert summary["reached_target"] and summary["best_top1"] >= 0.9
    # time-to-accuracy is the elapsed time of the first evaluation at or above the target,
    # and training stopped there
    first = next(e for e in evals if e["top1"] >= 0.9)
    assert summary["time_to_accuracy_s"] == first["elapsed_s"] and evals[-1] is first
    assert summary["epochs_done"] == first["epoch"] < 8
