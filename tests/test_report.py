"""`dlscale report`, `export mllog` and `rerun` on real runs: a study on the real Slurm test
cluster, and a time-to-accuracy experiment on the local backend. The report's numbers must
be analysis.results' numbers, and its figures must be real PNGs showing those series."""

import base64
import json
import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from conftest import REPO, dlscale, mlperf_check, mlperf_score_s
from dlscale.engine.io.outputs import OutputFolder
from dlscale.engine.results import analysis, charts, disturbed, tables
from dlscale.engine.results.report import document as reporting
from dlscale.engine.results.report import figures, mllog
from dlscale.engine.tracking.store import Store

PNG = b"\x89PNG\r\n\x1a\n"


def md_table(text: str, title: str) -> list[dict[str, str]]:
    """The rows of the Markdown table under `## title`, as dicts by header."""
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    headers = cells[0]
    return [dict(zip(headers, row)) for row in cells[2:]]


def check_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data[:8] == PNG, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
    return image


def pixels_of(image: np.ndarray, hex_colour: str, tol: float = 0.03) -> int:
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(image[..., :3] - rgb) < tol).all(axis=-1).sum())


def check_figures(made: reporting.Report) -> None:
    rows = made.rows
    names = {f.name for f in made.figures}
    assert {"speedup", "efficiency", "throughput", "frameworks"} <= names
    has_tta = any(r["time_to_accuracy_s"] is not None for r in rows)
    assert ("tta" in names) == has_tta
    for fig in made.figures:
        image = check_png(fig.path)
        for label, colour in fig.colors.items():
            # every series is visibly drawn in its own colour
            assert pixels_of(image, colour) > 20, (fig.name, label, colour)
    by_name = {f.name: f for f in made.figures}
    for metric in ("speedup", "efficiency", "throughput") + (("tta",) if has_tta else ()):
        key = charts.METRICS[metric][0]
        fig = by_name[metric]
        expected = charts.series([r for r in rows if r[key] is not None])
        for label, pts in expected.items():
            assert label in fig.legend
            assert fig.series[label] == pytest.approx([(r["ranks"], r[key]) for r in pts])
        if metric in ("speedup", "efficiency"):
            devices = sorted({r["ranks"] for r in rows})
            assert fig.series["ideal"] == pytest.approx(
                [(d, d if metric == "speedup" else 1.0) for d in devices]
            )
        assert ("noisy (CV > 5%)" in fig.legend) == any(r["noisy"] for r in rows)
    bars = by_name["frameworks"]
    for fw in {r["framework"] for r in rows}:
        best = {}
        for r in rows:
            if r["framework"] == fw:
                best[r["ranks"]] = max(best.get(r["ranks"], 0), r["throughput"])
        assert [y for _, y in bars.series[fw]] == pytest.approx([best[d] for d in sorted(best)])


def check_results_table(text: str, rows: list[dict]) -> None:
    shown = md_table(text, "Throughput, speedup and efficiency")
    assert len(shown) == len(rows)
    for r in rows:
        scale = f"{r['nodes']}x{r['ranks_per_node']}"
        (cells,) = [
            c
            for c in shown
            if c["framework"] == r["framework"]
            and c["scale"] == scale
            and c["batch/dev"] == str(r["per_device_batch"])
        ]
        mark = " \\*" if r["noisy"] else ""  # the noisy mark, escaped for Markdown
        # and the disturbed one, where other work disturbed runs it counts (a busy CI)
        mark += " \\~" if disturbed.counted_disturbed(r) else ""
        assert cells["images/s"] == tables.fmt(r["throughput"], 1) + mark
        assert cells["CI95"] == tables.fmt(r["throughput_ci95"], 1)
        assert cells["speedup"] == tables.fmt(r["speedup"])
        assert cells["efficiency"] == tables.fmt(r["efficiency"])
        assert cells["n"] == f"{r['n']}/{r['repetitions']}"
        assert cells["CV"].endswith(" \\*") == r["noisy"]
        assert cells["baseline"] == r["baseline"]
    noisy = [r for r in rows if r["noisy"]]
    assert ("## Noisy points" in text) == bool(noisy)
    for r in rows:
        if r["baseline_run_id"]:
            assert f"run {r['baseline_run_id']}" in text  # the baseline is named


@pytest.mark.slurm
@pytest.mark.slow
def test_report_of_the_ccgrid_cpu_study_on_the_slurm_cluster(slurm_cluster, tmp_path, home):
    spec = REPO / "examples/studies/ccgrid2020/cpu.toml"
    profile = REPO / "examples/clusters/test-cluster.toml"
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(profile),
        "--backend",
        "slurm",
        "--wait",
        check=0,
        timeout=900,
    )
    store = Store(home)
    rows = analysis.results(store, "ccgrid2020-cpu")
    assert len(rows) == 4 and all(r["state"] == "COMPLETED" for r in rows)

    out = dlscale("report", "--out", str(tmp_path / "md"), check=0).stdout
    assert "report of ccgrid2020-cpu" in out and "4 figures" in out
    text = (tmp_path / "md" / "report.md").read_text()
    check_results_table(text, rows)
    assert json.loads((tmp_path / "md" / "results.json").read_text()) == json.loads(
        json.dumps(rows)
    )
    assert "| cluster profile | test-cluster" in text and "| nodes | node1, node2 |" in text
    assert "torch 2.13.0" in text and "| backend | slurm |" in text
    assert 'name = "ccgrid2020-cpu"' in text  # the spec text
    for link in re.findall(r"\]\((figures/[^)]+)\)", text):
        check_png(tmp_path / "md" / link)
    # the paper's number beside the user's largest-scale DDP speedup
    (speedup_ref, _) = md_table(
        text,
        "Against the paper: S. Mahon, S. Varrette, V. Plugaru, "
        "F. Pinel, P. Bouvry, IEEE/ACM CCGRID 2020",
    )
    best2 = max(r["speedup"] for r in rows if r["ranks"] == 2)
    assert speedup_ref["paper"] == "10.11" and speedup_ref["yours"] == tables.fmt(best2)
    assert "not the paper's scale" in speedup_ref["your point"]
    mllogs = sorted((tmp_path / "md" / "mllog").iterdir())
    assert len(mllogs) == 8

    made = reporting.build(store, "ccgrid2020-cpu", tmp_path / "api", "md")
    assert made.rows == rows
    check_figures(made)

    dlscale(
        "report",
        "-e",
        "ccgrid2020-cpu",
        "--format",
        "html",
        "--out",
        str(tmp_path / "html"),
        check=0,
    )
    page = (tmp_path / "html" / "report.html").read_text()
    uris = re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert len(uris) == len(made.figures) and 'src="figures/' not in page
    assert all(base64.b64decode(u)[:8] == PNG for u in uris)
    assert tables.fmt(rows[0]["throughput"], 1) in page and "10.11" in page

    # a Slurm rerun: the same job script with only the run id and folder moved
    one = next(r for r in store.runs("ccgrid2020-cpu") if r["nodes"] == 2)
    dlscale("rerun", one["run_id"], "--wait", check=0, timeout=600)
    (new,) = store.reruns(one["run_id"])
    assert new["state"] == "COMPLETED" and new["backend"] == "slurm"
    assert new["job_id"] != one["job_id"]
    old_script = (Path(one["run_dir"]) / "job.sh").read_text().splitlines()
    new_script = (Path(new["run_dir"]) / "job.sh").read_text().splitlines()
    assert (
        new_script[1] == f"# dlscale rerun of run {one['run_id']}: its job script, with "
        "the run id and folder moved"
    )
    del new_script[1]
    assert len(old_script) == len(new_script)
    for a, b in zip(old_script, new_script):
        assert (
            a.replace(one["run_dir"], new["run_dir"])
            .replace(one["run_id"], new["run_id"])
            .replace(one["run_id"][:8], new["run_id"][:8])
            == b
        )
    env = store.records.of(new["run_id"], "env")[0]
    assert env["job_id"] == new["job_id"] and sorted(env["nodes"]) == ["node1", "node2"]
    assert (Path(new["run_dir"]) / "spec.toml").read_text() == spec.read_text()


TTA_SPEC = """
[experiment]
name = "tta"
frameworks = ["pytorch-ddp"]
models = ["resnet20"]
datasets = ["digits"]
scales = ["1x1", "1x2"]
per_device_batch = [32]
precisions = ["fp32"]
repetitions = 1

[training]
epochs = 2
warmup_steps = 2
log_every = 10
target_accuracy = 0.05
"""


@pytest.mark.slow
def test_report_mllog_and_rerun_of_a_local_time_to_accuracy_run(tmp_path, home):
    spec = tmp_path / "tta.toml"
    spec.write_text(TTA_SPEC)
    dlscale("run", str(spec), "--wait", check=0)
    store = Store(home)
    one = next(r for r in store.runs("tta") if r["devices"] == 1)

    # MLLOG: one `:::MLLOG {json}` line per event, in the mlcommons/logging shape
    text = dlscale("export", "mllog", one["run_id"][:8], check=0).stdout.splitlines()
    events = [mllog.parse(line) for line in text]
    assert all(
        set(e) == {"namespace", "time_ms", "event_type", "key", "value", "metadata"} for e in events
    )
    keys = [e["key"] for e in events]
    (bench,) = [e for e in events if e["key"] == "submission_benchmark"]
    assert bench["value"] == "resnet"  # the ruleset's; dlscale's network is dlscale_model
    assert [e["value"] for e in events if e["key"] == "dlscale_model"] == ["resnet20"]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    (stop,) = [e for e in events if e["key"] == "run_stop"]
    assert stop["event_type"] == "INTERVAL_END"
    assert stop["metadata"]["status"] == "success"  # the target was reached
    evals = store.records.of(one["run_id"], "eval")
    assert [e["value"] for e in events if e["key"] == "eval_accuracy"] == [r["top1"] for r in evals]
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [
        r["epoch"] for r in evals
    ]
    summary = store.records.of(one["run_id"], "summary")[0]
    (tput,) = [e for e in events if e["key"] == "dlscale_throughput"]
    assert tput["value"] == summary["throughput"]
    assert [e["value"] for e in events if e["key"] == "global_batch_size"] == [32]
    times = [e["time_ms"] for e in events]
    assert times == sorted(times)
    dlscale("export", "mllog", "-e", "tta", "--out", str(tmp_path / "ml"), check=0)
    assert sorted(p.name for p in (tmp_path / "ml").iterdir()) == sorted(
        f"{r['run_id']}.mllog" for r in store.runs("tta")
    )
    # MLCommons' own tools: every real trainer run that reached its target passes the
    # checker (training 4.0.0, open division), and MLPerf's score is dlscale's
    # time-to-accuracy (the summary is written seconds later: the step-time breakdown)
    for run in store.runs("tta"):
        path = tmp_path / "ml" / f"{run['run_id']}.mllog"
        passed, output = mlperf_check(path, tmp_path)
        assert passed, output
        tta = store.records.of(run["run_id"], "summary")[0]["time_to_accuracy_s"]
        assert mlperf_score_s(path) == pytest.approx(tta, rel=0.01)

    # rerun: a new run repeating the 1-rank one; the original stays as it was
    before = store.records.of(one["run_id"])
    out = dlscale("rerun", one["run_id"], "--wait", check=0).stdout
    (new,) = store.reruns(one["run_id"])
    assert f"run {new['run_id']} repeats run {one['run_id']}" in out
    assert new["state"] == "COMPLETED" and new["run_id"] != one["run_id"]
    assert store.records.of(one["run_id"]) == before
    assert store.records.of(new["run_id"], "params")[0]["run_id"] == new["run_id"]
    assert Path(new["run_dir"]).name == new["run_id"]
    t0 = before[-1]["throughput"]
    t1 = store.records.of(new["run_id"], "summary")[0]["throughput"]
    assert f"rerun / original {t1 / t0:.3f}" in out
    rows = analysis.results(store, "tta")
    assert [r["n"] for r in rows] == [1, 1]  # not pooled into the point's repetitions

    dlscale("report", "--out", str(tmp_path / "rep"), check=0)
    page = (tmp_path / "rep" / "report.md").read_text()
    check_results_table(page, rows)
    assert json.loads((tmp_path / "rep" / "reruns.json").read_text()) == json.loads(
        json.dumps(analysis.reruns(store, "tta"))
    )
    assert not (tmp_path / "rep" / "reference.json").exists()  # no paper for this spec
    (rerun_row,) = md_table(page, "Reruns (original against its exact repeat)")
    assert rerun_row["rerun"] == new["run_id"] and rerun_row["rerun / original"] == f"{t1 / t0:.3f}"
    tta = md_table(page, "Time-to-accuracy")
    assert [c["TTA s"] for c in tta] == [tables.fmt(r["time_to_accuracy_s"], 1) for r in rows]
    made = reporting.build(store, None, tmp_path / "api", "md")
    check_figures(made)  # with the time-to-accuracy figure

    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[paper]\ntitle = "x"\nauthors = "y"\nvenue = "z"\n\n[[numbers]]\n'
        'metric = "speedup"\nmodel = "resnet20"\ndevices = 0\nvalue = 1.0\n'
        'hardware = "h"\n'
    )
    proc = dlscale("report", "--reference", str(bad), "--out", str(tmp_path / "x"), check=2)
    assert f"{bad}:9: numbers[0].devices" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_report_export_and_rerun_input(tmp_path, home):
    proc = dlscale("report", check=2)
    assert "has no experiments yet" in proc.stderr and "Traceback" not in proc.stderr
    assert dlscale("report", "--format", "pdf").returncode == 2
    assert "no experiment 'nope'" in dlscale("report", "-e", "nope", check=2).stderr
    assert "name runs to export" in dlscale("export", "mllog", check=2).stderr
    assert "no run 'nosuch'" in dlscale("export", "mllog", "nosuch", check=2).stderr
    assert "no run 'nosuch'" in dlscale("rerun", "nosuch", check=2).stderr


def _point(loader, devices, throughput):
    return {
        "model": "resnet50",
        "framework": "pytorch-ddp",
        "nodes": devices // 4,
        "ranks_per_node": 4,
        "per_device_batch": 64,
        "precision": "bf16",
        "loader": loader,
        "throughput": throughput,
        "throughput_ci95": 1.0,
        "noisy": False,
    }


def test_the_loader_table_sets_each_loader_against_native():
    rows = [_point("native", 4, 100.0), _point("dali", 4, 150.0), _point("native", 8, 180.0)]
    t = reporting.loader_table(rows)
    assert t.headers[-3:] == ["native images/s", "dali images/s", "dali / native"]
    assert t.rows == [
        ["resnet50", "pytorch-ddp", "1x4", "64", "bf16", "100.0 ± 1.0", "150.0 ± 1.0", "1.50"],
        ["resnet50", "pytorch-ddp", "2x4", "64", "bf16", "180.0 ± 1.0", "-", "-"],
    ]
    assert reporting.loader_table(rows[:1]) is None  # one loader: no comparison


def test_figures_of_a_large_matrix_use_a_log_axis_and_name_each_series(tmp_path):
    """The shape of the J. Big Data study: 3 frameworks, 2 loaders, 4 to 1,024 GPUs."""
    rows = []
    for i, fw in enumerate(["deepspeed", "horovod-pytorch", "pytorch-ddp"]):
        for loader in ("native", "dali"):
            for d in (4, 16, 64, 256, 1024):
                tput = 1000.0 * d * (0.9 - 0.05 * i) * (1.5 if loader == "dali" else 1.0)
                rows.append(
                    {
                        **_point(loader, d, tput),
                        "framework": fw,
                        "ranks": d,
                        "speedup": tput / 1000.0 / 4,
                        "efficiency": tput / 1000.0 / d,
                        "noisy": d == 16,
                        "baseline": "pytorch-ddp 1x4",
                        "time_to_accuracy_s": None,
                        "time_to_accuracy_ci95": None,
                    }
                )
    with OutputFolder.open(tmp_path) as folder:
        made = {f.name: f for f in figures.draw_all(rows, folder, "big")}
    assert set(made) == {"speedup", "efficiency", "throughput", "frameworks"}  # no TTA
    speed = made["speedup"]
    assert speed.xscale == "log"  # 4 to 1,024 devices spread evenly
    assert {"deepspeed dali", "pytorch-ddp native", "ideal", "noisy (CV > 5%)"} <= set(speed.legend)
    assert len(speed.series["noisy (CV > 5%)"]) == 6  # every series' 16-GPU point
    image = check_png(speed.path)
    assert all(pixels_of(image, c) > 20 for c in speed.colors.values())
    bars = made["frameworks"].series
    assert sorted(bars) == ["deepspeed", "horovod-pytorch", "pytorch-ddp"]
    assert [y for _, y in bars["pytorch-ddp"]] == pytest.approx(
        [1000.0 * d * 0.8 * 1.5 for d in (4, 16, 64, 256, 1024)]
    )  # its best loader
