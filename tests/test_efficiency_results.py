"""Where the efficiency goes, in results and the report: the efficiency model on known numbers
through the real store, every field null with why where a part was not measured, the CSV,
JSON and table, the report's table and figures (stacked bars, accuracy per lr schedule)."""

import json

import pytest
from test_report import check_png, md_table, pixels_of
from test_store import line, make_run

from conftest import dlscale
from dlscale.engine.config.frameworks import NO_COMM_BENCHMARK
from dlscale.engine.results import analysis, tables
from dlscale.engine.results.report import document as reporting
from dlscale.engine.results.report import figures, mllog
from dlscale.engine.tracking.store import Store

RAPL = "no readable RAPL package energy under /sys/class/powercap (not exposed on this machine)"


def add(
    store,
    tmp_path,
    summaries,
    state="COMPLETED",
    env=None,
    evals=(),
    reason=None,
    schedule=None,
    training=None,
    **over,
):
    """One run per summary (repetitions of one point); `summaries`: extra summary fields;
    `training`: more of the recipe (a declared framework's `custom`)."""
    ids = []
    for rep, extra in enumerate(summaries):
        recipe = {"steps": 4, **(training or {}), **({"lr_schedule": schedule} if schedule else {})}
        run = make_run(repetition=rep, training=recipe, **over)
        store.add_run(run)
        text = "".join(line("eval", step=e, epoch=e, top1=a, elapsed_s=1.0) for e, a in evals)
        if env is not None:
            text += line(
                "env",
                framework_versions={},
                hostnames=["h"],
                devices=["cpu"],
                world_size=run.devices,
                dlscale_version="0",
                **env,
            )
        text += line(
            "summary", status="completed", timed_steps=10, warmup_steps=1, elapsed_s=1.0, **extra
        )
        path = tmp_path / f"{run.run_id}.jsonl"
        path.write_text(text)
        store.records.ingest(run.run_id, path)
        store.update_run(run.run_id, state=state, reason=reason)
        ids.append(run.run_id)
    return ids


def add_comm(
    store, tmp_path, comm_time, busbw, state="COMPLETED", reason=None, record=None, **over
):
    """A comm benchmark run; `record`: more fields of its comm record (buckets, sweep)."""
    run = make_run(training={"steps": 4, "comm_benchmark": True}, **over)
    assert run.comm_benchmark
    store.add_run(run)
    path = tmp_path / f"{run.run_id}.jsonl"
    path.write_text(
        line(
            "comm",
            collective="allreduce",
            backend="gloo",
            world_size=run.devices,
            comm_bytes=1_078_888,
            bucket_bytes=25 << 20,
            comm_time_s=comm_time,
            comm_algbw_gbps=busbw,
            comm_busbw_gbps=busbw,
            **(record or {}),
        )
        + line(
            "summary",
            status="completed",
            throughput=0.0,
            timed_steps=0,
            warmup_steps=0,
            elapsed_s=1.0,
        )
        if state == "COMPLETED"
        else ""
    )
    store.records.ingest(run.run_id, path)
    store.update_run(run.run_id, state=state, reason=reason)
    return run.run_id


def breakdown(throughput, compute, exposed, energy=None):
    return {
        "throughput": throughput,
        "compute_time_s": compute,
        "exposed_comm_s": exposed,
        "forward_s": compute / 3,
        "backward_s": compute / 2,
        "optimizer_s": compute / 6,
        "breakdown_unavailable": None,
        "energy_per_image_j": energy,
    }


@pytest.fixture
def study(tmp_path):
    """pytorch-ddp at 1 and 2 ranks (batch 8), with a benchmark at 2 ranks."""
    store = Store(tmp_path)
    add(
        store,
        tmp_path,
        [
            breakdown(100, 0.07, 0.0, 0.5),
            breakdown(100, 0.09, 0.0, 0.25),
            breakdown(100, 0.071, 0.0, 0.4),
        ],
    )
    add(store, tmp_path, [breakdown(160, 0.075, 0.02, 0.3)], ranks_per_node=2)
    comm = add_comm(store, tmp_path, 0.01, 0.5, ranks_per_node=2)
    return store, comm


def by_ranks(rows):
    return {r["ranks"]: r for r in rows}


def test_the_model_predicts_the_step_from_1_device_compute_and_the_allreduce(study):
    store, comm = study
    rows = by_ranks(analysis.results(store))
    assert set(rows) == {1, 2}  # the benchmark run is not a point of its own
    one, two = rows[1], rows[2]
    assert one["compute_time_s"] == pytest.approx(0.071)  # median over the repetitions
    assert one["comm_time_s"] == 0.0 and one["predicted_efficiency"] == pytest.approx(1.0)
    assert one["unmeasured"]["comm_busbw_gbps"] == "one device: nothing to communicate"
    assert one["images_per_joule"] == pytest.approx(1 / 0.4)  # median energy per image
    assert two["step_time_s"] == pytest.approx(16 / 160)
    assert two["other_s"] == pytest.approx(0.1 - 0.075 - 0.02)
    assert two["comm_time_s"] == 0.01 and two["comm_busbw_gbps"] == 0.5
    assert two["comm_run_id"] == comm
    assert two["predicted_step_s"] == pytest.approx(0.071 + 0.01)
    assert two["predicted_efficiency"] == pytest.approx(0.071 / 0.081)
    assert two["efficiency"] == pytest.approx(0.8)  # measured, beside it
    assert two["images_per_joule"] == pytest.approx(1 / 0.3)
    assert "predicted_efficiency" not in two["unmeasured"]


def test_strong_scaling_scales_the_baseline_compute_to_the_per_device_batch(tmp_path):
    store = Store(tmp_path)
    add(store, tmp_path, [breakdown(100, 0.16, 0.0)], per_device_batch=16, scaling="strong")
    add(
        store,
        tmp_path,
        [breakdown(150, 0.085, 0.01)],
        per_device_batch=8,
        ranks_per_node=2,
        scaling="strong",
    )
    add_comm(store, tmp_path, 0.02, 1.0, per_device_batch=8, ranks_per_node=2, scaling="strong")
    two = by_ranks(analysis.results(store))[2]
    assert two["predicted_step_s"] == pytest.approx(0.16 * 8 / 16 + 0.02)
    assert two["predicted_efficiency"] == pytest.approx(0.08 / 0.1)


def test_every_part_not_measured_is_null_with_why(tmp_path):
    store = Store(tmp_path)
    env = {"energy_source": None, "energy_unavailable": RAPL}
    for fw in ("pytorch-ddp", "tensorflow", "deepspeed", "horovod-pytorch"):
        add(store, tmp_path, [breakdown(100, 0.07, 0.0)], framework=fw, env=env)
    # tensorflow records no breakdown; deepspeed says why it has none
    add(store, tmp_path, [{"throughput": 150}], framework="tensorflow", ranks_per_node=2, env=env)
    add(
        store,
        tmp_path,
        [
            {
                **breakdown(150, 0.07, 0.0),
                "compute_time_s": None,
                "exposed_comm_s": None,
                "breakdown_unavailable": "deepspeed has no "
                "step without gradient synchronisation to compare with",
            }
        ],
        framework="deepspeed",
        ranks_per_node=2,
        env=env,
    )
    add(store, tmp_path, [breakdown(150, 0.07, 0.01)], ranks_per_node=2, env=env)  # no comm run
    add(
        store,
        tmp_path,
        [breakdown(150, 0.07, 0.01)],
        framework="horovod-pytorch",
        ranks_per_node=2,
        env=env,
    )
    failed = add_comm(
        store,
        tmp_path,
        0,
        0,
        state="FAILED",
        reason="gloo timed out\nmore",
        framework="horovod-pytorch",
        ranks_per_node=2,
    )
    rows = {(r["framework"], r["ranks"]): r for r in analysis.results(store)}
    tf = rows[("tensorflow", 2)]
    assert tf["compute_time_s"] is None and tf["exposed_comm_s"] is None
    assert (
        tf["unmeasured"]["compute_time_s"] == "the tensorflow trainer records no step-time "
        "breakdown"
    )
    assert tf["comm_busbw_gbps"] is None and tf["predicted_efficiency"] is None
    assert tf["unmeasured"]["comm_busbw_gbps"] == (
        "no communication benchmark for tensorflow: " + NO_COMM_BENCHMARK["tensorflow"]
    )
    ds = rows[("deepspeed", 2)]
    assert (
        ds["exposed_comm_s"] is None
        and "deepspeed has no step without" in ds["unmeasured"]["exposed_comm_s"]
    )
    ddp = rows[("pytorch-ddp", 2)]
    assert "experiment.comm_benchmark = true" in ddp["unmeasured"]["comm_busbw_gbps"]
    assert (
        ddp["predicted_efficiency"] is None
        and "no allreduce time for this scale" in ddp["unmeasured"]["predicted_efficiency"]
    )
    hvd = rows[("horovod-pytorch", 2)]
    assert (
        hvd["unmeasured"]["comm_busbw_gbps"]
        == f"the communication benchmark run {failed} is FAILED (gloo timed out)"
    )
    for r in rows.values():
        assert r["images_per_joule"] is None and r["unmeasured"]["images_per_joule"] == RAPL
    # a baseline without compute leaves its points without a prediction, naming it
    store2 = Store(tmp_path / "2")
    add(store2, tmp_path, [{"throughput": 100}], framework="tensorflow")
    add(store2, tmp_path, [breakdown(150, 0.07, 0.01)], ranks_per_node=2)
    add_comm(store2, tmp_path, 0.01, 1.0, ranks_per_node=2)
    two = by_ranks(analysis.results(store2))[2]
    assert two["comm_busbw_gbps"] == 1.0 and two["predicted_efficiency"] is None
    assert two["unmeasured"]["predicted_efficiency"].startswith(
        "its baseline (tensorflow 1x1) has no compute time"
    )


def test_csv_json_and_the_table_carry_the_new_fields(study, tmp_path):
    store, _ = study
    rows = analysis.results(store)
    as_json = json.loads(tables.results_json(rows))
    new = (
        "compute_time_s",
        "exposed_comm_s",
        "predicted_efficiency",
        "comm_busbw_gbps",
        "images_per_joule",
    )
    assert all(k in r for r in as_json for k in new)
    assert as_json[0]["unmeasured"] == {"comm_busbw_gbps": "one device: nothing to communicate"}
    csv_rows = tables.results_csv(rows).splitlines()
    header = csv_rows[0].split(",")
    assert set(new) <= set(header)
    assert "comm_busbw_gbps: one device: nothing to communicate" in csv_rows[1]
    shown = dlscale("results", home=tmp_path, check=0).stdout
    assert "pred. eff" in shown and "images/J" in shown and "0.88" in shown  # 0.071 / 0.081
    # without energy anywhere the column stays out and a note says why
    store2 = Store(tmp_path / "h2")
    add(store2, tmp_path, [breakdown(100, 0.07, 0.0)], env={"energy_unavailable": RAPL})
    shown = dlscale("results", home=tmp_path / "h2", check=0).stdout
    assert "images/J" not in shown and f"images_per_joule: {RAPL}" in " ".join(shown.split())


def test_the_report_explains_the_efficiency_in_a_table_and_stacked_bars(study, tmp_path):
    store, comm = study
    store.save_experiment("e", str(tmp_path / "no" / "spec.toml"), "[experiment]\n", "0")
    made = reporting.build(store, "e", tmp_path / "rep")
    text = made.path.read_text()
    rows = by_ranks(made.rows)
    table = {r["devices"]: r for r in md_table(text, "Where the efficiency goes")}
    assert table["2"]["predicted eff"] == tables.fmt(rows[2]["predicted_efficiency"])
    assert table["2"]["measured eff"] == "0.80" and table["2"]["allreduce ms"] == "10.0"
    assert table["2"]["compute ms"] == "75.0" and table["2"]["exposed comm ms"] == "20.0"
    assert table["2"]["rest ms"] == "5.0" and table["2"]["busbw GB/s"] == "0.500"
    assert table["1"]["busbw GB/s"] == "-"
    results = {r["devices"]: r for r in md_table(text, "Throughput, speedup and efficiency")}
    assert results["1"]["images/J"] == "2.5" and results["2"]["images/J"] == "3.3"
    fig = {f.name: f for f in made.figures}["efficiency-breakdown"]
    assert [y for _, y in fig.series["compute"]] == pytest.approx([71.0, 75.0])
    assert [y for _, y in fig.series["exposed communication"]] == pytest.approx([0.0, 20.0])
    assert [y for _, y in fig.series["the rest"]] == pytest.approx([9.0, 5.0])
    assert [y for _, y in fig.series[figures.MEASURED]] == pytest.approx([80.0, 100.0])
    assert [y for _, y in fig.series[figures.PREDICTED]] == pytest.approx([71.0, 81.0])
    image = check_png(fig.path)
    assert all(pixels_of(image, c) > 20 for c in fig.colors.values())
    assert "accuracy-per-schedule" not in {f.name for f in made.figures}  # one schedule
    events = [json.loads(x.split(" ", 1)[1]) for x in mllog.lines(store, comm)]
    (bench,) = [e for e in events if e["key"] == "dlscale_comm_benchmark"]
    assert bench["value"] == 0.5 and bench["metadata"]["comm_time_s"] == 0.01


def test_the_report_draws_accuracy_against_epoch_per_schedule(tmp_path):
    store = Store(tmp_path)
    curves = {"step": [(1, 0.3), (2, 0.5), (3, 0.7)], "cosine": [(1, 0.4), (2, 0.6), (3, 0.8)]}
    for schedule, evals in curves.items():
        # two repetitions: the curve is their mean
        add(store, tmp_path, [breakdown(100, 0.07, 0.0)] * 2, schedule=schedule, evals=evals)
    got = analysis.accuracy_curves(store)
    assert set(got) == {"step", "cosine"}
    assert got["step"] == pytest.approx([(1.0, 0.3), (2.0, 0.5), (3.0, 0.7)])
    store.save_experiment("e", str(tmp_path / "no" / "spec.toml"), "[experiment]\n", "0")
    made = reporting.build(store, "e", tmp_path / "rep")
    fig = {f.name: f for f in made.figures}["accuracy-per-schedule"]
    assert fig.series["cosine"] == pytest.approx([(1, 0.4), (2, 0.6), (3, 0.8)])
    assert sorted(fig.legend) == ["cosine", "step"] and fig.xlabel == "epoch"
    image = check_png(fig.path)
    assert all(pixels_of(image, c) > 20 for c in fig.colors.values())
    shown = {
        r["lr schedule"]
        for r in md_table(made.path.read_text(), "Throughput, speedup and efficiency")
    }
    assert shown == {"step", "cosine"}


def test_without_a_benchmark_the_report_shows_the_breakdown_but_draws_no_bars(tmp_path):
    store = Store(tmp_path)
    add(store, tmp_path, [breakdown(100, 0.07, 0.0)])
    add(store, tmp_path, [breakdown(160, 0.075, 0.02)], ranks_per_node=2)
    store.save_experiment("e", str(tmp_path / "no" / "spec.toml"), "[experiment]\n", "0")
    made = reporting.build(store, "e", tmp_path / "rep")
    assert "efficiency-breakdown" not in {f.name for f in made.figures}
    table = {r["devices"]: r for r in md_table(made.path.read_text(), "Where the efficiency goes")}
    assert table["2"]["exposed comm ms"] == "20.0" and table["2"]["allreduce ms"] == "-"
    assert "experiment.comm_benchmark = true" in made.path.read_text()  # says how to get it


@pytest.mark.parametrize("compute,says_noise", [(0.060, False), (0.108, True)])
def test_the_breakdown_line_says_when_the_probe_ran_slower_than_the_timed_steps(
    compute, says_noise
):
    from dlscale.engine.results.tables import breakdown_text

    step, exposed = 0.0853, 0.0
    line = breakdown_text(
        {
            "step_time_s": step,
            "compute_time_s": compute,
            "exposed_comm_s": exposed,
            "other_s": step - compute - exposed,
            "efficiency": 0.9,
            "predicted_efficiency": 1.0,
        }
    )
    assert line.startswith("step 85.3 ms = compute ")
    assert ("noise, not a saving" in line) is says_noise


@pytest.mark.parametrize("compute", [0.05, 0.09, 0.2])
def test_a_rest_below_zero_is_said_with_the_points_where_it_is(tmp_path, compute):
    """Issue 48/49: a compute above the step (measured apart, on a busy machine) made rest
    negative with no word beside it; every front end's table says where and what it means."""
    from dlscale.engine.results import tables

    store = Store(tmp_path)
    add(store, tmp_path, [breakdown(100, 0.07, 0.0)])
    add(store, tmp_path, [breakdown(160, compute, 0.02)], ranks_per_node=2)  # step 0.1 s
    table = tables.efficiency_table(analysis.results(store))
    said = [n for n in table.notes if n.startswith("rest below zero at")]
    if compute + 0.02 > 0.1:
        (line,) = said
        assert "pytorch-ddp 1x2 (" in line and "upper bounds" in line
    else:
        assert said == []


def test_a_transformers_mfu_and_memory_reach_every_results_output(tmp_path):
    """Issue 52, item 3: tokens/s, achieved TFLOPS, MFU and peak memory per device, as the
    trainers record them (median over the repetitions), in the results rows (JSON, CSV) and
    the table with the note saying what they count; a study without them gets no such column."""
    from conftest import dlscale

    store = Store(tmp_path)
    summaries = [
        {
            "throughput": 900.0 + i,
            "achieved_tflops_per_device": 0.4 + i / 100,
            "mfu": 0.30 + i / 100,
            "peak_memory_bytes": (300 + i) * 2**20,
        }
        for i in range(3)
    ]
    add(store, tmp_path, summaries)
    store.close()
    (row,) = json.loads(
        dlscale("results", "--format", "json", "--wide", home=tmp_path, check=0).stdout
    )
    assert row["mfu"] == pytest.approx(0.31) and row["peak_memory_bytes"] == 301 * 2**20
    assert row["achieved_tflops_per_device"] == pytest.approx(0.41)
    shown = dlscale("results", "--wide", home=tmp_path, check=0).stdout
    assert "MFU" in shown and "31.0%" in shown and "301" in shown and "PaLM's count" in shown
    csv_head = dlscale("results", "--format", "csv", home=tmp_path, check=0).stdout.splitlines()[0]
    assert {"mfu", "peak_memory_bytes", "achieved_tflops_per_device"} <= set(csv_head.split(","))
    plain = tmp_path / "plain"
    other = Store(plain)
    add(other, plain, [{"throughput": 100.0}, {"throughput": 101.0}])
    other.close()
    assert "MFU" not in dlscale("results", "--wide", home=plain, check=0).stdout
