"""Learning-rate schedules after the linear warm-up, the same in every framework (they all
take their lr from common/schedule.py): constant, step, poly and cosine."""

import json
import subprocess
import sys

import pytest

from dlscale.trainers.common.args import LR_SCHEDULES
from dlscale.trainers.common.schedule import LRPlan

WARM, TOTAL = 10, 110  # 100 steps after the warm-up


def plan(schedule: str) -> LRPlan:
    return LRPlan(0.1, 0.8, WARM, TOTAL, schedule)


@pytest.mark.parametrize("schedule", LR_SCHEDULES)
def test_every_schedule_ramps_linearly_to_the_scaled_lr_first(schedule):
    p = plan(schedule)
    assert p.lr(0) == pytest.approx(0.1)
    assert p.lr(5) == pytest.approx(0.45)
    assert p.lr(WARM) == pytest.approx(0.8)


@pytest.mark.parametrize(
    "schedule,fraction,factor",
    [
        ("constant", 0.5, 1.0),
        ("constant", 0.99, 1.0),
        ("step", 0.29, 1.0),
        ("step", 0.3, 0.1),
        ("step", 0.59, 0.1),
        ("step", 0.6, 0.01),
        ("step", 0.8, 0.001),
        ("step", 0.99, 0.001),
        ("poly", 0.5, 0.25),
        ("poly", 0.9, 0.01),
        ("poly", 1.0, 0.0),
        ("cosine", 0.5, 0.5),
        ("cosine", 1.0, 0.0),
    ],
)
def test_after_the_warm_up(schedule, fraction, factor):
    step = WARM + round(fraction * (TOTAL - WARM))
    assert plan(schedule).lr(step) == pytest.approx(0.8 * factor, abs=1e-12)


def test_an_unknown_schedule_is_an_error_not_a_constant():
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        plan("linear").lr(WARM + 1)


@pytest.mark.slow
def test_the_trainer_follows_the_step_schedule(tmp_path):
    out = tmp_path / "m.jsonl"
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
            "4",
            "--steps",
            "10",
            "--warmup-steps",
            "0",
            "--log-every",
            "1",
            "--lr",
            "0.1",
            "--lr-scaling",
            "none",
            "--lr-schedule",
            "step",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lrs = [json.loads(line)["lr"] for line in out.read_text().splitlines() if '"interval"' in line]
    assert lrs == pytest.approx([0.1] * 3 + [0.01] * 3 + [0.001] * 2 + [0.0001] * 2)
