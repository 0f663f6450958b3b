"""A clock that moves only when something sleeps: timing arithmetic tested exactly, whatever
the machine's load (real sleeps overshot by 27 ms at load 8; a 0.70 asked of the slowdown
knob read 0.55 to 0.73 in CI). Put in place of `time` (its perf_counter and sleep) only in
the code under test: a subprocess's wait sleeps too."""


class VirtualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def perf_counter(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")  # as time.sleep says
        self.t += seconds
