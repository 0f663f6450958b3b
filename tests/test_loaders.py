"""ImageNet-format data and the DALI loader against the native one: the sample writer, the
native ImageNet reader, DALI giving the same epochs as the native loader, 2-rank runs that
train with either, planning's refusals, and both loaders side by side on the Slurm test
cluster.

DALI runs in an environment of its own (`dlscale env create pytorch-ddp --with dali`), built
once per machine into DLSCALE_ENV_CACHE; the checks that need it run their code in that
environment's python, the way the trainers run."""

import json
import os
import subprocess
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import HANG_S, dlscale, write_spec
from dlscale.engine.datasets import write_imagenet_sample
from dlscale.engine.errors import UserError
from dlscale.engine.launching import envs
from dlscale.engine.launching.envs import builder as envbuild
from dlscale.engine.launching.envs import recipes
from dlscale.engine.tracking.store import Store
from dlscale.trainers.common.args import build_parser
from dlscale.trainers.common.imagenet import read_folders
from dlscale.trainers.torch_ddp import loaders
from test_data import make_cifar
from test_frameworks import PROFILE, env_home, records, run_trainer  # noqa: F401


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """4 classes x 12 training and 3 validation images, as `dlscale data sample` writes."""
    root = tmp_path_factory.mktemp("data") / "imagenet-sample"
    write_imagenet_sample(root, classes=4, per_class=12, val_per_class=3)
    return root


def args_for(dataset, loader="native", batch=4, data_dir=None, workers=0):
    model = "resnet50" if dataset == "imagenet" else "resnet20"
    argv = [
        "--model",
        model,
        "--dataset",
        dataset,
        "--per-device-batch",
        str(batch),
        "--steps",
        "1",
        "--loader",
        loader,
        "--loader-workers",
        str(workers),
    ]
    return build_parser("test").parse_args(
        argv + (["--data-dir", str(data_dir)] if data_dir else [])
    )


# --- the sample ---------------------------------------------------------------------------


def test_data_sample_writes_a_layout_that_data_check_accepts(tmp_path, home):
    dest = tmp_path / "sample"
    proc = dlscale(
        "data",
        "sample",
        "imagenet",
        str(dest),
        "--classes",
        "3",
        "--per-class",
        "5",
        "--val-per-class",
        "2",
        check=0,
    )
    assert (
        "train: 3 classes, 15 images" in proc.stdout and "val: 3 classes, 6 images" in proc.stdout
    )
    assert f'training.data_dir = "{dest}"' in proc.stdout
    assert (
        "layout OK"
        in dlscale("data", "check", "imagenet", str(dest), "--classes", "3", check=0).stdout
    )
    assert sorted(p.name for p in (dest / "train").iterdir()) == ["digit-0", "digit-1", "digit-2"]
    first = next((dest / "val" / "digit-1").iterdir())
    assert first.suffix == ".JPEG" and first.read_bytes()[:3] == b"\xff\xd8\xff"
    # a second time into the same folder: refused, nothing touched, nothing left behind
    before = sorted(p.relative_to(dest) for p in dest.rglob("*"))
    proc = dlscale("data", "sample", "imagenet", str(dest), check=2)
    assert f"{dest} exists and is not an empty folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.relative_to(dest) for p in dest.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["sample"]  # no temporary folder left


def test_data_sample_refuses_what_the_digits_cannot_give(tmp_path):
    with pytest.raises(UserError, match="1 to 10 classes"):
        write_imagenet_sample(tmp_path / "a", classes=11)
    with pytest.raises(UserError, match="the digits have only 1[0-9]{2} images of class 0"):
        write_imagenet_sample(tmp_path / "b", classes=1, per_class=500)
    assert list(tmp_path.iterdir()) == []


# --- the native ImageNet reader (dlscale's own torch) -------------------------------------


def test_labels_come_from_the_sorted_class_folders(sample):
    folders = read_folders(str(sample))
    assert folders.classes == ["digit-0", "digit-1", "digit-2", "digit-3"]
    assert len(folders.train) == 48 and len(folders.val) == 12
    for path, label in folders.train + folders.val:
        assert Path(path).parent.name == folders.classes[label]


def test_native_imagenet_reader_shapes_labels_and_disjoint_shards(sample):
    args = args_for("imagenet", batch=5, data_dir=sample)
    seen = []
    for rank in range(2):
        data = loaders.build(args, 2, rank, 0, torch.device("cpu"), False, "pytorch-ddp")
        assert (data.classes, data.train_images, data.steps_per_epoch) == (4, 48, 4)  # 24 // 5
        batches = list(data.epoch(0))
        assert len(batches) == 4
        for x, y in batches:
            assert x.shape == (5, 3, 224, 224) and x.dtype == torch.float32
            assert y.dtype == torch.int64 and set(y.tolist()) <= {0, 1, 2, 3}
        assert -3 < float(x.mean()) < 3 and float(x.std()) > 0.1  # normalised, not 0..255
        val = list(data.val())
        assert sum(len(y) for _, y in val) == 6 and val[0][0].shape[1:] == (3, 224, 224)
        seen.append(set(loaders.epoch_sampler(48, 2, rank, 0)))
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 48  # disjoint, all covered


def test_a_broken_imagenet_folder_is_named_before_training(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "x.JPEG").write_bytes(b"PNG...")
    from dlscale.trainers.common.data import DataError

    with pytest.raises(DataError) as info:
        loaders.build(
            args_for("imagenet", data_dir=tmp_path),
            1,
            0,
            0,
            torch.device("cpu"),
            False,
            "pytorch-ddp",
        )
    text = str(info.value)
    assert f"{tmp_path}/val: missing" in text and "named .JPEG but not JPEG data" in text


# --- DALI (in its own environment) --------------------------------------------------------


@pytest.fixture(scope="session")
def dali_home(env_home):
    """The store home whose envs.json records the cached framework environments."""
    return env_home


@pytest.fixture(scope="session")
def dali_env(dali_home):
    proc = dlscale("env", "create", "pytorch-ddp", "--with", "dali", home=dali_home, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = envs.resolve("pytorch-ddp", dali_home)
    assert status.ok and status.extras == ("dali",), status
    return status


def in_env(status, home, code, *argv):
    """Run `code` in the environment's python, as a trainer runs; its JSON answer."""
    proc = subprocess.run(
        [status.python, "-c", textwrap.dedent(code), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **envs.launch_env(status, home)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


COMPARE = """
import json, sys, torch
from dlscale.trainers.common.args import build_parser
from dlscale.trainers.torch_ddp import loaders
dataset, data_dir, batch, worlds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
out = []
for world in map(int, worlds.split(",")):
    for rank in range(world):
        per = {}
        for loader in ("native", "dali"):
            args = build_parser("t").parse_args([
                "--model", "resnet50" if dataset == "imagenet" else "resnet20", "--dataset",
                dataset, "--data-dir", data_dir, "--per-device-batch", batch, "--steps", "1",
                "--loader", loader])
            data = loaders.build(args, world, rank, 0, torch.device("cpu"), False, "pytorch-ddp")
            per[loader] = (data, [list(data.epoch(e)) for e in range(2)])
        (nd, ne), (dd, de) = per["native"], per["dali"]
        for e in range(2):
            out.append({
                "world": world, "rank": rank, "epoch": e,
                "planned": [nd.steps_per_epoch, dd.steps_per_epoch],
                "steps": [len(ne[e]), len(de[e])],
                "shapes": [list(ne[e][0][0].shape), list(de[e][0][0].shape)],
                "dtypes": [str(ne[e][0][1].dtype), str(de[e][0][1].dtype)],
                "labels": [[y for _, b in ne[e] for y in b.tolist()],
                           [y for _, b in de[e] for y in b.tolist()]],
                "max_dx": max(float((a[0] - b[0]).abs().max()) for a, b in zip(ne[e], de[e])),
            })
print(json.dumps(out))
"""


@pytest.mark.slow
def test_dali_gives_digits_exactly_the_native_loaders_batches(dali_env, dali_home):
    """No augmentation on digits: the same images, in the same order, on the same rank."""
    for r in in_env(dali_env, dali_home, COMPARE, "digits", "-", 32, "1,2"):
        assert r["planned"] == r["steps"] == [1438 // r["world"] // 32] * 2, r  # 1438 train
        assert r["labels"][0] == r["labels"][1] and r["dtypes"] == ["torch.int64"] * 2
        assert r["max_dx"] < 1e-5  # the same normalisation, to float rounding


@pytest.mark.slow
def test_dali_pads_crops_and_flips_cifar10_as_the_native_loader_does(dali_env, dali_home, tmp_path):
    """Every DALI image is the native path's image at one of its 81 whole-pixel crops of
    the 4-pixel-padded image, flipped or not; labels and steps are the native loader's."""
    make_cifar(tmp_path / "cifar", n=16)  # 80 training images
    code = COMPARE.replace(
        "print(json.dumps(out))",
        """
import torch.nn.functional as F
from dlscale.trainers.common import data as cd
train, _ = cd.load_real("cifar10", data_dir, 0)
mean = torch.tensor(cd.CIFAR_MEAN).view(3, 1, 1) * 255
std = torch.tensor(cd.CIFAR_STD).view(3, 1, 1) * 255
args.loader = "dali"
data = loaders.build(args, 1, 0, 0, torch.device("cpu"), False, "pytorch-ddp")
sampler = loaders.epoch_sampler(80, 1, 0, 0)
sampler.set_epoch(0)
order = list(sampler)
matched = offsets = 0
seen = set()
for step, (x, y) in enumerate(data.epoch(0)):
    for j in range(len(y)):
        src = torch.from_numpy(train.images[order[step * len(y) + j]]).float()
        padded = F.pad(src, (4, 4, 4, 4))
        for oy in range(9):
            for ox in range(9):
                crop = (padded[:, oy:oy + 32, ox:ox + 32] - mean) / std
                for flip in (False, True):
                    c = crop.flip(2) if flip else crop
                    if float((c - x[j]).abs().max()) < 1e-4:
                        matched += 1
                        seen.add((oy, ox, flip))
                        break
                else:
                    continue
                break
            else:
                continue
            break
print(json.dumps({"cmp": out, "matched": matched, "images": len(order) // 8 * 8,
                  "variety": len(seen)}))
""",
    )
    r = in_env(dali_env, dali_home, code, "cifar10", tmp_path / "cifar", 8, "1,2")
    for c in r["cmp"]:
        assert c["planned"] == c["steps"] == [80 // c["world"] // 8] * 2, c
        assert c["labels"][0] == c["labels"][1]
    assert r["matched"] == r["images"] == 80
    assert r["variety"] > 20  # offsets and flips vary from image to image


@pytest.mark.slow
def test_dali_and_native_imagenet_epochs_have_the_same_steps_and_labels(
    dali_env, dali_home, sample
):
    out = in_env(dali_env, dali_home, COMPARE, "imagenet", sample, 5, "1,2,3")
    for r in out:
        assert (
            r["planned"][0]
            == r["planned"][1]
            == r["steps"][0]
            == r["steps"][1]
            == 48 // r["world"] // 5
        ), r
        assert r["shapes"] == [[5, 3, 224, 224]] * 2 and r["dtypes"] == ["torch.int64"] * 2
    # one rank, 48 images in batches of 4: each epoch is the whole training set, either way
    one = in_env(dali_env, dali_home, COMPARE, "imagenet", sample, 4, "1")
    for r in one:
        assert Counter(r["labels"][0]) == Counter(r["labels"][1]) == {0: 12, 1: 12, 2: 12, 3: 12}
    # two ranks: together they read disjoint images, so each class at most 12 times
    for e in range(2):
        union = Counter()
        for r in out:
            if r["world"] == 2 and r["epoch"] == e:
                union.update(r["labels"][1])
        assert sum(union.values()) == 2 * 4 * 5 and max(union.values()) <= 12


@pytest.mark.slow
def test_dali_decodes_only_the_crop_of_each_imagenet_jpeg(dali_env, dali_home, sample):
    """DALI's ResNet-50 recipe: the random crop is chosen before decoding, and only that
    region is decoded (then resized), instead of decoding the whole JPEG and cropping."""
    r = in_env(
        dali_env,
        dali_home,
        """
import json, sys, torch
from dlscale.trainers.common.args import build_parser
from dlscale.trainers.torch_ddp import loaders
args = build_parser("t").parse_args(["--model", "resnet50", "--dataset", "imagenet",
    "--data-dir", sys.argv[1], "--per-device-batch", "4", "--steps", "1", "--loader", "dali"])
data = loaders.build(args, 1, 0, 0, torch.device("cpu"), False, "pytorch-ddp")
graph = data.pipeline.serialize().decode("latin-1")
x, y = next(iter(data.epoch(0)))
print(json.dumps({"crop_decoder": "ImageRandomCrop" in graph,
                  "whole_decoder": 'decoders__Image"' in graph or 'ImageDecoder"' in graph,
                  "shape": list(x.shape)}))
""",
        sample,
    )
    assert r == {"crop_decoder": True, "whole_decoder": False, "shape": [4, 3, 224, 224]}


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["digits", "imagenet"])
def test_two_ranks_train_with_dali_to_identical_weights(
    dali_env, dali_home, tmp_path, sample, dataset
):
    model = (
        [
            "--model",
            "resnet50",
            "--dataset",
            "imagenet",
            "--data-dir",
            str(sample),
            "--per-device-batch",
            "4",
            "--epochs",
            "1",
        ]
        if dataset == "imagenet"
        else [
            "--model",
            "resnet20",
            "--dataset",
            "digits",
            "--per-device-batch",
            "32",
            "--steps",
            "6",
        ]
    )
    proc, out = run_trainer(
        dali_env,
        dali_home,
        "pytorch-ddp",
        tmp_path,
        *model,
        "--loader",
        "dali",
        "--warmup-steps",
        "1",
        "--log-every",
        "2",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["loader"] == "dali" and params["world_size"] == 2
    assert env["framework_versions"]["dali"] == "2.4.0"
    if dataset == "imagenet":
        assert params["classes"] == 4 and params["steps_per_epoch"] == 48 // 2 // 4
        assert summary["epochs_done"] == 1 and any(r["kind"] == "eval" for r in recs)
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert summary["throughput"] > 0 and summary["timed_steps"] >= 5


# --- planning -----------------------------------------------------------------------------


def loaders_spec(tmp_path, data_dir, name="loaders", scales='"1x1"'):
    path = write_spec(
        tmp_path / f"{name}.toml",
        'loaders = ["native", "dali"]',
        f'data_dir = "{data_dir}"',
        name=name,
        scales=scales,
    )
    path.write_text(
        path.read_text()
        .replace('"synthetic-cifar"', '"digits"')
        .replace("per_device_batch = [8]", "per_device_batch = [32]")
    )
    return path


def test_dali_without_dali_in_the_environment_is_refused_with_the_fix(tmp_path, home):
    assert envs.resolve("pytorch-ddp", home).source == "dlscale's own"
    if envs.own_interpreter_has(recipes.EXTRAS["dali"].probe_recipe):
        pytest.skip("dlscale's own interpreter has DALI")
    spec = loaders_spec(tmp_path, tmp_path)
    for command in ("plan", "run"):
        proc = dlscale(command, str(spec), check=2)
        assert (
            f"{spec}: experiment.loaders: pytorch-ddp: loader dali needs nvidia.dali in "
            "pytorch-ddp's environment" in proc.stderr
        )
        assert "build one with `dlscale env create pytorch-ddp --with dali`" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert Store(home).runs() == []  # nothing submitted, nothing recorded


def test_dali_environments_are_opt_in_and_keyed_apart(home):
    plain, with_dali = (
        recipes.recipe_for("pytorch-ddp"),
        recipes.recipe_for("pytorch-ddp", ["dali"]),
    )
    assert plain.digest != with_dali.digest and "nvidia.dali" in with_dali.imports
    assert "nvidia-dali-cuda130==2.4.0" not in str(plain.steps)  # never in the default one
    assert envbuild.default_prefix(with_dali, home).name == f"pytorch-ddp+dali-{with_dali.digest}"
    for fw in ("pytorch-ddp", "deepspeed", "horovod-pytorch"):
        assert any("pillow" in p for s in recipes.RECIPES[fw].steps for p in s.packages)
    proc = dlscale("env", "create", "tensorflow", "--with", "dali", check=2)
    assert (
        "--with dali: only for pytorch-ddp, pytorch-fsdp, horovod-pytorch, deepspeed" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert (
        envs.create_command("deepspeed", home, ("dali",))
        == "dlscale env create deepspeed --with dali"
    )


# --- both loaders on the Slurm test cluster -----------------------------------------------


@pytest.mark.slow
@pytest.mark.slurm
def test_native_and_dali_side_by_side_on_two_slurm_nodes(
    slurm_cluster, dali_env, dali_home, tmp_path
):
    # Without the profile's own pytorch-ddp environment, jobs activate the one that
    # `env create --with dali` recorded (on this machine's file system, which the nodes share).
    text = (
        PROFILE.read_text()
        .replace("[environments.pytorch-ddp]", "")
        .replace('venv = "../../.venv"', "")
    )
    (tmp_path / "cluster.toml").write_text(text)
    spec = loaders_spec(tmp_path, tmp_path, name="loaders-slurm", scales='"2x1"')
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(tmp_path / "cluster.toml"),
        "--backend",
        "slurm",
        "--wait",
        home=dali_home,
        check=0,
        timeout=900,
    )
    runs = Store(dali_home).runs("loaders-slurm")
    assert {(r["loader"], r["state"]) for r in runs} == {
        ("native", "COMPLETED"),
        ("dali", "COMPLETED"),
    }
    for run in runs:
        env = Store(dali_home).records.of(run["run_id"], "env")[0]
        assert sorted(env["hostnames"]) == ["node1", "node2"]
        assert (
            f"source {dali_env.prefix}/bin/activate"
            in (Path(run["run_dir"]) / "job.sh").read_text()
        )
    table = dlscale("results", "-e", "loaders-slurm", home=dali_home, check=0).stdout
    cells = [  # the table's rows (the notes under it name points too)
        [c for c in ln.split() if c != "│"]
        for ln in table.splitlines()
        if ln.lstrip().startswith("│") and "resnet20" in ln
    ]
    assert "loader" in table and sorted(c[2] for c in cells) == ["dali", "native"]
    rows = json.loads(
        dlscale(
            "results", "-e", "loaders-slurm", "--format", "json", home=dali_home, check=0
        ).stdout
    )
    assert {r["loader"]: r["throughput"] > 0 for r in rows} == {"native": True, "dali": True}


def test_trainers_refuse_what_they_cannot_read_in_one_line(tmp_path):
    """Called directly, past planning: the same refusals, one line, no traceback."""
    import sys

    def trainer(module, dataset):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                module,
                "--model",
                "resnet20",
                "--dataset",
                dataset,
                "--per-device-batch",
                "4",
                "--steps",
                "1",
                "--loader",
                "dali",
                "--output",
                str(tmp_path / "m.jsonl"),
            ],
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )

    proc = trainer("dlscale.trainers.torch_ddp", "synthetic-cifar")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--loader dali reads data, and synthetic-cifar has none" in proc.stderr
    # TensorFlow's and MXNet's trainers take the array datasets and the native loader only
    from dlscale.engine.config.frameworks import FRAMEWORKS
    from dlscale.trainers.common.args import ARRAY_DATASETS, NATIVE_ONLY

    for fw in ("tensorflow", "mxnet", "horovod-tensorflow"):
        assert (FRAMEWORKS[fw].datasets, FRAMEWORKS[fw].loaders) == (ARRAY_DATASETS, NATIVE_ONLY)
        # The trainer itself refuses, before it imports its framework (not installed here).
        proc = trainer(FRAMEWORKS[fw].trainer_module, "digits")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "--loader: invalid choice: 'dali' (choose from 'native')" in proc.stderr
    parser = build_parser("tf", ARRAY_DATASETS, NATIVE_ONLY)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(
            [
                "--model",
                "resnet20",
                "--dataset",
                "digits",
                "--per-device-batch",
                "4",
                "--steps",
                "1",
                "--loader",
                "dali",
            ]
        )
    assert info.value.code == 2
