"""What else the machine did while a run measured (issue 50): read from Linux's cumulative
counters at the edges of the run's timed window, so nothing samples during its steps.

Over the window, on the CPUs the run may use (its affinity):
- `others_cpu_share`: the share of those CPUs' time that processes other than the run's
  used: their busy time (/proc/stat: user, nice, system, irq, softirq) less the run's own
  CPU time, over the window's seconds times the CPUs. The run's own is the process tree of
  the rank's launcher (spawn, torchrun, or Slurm's step daemon: every rank of the run on
  the node), or the rank's own tree where it has no launcher of its own;
- `steal_share`: the time a hypervisor gave those CPUs to other guests, over the same;
- `cpu_stall_share`, `io_stall_share`, `memory_stall_share`: pressure stall information
  (/proc/pressure: the machine's `some` totals), the share of the window in which some task
  waited for that resource;
- `run_queue_wait_share`: of the time the rank's threads wanted a CPU, the share they
  waited on a run queue for one (/proc/PID/task/TID/schedstat): the most direct sign that
  something else took the CPUs the run needed (others' share above counts CPUs the run
  did not want: one thread on two CPUs leaves one to others at no cost);
and the run's own CPU seconds (`own_cpu_s`), the rank's (`rank_cpu_s`, what a CPU-time
measure per step is made of). A counter the kernel does not offer is None.

Standard library only: the trainers use it, in the job's own environment.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import cpu_time

PROC = Path("/proc")
SYS_BLOCK = Path("/sys/block")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
RESOURCES = ("cpu", "io", "memory")
# The launchers whose tree is the run's on a node (a rank's parent): anything else (a job
# shell, the local worker) has other work in it, and the rank's own tree stands for the run.
LAUNCHERS = ("python", "torchrun", "slurmstepd", "mpirun", "orted", "horovodrun", "prterun")


@dataclass(frozen=True)
class Reading:
    """The counters at one moment."""

    at: float  # time.monotonic()
    cpus: tuple[int, ...]
    busy_s: float | None  # the CPUs' busy time, every process's
    steal_s: float | None
    run_cpu_s: float | None  # the run's process tree on this node
    rank_cpu_s: float | None  # this rank's process tree
    stall_s: dict[str, float | None] = field(default_factory=dict)
    # this rank's threads: seconds on a CPU and seconds waiting on a run queue
    ran_s: float | None = None
    queued_s: float | None = None
    # bytes the node's disks moved (read and written), the run's tree's own storage I/O,
    # and the bytes the node's network interfaces moved (all but loopback)
    disk_bytes: float | None = None
    run_disk_bytes: float | None = None
    net_bytes: float | None = None


def _disk_bytes(proc: Path, block: Path) -> float | None:
    """Sectors the node's whole disks read and wrote (/proc/diskstats counts partitions
    too: only names /sys/block lists, less loop and RAM devices), in bytes."""
    try:
        disks = {d.name for d in block.iterdir() if not d.name.startswith(("loop", "ram", "zram"))}
        lines = (proc / "diskstats").read_text().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        words = line.split()
        if len(words) > 9 and words[2] in disks and words[5].isdigit() and words[9].isdigit():
            total += (int(words[5]) + int(words[9])) * 512  # a diskstats sector is 512 bytes
    return float(total)


def _tree_disk_bytes(root: int, proc: Path) -> float | None:
    """The storage I/O of `root`'s tree (/proc/PID/io read_bytes + write_bytes: a reaped
    child's count joins its parent's), in bytes; None where /proc/ROOT/io is unreadable."""
    total = 0.0
    for pid in cpu_time.tree_pids(root):
        try:
            fields = dict(
                line.split(": ", 1) for line in (proc / str(pid) / "io").read_text().splitlines()
            )
            total += int(fields["read_bytes"]) + int(fields["write_bytes"])
        except (OSError, KeyError, ValueError):
            if pid == root:
                return None
    return total


def _net_bytes(proc: Path) -> float | None:
    """Bytes received and sent by the node's network interfaces, loopback left out."""
    try:
        lines = (proc / "net" / "dev").read_text().splitlines()[2:]
    except OSError:
        return None
    total = 0
    for line in lines:
        name, _, rest = line.partition(":")
        words = rest.split()
        if name.strip() != "lo" and len(words) > 8 and words[0].isdigit() and words[8].isdigit():
            total += int(words[0]) + int(words[8])
    return float(total)


def _cpu_times(cpus: tuple[int, ...], stat: Path) -> tuple[float | None, float | None]:
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None, None
    busy = steal = 0.0
    wanted = {f"cpu{c}" for c in cpus}
    for line in lines:
        words = line.split()
        if not words or words[0] not in wanted:
            continue
        try:
            ticks = [int(x) for x in words[1:9]]
        except ValueError:
            return None, None
        user, nice, system, _idle, _iowait, irq, softirq, stolen = ticks + [0] * (8 - len(ticks))
        busy += (user + nice + system + irq + softirq) / _TICK
        steal += stolen / _TICK
    return busy, steal


def _stall(resource: str, pressure: Path) -> float | None:
    """The `some` total of a resource's pressure stall information, in seconds."""
    try:
        text = (pressure / resource).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for word in line.split():
                if word.startswith("total="):
                    try:
                        return int(word[6:]) / 1e6
                    except ValueError:
                        return None
    return None


def launcher_pid() -> int | None:
    """The rank's parent where it is a launcher of the run's ranks, else None."""
    parent = os.getppid()
    try:
        name = (PROC / str(parent) / "comm").read_text().strip()
    except OSError:
        return None
    return parent if name.startswith(LAUNCHERS) else None


def read(proc: Path = PROC) -> Reading:
    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = tuple(range(os.cpu_count() or 1))
    busy, steal = _cpu_times(cpus, proc / "stat")
    rank = cpu_time.tree_seconds()
    parent = launcher_pid()
    run = cpu_time.tree_seconds(parent) if parent is not None else rank
    stall = {r: _stall(r, proc / "pressure") for r in RESOURCES}
    waits = cpu_time.tree_waits()
    ran, queued = waits if waits is not None else (None, None)
    disk = _disk_bytes(proc, SYS_BLOCK)
    own_disk = _tree_disk_bytes(parent if parent is not None else os.getpid(), proc)
    return Reading(
        time.monotonic(),
        cpus,
        busy,
        steal,
        run,
        rank,
        stall,
        ran,
        queued,
        disk,
        own_disk,
        _net_bytes(proc),
    )


# A Reading's counters, as a meter's timeline keeps them (metered.py: one dict a sample)
COUNTERS = (
    "busy_s",
    "steal_s",
    "run_cpu_s",
    "rank_cpu_s",
    "ran_s",
    "queued_s",
    "disk_bytes",
    "run_disk_bytes",
    "net_bytes",
)


def as_sample(r: Reading) -> dict[str, float | None]:
    return {
        **{name: getattr(r, name) for name in COUNTERS},
        **{f"{k}_stall_s": v for k, v in r.stall_s.items()},
    }


def from_sample(at: float, cpus: tuple[int, ...], sample: dict[str, object]) -> Reading:
    """A Reading from a timeline's sample (unknown or malformed counters: None)."""

    def number(name: str) -> float | None:
        v = sample.get(name)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    values = {name: number(name) for name in COUNTERS}
    stall = {r: number(f"{r}_stall_s") for r in RESOURCES}
    return Reading(at, cpus, stall_s=stall, **values)  # type: ignore[arg-type]


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


@dataclass
class Window:
    """The sum of a run's timed segments, each between two readings."""

    seconds: float = 0.0
    cpus: tuple[int, ...] = ()
    busy_s: float | None = 0.0
    steal_s: float | None = 0.0
    run_cpu_s: float | None = 0.0
    rank_cpu_s: float | None = 0.0
    stall_s: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0.0))
    ran_s: float | None = 0.0
    queued_s: float | None = 0.0
    disk_bytes: float | None = 0.0
    run_disk_bytes: float | None = 0.0
    net_bytes: float | None = 0.0
    gpu: GpuNeighbours | None = None  # the run's GPU's other users, where NVML is open
    _open: Reading | None = None

    def resume(self, reading: Reading | None = None) -> None:
        self._open = reading or read()
        if self.gpu is not None:
            self.gpu.resume()

    def pause(self, reading: Reading | None = None) -> None:
        """Close the segment opened by `resume` (nothing if none is open)."""
        a, self._open = self._open, None
        if a is None:
            return
        b = reading or read()
        if self.gpu is not None:
            self.gpu.pause()
        self.seconds += max(0.0, b.at - a.at)
        self.cpus = b.cpus
        for name in COUNTERS:
            d = _delta(getattr(a, name), getattr(b, name))
            total = getattr(self, name)
            setattr(self, name, None if d is None or total is None else total + d)
        for r in RESOURCES:
            d = _delta(a.stall_s.get(r), b.stall_s.get(r))
            total = self.stall_s.get(r)
            self.stall_s[r] = None if d is None or total is None else total + d

    def record(self) -> dict[str, object]:
        """The `interference` record's fields: shares of the window (0 to 1), None where
        the kernel does not say."""
        span = self.seconds * max(1, len(self.cpus))

        def share(value: float | None, over: float) -> float | None:
            return None if value is None or over <= 0 else min(1.0, max(0.0, value / over))

        others = None
        if self.busy_s is not None and self.run_cpu_s is not None:
            others = share(max(0.0, self.busy_s - self.run_cpu_s), span)
        others_disk = None
        if self.disk_bytes is not None and self.run_disk_bytes is not None:
            others_disk = max(0.0, self.disk_bytes - self.run_disk_bytes)
        waited = None
        if self.ran_s is not None and self.queued_s is not None:
            waited = share(self.queued_s, self.ran_s + self.queued_s)
        return {
            "window_s": self.seconds,
            "cpus": list(self.cpus),
            "run_queue_wait_share": waited,
            "others_cpu_share": others,
            "steal_share": share(self.steal_s, span),
            **{f"{r}_stall_share": share(self.stall_s.get(r), self.seconds) for r in RESOURCES},
            "own_cpu_s": self.run_cpu_s,
            "rank_cpu_s": self.rank_cpu_s,
            # the node's disks over the window, the run's own storage I/O, and the rest:
            # others' (a run's writes reach the disk later, from the page cache, so over a
            # short window its own can exceed the disks' and others' is then 0)
            "disk_bytes": self.disk_bytes,
            "own_disk_bytes": self.run_disk_bytes,
            "others_disk_bytes": others_disk,
            "net_bytes": self.net_bytes,
            **(self.gpu.record() if self.gpu is not None else {}),
        }


# --- a glance at the machine before a study starts (issue 50, item 4) -----------------------


@dataclass(frozen=True)
class Glance:
    """What the machine's CPUs did over a short look: the share of all of them that
    processes other than the ones left out used, and the busiest of those, by name."""

    seconds: float
    cpus: int
    others_share: float | None  # None: /proc cannot say
    # (command line, pid, share of one CPU), the busiest first: at most 20, each 1% or more
    busiest: tuple[tuple[str, int, float], ...]


def _processes(proc: Path) -> dict[int, tuple[str, int, float]]:
    """pid -> (command name, parent pid, CPU seconds) of every process /proc lists."""
    out = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        fields = text.rsplit(")", 1)[-1].split()
        try:  # proc(5): ppid is field 4, utime and stime 14 and 15
            cpu_s = (int(fields[11]) + int(fields[12])) / _TICK
            out[int(entry.name)] = (name, int(fields[1]), cpu_s)
        except (ValueError, IndexError):
            continue
    return out


def _below(pids: set[int], parents: dict[int, int]) -> set[int]:
    """`pids` and every process below them."""
    out = set(pids)
    changed = True
    while changed:
        more = {p for p, parent in parents.items() if parent in out and p not in out}
        out |= more
        changed = bool(more)
    return out


def _command(pid: int, proc: Path, name: str) -> str:
    """A process's command line, its first words (else its name), the program by its file
    name: a venv's 70-character path to `python` would leave no room for the arguments
    that tell one Python from another."""
    try:
        words = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return name
    shown = [" ".join(w.decode("utf-8", "replace").split()) for w in words[:4] if w]
    if shown:
        shown[0] = shown[0].rsplit("/", 1)[-1] or shown[0]
    text = " ".join(shown)
    return (text[:60] + "...") if len(text) > 60 else text or name


def glance(seconds: float = 1.0, leave_out: Collection[int] = (), proc: Path = PROC) -> Glance:
    """Look at every CPU for `seconds`: how much of them processes used, less this process's
    tree and the trees of `leave_out` (dlscale's own: its worker and the runs it starts)."""
    cpus = tuple(range(os.cpu_count() or 1))
    busy0, _ = _cpu_times(cpus, proc / "stat")
    before = _processes(proc)
    start = time.monotonic()
    time.sleep(seconds)
    busy1, _ = _cpu_times(cpus, proc / "stat")
    after = _processes(proc)
    took = time.monotonic() - start
    parents = {pid: v[1] for pid, v in after.items()}
    ours = _below({os.getpid(), *leave_out}, parents)
    used = {
        pid: max(0.0, v[2] - before[pid][2])
        for pid, v in after.items()
        if pid in before and pid not in ours
    }
    share = None
    if busy0 is not None and busy1 is not None and took > 0:
        own = sum(max(0.0, after[p][2] - before[p][2]) for p in ours if p in after and p in before)
        share = min(1.0, max(0.0, (busy1 - busy0 - own) / (took * len(cpus))))
    top = sorted(used.items(), key=lambda kv: -kv[1])[:20]
    busiest = tuple(
        (_command(pid, proc, after[pid][0]), pid, s / took) for pid, s in top if s / took >= 0.01
    )
    return Glance(took, len(cpus), share, busiest)


def quietest(
    count: int, seconds: float = 0.5, allowed: Collection[int] | None = None, proc: Path = PROC
) -> tuple[list[int], dict[int, float]]:
    """The `count` CPUs of `allowed` (this process's, by default) that were least busy over
    `seconds`, in ascending order, and each allowed CPU's busy share: where a run pinned
    there meets the least other work (issue 50: `cpus = "quiet"`). Ties go to the higher
    CPU: the lowest carries more of the system's own work (interrupts, timers). Nothing
    readable: the first `count`, shares empty."""
    cpus = tuple(sorted(allowed if allowed is not None else os.sched_getaffinity(0)))
    before = {c: _cpu_times((c,), proc / "stat")[0] for c in cpus}
    start = time.monotonic()
    time.sleep(seconds)
    after = {c: _cpu_times((c,), proc / "stat")[0] for c in cpus}
    took = time.monotonic() - start
    shares = {
        c: min(1.0, max(0.0, (b1 - b0) / took))
        for c in cpus
        if (b0 := before[c]) is not None and (b1 := after[c]) is not None and took > 0
    }
    if len(shares) < len(cpus):
        return list(cpus[:count]), {}
    chosen = sorted(cpus, key=lambda c: (round(shares[c], 2), -c))[:count]
    return sorted(chosen), shares


# --- a GPU's other users (issue 50: "a foreign process used GPU 0 for 12 s") ----------------


class GpuNeighbours:
    """Compute processes on the run's GPU that are not the run's, over its timed window,
    from NVML: the processes at each segment's edges (nvmlDeviceGetComputeRunningProcesses)
    and, between them, the per-process SM utilisation samples NVML keeps
    (nvmlDeviceGetProcessUtilization, since the segment began). The run's own processes are
    the node's tree of the rank's launcher, or the rank's own. Whatever NVML refuses (an
    older driver, no permission to see other users' processes) leaves its field None."""

    def __init__(self, nvml: Any, handle: Any, ours: Callable[[], set[int]]) -> None:
        self._nvml, self._handle, self._ours = nvml, handle, ours
        self._since: int | None = None  # NVML's timestamp (microseconds) a segment began
        self.pids: set[int] = set()
        self.util_sum = 0.0  # foreign SM utilisation (%) summed over samples
        self.samples = 0  # samples of any process in the window
        self.unknown: str | None = None

    def _foreign(self) -> set[int]:
        try:
            found = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception as exc:
            self.unknown = f"NVML lists no processes ({type(exc).__name__})"
            return set()
        pids, ours = {int(p.pid) for p in found}, self._ours()
        if pids and not pids & ours:
            # The run computes on this GPU by now (its warm-up ran), so NVML lists it: under
            # another pid, in a container's pid namespace, where no pid can be told apart
            self.unknown = "NVML's process ids are not this namespace's (a container)"
            return set()
        return pids - ours

    def resume(self) -> None:
        self.pids |= self._foreign()
        self._since = int(time.time() * 1e6)

    def pause(self) -> None:
        if self._since is None:
            return
        since, self._since = self._since, None
        foreign = self._foreign()
        self.pids |= foreign
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(self._handle, since)
        except Exception:  # NVML_ERROR_NOT_FOUND: no process sampled since (or none kept)
            samples = []
        ours = self._ours()
        for s in samples:
            self.samples += 1
            if int(s.pid) not in ours:
                self.pids.add(int(s.pid))
                self.util_sum += float(s.smUtil)

    def record(self) -> dict[str, object]:
        """`foreign_gpu_pids`; `foreign_gpu_util_share`: the foreign processes' SM
        utilisation over the window's samples (0 to 1), None where NVML kept none."""
        share = None
        if self.samples and self.unknown is None:
            share = min(1.0, self.util_sum / 100.0 / self.samples)
        return {
            "foreign_gpu_pids": sorted(self.pids) if self.unknown is None else None,
            "foreign_gpu_util_share": share,
        }


def run_pids() -> set[int]:
    """The processes of the run on this node: the launcher's tree, or the rank's own."""
    parent = launcher_pid()
    return set(cpu_time.tree_pids(parent if parent is not None else os.getpid()))
