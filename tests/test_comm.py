"""The communication benchmark on the trainers' side: nccl-tests' bandwidth definitions, the
buckets each framework fills with a step's gradient, and real runs of `--comm-benchmark`
(2 ranks over gloo here; DeepSpeed and Horovod in their own environments)."""

import subprocess
import sys

import pytest
import torch.distributed as dist

from dlscale.trainers.common import comm
from dlscale.trainers.common.records import COMM_KINDS, parse_record
from dlscale.trainers.torch_ddp.comm import gradient_elements
from dlscale.trainers.torch_ddp.models import build
from test_frameworks import (  # noqa: F401  (fixtures)
    SMALL,
    TORCH_RESNET20_PARAMETERS,
    deepspeed_env,
    env_home,
    horovod_env,
    records,
    run_trainer,
)

DDP_LIMITS = [comm.DDP_FIRST_BUCKET_BYTES, comm.DDP_BUCKET_BYTES]


# --- nccl-tests' definitions (doc/PERFORMANCE.md) ----------------------------------------


@pytest.mark.parametrize("ranks,factor", [(2, 1.0), (4, 1.5), (8, 1.75), (1024, 2 * 1023 / 1024)])
def test_bus_bandwidth_is_algorithm_bandwidth_times_2_n_minus_1_over_n(ranks, factor):
    alg = comm.algbw_gbps(3 * 10**9, 1.5)  # 3 GB in 1.5 s
    assert alg == pytest.approx(2.0)  # GB/s: 10^9 bytes a second, as nccl-tests print
    assert comm.busbw_gbps(alg, ranks) == pytest.approx(2.0 * factor)


def test_the_record_takes_the_slowest_rank_of_each_round_and_their_median():
    plan = comm.CommPlan([600, 400], bucket_bytes=1024)
    per_rank = [[1.0, 2.0, 3.0, 9.0], [1.5, 1.0, 4.0, 1.0]]  # the slowest: 1.5 2 4 9
    f = comm.record_fields(per_rank, plan, "gloo", warmup=5)
    assert f["comm_time_s"] == pytest.approx(3.0)  # median of 1.5, 2, 4, 9
    assert f["comm_bytes"] == 1000 and f["buckets"] == [600, 400]
    assert f["comm_algbw_gbps"] == pytest.approx(1000 / 3.0 / 1e9)
    assert f["comm_busbw_gbps"] == pytest.approx(f["comm_algbw_gbps"])  # 2 ranks: x1
    assert f["elapsed_s"] == pytest.approx(16.5) and f["repetitions"] == 4
    assert f["world_size"] == 2 and f["backend"] == "gloo" and f["collective"] == "allreduce"


@pytest.mark.parametrize(
    "sizes,element", [([1000, 3000], 4), ([4 * 10**6, 10**8], 4), ([200], 2), ([8] * 5, 4)]
)
def test_the_sweep_runs_from_one_bucket_to_the_whole_gradient(sizes, element):
    plan = comm.CommPlan(sizes, bucket_bytes=max(sizes), element_bytes=element)
    got = comm.sweep_sizes(plan)
    assert got == sorted(set(got)) and got[-1] == plan.total_bytes
    assert got[0] <= min(min(sizes), max(element, plan.total_bytes // comm.SWEEP_SPAN))
    assert all(s % element == 0 and s > 0 for s in got) and len(got) <= comm.SWEEP_POINTS


# --- buckets -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes,limits,expected",
    [
        ([10, 10, 10], [25], [30]),  # a bucket closes once it holds its limit
        ([10, 15, 10], [25], [25, 10]),  # exactly at the limit closes it
        ([100, 5, 5], [25], [100, 10]),  # a tensor is never split
        ([5, 5, 30, 30], [10, 50], [10, 60]),  # the first bucket has a limit of its own
        ([], [10], []),
        ([4, 4, 4], [0], [4, 4, 4]),  # a limit of 0: every tensor alone
    ],
)
def test_buckets_fill_in_order_and_close_at_their_limit(sizes, limits, expected):
    assert comm.buckets(sizes, limits) == expected


@pytest.mark.parametrize(
    "model,classes", [("resnet20", 10), ("resnet110", 10), ("resnet50", 1000), ("resnet152", 1000)]
)
def test_ddp_buckets_are_the_reducers_own(model, classes):
    """The sizes the benchmark allreduces are those torch's reducer computes when it
    rebuilds DDP's buckets in gradient order (dist._compute_bucket_assignment_by_size)."""
    params = list(build(model, classes).parameters())[::-1]
    indices, _ = dist._compute_bucket_assignment_by_size(params, DDP_LIMITS, [False] * len(params))
    theirs = [sum(4 * params[i].numel() for i in bucket) for bucket in indices]
    ours = comm.buckets([4 * n for n in gradient_elements(build(model, classes))], DDP_LIMITS)
    assert ours == theirs and len(ours) >= 2


def test_horovod_issues_each_gradient_and_fuses_up_to_its_threshold(monkeypatch):
    from argparse import Namespace

    from dlscale.trainers.horovod_torch.train import HorovodTorch

    grads = gradient_elements(build("resnet50", 1000))
    plan = HorovodTorch().comm_plan(grads, Namespace(fp16_allreduce=False))
    assert plan.sizes == [4 * n for n in grads] and plan.fused_by == "library"
    assert plan.bucket_bytes == 128 * comm.MIB and plan.fused == [4 * sum(grads)]  # one fusion
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", str(32 * comm.MIB))
    half = HorovodTorch().comm_plan(grads, Namespace(fp16_allreduce=True))
    assert half.element_bytes == 2 and half.total_bytes == 2 * sum(grads)  # fp16 compression
    assert len(half.fused) == 2 and all(b >= 32 * comm.MIB for b in half.fused[:-1])


# --- real runs ---------------------------------------------------------------------------


def comm_run(tmp_path, nproc, *extra):
    out = tmp_path / "m.jsonl"
    launch = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    proc = subprocess.run(
        [
            *launch,
            "-m",
            "dlscale.trainers.torch_ddp",
            *SMALL,
            "--comm-benchmark",
            "--run-id",
            "c0ffee",
            "--output",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


def check_comm_records(path, framework, backend, ranks, parameters):
    recs = [parse_record(line) for line in path.read_text().splitlines()]  # typed on ingest
    assert [r["kind"] for r in recs] == list(COMM_KINDS)
    params, env, c, summary = recs
    assert params["mode"] == "comm-benchmark" and params["framework"] == framework
    assert env["backend"] == backend and len(env["hostnames"]) == ranks
    assert c["world_size"] == ranks and c["backend"] == backend
    assert c["comm_bytes"] == 4 * parameters == sum(c["buckets"])
    assert c["comm_time_s"] > 0 and c["repetitions"] == comm.ROUNDS
    assert c["comm_algbw_gbps"] == pytest.approx(c["comm_bytes"] / c["comm_time_s"] / 1e9)
    assert c["comm_busbw_gbps"] == pytest.approx(c["comm_algbw_gbps"] * 2 * (ranks - 1) / ranks)
    # the sweep: one bucket up to the whole gradient, each size with nccl-tests' bandwidths
    sizes = [e["bytes"] for e in c["sweep"]]
    assert sizes == sorted(sizes) and sizes[-1] == c["comm_bytes"] and len(sizes) >= 4
    assert sizes[0] <= min(c["buckets"]) and sizes[0] <= c["comm_bytes"] // comm.SWEEP_SPAN
    for e in c["sweep"]:
        assert e["time_s"] > 0 and e["rounds"] == comm.SWEEP_ROUNDS
        assert e["algbw_gbps"] == pytest.approx(e["bytes"] / e["time_s"] / 1e9)
        assert e["busbw_gbps"] == pytest.approx(e["algbw_gbps"] * 2 * (ranks - 1) / ranks)
    # nothing was trained: the summary closes the run without claiming images
    assert summary["throughput"] == 0 and summary["timed_steps"] == 0
    assert summary["comm_busbw_gbps"] == c["comm_busbw_gbps"]
    return c


@pytest.mark.slow
def test_two_ranks_time_ddps_buckets_over_gloo(tmp_path):
    proc, out = comm_run(tmp_path, 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    c = check_comm_records(out, "pytorch-ddp", "gloo", 2, TORCH_RESNET20_PARAMETERS)
    assert c["buckets"] == comm.buckets(
        [4 * n for n in gradient_elements(build("resnet20", 10))], DDP_LIMITS
    )
    assert c["bucket_bytes"] == 25 * 1024 * 1024
    assert "allreduce of 1.08 MB in 2 bucket(s) over gloo x2" in proc.stdout


def test_one_rank_is_refused_in_one_line(tmp_path):
    proc, out = comm_run(tmp_path, 1)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "dlscale-torch-ddp: error: rank 0: TrainerError: --comm-benchmark needs 2 or more "
        "ranks: one rank has nothing to communicate"
    )


@pytest.mark.slow
def test_deepspeed_times_its_reduce_bucket(deepspeed_env, env_home, tmp_path):
    proc, out = run_trainer(
        deepspeed_env,
        env_home,
        "deepspeed",
        tmp_path,
        *SMALL,
        "--comm-benchmark",
        "--run-id",
        "c0ffee",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    c = check_comm_records(out, "deepspeed", "gloo", 2, TORCH_RESNET20_PARAMETERS)
    assert c["buckets"] == [c["comm_bytes"]] and c["bucket_bytes"] == 4 * 500_000_000


@pytest.mark.slow
@pytest.mark.parametrize("fp16", [False, True])
def test_horovod_times_its_fused_allreduce(horovod_env, env_home, tmp_path, fp16):
    extra = ["--fp16-allreduce"] if fp16 else []
    proc, out = run_trainer(
        horovod_env,
        env_home,
        "horovod-pytorch",
        tmp_path,
        *SMALL,
        "--comm-benchmark",
        "--run-id",
        "c0ffee",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    c = recs[2]
    assert c["kind"] == "comm" and c["backend"] == "horovod-gloo" and c["fused_by"] == "library"
    assert c["comm_bytes"] == (2 if fp16 else 4) * TORCH_RESNET20_PARAMETERS
    assert c["buckets"] == [c["comm_bytes"]]  # under Horovod's 128 MiB: one fusion
    assert [r["kind"] for r in recs] == list(COMM_KINDS)
