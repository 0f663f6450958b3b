"""Energy around a declared framework's script: the meter that wraps its command
(trainers/common/metered.py: its child's exit status and signals, its timeline) and the
energy over the timed window taken from that timeline (engine/tracking/custom_energy.py).
The examples' end-to-end runs check the whole path in tests/test_custom_runs.py, and on a
GPU in tests/gpu."""

import json
import signal
import subprocess
import sys
import time

import pytest
from test_energy import fake_powercap, set_energy

from conftest import HANG_S
from dlscale.engine.tracking import custom_energy

METER = [sys.executable, "-m", "dlscale.trainers.common.metered"]


def timeline(samples, unit="uJ", wraps=(10**9,), source="powercap", unavailable=None):
    return {
        "source": source,
        "unit": unit,
        "devices": ["package-0"] * len(wraps),
        "wraps": list(wraps),
        "unavailable": unavailable,
        "host": "n1",
        "samples": [[t, list(e), None, size] for t, e, size in samples],
    }


def test_energy_over_the_window_is_interpolated_between_samples():
    # 10 W from t=100 to t=110 (1e7 uJ a second... 10 J a second), sampled each second
    tl = timeline([(100 + i, [i * 10_000_000], None) for i in range(11)])
    fields = custom_energy.energy_over([tl], 102.5, 106.5, units=400)
    assert fields["energy_j"] == pytest.approx(40.0)
    assert fields["mean_power_w"] == pytest.approx(10.0)
    assert fields["energy_per_image_j"] == pytest.approx(0.1)
    assert fields["energy_source"] == "powercap" and fields["energy_window_s"] == 4.0


def test_nodes_and_devices_are_summed_and_a_wrapped_counter_unwrapped():
    wrap = 50_000_000
    a_counts = [0, 15_000_000, 30_000_000, 45_000_000, 10_000_000]  # wrapped at 50 J
    a = timeline([(2 * i, [c], None) for i, c in enumerate(a_counts)], wraps=[wrap])
    b_counts = [[i * 500_000, i * 1_000_000] for i in range(5)]
    b = timeline([(2 * i, c, None) for i, c in enumerate(b_counts)], wraps=[wrap, wrap])
    fields = custom_energy.energy_over([a, b], 0.0, 8.0, units=1)
    assert fields["energy_j"] == pytest.approx(60 + 2 + 4)
    assert fields["devices_metered"] == ["package-0"] * 3


def test_a_window_the_samples_do_not_cover_leaves_the_energy_unknown():
    tl = timeline([(100 + i, [i], None) for i in range(5)])
    fields = custom_energy.energy_over([tl], 90.0, 103.0, units=10)
    assert (
        "energy_j" not in fields and "do not cover the timed steps" in fields["energy_unavailable"]
    )


def test_a_window_of_too_few_sampling_intervals_leaves_the_energy_unknown():
    """Interpolated over a window shorter than MIN_INTERVALS samples, the energy would be
    mostly the counters' movement outside the timed steps: unknown, saying why."""
    n = custom_energy.MIN_INTERVALS
    tl = timeline([(100 + i * 0.25, [i * 1_000_000], None) for i in range(40)])
    assert custom_energy.energy_over([tl], 101.0, 101.0 + n * 0.25, units=1)["energy_j"] > 0
    short = custom_energy.energy_over([tl], 101.0, 101.0 + n * 0.25 - 0.01, units=1)
    assert "energy_j" not in short, short
    why = short["energy_unavailable"]
    assert "lasted 0.99 s" in why and "sampling intervals (0.25 s)" in why, why


def test_shared_packages_left_to_the_first_task_are_not_a_failure():
    metered = timeline([(i, [i * 1_000_000], None) for i in range(5)])
    other = timeline([], source=None, unavailable=custom_energy.SHARED_CPU)
    assert custom_energy.energy_over([metered, other], 0, 4, 1)["energy_j"] == pytest.approx(4.0)
    nothing = timeline([], source=None, unavailable="no RAPL here")
    assert custom_energy.energy_over([nothing], 0, 1, 1) == {"energy_unavailable": "no RAPL here"}


def test_the_log_line_is_dated_by_the_first_sample_that_held_it():
    tl = timeline([(10, [0], 100), (11, [0], 250), (12, [0], 900)])
    assert custom_energy.log_time([tl], 250) == 11
    assert custom_energy.log_time([tl], 251) == 12
    assert custom_energy.log_time([tl], 5000) is None


def test_the_meter_runs_its_command_returns_its_status_and_writes_a_timeline(tmp_path, monkeypatch):
    root = fake_powercap(tmp_path / "powercap", packages=1, start=0)
    monkeypatch.setenv("DLSCALE_POWERCAP", str(root))
    log = tmp_path / "run.log"
    log.write_text("x" * 10)
    started = tmp_path / "started"
    script = f"import pathlib, sys, time; pathlib.Path({str(started)!r}).touch(); "
    script += "time.sleep(0.8); sys.exit(3)"
    proc = subprocess.Popen(
        [*METER, "--out", str(tmp_path / "energy"), "--log", str(log), "--", sys.executable]
        + ["-c", script]
    )
    deadline = time.monotonic() + HANG_S
    while not started.exists() and time.monotonic() < deadline:  # metering by then
        time.sleep(0.02)
    set_energy(root, 0, 5_000_000)
    assert proc.wait(timeout=HANG_S) == 3
    (written,) = (tmp_path / "energy").glob("*.json")
    data = json.loads(written.read_text())
    assert data["source"] == "powercap" and data["unit"] == "uJ"
    assert len(data["samples"]) >= 3
    assert data["samples"][0][1] == [0] and data["samples"][-1][1] == [5_000_000]
    assert data["samples"][-1][3] == 10  # the log's size, sampled


def test_a_signal_to_the_meter_reaches_its_command_and_the_timeline_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCALE_POWERCAP", str(fake_powercap(tmp_path / "pc", packages=1)))
    marker = tmp_path / "got-term"
    script = (
        "import signal, sys, time, pathlib\n"
        "def bye(*a):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('term'); sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [*METER, "--out", str(tmp_path / "energy"), "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=HANG_S) == 143
    assert marker.read_text() == "term"
    assert list((tmp_path / "energy").glob("*.json"))


def _unreadable_rapl(root, how):
    """A machine's RAPL that cannot be read, in each way one is met."""
    if how == "no folder":
        return root
    root.mkdir()
    if how == "a package without its counter":
        fake_powercap(root, packages=1)
        (root / "intel-rapl:0" / "energy_uj").unlink()
    elif how == "a counter that is not a number":
        fake_powercap(root, packages=1)
        (root / "intel-rapl:0" / "energy_uj").write_text("n/a\n")
    elif how == "core zones only":
        fake_powercap(root, packages=1)
        (root / "intel-rapl:0" / "name").write_text("dram\n")
    return root


@pytest.mark.parametrize(
    "how",
    [
        "no folder",
        "empty",
        "a package without its counter",
        "a counter that is not a number",
        "core zones only",
    ],
)
def test_a_cpu_runs_unknown_energy_says_the_cpus_reason_as_the_built_in_trainer_does(
    tmp_path, monkeypatch, how
):
    """On a CPU run (the meter given no GPUs, as custom_launch.metered words it for a CPU
    device), the reason is RAPL's in the built-in trainers' words, never NVML's or that
    nvidia-ml-py is missing, whatever this machine's GPUs and driver."""
    from dlscale.trainers.common.energy import Meter

    root = _unreadable_rapl(tmp_path / "powercap", how)
    monkeypatch.setenv("DLSCALE_POWERCAP", str(root))
    built_in = Meter(powercap=str(root)).unavailable
    assert built_in is not None and "RAPL" in built_in
    out = tmp_path / "energy"
    subprocess.run([*METER, "--out", str(out), "--", sys.executable, "-c", ""], check=True)
    (written,) = out.glob("*.json")
    declared = json.loads(written.read_text())["unavailable"]
    assert declared == built_in
    shown = custom_energy.energy_over([json.loads(written.read_text())], 0, 1, 1)
    assert shown == {"energy_unavailable": built_in}


def _load_timeline(until: float = 10.0, every: float = 0.25) -> dict:
    """A meter's load samples: two CPUs busy 1.5 s a second of which the run's 1.0, its
    threads queued from t=6 on, 0.5 s a second, CPU pressure 0.1; the log crosses 500
    bytes at t=8."""
    load = []
    for i in range(int(until / every) + 1):
        t = 1000.0 + i * every
        x = t - 1000.0
        counters = {
            "busy_s": 1.5 * x, "steal_s": 0.0, "run_cpu_s": 1.0 * x, "rank_cpu_s": 1.0 * x,
            "ran_s": 1.0 * x, "queued_s": 0.5 * max(0.0, x - 6), "cpu_stall_s": 0.1 * x,
            "io_stall_s": 0.0, "memory_stall_s": None,
        }  # fmt: skip
        load.append([t, int(10 * x) if x < 8 else 500 + int(x), counters])
    return {"samples": [], "load": load, "cpus": [0, 1], "host": "h"}


def test_a_declared_run_s_interference_is_read_over_its_timed_window():
    """Issue 50: the meter around a declared script reads what else the machine did; the
    engine takes the window its log says (ended when the last measured line was written,
    lasting the summary's timed seconds) and gives the built-in trainers' shares."""
    from dlscale.engine.tracking.custom_load import window_record

    summary = {"elapsed_s": 4.0, "log_measured_until_byte": 500}
    rec = window_record(_load_timeline(), summary)
    assert rec["window_s"] == pytest.approx(4.0) and rec["cpus"] == [0, 1]
    assert rec["others_cpu_share"] == pytest.approx(0.5 * 4 / (4 * 2))
    # the window is [4, 8]: queued 1 s of the 5 its threads wanted a CPU (from [1, 5], 0)
    assert rec["run_queue_wait_share"] == pytest.approx(1 / 5)
    assert rec["cpu_stall_share"] == pytest.approx(0.1)
    assert rec["memory_stall_share"] is None  # a counter the kernel does not offer
    assert rec["metered"].startswith("around the script")
    # too short to read from outside, or outside the samples: unknown, saying why
    short = window_record(_load_timeline(), {"elapsed_s": 0.5, "log_measured_until_byte": 500})
    assert "too short" in short["unavailable"] and "others_cpu_share" not in short
    late = window_record(_load_timeline(until=3.0), {"elapsed_s": 2.0, "time": 1100.0})
    assert "do not cover" in late["unavailable"]


def test_the_meter_reads_the_machine_whatever_energy_it_meters(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCALE_POWERCAP", str(tmp_path / "no-powercap"))
    log = tmp_path / "run.log"
    log.write_text("x" * 7)
    script = "import time; time.sleep(0.6)"
    out = tmp_path / "energy"
    proc = subprocess.run(
        [*METER, "--out", str(out), "--log", str(log), "--", sys.executable, "-c", script],
        timeout=HANG_S,
    )
    assert proc.returncode == 0
    (written,) = out.glob("*.json")
    data = json.loads(written.read_text())
    assert data["source"] is None and data["samples"] == []  # no energy metered here
    assert len(data["load"]) >= 2 and data["load"][-1][1] == 7  # the log's size
    assert data["cpus"] and "busy_s" in data["load"][-1][2]


@pytest.mark.parametrize(
    "load",
    [
        "x", [["t", 1, {}], [1.0, 2, {}]], [[float("nan"), 1, {}]] * 3, [[1.0, "big", {}]] * 3,
        [[1.0, 1, []], [2.0, 2, []]], [[1.0, 1, {"busy_s": "x"}], [2.0, 2, {"busy_s": 1}]],
    ],
)  # fmt: skip
def test_a_garbled_load_timeline_is_left_out_never_raised(load):
    """The meter writes its timeline in the job's environment: whatever is there is read
    as data, never trusted to its shape."""
    from dlscale.engine.tracking.custom_load import window_record

    rec = window_record({"load": load, "cpus": "no"}, {"elapsed_s": 4.0, "time": 2.0})
    assert rec["cpus"] == [] and (rec.get("unavailable") or rec["others_cpu_share"] is None)
