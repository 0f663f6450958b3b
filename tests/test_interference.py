"""What else the machine did while a run measured (issue 50, item 1): the counters read at
the edges of a run's timed window (trainers/common/interference.py), on synthetic /proc
files and on this machine with a real CPU hog sharing the run's one CPU; and the record a
real trainer's run writes (about 10 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from conftest import dlscale, write_spec
from dlscale.trainers.common import interference
from dlscale.trainers.common.interference import Reading, Window, _cpu_times, _stall


def test_cpu_times_of_the_run_s_cpus_only(tmp_path):
    (tmp_path / "stat").write_text(
        "cpu  900 0 300 5000 10 0 0 40 0 0\n"
        "cpu0 400 0 100 2500 5 0 0 20 0 0\n"  # user nice system idle iowait irq softirq steal
        "cpu1 500 0 200 2500 5 10 10 20 0 0\n"
        "intr 1 2 3\n"
    )
    tick = os.sysconf("SC_CLK_TCK")
    assert _cpu_times((1,), tmp_path / "stat") == pytest.approx((720 / tick, 20 / tick))
    assert _cpu_times((0, 1), tmp_path / "stat") == pytest.approx((1220 / tick, 40 / tick))
    (tmp_path / "bad").write_text("cpu0 x y z\n")
    assert _cpu_times((0,), tmp_path / "bad") == (None, None)
    assert _cpu_times((0,), tmp_path / "absent") == (None, None)


def test_pressure_stall_totals(tmp_path):
    (tmp_path / "cpu").write_text(
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    (tmp_path / "io").write_text("some avg10=0 total=oops\n")
    assert _stall("cpu", tmp_path) == 2.5
    assert _stall("io", tmp_path) is None  # unreadable: unknown, not 0
    assert _stall("memory", tmp_path) is None  # absent (a kernel without PSI)


def _reading(at, busy, run, stall, ran=0.0, queued=0.0, cpus=(0, 1)):
    return Reading(at, cpus, busy, 0.0, run, run, {"cpu": stall, "io": 0.0, "memory": None},
                   ran, queued)  # fmt: skip


def test_a_window_sums_its_segments_and_gives_shares():
    w = Window()
    w.resume(_reading(0.0, busy=0.0, run=0.0, stall=0.0))
    w.pause(_reading(10.0, busy=12.0, run=8.0, stall=2.0, ran=8.0, queued=2.0))
    w.resume(_reading(50.0, busy=100.0, run=90.0, stall=40.0, ran=90.0, queued=40.0))
    w.pause(_reading(60.0, busy=106.0, run=94.0, stall=40.0, ran=94.0, queued=41.0))
    rec = w.record()
    assert rec["window_s"] == 20.0 and rec["cpus"] == [0, 1]
    # others: busy 18 less the run's 12, over 20 s x 2 CPUs (the gap between is not counted)
    assert rec["others_cpu_share"] == pytest.approx(6 / 40)
    assert rec["cpu_stall_share"] == pytest.approx(2 / 20)
    assert rec["run_queue_wait_share"] == pytest.approx(3 / 15)
    assert rec["memory_stall_share"] is None  # one edge unknown: unknown
    w.pause()  # nothing open: nothing added
    assert w.record()["window_s"] == 20.0


def _hog(cpu: int) -> tuple[int, subprocess.Popen]:
    """A busy loop pinned to `cpu`, outside this process's tree (its shell exits, so it is
    another process's, as a neighbour's is): its pid, once it spins; and the pipe it said so
    on."""
    spin = (
        f"import os\nos.sched_setaffinity(0, {{{cpu}}})\n"
        "print(os.getpid(), flush=True)\nwhile 1: pass"
    )
    shell = subprocess.Popen(
        ["sh", "-c", 'exec 3>&1; "$0" -c "$1" >&3 &', sys.executable, spin],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())  # pinned, and spinning from now on
    shell.wait()
    return pid, shell


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_hog_on_the_run_s_cpu_is_seen(monkeypatch):
    """A busy loop pinned to the one CPU this process is pinned to: this process's thread
    waits for it about half the time (51-68% measured beside CI), and others take a share of
    its CPU (whatever else runs, these only grow). The run here is this process alone (under
    xdist its parent is pytest's, a python like a launcher, whose tree holds the other
    worker)."""
    monkeypatch.setattr(interference, "launcher_pid", lambda: None)
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    pid, shell = _hog(cpu)
    try:
        os.sched_setaffinity(0, {cpu})
        w = Window()
        w.resume()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        w.pause()
    finally:
        os.sched_setaffinity(0, before)
        os.kill(pid, signal.SIGKILL)
        shell.stdout.close()  # type: ignore[union-attr]
    rec = w.record()
    assert rec["cpus"] == [cpu]
    if rec["run_queue_wait_share"] is not None:  # a kernel with schedstats
        assert rec["run_queue_wait_share"] >= 0.3, rec
    assert rec["others_cpu_share"] >= 0.3, rec


@pytest.mark.slow  # trains the built-in trainer: needs torch
def test_a_run_records_its_window_and_cpu_time_per_step(tmp_path, home):
    spec = write_spec(tmp_path / "s.toml", name="load", scales='"1x1"', steps=6)
    dlscale("run", str(spec), "--wait", check=0)
    (metrics,) = (home / "runs").glob("*/metrics.jsonl")
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    (load,) = [r for r in records if r["kind"] == "interference"]
    summary = next(r for r in records if r["kind"] == "summary")
    assert load["window_s"] == pytest.approx(summary["elapsed_s"], rel=0.2, abs=0.05)
    for name in ("others_cpu_share", "cpu_stall_share", "run_queue_wait_share"):
        assert load[name] is None or 0 <= load[name] <= 1
    assert 0 < summary["cpu_s_per_step"] < 10
    per_step = load["rank_cpu_s"] / summary["timed_steps"]
    assert summary["cpu_s_per_step"] == pytest.approx(per_step)
    assert interference.launcher_pid() is None or interference.launcher_pid() > 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_glance_names_what_is_busy_and_leaves_out_dlscale_s_own():
    """Issue 50 item 4: before a study starts, a half-second look at every CPU: a busy loop
    on one of them is among the busiest, by its command line; left out (dlscale's own
    worker), it is not counted."""
    pid, shell = _hog(min(os.sched_getaffinity(0)))
    try:
        seen = interference.glance(1.0)
        left = interference.glance(1.0, {pid})
    finally:
        os.kill(pid, signal.SIGKILL)
        shell.stdout.close()  # type: ignore[union-attr]
    assert seen.others_share is not None and seen.others_share >= 0.05 / seen.cpus, seen
    (hog,) = [b for b in seen.busiest if b[1] == pid]
    # its CPU shared with a loaded CI machine's every other process, at worst
    assert "-c import os" in hog[0] and hog[2] >= 0.05, seen
    assert all(b[1] != pid for b in left.busiest), left


def test_a_busy_process_is_named_by_its_program_and_arguments(tmp_path):
    """A venv's long path to `python` is cut to the program's name, so the arguments that
    tell one Python from another fit (CI's 3.13 venv path hid `-c ...` past 60 characters)."""
    long = "/var/cache/dlscale/pythons/py3.13.0-4d8a59818f13/bin/python"
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"\0".join([long.encode(), b"-c", b"import os"]))
    assert interference._command(7, tmp_path, "python3") == "python -c import os"
    assert interference._command(8, tmp_path, "kworker") == "kworker"  # gone: its name


def test_run_waits_for_a_quiet_machine_only_when_asked(monkeypatch, capsys):
    from dlscale.engine.cli import runs

    class Busy:
        looks = 0

        def busy(self):
            self.looks += 1
            return "this machine is busy: hog (pid 1)" if self.looks <= 3 else None

    monkeypatch.setattr(runs, "LOOK_AGAIN_S", 0.0)
    assert runs._quiet_enough(Busy(), "go")
    said = capsys.readouterr().out
    assert "hog (pid 1); going on" in said
    target = Busy()
    assert runs._quiet_enough(target, "wait") and target.looks == 4
    said = capsys.readouterr().out
    assert "waiting for it to be quiet" in said and "quiet after" in said


class FakeNvml:
    """NVML as the GPU neighbours read it: the compute processes now, and the per-process
    utilisation samples since a time (NVML raises NOT_FOUND when it kept none)."""

    def __init__(self, running, samples):
        self.running, self.samples, self.asked_since = running, samples, []

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.running]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        self.asked_since.append(since)
        if not self.samples:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return [
            types.SimpleNamespace(pid=p, smUtil=u, timeStamp=since + 1) for p, u in self.samples
        ]


def test_a_foreign_gpu_process_is_seen_with_its_share_of_the_gpu():
    """Issue 50: compute processes on the run's GPU that are not the run's, and their SM
    utilisation over the window, from NVML (a synthetic one: CI has no GPU)."""
    ours = {10, 11}
    nvml = FakeNvml(running=[10, 99], samples=[(10, 80), (99, 40), (10, 70), (99, 30)])
    w = Window(gpu=interference.GpuNeighbours(nvml, "gpu0", lambda: ours))
    w.resume()
    w.pause()
    rec = w.record()
    assert rec["foreign_gpu_pids"] == [99]
    assert rec["foreign_gpu_util_share"] == pytest.approx((40 + 30) / 100 / 4)
    assert nvml.asked_since and nvml.asked_since[0] > 1e15  # microseconds, as NVML counts
    # alone on its GPU, NVML keeping no samples: nothing foreign, and no share to judge by
    alone = Window(gpu=interference.GpuNeighbours(FakeNvml([10], []), "gpu0", lambda: ours))
    alone.resume()
    alone.pause()
    assert alone.record()["foreign_gpu_pids"] == []
    assert alone.record()["foreign_gpu_util_share"] is None
    # a driver that will not list processes: unknown, not "none"
    broken = FakeNvml([], [])
    broken.nvmlDeviceGetComputeRunningProcesses = None  # type: ignore[assignment]
    w = Window(gpu=interference.GpuNeighbours(broken, "gpu0", lambda: ours))
    w.resume()
    w.pause()
    assert w.record()["foreign_gpu_pids"] is None
    assert w.record()["foreign_gpu_util_share"] is None
    # in a container, NVML lists host pids: the run's own cannot be told from others'
    hosted = FakeNvml(running=[4010, 4099], samples=[(4010, 80), (4099, 40)])
    w = Window(gpu=interference.GpuNeighbours(hosted, "gpu0", lambda: ours))
    w.resume()
    w.pause()
    assert w.record()["foreign_gpu_util_share"] is None
    # a run without a metered GPU has neither field
    assert "foreign_gpu_pids" not in Window().record()


def test_disk_and_network_bytes_are_read_from_the_kernel_s_counters(tmp_path):
    """Issue 50: others' I/O beside the run's own. Whole disks only (a partition's sectors
    are its disk's too; loop and RAM devices are no disk), 512-byte sectors read and
    written; the network's bytes in and out on every interface but loopback."""
    block = tmp_path / "block"
    for name in ("vda", "loop0", "zram0"):
        (block / name).mkdir(parents=True)
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "diskstats").write_text(
        " 254 0 vda 10 0 100 5 20 0 300 9 0 0 0\n"
        " 254 1 vda1 10 0 100 5 20 0 300 9 0 0 0\n"  # vda's partition: counted in vda
        "   7 0 loop0 1 0 5000 0 0 0 0 0 0 0 0\n"
        " 252 0 zram0 1 0 7000 0 0 0 9000 0 0 0 0\n"
    )
    assert interference._disk_bytes(proc, block) == (100 + 300) * 512
    assert interference._disk_bytes(tmp_path / "none", block) is None
    (proc / "net" / "dev").write_text(
        "Inter-|   Receive ...\n face |bytes packets ...\n"
        "    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n"
        "  eth0: 1000 2 0 0 0 0 0 0 250 3 0 0 0 0 0 0\n"
        "  ib0: 4000 2 0 0 0 0 0 0 50 3 0 0 0 0 0 0\n"
    )
    assert interference._net_bytes(proc) == 1000 + 250 + 4000 + 50


def test_the_run_s_own_disk_bytes_count_what_it_wrote(tmp_path):
    """The tree's /proc/PID/io: 4 MiB written and synced by this process show in its own
    bytes (others' is the disks' less it); an unreadable root says nothing."""
    window = interference.Window()
    window.resume()
    with open(tmp_path / "data", "wb") as fh:
        fh.write(os.urandom(4 << 20))
        fh.flush()
        os.fsync(fh.fileno())
    window.pause()
    record = window.record()
    if record["own_disk_bytes"] is None:
        pytest.skip("no /proc/PID/io here (a kernel without task I/O accounting)")
    assert record["own_disk_bytes"] >= 4 << 20
    assert record["others_disk_bytes"] is None or record["others_disk_bytes"] >= 0
    assert interference._tree_disk_bytes(os.getpid(), tmp_path) is None
