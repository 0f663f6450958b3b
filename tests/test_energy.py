"""Energy and utilisation over the timed steps: RAPL package counters read from a powercap
tree (a fake one here, with counters that move while a real trainer runs), their wrap-around,
and the null path with its reason where nothing can be read. NVML is in tests/gpu."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from dlscale.trainers.common.energy import Meter, Reading, summary_fields


def fake_powercap(root, packages=2, start=1_000_000, wrap=10**9):
    for i in range(packages):
        zone = root / f"intel-rapl:{i}"
        sub = root / f"intel-rapl:{i}:0"  # a core sub-zone: not counted
        for z, name in ((zone, f"package-{i}"), (sub, "core")):
            z.mkdir(parents=True)
            (z / "name").write_text(name + "\n")
            (z / "energy_uj").write_text(f"{start}\n")
            (z / "max_energy_range_uj").write_text(f"{wrap}\n")
    return root


def set_energy(root, package, uj):
    """As the kernel shows it: whole at every read (written aside, then renamed)."""
    path = root / f"intel-rapl:{package}" / "energy_uj"
    part = path.with_name("energy_uj.part")
    part.write_text(f"{uj}\n")
    os.replace(part, path)


def test_package_energy_over_the_metered_segments_only(tmp_path):
    root = fake_powercap(tmp_path / "powercap")
    meter = Meter(powercap=str(root))
    assert meter.source == "powercap" and meter.unavailable is None
    meter.resume()
    set_energy(root, 0, 3_000_000)  # +2 J
    set_energy(root, 1, 1_500_000)  # +0.5 J
    meter.pause()
    set_energy(root, 0, 9_000_000)  # between segments (an evaluation): not counted
    meter.resume()
    set_energy(root, 0, 9_250_000)  # +0.25 J
    r = meter.reading()
    assert r.energy_j == pytest.approx(2.75) and r.seconds > 0
    assert r.util is not None and 0 <= r.util


def test_a_counter_that_wraps_is_unwrapped(tmp_path):
    root = fake_powercap(tmp_path / "powercap", packages=1, start=999_000_000, wrap=10**9)
    meter = Meter(powercap=str(root))
    meter.resume()
    set_energy(root, 0, 1_000_000)  # wrapped: 1 J to the top, 1 J after
    assert meter.reading().energy_j == pytest.approx(2.0)


@pytest.mark.parametrize("why", ["missing", "empty", "unreadable"])
def test_no_readable_counter_is_null_with_the_reason(tmp_path, why):
    root = tmp_path / "powercap"
    if why != "missing":
        root.mkdir()
    if why == "unreadable":
        zone = root / "intel-rapl:0"
        zone.mkdir()
        (zone / "name").write_text("package-0\n")
        (zone / "max_energy_range_uj").write_text("100\n")  # energy_uj absent
    meter = Meter(powercap=str(root))
    assert meter.source is None and str(root) in meter.unavailable
    meter.resume()
    assert meter.reading().energy_j is None
    assert summary_fields([meter.reading()], 100) == {
        "energy_j": None,
        "energy_per_image_j": None,
        "mean_power_w": None,
        "device_util": None,
    }


def test_only_the_nodes_first_rank_meters_its_shared_packages(tmp_path):
    meter = Meter(first_on_node=False, powercap=str(fake_powercap(tmp_path / "p")))
    assert meter.source is None and "first rank" in meter.unavailable


@pytest.mark.parametrize("fault", ["empty", "garbage", "gone"])
def test_a_counter_that_fails_mid_run_ends_the_metering_not_the_run(tmp_path, fault):
    """The class: whatever the counter answers mid-run (a read cut short, text that is
    not a number, a zone that went away), training goes on, the run's energy is unknown
    (not the part before the fault) and the summary says why; so does the job's, whatever
    the other ranks measured."""
    root = fake_powercap(tmp_path / "powercap")
    meter = Meter(powercap=str(root))
    meter.resume()
    set_energy(root, 0, 5_000_000)
    meter.pause()
    meter.resume()
    path = root / "intel-rapl:0" / "energy_uj"
    if fault == "gone":
        path.unlink()
    else:
        path.write_text("" if fault == "empty" else "n/a\n")
    meter.pause()  # no exception
    meter.resume()
    meter.pause()
    r = meter.reading()
    assert r.energy_j is None and "stopped answering mid-run" in r.failed
    fields = summary_fields([Reading(30.0, 2.0, 0.5), r], images=400)
    assert fields["energy_j"] is None and fields["energy_per_image_j"] is None
    assert "stopped answering mid-run" in fields["energy_unavailable"]


def test_the_jobs_energy_is_the_sum_over_the_ranks_that_metered():
    fields = summary_fields(
        [Reading(30.0, 2.0, 0.5), Reading(None, 2.0, None), Reading(10.0, 1.0, 0.7)], images=400
    )
    assert fields["energy_j"] == 40.0 and fields["energy_per_image_j"] == 0.1
    assert fields["mean_power_w"] == 20.0 and fields["device_util"] == pytest.approx(0.6)


def run_trainer(tmp_path, powercap):
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
            "8",
            "--steps",
            "6",
            "--warmup-steps",
            "1",
            "--log-every",
            "3",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DLSCALE_POWERCAP": str(powercap)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    return recs[1], recs[-1]


@pytest.mark.slow
def test_a_real_run_reports_joules_per_image_from_the_counters(tmp_path):
    root = fake_powercap(tmp_path / "powercap", packages=1, start=0)
    stop = threading.Event()

    def burn():  # the package draws 50 W while the run goes
        uj, t0 = 0, time.monotonic()
        while not stop.wait(0.01):
            uj = int((time.monotonic() - t0) * 50e6)
            set_energy(root, 0, uj)

    t = threading.Thread(target=burn)
    t.start()
    try:
        env, summary = run_trainer(tmp_path, root)
    finally:
        stop.set()
        t.join()
    assert env["energy_source"] == "powercap" and env["energy_unavailable"] is None
    assert summary["energy_j"] > 0
    assert summary["energy_per_image_j"] == pytest.approx(
        summary["energy_j"] / summary["images_timed"]
    )
    assert 20 < summary["mean_power_w"] < 80  # about the 50 W it drew, over the timed steps


@pytest.mark.slow
def test_a_real_run_without_counters_says_why(tmp_path):
    env, summary = run_trainer(tmp_path, tmp_path / "nothing-here")
    assert env["energy_source"] is None and "nothing-here" in env["energy_unavailable"]
    assert summary["energy_j"] is None and summary["energy_per_image_j"] is None


class FakeNvml:
    """pynvml's calls the meter makes, on a GPU that is always 75% busy and draws 1 J per
    read of its counter."""

    def __init__(self):
        self.mj = 0

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.mj += 1000
        return self.mj

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": 75})()


def test_a_segment_shorter_than_the_sampling_period_still_has_its_utilisation(monkeypatch):
    # On an H100 twenty small steps end before the first 0.2 s sample: the H100 proof found
    # device_util None beside a measured energy.
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    meter = Meter(gpu=type("Gpu", (), {"index": 0})(), every_s=60)
    assert meter.source == "nvml", meter.unavailable
    meter.resume()
    r = meter.reading()
    assert r.energy_j == pytest.approx(1.0) and r.util == pytest.approx(0.75)
