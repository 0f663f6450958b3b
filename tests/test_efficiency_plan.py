"""Planning for issue 17: communication benchmark runs (comm_benchmark = true) and lr schedules
as a matrix axis (lr_schedules = [...]), both without changing the id of any run a spec
without them plans."""

import hashlib
import textwrap

import pytest

from conftest import dlscale, write_spec
from dlscale.engine.config.frameworks import NO_COMM_BENCHMARK
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError
from dlscale.engine.launching.launch import trainer_args
from dlscale.engine.launching.plan import plan

# 4 frameworks x 5 models x 10 scales x 5 batches x 10 repetitions = 10,000 runs. The digest
# of their ids was taken before comm_benchmark and lr_schedules existed (commit f965915).
TEN_THOUSAND = textwrap.dedent("""\
    [experiment]
    name = "ten-thousand"
    frameworks = ["pytorch-ddp", "deepspeed", "horovod-pytorch", "mxnet"]
    models = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]
    datasets = ["synthetic-cifar"]
    scales = ["1x1", "1x2", "1x4", "1x8", "2x1", "2x2", "2x4", "2x8", "4x4", "4x8"]
    per_device_batch = [8, 16, 32, 64, 128]
    precisions = ["fp32"]
    repetitions = 10
    {experiment}
    [training]
    steps = 30
    warmup_steps = 5
    """)
TEN_THOUSAND_IDS = "0f638366d37e0e63b11704d43b1bf46edf39618811471d061b6991ccf9f02454"


def ids_digest(runs) -> str:
    return hashlib.sha256(" ".join(r.run_id for r in runs).encode()).hexdigest()


def spec(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_spec(path)


@pytest.mark.parametrize(
    "experiment",
    ["", "comm_benchmark = false", "comm_benchmark = true", 'lr_schedules = ["constant"]'],
)
def test_ten_thousand_training_runs_keep_their_ids(tmp_path, experiment):
    p = plan(spec(tmp_path, TEN_THOUSAND.format(experiment=experiment)))
    training = [r for r in p.runs if not r.comm_benchmark]
    assert len(training) == 10_000 and ids_digest(training) == TEN_THOUSAND_IDS


def test_comm_runs_one_per_framework_model_scale_and_precision_first(tmp_path):
    text = (
        TEN_THOUSAND.format(experiment="comm_benchmark = true")
        .replace('precisions = ["fp32"]', 'precisions = ["fp32", "bf16"]')
        .replace("repetitions = 10", "repetitions = 1")
    )
    p = plan(spec(tmp_path, text))
    comm = [r for r in p.runs if r.comm_benchmark]
    # mxnet has none; scale 1x1 has nothing to communicate; batches do not matter
    assert len(comm) == 3 * 5 * 9 * 2
    assert p.runs[: len(comm)] == comm  # before every training run
    assert {(r.framework, r.model, r.scale, r.precision) for r in comm} == {
        (fw, m, s, prec)
        for fw in ("pytorch-ddp", "deepspeed", "horovod-pytorch")
        for m in ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
        for s in ("1x2", "1x4", "1x8", "2x1", "2x2", "2x4", "2x8", "4x4", "4x8")
        for prec in ("fp32", "bf16")
    }
    assert len({r.run_id for r in p.runs}) == len(p.runs)  # ids of their own
    assert plan(spec(tmp_path, text, "again.toml")).runs[: len(comm)] == comm  # and stable
    assert [r.run_id for r in plan(spec(tmp_path, text, "again.toml")).runs[: len(comm)]] == [
        r.run_id for r in comm
    ]
    assert p.notes == [f"communication benchmark: none for mxnet: {NO_COMM_BENCHMARK['mxnet']}"]
    assert "communication benchmark" in comm[0].label()


def test_only_comm_runs_start_the_trainer_in_comm_mode_with_their_options(tmp_path):
    path = write_spec(tmp_path / "s.toml", "comm_benchmark = true")
    path.write_text(
        path.read_text().replace('"pytorch-ddp"', '"pytorch-ddp", "horovod-pytorch"')
        + "[options.horovod-pytorch]\nfp16_allreduce = true\n"
    )
    runs = plan(load_spec(path)).runs
    for r in runs:
        args = trainer_args(r)
        assert ("--comm-benchmark" in args) == r.comm_benchmark
        assert ("--fp16-allreduce" in args) == (r.framework == "horovod-pytorch")
    assert sorted((r.framework, r.scale) for r in runs if r.comm_benchmark) == [
        ("horovod-pytorch", "1x2"),
        ("pytorch-ddp", "1x2"),
    ]


@pytest.mark.parametrize(
    "frameworks,scales,note",
    [
        ('["tensorflow"]', '"1x1", "1x2"', "none for tensorflow"),
        ('["horovod-tensorflow"]', '"1x2"', "none for horovod-tensorflow"),
        ('["pytorch-ddp"]', '"1x1"', "every scale is one device"),
    ],
)
def test_plan_says_why_no_benchmark_runs(tmp_path, home, frameworks, scales, note):
    path = write_spec(tmp_path / "s.toml", "comm_benchmark = true", scales=scales)
    path.write_text(path.read_text().replace('["pytorch-ddp"]', frameworks))
    p = plan(load_spec(path))
    assert not [r for r in p.runs if r.comm_benchmark]
    assert any(note in n for n in p.notes)
    shown = dlscale("plan", str(path), "--include-planned", home=home)
    assert note in " ".join(shown.stdout.split()), shown.stdout + shown.stderr


def test_lr_schedules_are_a_matrix_axis(tmp_path):
    base = plan(load_spec(write_spec(tmp_path / "a.toml"))).runs
    path = write_spec(tmp_path / "b.toml", 'lr_schedules = ["constant", "step", "cosine"]')
    runs = plan(load_spec(path)).runs
    assert len(runs) == 3 * len(base)
    by_schedule = {}
    for r in runs:
        by_schedule.setdefault(r.training["lr_schedule"], []).append(r)
        args = trainer_args(r)
        assert args[args.index("--lr-schedule") + 1] == r.training["lr_schedule"]
    assert sorted(by_schedule) == ["constant", "cosine", "step"]
    # the constant runs are the runs the spec always planned (constant is the default)
    assert [r.run_id for r in by_schedule["constant"]] == [r.run_id for r in base]
    assert len({r.point_id for r in runs}) == 3 * len({r.point_id for r in base})
    # the training recipe's own schedule still works alone
    alone = write_spec(tmp_path / "c.toml", training='lr_schedule = "step"')
    assert [r.run_id for r in plan(load_spec(alone)).runs] == [
        r.run_id for r in by_schedule["step"]
    ]


@pytest.mark.parametrize(
    "experiment,training,fragments",
    [
        (
            'lr_schedules = ["step", "cosine"]',
            'lr_schedule = "poly"',
            [
                "training: lr_schedule = 'poly' and experiment.lr_schedules = ['step', 'cosine'] "
                "are both given"
            ],
        ),
        (
            'lr_schedules = ["step", "step"]',
            "",
            ["experiment.lr_schedules", "'step' is given twice"],
        ),
        ('lr_schedules = ["linear"]', "", ["experiment.lr_schedules[0]", "'constant'", "'cosine'"]),
        ("lr_schedules = []", "", ["experiment.lr_schedules", "at least 1"]),
        ('comm_benchmark = "yes"', "", ["experiment.comm_benchmark", "valid boolean"]),
    ],
)
def test_bad_schedule_and_benchmark_fields_exit_2_naming_them(
    tmp_path, home, experiment, training, fragments
):
    path = write_spec(tmp_path / "s.toml", experiment, training)
    with pytest.raises(SpecError):
        load_spec(path)
    proc = dlscale("plan", str(path), home=home, check=2)
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"dlscale: error: {path}:"), err
    for fragment in fragments:
        assert fragment in err, err
