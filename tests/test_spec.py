"""Every kind of bad spec: named file, line, field and what is allowed; exit 2; no traceback."""

import pytest

from conftest import REPO, dlscale, write_spec
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError

BAD = [
    # (what to change, expected fragments of the message, line)
    (
        {"experiment": "bogus = 1"},
        ["experiment.bogus", "unknown key", "allowed keys here: name"],
        10,
    ),
    ({"training": 'lr = "fast"'}, ["training.lr", "valid number"], 15),
    ({"training": "steps_per_epoch = 3"}, ["training.steps_per_epoch", "unknown key"], 15),
    (
        {"replace": ('"pytorch-ddp"', '"pytorch-dpp"')},
        ["experiment.frameworks", "unknown framework 'pytorch-dpp'", "allowed: pytorch-ddp"],
        3,
    ),
    (
        {"replace": ('"resnet20"', '"resnet21"')},
        ["experiment.models", "unknown model", "resnet44"],
        4,
    ),
    ({"replace": ('"synthetic-cifar"', '"mnist"')}, ["unknown dataset", "digits", "imagenet"], 5),
    (
        {"replace": ('"synthetic-cifar"', '"imagenet"')},
        ["model resnet20 fits none", "ImageNet ResNets take", "imagenet"],
        1,
    ),
    (
        {"experiment": 'loaders = ["native", "dali"]'},
        [
            "experiment.loaders",
            "loader 'dali' reads data, and synthetic-cifar has none",
            "no loader is involved",
            'loaders = ["native"]',
            "cifar10, digits, imagenet",
        ],
        10,
    ),
    (
        {"experiment": 'loaders = ["native", "fast"]'},
        ["experiment.loaders", "unknown loader 'fast'", "allowed: native, dali"],
        10,
    ),
    (
        {"replace": ('"1x1", "1x2"', '"0x1"')},
        ["experiment.scales[0].nodes", "greater than or equal to 1", "got 0"],
        6,
    ),
    (
        {"replace": ('"1x1", "1x2"', "{nodes = 1, ranks_per_node = 0}")},
        ["experiment.scales[0].ranks_per_node", "greater than or equal to 1"],
        6,
    ),
    ({"replace": ('"1x1", "1x2"', '"two"')}, ["not NODESxRANKS"], 6),
    ({"replace": ("[8]", "[0]")}, ["experiment.per_device_batch", "not a positive integer"], 7),
    ({"replace": ("[8]", "[-4]")}, ["not a positive integer"], 7),
    ({"replace": ("[8]", "[8.5]")}, ["experiment.per_device_batch[0]", "valid integer", "8.5"], 7),
    ({"replace": ("[8]", '["8"]')}, ["experiment.per_device_batch[0]", "valid integer"], 7),
    ({"replace": ("repetitions = 1", "repetitions = 0")}, ["experiment.repetitions"], 9),
    ({"replace": ("steps = 4", "epochs = 4")}, ["synthetic-cifar has no epochs"], None),
    ({"training": "epochs = 2"}, ["exactly one of steps"], 11),
    ({"training": "target_accuracy = 0.9"}, ["target_accuracy needs a real dataset"], None),
    (
        {"training": "target_accuracy = 1.5"},
        ["training.target_accuracy", "less than or equal to 1"],
        15,
    ),
]


def _make(tmp_path, change):
    path = write_spec(
        tmp_path / "spec.toml", change.get("experiment", ""), change.get("training", "")
    )
    if "replace" in change:
        old, new = change["replace"]
        path.write_text(path.read_text().replace(old, new, 1))
    return path


@pytest.mark.parametrize("change,fragments,line", BAD)
def test_bad_spec_is_reported_with_file_line_and_field(tmp_path, change, fragments, line):
    path = _make(tmp_path, change)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message
    assert message.startswith(f"{path}:{line}:" if line else str(path))


def test_invalid_toml_names_line_and_column(tmp_path):
    path = write_spec(tmp_path / "spec.toml")
    path.write_text(path.read_text().replace("[training]", "[training"))
    with pytest.raises(SpecError, match=r"spec.toml:11:\d+: invalid TOML"):
        load_spec(path)


def test_cli_exit_2_without_traceback(tmp_path, home):
    path = _make(tmp_path, {"replace": ("[8]", "[0]")})
    for cmd in (["plan", str(path)], ["run", str(path)]):
        proc = dlscale(*cmd, check=2)
        assert "Traceback" not in proc.stderr + proc.stdout
        assert f"dlscale: error: {path}:7: experiment.per_device_batch" in proc.stderr
    proc = dlscale("run", str(tmp_path / "nope.toml"), check=2)
    assert f"{tmp_path / 'nope.toml'}: no such file" in proc.stderr
    assert not (home / "runs").exists()  # nothing was submitted


def test_shipped_examples_validate():
    for path in sorted((REPO / "examples").glob("*.toml")):
        load_spec(path)


OPTION_ERRORS = [
    (
        "[options.deepspeed]\nzero_stage = 4",
        "zero_stage",
        ["options.deepspeed.zero_stage", "allowed: 0, 1, 2, 3", "got 4"],
    ),
    ("[options.deepspeed]\nzero_stage = true", "zero_stage", ["valid integer"]),
    (
        "[options.horovod-pytorch]\nfp16 = true",
        "fp16",
        ["options.horovod-pytorch.fp16", "unknown key", "allowed keys here: fp16_allreduce"],
    ),
    ("[options.horovod-pytorch]\nfp16_allreduce = 1", "fp16_allreduce", ["valid boolean"]),
    (
        "[options.tensorflow]\nbucket_mb = 25",
        "[options.tensorflow]",
        ["options.tensorflow", "unknown key", "deepspeed", "horovod-pytorch", "pytorch-ddp"],
    ),
    (
        '[options.pytorch-ddp]\ncompile_mode = "fast"',
        "compile_mode",
        ["options.pytorch-ddp.compile_mode", "allowed: default, reduce-overhead", "got 'fast'"],
    ),
]


@pytest.mark.parametrize("table,at,fragments", OPTION_ERRORS)
def test_bad_framework_options_are_reported_at_their_line(tmp_path, table, at, fragments):
    path = write_spec(tmp_path / "spec.toml")
    path.write_text(path.read_text() + "\n" + table + "\n")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(at))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    for fragment in fragments:
        assert fragment in str(info.value)
    proc = dlscale("plan", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_dali_and_imagenet_are_refused_for_trainers_without_them(tmp_path, framework):
    """Named at the field, with the frameworks that take it and what this one takes."""
    path = write_spec(tmp_path / "spec.toml", 'loaders = ["dali"]')
    path.write_text(
        path.read_text()
        .replace('"pytorch-ddp"', f'"{framework}"')
        .replace('"synthetic-cifar"', '"digits"')
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(
        f"{path}:10: experiment.loaders: loader 'dali' is taken only by the pytorch-ddp, "
        f"pytorch-fsdp, horovod-pytorch, deepspeed trainers, not by {framework}'s (its "
        f'loaders: native); give {framework} a spec of its own with loaders = ["native"]'
    )
    path.write_text(
        path.read_text()
        .replace('loaders = ["dali"]', "")
        .replace('"digits"', '"imagenet"')
        .replace('"resnet20"', '"resnet50"')
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert (
        f"{path}:5: experiment.datasets: dataset 'imagenet' is taken only by the "
        f"pytorch-ddp, pytorch-fsdp, horovod-pytorch, deepspeed trainers, not by {framework}'s "
        "(its datasets: synthetic-cifar, synthetic-imagenet, cifar10, digits)" in str(info.value)
    )
    proc = dlscale("plan", str(path), check=2)  # the command line: exit 2, one line, no traceback
    assert "experiment.datasets: dataset 'imagenet'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_imagenet_needs_a_data_dir_and_says_how_to_get_a_small_one(tmp_path):
    path = write_spec(tmp_path / "spec.toml")
    path.write_text(
        path.read_text()
        .replace('"synthetic-cifar"', '"imagenet"')
        .replace('"resnet20"', '"resnet50"')
    )
    with pytest.raises(
        SpecError, match="needs training.data_dir .*`dlscale data sample imagenet DIR`"
    ):
        load_spec(path)


@pytest.mark.parametrize(
    "old,new,field,line",
    [
        ("[8]", "[100000000000000000000]", "experiment.per_device_batch[0]", 7),
        ("[8]", "[9223372036854775807]", "experiment.per_device_batch[0]", 7),
        ("steps = 4", "steps = 100000000000000000000", "training.steps", 12),
    ],
)
def test_numbers_beyond_what_can_run_are_exit_2_in_plan_and_run(
    tmp_path, home, old, new, field, line
):
    """Issue 11, item 15: once an OverflowError in `run`, or submitted. Every numeric field
    is refused by class in test_bad_input.py; these are the reported ones, end to end."""
    path = _make(tmp_path, {"replace": (old, new)})
    for cmd in (["run", str(path)], ["plan", str(path)])[: 2 if old == "[8]" else 1]:
        proc = dlscale(*cmd, check=2)
        assert proc.stderr.startswith(
            f"dlscale: error: {path}:{line}: {field}: Input should be less than or equal to "
        )
        assert "Overflow" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (home / "runs").exists()  # nothing was submitted
