"""Speedup, efficiency and CI arithmetic on known numbers, through the real store."""

import math

import pytest
from test_store import line, make_run

from dlscale.engine.results.analysis import results
from dlscale.engine.results.stats import spread
from dlscale.engine.tracking.store import Store


def test_spread_of_known_values():
    s = spread([100.0, 110.0, 120.0])
    # Student t, 2 degrees of freedom, 97.5th percentile = 4.302652729911275
    assert s.mean == 110.0 and s.median == 110.0
    assert s.ci95 == pytest.approx(4.302652729911275 * 10 / math.sqrt(3))
    assert s.cv == pytest.approx(10 / 110) and s.noisy
    assert spread([5.0]).ci95 is None and not spread([5.0]).noisy
    assert not spread([100.0, 101.0, 99.0]).noisy  # CV 1%


def add(store, tmp_path, throughputs, tta=None, **over):
    for rep, value in enumerate(throughputs):
        run = make_run(repetition=rep, **over)
        store.add_run(run)
        path = tmp_path / f"{run.run_id}.jsonl"
        path.write_text(
            line(
                "summary",
                status="completed",
                throughput=value,
                timed_steps=10,
                warmup_steps=1,
                elapsed_s=1.0,
                time_to_accuracy_s=tta,
                best_top1=0.9 if tta else None,
            )
        )
        store.records.ingest(run.run_id, path)
        store.update_run(run.run_id, state="COMPLETED")


def test_speedup_against_the_best_single_device_point_in_any_framework(tmp_path):
    store = Store(tmp_path)
    add(store, tmp_path, [100, 110, 120], framework="pytorch-ddp")
    add(store, tmp_path, [90, 90, 90], framework="horovod-pytorch")
    add(store, tmp_path, [200, 200, 200], framework="pytorch-ddp", ranks_per_node=2)
    add(store, tmp_path, [180, 180, 180], framework="horovod-pytorch", ranks_per_node=2)
    add(store, tmp_path, [500], framework="pytorch-ddp", ranks_per_node=2, per_device_batch=16)
    rows = {(r["framework"], r["ranks"], r["per_device_batch"]): r for r in results(store)}
    best_single = rows[("pytorch-ddp", 1, 8)]
    ddp2, hvd2 = rows[("pytorch-ddp", 2, 8)], rows[("horovod-pytorch", 2, 8)]
    assert ddp2["speedup"] == pytest.approx(200 / 110)
    assert ddp2["efficiency"] == pytest.approx(200 / 110 / 2)
    assert hvd2["speedup"] == pytest.approx(180 / 110)  # the strongest baseline, not its own
    assert hvd2["speedup_own"] == pytest.approx(2.0)
    assert hvd2["baseline_run_id"] == best_single["run_id"] == ddp2["baseline_run_id"]
    assert hvd2["baseline"] == "pytorch-ddp 1x1"
    assert best_single["noisy"] and not ddp2["noisy"] and ddp2["throughput_ci95"] == 0
    # a batch with no single-device point has no speedup rather than a wrong one
    assert rows[("pytorch-ddp", 2, 16)]["speedup"] is None
    assert rows[("pytorch-ddp", 2, 16)]["throughput_ci95"] is None


def test_failed_repetitions_do_not_count_but_show(tmp_path):
    store = Store(tmp_path)
    add(store, tmp_path, [100, 120, 80], tta=30.0)
    failed = store.runs()[2]["run_id"]
    store.update_run(failed, state="FAILED")
    (row,) = results(store)
    assert row["state"] == "PARTIAL" and row["n"] == 2 and row["throughput"] == 110
    assert row["time_to_accuracy_s"] == 30.0 and row["reached_target"] == "2/2"


def add_on(store, tmp_path, device, throughputs, first_rep=0, **over):
    """Completed repetitions whose env record says what they trained on."""
    for rep, value in enumerate(throughputs, start=first_rep):
        run = make_run(repetition=rep, **over)
        store.add_run(run)
        path = tmp_path / f"{run.run_id}.jsonl"
        ranks = over.get("ranks_per_node", 1)
        path.write_text(
            line(
                "env",
                framework_versions={"python": "3"},
                hostnames=["n1"] * ranks,
                devices=[device] * ranks,
                world_size=ranks,
                dlscale_version="0",
            )
            + line(
                "summary",
                status="completed",
                throughput=value,
                timed_steps=10,
                warmup_steps=1,
                elapsed_s=1.0,
            )
        )
        store.records.ingest(run.run_id, path)
        store.update_run(run.run_id, state="COMPLETED")


def test_a_cpu_point_is_never_compared_with_a_gpu_baseline(tmp_path):
    """The same spec measured on CPUs and on GPUs makes two points, one per device kind, and
    each scale's speedup is against a 1-device point of its own kind."""
    store = Store(tmp_path)
    cpu, gpu = "cpu: Intel Xeon (2 thread(s))", "NVIDIA H100 80GB HBM3"
    add_on(store, tmp_path, cpu, [100, 100])
    add_on(store, tmp_path, gpu, [3000, 3000], first_rep=2)  # same point id, on GPUs
    add_on(store, tmp_path, cpu, [150], ranks_per_node=2)
    add_on(store, tmp_path, gpu, [5000], ranks_per_node=2, first_rep=1)
    add_on(store, tmp_path, "NVIDIA A100-SXM4-40GB", [4000], ranks_per_node=2, first_rep=2)
    rows = {(r["device"], r["ranks"]): r for r in results(store)}
    assert set(rows) == {("cpu", 1), (gpu, 1), ("cpu", 2), (gpu, 2), ("NVIDIA A100-SXM4-40GB", 2)}
    assert rows[("cpu", 2)]["speedup"] == pytest.approx(1.5)
    assert rows[(gpu, 2)]["speedup"] == pytest.approx(5000 / 3000)
    assert rows[(gpu, 1)]["throughput"] == 3000 and rows[("cpu", 1)]["throughput"] == 100
    # no 1-device point on A100s: no speedup, rather than one against the H100 or the CPU
    assert rows[("NVIDIA A100-SXM4-40GB", 2)]["speedup"] is None


def test_the_results_table_names_the_device_when_points_differ_in_it(tmp_path):
    from rich.console import Console

    from dlscale.engine.results.table import for_terminal
    from dlscale.engine.results.tables import results_table

    store = Store(tmp_path)
    add_on(store, tmp_path, "cpu: Intel Xeon (2 thread(s))", [100])
    add_on(store, tmp_path, "NVIDIA H100 80GB HBM3", [3000], first_rep=1)
    console = Console(width=250, record=True)
    console.print(for_terminal(results_table(results(store)), 250)[0])
    text = console.export_text()
    assert "device" in text and "NVIDIA H100 80GB HBM3" in text and " cpu " in text


def test_the_confidence_interval_uses_students_t_without_scipy_stats(tmp_path, monkeypatch):
    """The 95% interval's t quantile is scipy.stats.t.ppf's own, for every sample size a
    study has."""
    from scipy import stats

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the quantiles it keeps go here

    from dlscale.engine.results.stats import t_quantile

    for df in [*range(1, 40), 99, 1000]:
        # stdtrit and t.ppf agree to 1e-12 in scipy 1.17; 1.15 (the newest for Python
        # 3.10) computes t.ppf another way, 1e-11 apart: either is a 95% interval's t
        assert t_quantile(df) == pytest.approx(float(stats.t.ppf(0.975, df)), rel=1e-9)
    s = spread([100.0, 110.0, 90.0])
    assert s.ci95 == pytest.approx(float(stats.t.ppf(0.975, 2)) * 10.0 / 3**0.5)


def test_t_quantiles_come_from_scipy_once_then_from_the_users_cache(tmp_path):
    """The first command that needs a t quantile asks scipy.special (never scipy.stats)
    and keeps it; the next reads it without importing scipy at all, the same number. A
    cache that is damaged, or cannot be written, only costs the import."""
    import os
    import subprocess
    import sys

    from scipy import stats

    probe = (
        "import sys; from dlscale.engine.results.stats import t_quantile; "
        "print(repr(t_quantile(4)), 'scipy.special' in sys.modules, "
        "'scipy.stats' in sys.modules)"
    )

    def ask(cache) -> list[str]:
        env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
        )
        return done.stdout.split()

    exact = repr(float(stats.t.ppf(0.975, 4)))
    assert ask(tmp_path) == [exact, "True", "False"]  # computed
    assert ask(tmp_path) == [exact, "False", "False"]  # kept
    (kept,) = (tmp_path / "dlscale").glob("t-quantiles-scipy-*.json")  # one per release
    kept.write_text('{"4": "not a number"')
    assert ask(tmp_path) == [exact, "True", "False"]
    blocked = tmp_path / "file"
    blocked.write_text("")  # a cache folder that cannot be made
    assert ask(blocked) == [exact, "True", "False"]
