"""Energy and utilisation over a run's timed steps, measured where the machine lets us read
them: NVML's energy counter and utilisation on NVIDIA GPUs (nvidia-ml-py), the CPU packages'
RAPL energy counters under /sys/class/powercap. Where neither can be read the numbers are
null and `unavailable` says why; nothing is estimated.

One meter per rank. A GPU is a rank's own; a CPU package is shared by the node's ranks, so
only the node's first rank meters it and the job's energy is the sum over ranks."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POWERCAP = "/sys/class/powercap"


@dataclass
class Reading:
    """What one rank measured over its timed steps (None: not measured)."""

    energy_j: float | None
    seconds: float
    util: float | None  # mean device utilisation, 0..1
    failed: str | None = None  # why the counter stopped answering mid-run, if it did


class Powercap:
    """The CPU packages' cumulative energy (µJ) from RAPL zones named package-N."""

    def __init__(self, root: Path) -> None:
        self.zones = []
        for zone in sorted(root.glob("*:*")):
            if zone.name.count(":") != 1:  # sub-zones (core, dram) are inside a package
                continue
            try:
                name = (zone / "name").read_text().strip()
                if name.startswith("package"):
                    wrap = int((zone / "max_energy_range_uj").read_text())
                    int((zone / "energy_uj").read_text())  # readable now, or not at all
                    self.zones.append((zone / "energy_uj", wrap))
            except (OSError, ValueError):
                continue

    def joules(self) -> list[int]:
        return [int(path.read_text()) for path, _ in self.zones]

    def delta_j(self, before: list[int], after: list[int]) -> float:
        total = 0
        for (_, wrap), a, b in zip(self.zones, before, after):
            total += b - a if b >= a else b + wrap - a  # the counter wrapped once
        return total / 1e6


def open_rapl(root: Path) -> tuple[Powercap | None, str | None]:
    """The CPU packages' counters under `root`, or None and why not: the one reason a CPU
    run's energy is unknown, in the same words for the built-in trainers' meter and the
    meter around a declared framework's script (metered.py)."""
    rapl = Powercap(root) if root.is_dir() else None
    if rapl is None or not rapl.zones:
        return None, (
            f"no readable RAPL package energy under {root} (not exposed on this machine, "
            "or readable by root only)"
        )
    return rapl, None


class Meter:
    """resume()/pause() bracket the timed segments; a background thread samples
    utilisation while they run. `source` names what is read, `unavailable` why nothing is."""

    def __init__(
        self,
        gpu: Any | None = None,
        first_on_node: bool = True,
        every_s: float = 0.2,
        powercap: str | None = None,
    ) -> None:
        self.source: str | None = None
        self.unavailable: str | None = None
        self.every_s = every_s
        self._energy, self._seconds, self._util = 0.0, 0.0, []
        self._mark: tuple[float, Any, Any] | None = None  # (time, counter, cpu times)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = self._handle = self._rapl = None
        self._failed: str | None = None
        if gpu is not None:
            self._open_nvml(gpu)
        elif not first_on_node:
            self.unavailable = "the node's first rank meters the CPU packages it shares"
        else:
            root = Path(powercap or os.environ.get("DLSCALE_POWERCAP", POWERCAP))
            rapl, self.unavailable = open_rapl(root)
            if rapl is not None:
                self._rapl, self.source = rapl, "powercap"

    def _open_nvml(self, gpu: Any) -> None:
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            # NVML numbers GPUs without CUDA_VISIBLE_DEVICES: the UUID names the same one
            uuid = getattr(gpu, "uuid", None)
            self._handle = (
                pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
                if uuid
                else pynvml.nvmlDeviceGetHandleByIndex(int(getattr(gpu, "index", 0)))
            )
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)  # Volta and newer
            self._nvml, self.source = pynvml, "nvml"
        except ImportError:
            self.unavailable = "nvidia-ml-py (pynvml) is not installed in this environment"
        except Exception as exc:  # NVMLError_*: no driver access, an older GPU...
            self.unavailable = f"NVML cannot read this GPU's energy ({type(exc).__name__})"

    def nvml(self) -> tuple[Any, Any] | None:
        """NVML and the handle of the GPU it meters, where it opened one (interference.py
        asks the same GPU for its other users)."""
        return (self._nvml, self._handle) if self._nvml is not None else None

    # --- the counters ----------------------------------------------------------------------

    def _read(self) -> Any:
        """The counter now; None once it has failed. A counter that stops answering mid-run
        (a sysfs read cut short, an NVML error) ends the metering, never the run, and the
        run's energy is then unknown rather than a part of it."""
        if self._failed is not None:
            return None
        try:
            return self._counter()
        except Exception as exc:
            self._failed = (
                f"the {self.source} energy counter stopped answering mid-run "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            )
            return None

    def _counter(self) -> Any:
        if self._nvml is not None:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)  # mJ
        return self._rapl.joules() if self._rapl is not None else None

    def _delta_j(self, before: Any, after: Any) -> float:
        if self._nvml is not None:
            return (after - before) / 1e3
        return self._rapl.delta_j(before, after)

    def _sample(self) -> float | None:
        if self._nvml is not None:
            return self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0
        return None

    # --- segments --------------------------------------------------------------------------

    def resume(self) -> None:
        if self.source is None or self._mark is not None:
            return
        self._mark = (time.perf_counter(), self._read(), os.times())
        if self._nvml is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()

    def pause(self) -> None:
        if self._mark is None:
            return
        t0, c0, cpu0 = self._mark
        self._mark = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            # One sample at the segment's end too: a segment shorter than the sampling period
            # (twenty small steps on an H100) would otherwise leave no utilisation at all.
            self._watch_once()
        seconds = time.perf_counter() - t0
        self._seconds += seconds
        c1 = self._read()
        if self._failed is None:
            self._energy += self._delta_j(c0, c1)
        if self._rapl is not None and seconds > 0:  # CPU: this process's share of its cores
            cpu1 = os.times()
            busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
            self._util.append(busy / seconds / max(1, len(os.sched_getaffinity(0))))

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self._watch_once()

    def _watch_once(self) -> None:
        try:
            value = self._sample()
        except Exception:  # a sample missed is not a run lost
            return
        if value is not None:
            self._util.append(value)

    def reading(self) -> Reading:
        self.pause()
        if self.source is None:
            return Reading(None, self._seconds, None)
        util = sum(self._util) / len(self._util) if self._util else None
        if self._failed is not None:
            return Reading(None, self._seconds, util, self._failed)
        return Reading(self._energy, self._seconds, util)


def summary_fields(readings: list[Reading], images: int) -> dict[str, Any]:
    """The summary's energy fields from every rank's reading: the job's joules (the sum over
    the ranks that metered), joules per image, mean power and mean utilisation. A rank
    whose counter failed mid-run leaves the job's energy unknown (the others' sum would
    be a part of it, not its energy), saying why."""
    measured = [r for r in readings if r.energy_j is not None]
    failed = next((r.failed for r in readings if r.failed), None)
    if not measured or failed:
        return {
            "energy_j": None,
            "energy_per_image_j": None,
            "mean_power_w": None,
            "device_util": None,
            **({"energy_unavailable": failed} if failed else {}),
        }
    joules = sum(r.energy_j for r in measured)
    seconds = max(r.seconds for r in measured)
    utils = [r.util for r in measured if r.util is not None]
    return {
        "energy_j": joules,
        "energy_per_image_j": joules / images if images else None,
        "mean_power_w": joules / seconds if seconds else None,
        "device_util": sum(utils) / len(utils) if utils else None,
    }
