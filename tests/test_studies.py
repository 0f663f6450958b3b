"""examples/studies: the full GPU matrices parse, expand and load as runnable (every
framework, dataset and loader they name has a trainer now), the CPU versions load too, and
each study's published numbers load and are set beside a user's results."""

from pathlib import Path

import pytest

from conftest import REPO, dlscale
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError
from dlscale.engine.launching.plan import plan
from dlscale.engine.results.reference import compare, load_reference

STUDIES = REPO / "examples" / "studies"

# file -> (runs in its whole matrix, frameworks, largest device count)
MATRICES = {
    "ccgrid2020/gpu.toml": (5 * 5 * 3 * 3, 5, 12),
    "ccgrid2020/cpu-nodes.toml": (5 * 5 * 3 * 3, 5, 12),
    "jbigdata2023/gpu.toml": (3 * 3 * 2 * 9 * 3, 3, 1024),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_full_matrices_expand_and_load_as_runnable(name):
    runs, frameworks, most = MATRICES[name]
    p = plan(load_spec(STUDIES / name))  # not planning-only: `dlscale run` takes it
    assert len(p.runs) == runs
    assert len({r.framework for r in p.runs}) == frameworks
    assert max(r.devices for r in p.runs) == most
    assert len({r.run_id for r in p.runs}) == runs  # every run its own id


def test_jbigdata_matrix_compares_loaders_and_models():
    runs = plan(load_spec(STUDIES / "jbigdata2023/gpu.toml")).runs
    assert {r.loader for r in runs} == {"native", "dali"}
    assert {r.model for r in runs} == {"resnet50", "resnet101", "resnet152"}
    assert {r.dataset for r in runs} == {"imagenet"}
    assert sorted({r.devices for r in runs}) == [4, 8, 16, 32, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize("study", ["ccgrid2020", "jbigdata2023"])
def test_cpu_versions_are_runnable_with_pytorch_ddp_only(study):
    loaded = load_spec(STUDIES / study / "cpu.toml")
    runs = plan(loaded).runs
    assert {r.framework for r in runs} == {"pytorch-ddp"}
    assert max(r.nodes for r in runs) == 2 and max(r.ranks_per_node for r in runs) == 1
    assert "`dlscale env create" in loaded.text  # says how the other frameworks join


def test_published_numbers_load():
    cc = load_reference(STUDIES / "ccgrid2020/reference.toml").reference
    assert [(n.metric, n.framework, n.model, n.devices, n.value) for n in cc.numbers][0] == (
        "speedup",
        "pytorch-ddp",
        "resnet44",
        12,
        10.11,
    )
    jb = load_reference(STUDIES / "jbigdata2023/reference.toml").reference
    assert [(n.devices, n.value, n.bound) for n in jb.numbers] == [
        (4, 43200, ">"),
        (1024, 200, "<"),
    ]


def _row(fw, devices, speedup, loader="native", runtime=None):
    return {
        "framework": fw,
        "model": "resnet44",
        "ranks": devices,
        "loader": loader,
        "speedup": speedup,
        "runtime_s": runtime,
    }


def test_compare_takes_the_same_scale_or_else_the_largest_and_says_so():
    ref = load_reference(STUDIES / "ccgrid2020/reference.toml").reference
    rows = [
        _row("pytorch-ddp", 1, 1.0),
        _row("pytorch-ddp", 2, 1.9),
        _row("pytorch-ddp", 12, 9.5),
        _row("horovod-pytorch", 12, 11.0),
    ]
    first = compare(ref, rows)[0]
    assert (first["yours"], first["your_devices"], first["same_scale"]) == (9.5, 12, True)
    first = compare(ref, rows[:2])[0]
    assert (first["yours"], first["your_devices"], first["same_scale"]) == (1.9, 2, False)
    assert compare(ref, [])[0]["yours"] is None


def test_a_bad_reference_names_file_line_and_field(tmp_path):
    bad = tmp_path / "reference.toml"
    text = (STUDIES / "ccgrid2020/reference.toml").read_text()
    bad.write_text(text.replace('metric = "speedup"', 'metric = "speed"', 1))
    with pytest.raises(SpecError) as info:
        load_reference(bad)
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if '"speed"' in t)
    assert f"{bad}:{line}: numbers[0].metric" in str(info.value)
    assert "runtime_s" in str(info.value)  # what is allowed


def test_plan_include_planned_on_the_command_line(home):
    spec = str(STUDIES / "ccgrid2020/gpu.toml")
    profile = str(REPO / "examples/clusters/ulhpc-iris.toml")
    out = dlscale(
        "plan", spec, "--profile", profile, "--backend", "slurm", "--include-planned", check=0
    ).stdout
    assert "225 runs: 225 to run, 0 completed earlier" in out
    # Without environments (an empty home) the plan is refused, naming each fix: on a GPU
    # partition the GPU environment, built with the profile's modules.
    proc = dlscale("plan", spec, "--profile", profile, "--backend", "slurm", check=2)
    assert (
        f"create one with `dlscale env create horovod-tensorflow --gpu --profile {profile}`"
    ) in proc.stderr
    spec = str(STUDIES / "jbigdata2023/gpu.toml")
    profile = str(REPO / "examples/clusters/juwels-booster.toml")
    proc = dlscale("plan", spec, "--profile", profile, "--backend", "slurm", check=2)
    assert (
        f"create one with `dlscale env create deepspeed --gpu --profile {profile}`" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_a_data_dir_under_home_is_expanded_for_the_trainer():
    loaded = load_spec(STUDIES / "ccgrid2020/gpu.toml")
    assert loaded.spec.training.data_dir == str(Path.home() / "data/cifar-10-batches-py")
