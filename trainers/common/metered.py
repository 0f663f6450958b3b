"""Energy around a command dlscale did not write: a declared framework's script (issue 38).

    python -m dlscale.trainers.common.metered --out DIR [--devices N] [--log FILE]
        [--software FILE --interpreter JSON] -- ARGV...

Runs ARGV as a child (its standard streams, signals forwarded, its exit status returned) and
samples, a few times a second, the cumulative energy counters of what that child computes on:
on a GPU run (--devices or --task-gpu) its GPUs (NVML, as the built-in trainers' meter
reads), falling back to the CPU packages (RAPL under /sys/class/powercap, by the node's first
task only: they are shared); on a CPU run the CPU packages alone, so its energy, or why that
is unknown, is the CPU's, in the built-in trainers' words.
With --log it also samples the run's log size, so the engine can tell when a log line was
written; and at every sample, metered or not, what else the machine did (interference.py's
cumulative counters), which the engine reads over the timed window (custom_load.py). At
exit the timeline is written to DIR/<host>-<task>.json, where the engine
(engine/tracking/custom_energy.py) takes the energy over the script's timed steps from it:
the window its summary record, or its log's last measured line, says. With --software and
--interpreter, before the command starts, the node's first task asks the command's Python
what it holds (interpreter.py, time-limited) and writes that to the file --software names.

Standard library only (nvidia-ml-py where a GPU is metered): it runs in the job's own
environment, not dlscale's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import interference
from .energy import POWERCAP, Powercap, open_rapl

EVERY_S = 0.25
# A timeline longer than this is halved (every other sample dropped) and sampled half as
# often: cumulative counters lose nothing between samples, only the window's edges blur.
MAX_SAMPLES = 20_000


class Counters:
    """The cumulative energy counters of the devices metered, and what they are."""

    def __init__(self, devices: int | None, first_task: bool, task_gpu: bool = False) -> None:
        self.source: str | None = None
        self.unit = ""
        self.names: list[str] = []
        self.unavailable: str | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._rapl: Powercap | None = None
        self.wraps: list[int] = []
        gpu_run = devices is not None or task_gpu  # a CPU run's GPUs are not its own
        if gpu_run and self._open_nvml(devices, task_gpu):
            return
        if not first_task:
            self.unavailable = "the node's first task meters the CPU packages it shares"
            return
        rapl, why = open_rapl(Path(os.environ.get("DLSCALE_POWERCAP", POWERCAP)))
        if rapl is None:
            # a GPU run's reason is its GPUs' where NVML gave one; a CPU run's is RAPL's
            self.unavailable = self.unavailable or (
                f"no GPU is metered and {why}" if gpu_run else why
            )
            return
        self._rapl, self.source, self.unit = rapl, "powercap", "uJ"
        self.names = [str(path.parent.name) for path, _ in rapl.zones]
        self.wraps = [wrap for _, wrap in rapl.zones]

    def _open_nvml(self, devices: int | None, task_gpu: bool) -> bool:
        try:
            import pynvml  # nvidia-ml-py  # noqa: PLC0415
        except ImportError:
            self.unavailable = "nvidia-ml-py (pynvml) is not installed where the script runs"
            return False
        try:
            pynvml.nvmlInit()
            handles = _visible(pynvml)
            if not handles:
                return False
            if task_gpu and len(handles) > 1:  # a task shown the node's GPUs takes its own
                handles = handles[int(_task()) : int(_task()) + 1]
            handles = handles[: devices or len(handles)]
            for h in handles:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # Volta and newer
            names = [pynvml.nvmlDeviceGetName(h) for h in handles]
        except Exception as exc:  # NVMLError_*: no driver, no GPU, an older GPU
            self.unavailable = f"NVML cannot read the GPUs' energy ({type(exc).__name__})"
            return False
        self._nvml, self._handles, self.source, self.unit = pynvml, handles, "nvml", "mJ"
        self.names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        return True

    def read(self) -> tuple[list[int], list[float] | None]:
        """(each device's counter, each GPU's utilisation 0..1 or None on CPUs)."""
        if self._nvml is not None:
            nvml = self._nvml
            energy = [int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]
            util = [nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100 for h in self._handles]
            return energy, util
        assert self._rapl is not None
        return self._rapl.joules(), None


def _visible(pynvml: Any) -> list[Any]:
    """NVML handles of the GPUs CUDA_VISIBLE_DEVICES shows (indices or UUIDs), in its
    order; all of them where it is unset. NVML itself ignores the variable."""
    count = pynvml.nvmlDeviceGetCount()
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    if shown is None:
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    handles = []
    for item in (s.strip() for s in shown.split(",")):
        if not item:
            break
        if item.isdigit():
            if int(item) >= count:
                break
            handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(item)))
        else:
            handles.append(pynvml.nvmlDeviceGetHandleByUUID(item))
    return handles


class Timeline:
    """Samples of (time, counters, utilisation, log size), taken by a thread."""

    def __init__(self, counters: Counters, log: str | None) -> None:
        self.counters, self.log = counters, log
        self.samples: list[list[Any]] = []
        # [time, log size, interference counters] at every sample, metered or not
        self.load: list[list[Any]] = []
        self.cpus: list[int] = []
        self.every = EVERY_S
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        """One sample: the energy counters where they are metered, the log's size, and
        what else the machine did (interference.py's counters) whatever is metered, so a
        run's timed window is found, and its interference read, without an energy meter."""
        energy = util = None
        if self.failed is None and self.counters.source is not None:
            try:
                energy, util = self.counters.read()
            except Exception as exc:  # a counter that stops answering ends the metering
                self.failed = f"the {self.counters.source} counter stopped answering ({exc})"
                self.failed = self.failed[:300]
        size = None
        if self.log:
            try:
                size = os.stat(self.log).st_size
            except OSError:
                size = None
        now = time.time()
        if energy is not None:
            self.samples.append([now, energy, util, size])
        try:
            reading = interference.read()
            self.cpus = list(reading.cpus)
            self.load.append([now, size, interference.as_sample(reading)])
        except Exception:  # the meter never keeps the script from running
            pass
        if max(len(self.samples), len(self.load)) > MAX_SAMPLES:
            self.samples, self.load = self.samples[::2], self.load[::2]
            self.every *= 2

    def as_dict(self) -> dict[str, Any]:
        c = self.counters
        return {
            "source": c.source,
            "unit": c.unit,
            "devices": c.names,
            "wraps": c.wraps,
            "unavailable": c.unavailable if c.source is None else self.failed,
            "host": socket.gethostname(),
            "samples": self.samples,
            "load": self.load,
            "cpus": self.cpus,
        }


# A task's rank on its node, as srun, Open MPI, MPICH / Intel MPI and torchrun say it.
_LOCAL_RANK = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK")


def _task() -> str:
    return next((v for n in _LOCAL_RANK if (v := os.environ.get(n, "")).isdigit()), "0")


def write(out: Path, data: dict[str, Any]) -> None:
    """DIR/<host>-<task>.json, whole or not at all (a temporary name, then renamed)."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"{socket.gethostname()}-{_task()}.json"
    tmp = out / f".{name}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, out / name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dlscale-metered", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder of the timelines")
    p.add_argument("--devices", type=int, default=None, help="the first N visible GPUs")
    p.add_argument(
        "--task-gpu",
        action="store_true",
        help="one task a device: the GPU of this task's local rank (the one it sees alone)",
    )
    p.add_argument("--log", default=None, help="the run's log, whose size is sampled")
    p.add_argument(
        "--software",
        default=None,
        help="where the node's first task writes what --interpreter holds, before the command",
    )
    p.add_argument(
        "--interpreter",
        default=None,
        help="the argv (JSON) of the Python the command runs in, asked for its versions",
    )
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("no command to run after --")
    # Asked before the command starts, so it never competes with the measurement, and a
    # task that dies later (or a launcher that stops the rest when one fails) keeps it.
    if a.software and a.interpreter and _task() == "0":
        record_software(Path(a.software), json.loads(a.interpreter))
    try:
        counters = Counters(a.devices, first_task=_task() == "0", task_gpu=a.task_gpu)
        timeline: Timeline | None = Timeline(counters, a.log)
    except Exception as exc:  # the meter never keeps the script from running
        print(f"dlscale-metered: not metering ({type(exc).__name__}: {exc})", file=sys.stderr)
        timeline = None
    if timeline is not None:
        timeline.start()
    child = subprocess.Popen(command)

    def forward(signum: int, frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    rc = child.wait()
    if timeline is not None:
        timeline.stop()
        try:
            write(Path(a.out), timeline.as_dict())
        except OSError as exc:
            print(f"dlscale-metered: the timeline was not written ({exc})", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


PROBE_S = 30.0  # a cold container or a slow shared file system, not a hung interpreter


def record_software(out: Path, interpreter: list[str]) -> None:
    """`interpreter`'s versions (interpreter.py run in it, time-limited) as JSON in `out`,
    written whole or not at all; or why they are unknown."""
    source = Path(__file__).with_name("interpreter.py").read_text(encoding="utf-8")
    try:
        done = subprocess.run(
            [*interpreter, "-c", source],
            capture_output=True,
            timeout=PROBE_S,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"]
            raise ValueError(f"it exited {done.returncode}: {said[-1]}")
        versions = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        data: dict[str, Any] = {"interpreter": interpreter, "versions": versions}
    except subprocess.TimeoutExpired:
        data = {"interpreter": interpreter, "unavailable": f"no answer in {PROBE_S:.0f} s"}
    except (OSError, ValueError, IndexError) as exc:
        data = {"interpreter": interpreter, "unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, out)
    except OSError as exc:
        print(f"dlscale-metered: the software was not written ({exc})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
