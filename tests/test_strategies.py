"""Issue 52 item 4: what each strategy moves in one step, as the projection counts it
(engine/results/projection/strategies.py), checked against a hand count, and the published
FSDP rows read with it."""

import json

import pytest

from dlscale.engine.results.projection import calibration, strategies
from dlscale.engine.results.projection.strategies import Traffic


def test_a_step_s_bytes_by_hand():
    """1,000 parameters. DDP in fp32: one allreduce of 4,000 bytes. FSDP in fp32: two
    all-gathers of 4,000 bytes and a reduce-scatter of 4,000, each half an allreduce: an
    allreduce of 6,000. Gathered in bf16, reduced in fp32: (2 x 2,000 + 4,000) / 2 = 4,000.
    Kept after forward (one all-gather): (4,000 + 4,000) / 2 = 4,000."""
    assert Traffic().step_bytes(1000) == 4000
    assert Traffic("fsdp", "fp32", "fp32", 2).step_bytes(1000) == 6000
    assert Traffic("fsdp", "fp32", "bf16", 2).step_bytes(1000) == 4000
    assert Traffic("fsdp", "fp32", "fp32", 1).step_bytes(1000) == 4000
    assert Traffic("fsdp", "bf16", "bf16", 2).factor() == pytest.approx(1.5)
    assert "all-gathers the parameters twice (bf16)" in Traffic("fsdp", "fp32", "bf16", 2).words()
    assert Traffic().words() == ""


@pytest.mark.parametrize(
    "framework, options, precision, expected",
    [
        ("pytorch-ddp", {}, "fp32", Traffic()),
        ("pytorch-fsdp", {}, "fp32", Traffic("fsdp", "fp32", "fp32", 2)),
        (
            "pytorch-fsdp",
            {"reshard_after_forward": "never"},
            "bf16",
            Traffic("fsdp", "fp32", "fp32", 1),
        ),
        ("pytorch-fsdp", {"mixed_precision": True}, "bf16", Traffic("fsdp", "fp32", "bf16", 2)),
        ("deepspeed", {"zero_stage": 3}, "bf16", Traffic("fsdp", "bf16", "bf16", 2)),
        ("deepspeed", {"zero_stage": 2}, "fp32", Traffic()),
        ("horovod-pytorch", {}, "fp16", Traffic()),
    ],
)
def test_a_measured_run_s_traffic_from_its_framework_and_options(
    framework, options, precision, expected
):
    training = json.dumps({"steps": 5, **({"options": options} if options else {})})
    assert strategies.of_run(framework, training, precision) == expected
    assert strategies.of_run(framework, "not json", precision).strategy in ("ddp", "fsdp")


def test_published_fsdp_rows_carry_their_traffic():
    data = calibration.published()
    fsdp = [r for r in data.rows if r.strategy == "fsdp"]
    assert {r.source for r in fsdp} == {"mosaicml-mpt", "torchtitan-llama3"}
    params = {m.id: m.parameters for m in data.models}
    for row in fsdp:
        (size,) = calibration.case(row).net.buckets
        gathered = strategies.DTYPE_BYTES[row.gathered or row.gradient]
        reduced = strategies.DTYPE_BYTES[row.gradient]
        assert size == round(params[row.model] * (2 * gathered + reduced) / 2)
