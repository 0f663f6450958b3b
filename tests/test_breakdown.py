"""Where a step's time goes: forward, backward, optimizer, and the communication that was not
hidden behind them, measured after the timed steps by pairs of steps with and without the
framework's gradient synchronisation."""

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.trainers.common import breakdown
from test_frameworks import SMALL, deepspeed_env, env_home, records, run_trainer  # noqa: F401
from virtual_clock import VirtualClock


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    """The breakdown's clock, and every sleep of the fake phases below."""
    virtual = VirtualClock()
    monkeypatch.setattr(breakdown.time, "perf_counter", virtual.perf_counter)
    monkeypatch.setattr(time, "sleep", virtual.sleep)
    return virtual


def fake_phases(comm_s: float, with_local: bool = True) -> breakdown.Phases:
    """Forward 20 ms, backward 30 ms plus `comm_s` unless inside `local`, optimizer 10 ms."""
    state = {"local": False}

    @contextlib.contextmanager
    def local():
        state["local"] = True
        try:
            yield
        finally:
            state["local"] = False

    def backward(_):
        time.sleep(0.03 + (0 if state["local"] else comm_s))

    return breakdown.Phases(
        lambda: time.sleep(0.02),
        backward,
        lambda: time.sleep(0.01),
        lambda: None,
        local if with_local else None,
        None if with_local else "no step without synchronisation",
    )


def test_exposed_communication_is_the_difference_of_the_paired_steps(clock):
    out = breakdown.measure(fake_phases(0.05), pairs=3, distributed=True)
    exact = {"abs": 1e-9}
    assert out["exposed_comm_s"] == pytest.approx(0.05, **exact)
    assert out["compute_time_s"] == pytest.approx(0.06, **exact)
    assert out["forward_s"] == pytest.approx(0.02, **exact)
    assert out["backward_s"] == pytest.approx(0.03, **exact)  # the local step's backward
    assert out["optimizer_s"] == pytest.approx(0.01, **exact)
    assert out["probe_step_s"] == pytest.approx(0.11, **exact)
    assert out["breakdown_pairs"] == 3 and out["breakdown_unavailable"] is None


def test_a_framework_without_a_local_step_says_so_instead_of_guessing(clock):
    out = breakdown.measure(fake_phases(0.05, with_local=False), pairs=2, distributed=True)
    assert out["exposed_comm_s"] is None and out["compute_time_s"] is None
    assert out["breakdown_unavailable"] == "no step without synchronisation"


def test_one_rank_has_nothing_to_synchronise(clock):
    out = breakdown.measure(fake_phases(0.0, with_local=False), pairs=2, distributed=False)
    assert out["exposed_comm_s"] == 0.0 and out["compute_time_s"] > 0


@pytest.mark.parametrize("timed,pairs", [(1, 2), (8, 2), (20, 5), (1000, 10)])
def test_the_probe_costs_a_quarter_of_the_timed_steps_at_most_ten_pairs(timed, pairs):
    assert breakdown.pairs_for(timed) == pairs


def torch_summary(tmp_path, nproc, *extra):
    out = tmp_path / "m.jsonl"
    launch = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    proc = subprocess.run(
        [*launch, "-m", "dlscale.trainers.torch_ddp", *SMALL, *extra, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_ddp_records_its_breakdown(tmp_path, nproc):
    s = torch_summary(tmp_path, nproc)
    assert s["compute_time_s"] > 0 and s["breakdown_unavailable"] is None
    assert s["exposed_comm_s"] >= 0 and (nproc == 2 or s["exposed_comm_s"] == 0.0)
    parts = s["forward_s"] + s["backward_s"] + s["optimizer_s"]
    assert 0.5 * s["compute_time_s"] < parts < 2 * s["compute_time_s"]
    assert s["data_wait_s"] >= 0
    assert s["breakdown_pairs"] == breakdown.pairs_for(s["timed_steps"])


@pytest.mark.slow
def test_the_breakdown_takes_the_pairs_asked_for_and_none_at_zero(tmp_path):
    """training.breakdown_pairs: a regression check's runs need only their throughput."""
    s = torch_summary(tmp_path, 1, "--breakdown-pairs", "3")
    assert s["breakdown_pairs"] == 3 and s["compute_time_s"] > 0
    s = torch_summary(tmp_path, 1, "--breakdown-pairs", "0")
    assert s["breakdown_unavailable"] == "not measured: training.breakdown_pairs = 0"
    assert "probe_step_s" not in s and "compute_time_s" not in s and s["throughput"] > 0


@pytest.mark.slow
def test_deepspeed_says_why_it_has_no_breakdown(deepspeed_env, env_home, tmp_path):
    proc, out = run_trainer(deepspeed_env, env_home, "deepspeed", tmp_path, *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = records(out)[-1]
    assert s["exposed_comm_s"] is None and "deepspeed" in s["breakdown_unavailable"]
    assert s["forward_s"] > 0
    # Its shared-memory op is up to date for the environment's own ninja, the one the Slurm
    # jobs (which activate the environment) and `env create` use: no run rebuilds it.
    built = Path(deepspeed_env.prefix) / "torch_extensions" / "deepspeed_shm_comm"
    ninja = Path(deepspeed_env.prefix) / "bin" / "ninja"
    dry = subprocess.run(
        [str(ninja), "-n", "-d", "explain"], cwd=built, capture_output=True, text=True
    )
    assert "no work to do" in dry.stdout, dry.stdout + dry.stderr
