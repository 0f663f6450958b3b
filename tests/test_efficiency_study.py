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
    started = {j["run_id"]: j["submitted"] for b in ("local", "slurm") for j in store.jobs.find(b)}
    assert max(started[r["run_id"]] for r in comm) <= min(
        started[r["run_id"]] for r in runs if r not in comm
    )
    for r in comm:
        (bench,) = store.records.of(r["run_id"], "comm")
        assert bench["backend"] == "gloo" and bench["world_size"] == r["devices"]
        assert bench["comm_busbw_gbps"] > 0 and bench["buckets"] == [1_049_000, 29_888]
        sizes = [e["bytes"] for e in bench["sweep"]]  # the sweep the projection fits
        assert sizes == sorted(sizes) and sizes[-1] == bench["comm_bytes"] and len(sizes) >= 4

    rows = json.loads(dlscale("results", "-e", name, "--format", "json", check=0).stdout)
    assert sorted(f"{r['nodes']}x{r['ranks_per_node']}" for r in rows) == sorted(scales)
    for r in rows:
        assert r["compute_time_s"] > 0 and r["exposed_comm_s"] >= 0
        assert 0 < r["predicted_efficiency"] <= 1 and r["efficiency"] > 0
        if r["ranks"] > 1:
            assert r["comm_busbw_gbps"] > 0 and r["comm_run_id"] in {c["run_id"] for c in comm}
            assert r["predicted_step_s"] > r["comm_time_s"] > 0
        # energy where the machine lets it be read, else null with why
        env = store.records.of(r["run_id"], "env")[0]
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
    # the energy column where a point has energy, else a note says why not
    metered = any(r["images_per_joule"] is not None for r in rows)
    assert ("images/J" in md_table(text, "Throughput, speedup and efficiency")[0]) == metered
    assert metered or "images_per_joule: " in text
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
    # past the measured scales: the intra-node link fitted from the 1x2 sweep, the
    # inter-node one stated by a profile, and every row saying which it is
    profile = tmp_path / "stated.toml"
    profile.write_text(
        PROFILE.read_text() + "\n[interconnect]\ninjection_gbps = 1.25\nlatency_us = 50\n"
    )
    (fam,) = json.loads(
        dlscale(
            "project",
            "-e",
            "efficiency-cpu",
            "--to",
            "4",
            "--profile",
            str(profile),
            "--format",
            "json",
            check=0,
        ).stdout
    )
    assert fam["links"]["intra-node"]["source"] == "measured"
    assert fam["links"]["inter-node"]["source"] == "stated, not measured"
    assert [(r["nodes"], r["ranks_per_node"], r["kind"]) for r in fam["rows"]] == [
        (1, 1, "measured"),
        (1, 2, "measured"),
        (2, 2, "projected"),
        (4, 2, "projected"),
    ]
    for r in fam["rows"][2:]:
        x = r["throughput"]
        assert r["stated"] and 0 < x["ci95_low"] <= x["value"] <= x["ci95_high"]
    assert fam["held_out"] is None  # two scales


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
    env = store.records.of(across["run_id"], "env")[0]
    assert sorted(env["nodes"]) == ["node1", "node2"] and env["job_id"]
    assert {r["ranks"] for r in rows} == {1, 2}


@pytest.mark.slurm
@pytest.mark.slow
def test_a_projection_and_its_held_out_check_on_two_slurm_nodes(slurm_cluster, tmp_path, home):
    """1x1, 1x2, 2x1 and 2x2 with the comm sweep: 2x2 is held out and projected from the
    others (the inter-node link fitted from 2x1's sweep alone), and the curve projected to 8
    nodes."""
    spec = small("efficiency-cpu-slurm.toml", tmp_path)
    spec.write_text(
        spec.read_text()
        .replace('scales = ["1x1", "1x2", "2x1"]', 'scales = ["1x1", "1x2", "2x1", "2x2"]')
        .replace('name = "efficiency-cpu-slurm"', 'name = "projection-slurm"')
    )
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(PROFILE),
        "--backend",
        "slurm",
        "--wait",
        check=0,
        timeout=1200,
    )
    (fam,) = json.loads(
        dlscale(
            "project", "-e", "projection-slurm", "--to", "8", "--format", "json", check=0
        ).stdout
    )
    assert fam["links"]["inter-node"]["source"] == "measured"
    assert fam["links"]["inter-node"]["points"] >= 8  # 2x1's and 2x2's sweeps
    kinds = [(r["nodes"], r["ranks_per_node"], r["kind"]) for r in fam["rows"]]
    assert kinds == [
        (1, 1, "measured"),
        (1, 2, "measured"),
        (2, 1, "measured"),
        (2, 2, "measured"),
        (4, 2, "projected"),
        (8, 2, "projected"),
    ]
    held = fam["held_out"]
    assert (held["nodes"], held["ranks_per_node"]) == (2, 2), held
    assert held["base"] == "pytorch-ddp 1x2" and "pytorch-ddp 2x1" in held["from"]
    assert held["measured_throughput"] > 0 and isinstance(held["outside_interval"], bool)
    assert abs(held["error"]) < 5  # a number, whatever the shared CPUs made of it
    shown = dlscale("project", "-e", "projection-slurm", "--to", "8", check=0).stdout
    assert "held-out check: 2x2 projected from" in shown
    out = tmp_path / "report"
    dlscale("report", "-e", "projection-slurm", "--out", str(out), check=0)
    text = (out / "report.md").read_text()
    assert "## Scaling beyond what was measured" in text and "held-out check: 2x2" in text
    print(  # the numbers for the note (pytest -s)
        "held-out 2x2:",
        held["projected_throughput"],
        "measured",
        held["measured_throughput"],
        "error",
        held["error"],
        "outside",
        held["outside_interval"],
    )
