"""The test-only slowdown knob (DLSCALE_TEST_SLOWDOWN) takes the throughput down by what it
says, also where a step returns before its work is done (a GPU's asynchronous steps): the
shared loop with a step whose work finishes only at the next synchronisation."""

import time

import pytest

from dlscale.trainers.common import loop
from dlscale.trainers.common.records import RecordWriter
from dlscale.trainers.common.schedule import LRPlan

STEP_S = 0.004


def run(monkeypatch, knob: str, asynchronous: bool, eval_every_steps: int | None = None):
    monkeypatch.setenv(loop.SLOWDOWN_VARIABLE, knob)
    pending = [0.0]  # device work queued and not done

    def step(x, y):
        if asynchronous:
            pending[0] += STEP_S  # returns at once; the work is done at sync
        else:
            time.sleep(STEP_S)
        return 1.0

    def sync():
        time.sleep(pending[0])
        pending[0] = 0.0

    steps, warmup = 60, 5
    recipe = loop.Recipe(
        steps + warmup,
        1,
        warmup,
        20,
        1,
        steps + warmup,
        None,
        None,
        LRPlan(0.1, 0.1, 0, steps + warmup, "constant"),
    )
    hooks = loop.Hooks(
        step=step,
        set_lr=lambda lr: None,
        loss_of=lambda x: (sync(), x)[1],
        sync=sync,
        evaluate=(lambda: 0.5) if eval_every_steps else None,
    )

    def stream():
        i = 0
        while True:
            i += 1
            yield (None, None)
            if eval_every_steps and i % eval_every_steps == 0:
                time.sleep(0.05)  # an epoch's end: evaluation, outside the timed steps
                yield None

    out = loop.run(recipe, hooks, RecordWriter(None), stream())
    return (out.step - warmup) / out.train_time


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_knob_slows_throughput_by_what_it_says(monkeypatch, asynchronous):
    ratios = []
    for _ in range(3):
        plain = run(monkeypatch, "", asynchronous)
        slowed = run(monkeypatch, "0.30", asynchronous)
        ratios.append(slowed / plain)
    assert sorted(ratios)[1] == pytest.approx(0.70, abs=0.05), ratios


def test_evaluations_are_not_stretched(monkeypatch):
    plain = run(monkeypatch, "", True, eval_every_steps=13)
    slowed = run(monkeypatch, "0.30", True, eval_every_steps=13)
    assert slowed / plain == pytest.approx(0.70, abs=0.07)
