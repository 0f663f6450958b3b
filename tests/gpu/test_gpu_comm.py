"""The communication benchmark over NCCL (and Horovod's NCCL) on real GPUs: one rank per GPU,
so it needs two; a machine with one says so and skips."""

import pytest
import torch
from test_gpu import FAMILY, NEEDS, SMALL, importable, records, trainer

from dlscale.trainers.common import comm
from dlscale.trainers.torch_ddp.comm import gradient_elements
from dlscale.trainers.torch_ddp.models import build


def need_two_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(
            f"the NCCL benchmark takes a GPU per rank: {torch.cuda.device_count()} "
            "visible, 2 needed"
        )


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("framework", sorted(FAMILY))
def test_two_gpus_time_the_gradient_allreduce_over_nccl(framework, precision, tmp_path):
    need_two_gpus()
    if framework in NEEDS and not importable(NEEDS[framework]):
        pytest.skip(f"{framework}: {NEEDS[framework]} does not import in this python")
    proc, out = trainer(
        FAMILY[framework],
        tmp_path,
        *SMALL,
        "--precision",
        precision,
        "--comm-benchmark",
        "--run-id",
        "c0ffee",
        ranks=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    params, env, c, summary = records(out)
    assert c["kind"] == "comm" and summary["kind"] == "summary"
    assert c["backend"] == ("horovod-nccl" if framework == "horovod-pytorch" else "nccl")
    assert env["framework_versions"]["nccl"] and all("cpu" not in d for d in env["devices"])
    # gradients keep the parameters' dtype under autocast: fp32 bytes in every precision
    grads = gradient_elements(build("resnet20", 10))
    assert c["comm_bytes"] == 4 * sum(grads)
    if framework == "pytorch-ddp":
        assert c["buckets"] == comm.buckets(
            [4 * n for n in grads], [comm.DDP_FIRST_BUCKET_BYTES, comm.DDP_BUCKET_BYTES]
        )
    assert c["comm_busbw_gbps"] == pytest.approx(c["comm_algbw_gbps"])  # 2 ranks: x1
    assert c["comm_busbw_gbps"] > 0.1  # NVLink or PCIe: far beyond a CPU's gloo
