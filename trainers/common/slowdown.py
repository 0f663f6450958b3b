"""Test only: DLSCALE_TEST_SLOWDOWN=0.10 stretches a run's timed steps to 1 / (1 - 0.10) of
their time, so its throughput drops by 10%: how benchmarks/check_rates.py and the tests
prove that `dlscale check` detects a slowdown. The one wrapper the loop calls, and the one
provenance field (`test_slowdown` in the summary) every number it touched is marked by.

The wait is added at the loop's synchronised points (each interval record, an evaluation's
pause, the end), for the timed time since the last one: on a GPU a step returns before its
work is done, so a wait after each step hid behind the device's work, and a synchronisation
after each step slowed short steps far more than asked (0.73 of the throughput for 0.90
asked, ResNet-44 at batch 128 on an H200)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .entry import TrainerError

VARIABLE = "DLSCALE_TEST_SLOWDOWN"


def asked() -> float:
    """The slowdown the environment asks for (0: none)."""
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 0.9:
        raise TrainerError(f"{VARIABLE}={text!r}: a fraction from 0 to 0.9, e.g. 0.10")
    return value


def spin(seconds: float) -> None:
    """Wait by spinning, not sleeping: the stretch costs CPU as the step's own work would,
    so a check by CPU time per step (`check --measure cpu`) sees it too (on one CPU thread,
    about the same share)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Slowdown:
    """The knob as the loop holds it: `resume` where timing starts or goes on, `settle` at a
    synchronised point (the wait for the timed time since the last one), `pause` where
    timing stops (an evaluation: settled first)."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._stretch = fraction / (1 - fraction)
        self._since = 0.0  # the last synchronised point of timed time (0: not timing)

    @classmethod
    def from_environment(cls) -> Slowdown:
        return cls(asked())

    @property
    def provenance(self) -> dict[str, float]:
        """The summary's field: present only on a slowed run."""
        return {"test_slowdown": self.fraction} if self.fraction else {}

    def resume(self, at: float) -> None:
        if not self._since:
            self._since = at

    def settle(self, sync: Callable[[], None] | None = None) -> None:
        if not (self._stretch and self._since):
            return
        if sync is not None:
            sync()  # the device is done: its time is known
        spin((time.perf_counter() - self._since) * self._stretch)
        self._since = time.perf_counter()

    def pause(self) -> None:
        self.settle()
        self._since = 0.0
