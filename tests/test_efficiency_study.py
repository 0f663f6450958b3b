"""examples/efficiency-cpu.toml end to end, made small: the communication benchmark runs first,
then the training runs; results carry the breakdown, the benchmark, the model beside the
measurement and the energy (or why not), and the report shows them. On the local backend and
on the two-node Slurm test cluster."""

import json
import re
from pathlib import Path

import pytest
from test_report import check_png, md_table

from conftest import REPO, dlscale
from dlscale.engine.tracking.store import Store

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


def small(example: str, tmp_path: Path) -> Path:
    text = (REPO / "examples" / example).read_text()
    for old, new in (
        ("steps = 30", "steps = 4"),
        ("warmup_steps = 5", "warmup_steps = 1"),
        ("repetitions = 3", "repetitions = 1"),
        ("log_every = 10", "log_every = 2"),
    ):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / example
    path.write_text(text)
    return path


def check_study(home: Path, tmp_path: Path, name: str, scales: list[str]) -> list[dict]:
    store = Store(home)
    runs = store.runs(name)
    assert all(r["state"] == "COMPLETED" for r in runs), [(r["state"], r["reason"]) for r in runs]
    comm = [r for r in runs if '"comm_benchmark": true' in r["training"]]
    assert sorted(f"{r['nodes']}x{r['ranks_per_node']}" for r in comm) == sorted(
        s for s in scales if s != "1x1"
    )
    # the benchmarks ran before the training runs (the same order on Slurm: submitted first)
    started = {j["run_id"]: j["submitted"] for b in ("local", "slurm") for j in store.jobs(b)}
    assert max(started[r["run_id"]] for r in comm) <= min(
        started[r["run_id"]] for r in runs if r not in comm
    )
    for r in comm:
        (bench,) = store.records(r["run_id"], "comm")
        assert bench["backend"] == "gloo" and bench["world_size"] == r["devices"]
        assert bench["comm_busbw_gbps"] > 0 and bench["buckets"] == [1_049_000, 29_888]

    rows = json.loads(dlscale("results", "-e", name, "--format", "json", check=0).stdout)
    assert sorted(f"{r['nodes']}x{r['ranks_per_node']}" for r in rows) == sorted(scales)
    for r in rows:
        assert r["compute_time_s"] > 0 and r["exposed_comm_s"] >= 0
        assert 0 < r["predicted_efficiency"] <= 1 and r["efficiency"] > 0
        if r["ranks"] > 1:
            assert r["comm_busbw_gbps"] > 0 and r["comm_run_id"] in {c["run_id"] for c in comm}
            assert r["predicted_step_s"] > r["comm_time_s"] > 0
        # energy where the machine lets it be read, else null with why
        env = store.records(r["run_id"], "env")[0]
        if env["energy_source"] is None:
            assert r["images_per_joule"] is None
            assert r["unmeasured"]["images_per_joule"] == env["energy_unavailable"]
        else:
            assert r["images_per_joule"] > 0
    table = dlscale("results", "-e", name, check=0).stdout
    assert "Where the efficiency goes" in table

    out = tmp_path / "report"
    dlscale("report", "-e", name, "--out", str(out), check=0)
    text = (out / "report.md").read_text()
    explained = {r["scale"]: r for r in md_table(text, "Where the efficiency goes")}
    assert set(explained) == set(scales)
    for r in rows:
        cells = explained[f"{r['nodes']}x{r['ranks_per_node']}"]
        assert cells["predicted eff"] == f"{r['predicted_efficiency']:,.2f}"
        assert cells["busbw GB/s"] == ("-" if r["ranks"] == 1 else f"{r['comm_busbw_gbps']:,.3f}")
    assert "images/J" in md_table(text, "Throughput, speedup and efficiency")[0]
    assert "figures/efficiency-breakdown.png" in text
    for link in re.findall(r"\]\((figures/[^)]+)\)", text):
        check_png(out / link)
    return rows


@pytest.mark.slow
def test_efficiency_study_on_the_local_backend(tmp_path, home):
    spec = small("efficiency-cpu.toml", tmp_path)
    shown = dlscale("plan", str(spec), "--all", check=0).stdout
    assert "3 runs" in shown  # the benchmark at 1x2, then 1x1 and 1x2
    dlscale("run", str(spec), "--wait", check=0, timeout=900)
    check_study(home, tmp_path, "efficiency-cpu", ["1x1", "1x2"])


@pytest.mark.slurm
@pytest.mark.slow
def test_efficiency_study_on_two_slurm_nodes(slurm_cluster, tmp_path, home):
    spec = small("efficiency-cpu-slurm.toml", tmp_path)
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(PROFILE),
        "--backend",
        "slurm",
        "--wait",
        check=0,
        timeout=900,
    )
    rows = check_study(home, tmp_path, "efficiency-cpu-slurm", ["1x1", "1x2", "2x1"])
    store = Store(home)
    (across,) = [
        r
        for r in store.runs("efficiency-cpu-slurm")
        if '"comm_benchmark": true' in r["training"] and r["nodes"] == 2
    ]
    env = store.records(across["run_id"], "env")[0]
    assert sorted(env["nodes"]) == ["node1", "node2"] and env["job_id"]
    assert {r["ranks"] for r in rows} == {1, 2}
