"""Speedup, efficiency and CI arithmetic on known numbers, through the real store."""
import math

import pytest
from test_store import line, make_run

from dlscale.engine.results.analysis import results, spread
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
        path.write_text(line("summary", status="completed", throughput=value, timed_steps=10,
                             warmup_steps=1, elapsed_s=1.0, time_to_accuracy_s=tta,
                             best_top1=0.9 if tta else None))
        store.ingest(run.run_id, path)
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
