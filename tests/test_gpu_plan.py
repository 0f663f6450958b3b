"""GPU runs, planned on a machine without a GPU: how planning tells a GPU run (a partition
with GPUs; on the local backend, the GPUs this machine shows, read from nvidia-smi as
recorded here by a stand-in), the profile's GPU fields, and what it refuses before anything
is submitted. Environments: test_gpu_envs.py; job scripts: test_gpu_jobscript.py; the
trainers: test_gpu_trainers.py and tests/gpu."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, write_spec
from dlscale.engine import study
from dlscale.engine.backends.registry import make_backend
from dlscale.engine.config import gpu_arch
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import PlanError, SpecError
from dlscale.engine.launching import envs, gpu_checks, gpus
from dlscale.engine.launching.plan import plan
from dlscale.engine.tracking.store import Store
from test_frameworks import env_home, horovod_env, tf_env  # noqa: F401  (fixtures)

# `nvidia-smi --query-gpu=index,uuid,name,compute_cap --format=csv,noheader` on a node with
# two H100s (the format of driver 550); an older driver refuses compute_cap.
SMI_H100 = (
    "0, GPU-5d3c1c1e-8e8b-4d1a-9a7e-3f0b1c2d4e5f, NVIDIA H100 80GB HBM3, 9.0\n"
    "1, GPU-9a8b7c6d-1e2f-4a5b-8c9d-0e1f2a3b4c5d, NVIDIA H100 80GB HBM3, 9.0\n"
)
SMI_OLD_DRIVER = 'Field "compute_cap" is not a valid field to query.\n'


def fake_smi(folder: Path, answer: str = SMI_H100, old_driver: bool = False) -> Path:
    """An nvidia-smi that answers as a GPU node's does, first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "answer").write_text(answer)
    refuse = (
        (f'case "$1" in *compute_cap*) printf %s {json.dumps(SMI_OLD_DRIVER)} >&2; exit 2;; esac\n')
        if old_driver
        else ""
    )
    (folder / "nvidia-smi").write_text(
        f'#!/bin/sh\n{refuse}sed "s/, 9.0$//" "{folder}/answer" | '
        f'{{ case "$1" in *compute_cap*) cat "{folder}/answer";; *) cat;; esac; }}\n'
    )
    (folder / "nvidia-smi").chmod(0o755)
    return folder


@pytest.fixture
def two_h100(tmp_path, monkeypatch):
    """This machine, as planning sees it, with two H100s."""
    stub = fake_smi(tmp_path / "smi")
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return stub


def spec_for(tmp_path, frameworks='"pytorch-ddp"', scales='"1x1"', precisions='"fp32"', name="g"):
    path = write_spec(tmp_path / f"{name}.toml", name=name, scales=scales)
    path.write_text(
        path.read_text()
        .replace('"pytorch-ddp"', frameworks)
        .replace('precisions = ["fp32"]', f"precisions = [{precisions}]")
    )
    return load_spec(path)


def gpu_profile(tmp_path, arch: str | None = "sm_90", extra: str = "") -> Path:
    path = tmp_path / "gpu-site.toml"
    path.write_text(f"""\
name = "gpu-site"
modules = ["CUDA/12.2", "NCCL/2.18"]

[[partitions]]
name = "gpu"
nodes = 4
cpus_per_node = 32
gpus_per_node = 4
{f'gpu_arch = "{arch}"' if arch else ""}
default = true

[[partitions]]
name = "cpu"
nodes = 4
cpus_per_node = 32
{extra}""")
    return path


def refusals(loaded, backend="local", profile=None, partition=None, home=None) -> str:
    with pytest.raises(PlanError) as info:
        study.check_plan(
            loaded,
            plan(loaded),
            make_backend(backend, Store(home), profile, partition, connect=False),
            home,
        )
    return str(info.value)


# --- the GPUs this machine shows ----------------------------------------------------------


@pytest.mark.parametrize(
    "text,arch",
    [
        ("sm_90", (9, 0)),
        ("9.0", (9, 0)),
        (8.6, (8, 6)),
        ("compute_80", (8, 0)),
        ("70", (7, 0)),
        ("sm_120", (12, 0)),
        ("sm_90a", (9, 0)),
    ],
)
def test_gpu_architectures_are_read_as_people_write_them(text, arch):
    assert gpu_arch.parse_arch(text) == arch


@pytest.mark.parametrize("text", ["hopper", "9", "sm_9.0", "", "0.1", "sm_05"])
def test_a_gpu_architecture_that_is_none_is_refused(text):
    with pytest.raises(ValueError, match="is not a GPU architecture"):
        gpu_arch.parse_arch(text)


@pytest.mark.parametrize(
    "visible,count",
    [
        (None, 2),
        ("", 0),
        ("1", 1),
        ("0,1", 2),
        ("1,0", 2),
        ("0,7,1", 1),
        ("GPU-9a8b", 1),
        ("GPU-", 0),
        ("0,0", 1),
        ("-1", 0),
    ],
)
def test_the_local_gpus_are_those_cuda_visible_devices_lets_a_process_see(two_h100, visible, count):
    environ = {**os.environ}
    environ.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        environ["CUDA_VISIBLE_DEVICES"] = visible
    shown = gpus.local_gpus(environ)
    assert len(shown) == count
    assert all(g.arch == (9, 0) and g.name == "NVIDIA H100 80GB HBM3" for g in shown)
    assert gpus.local_device(environ) == ("cuda" if count else "cpu")


def test_an_old_driver_without_compute_cap_still_counts_its_gpus(tmp_path, monkeypatch):
    stub = fake_smi(tmp_path / "old", old_driver=True)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    shown = gpus.local_gpus()
    assert [g.index for g in shown] == [0, 1] and all(g.arch is None for g in shown)


def test_without_nvidia_smi_the_drivers_folders_are_counted(tmp_path, monkeypatch):
    root = tmp_path / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"):
        (root / bus).mkdir(parents=True)
        (root / bus / "information").write_text("Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ: 1\n")
    monkeypatch.setattr(gpus, "PROC_GPUS", root)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    gpus._machine_gpus.cache_clear()
    shown = gpus.local_gpus()
    gpus._machine_gpus.cache_clear()
    assert [g.index for g in shown] == [2, 0] and shown[0].name == "NVIDIA A100-SXM4-40GB"


# --- profiles -------------------------------------------------------------------------------


def test_a_partitions_gpu_arch_and_nccl_settings_are_read_and_checked(tmp_path):
    loaded = load_profile(
        gpu_profile(tmp_path, "9.0", extra='[nccl]\nNCCL_IB_HCA = "mlx5"\nNCCL_NET_GDR_LEVEL = 2\n')
    )
    assert loaded.profile.partitions[0].gpu_arch == "sm_90"
    assert loaded.profile.nccl == {"NCCL_IB_HCA": "mlx5", "NCCL_NET_GDR_LEVEL": "2"}
    path = gpu_profile(tmp_path, "hopper")
    with pytest.raises(SpecError) as info:
        load_profile(path)
    line = 1 + path.read_text().splitlines().index('gpu_arch = "hopper"')
    assert f"{path}:{line}: partitions[0].gpu_arch" in str(info.value)
    assert 'write it as "sm_90" or "9.0"' in str(info.value)
    for bad, why in [
        ('[nccl]\nSOCKET_IFNAME = "ib0"\n', "is not an NCCL variable"),
        (
            '[env]\nNCCL_DEBUG = "INFO"\n[nccl]\nNCCL_DEBUG = "WARN"\n',
            "NCCL_DEBUG set in both [env] and [nccl]",
        ),
    ]:
        with pytest.raises(SpecError, match=re.escape(why)):
            load_profile(gpu_profile(tmp_path, extra=bad))


# --- planning ---------------------------------------------------------------------------


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
def test_a_gpu_partition_refuses_a_cpu_build_and_names_the_gpu_one(tmp_path, home):
    """dlscale's own .venv holds the CPU torch: on a GPU partition its runs would train on
    the CPU. A CPU partition of the same profile plans as before."""
    own = envs.resolve("pytorch-ddp", home, device="cuda")
    if own.cuda:
        pytest.skip(f"dlscale's own torch is a CUDA {own.cuda} build")
    loaded, profile = spec_for(tmp_path), load_profile(gpu_profile(tmp_path, "sm_90"))
    said = refusals(loaded, "slurm", profile, home=home)
    assert (
        f"{loaded.path}: experiment.frameworks: pytorch-ddp: partition gpu of "
        f"{profile.path} has 4 GPU(s) per node, and its environment"
    ) in said
    assert (
        "holds a CPU build of pytorch-ddp: it would train on the CPU; build a GPU one "
        f"with `dlscale env create pytorch-ddp --gpu --profile {profile.path}`" in said
    )
    study.check_plan(
        loaded,
        plan(loaded),  # no refusal
        make_backend("slurm", Store(home), profile, "cpu", connect=False),
        home,
    )


def test_a_registered_cpu_environment_is_no_gpu_environment(tf_env, tmp_path, home):
    """The cached TensorFlow environment is tensorflow-cpu: found, read, and refused."""
    prefix = tf_env.prefix
    home.mkdir(parents=True)
    (home / "envs.json").write_text(json.dumps({"tensorflow": {"prefix": str(prefix)}}))
    status = envs.resolve("tensorflow", home, device="cuda")
    assert status.ok and status.cuda is None and status.source == "registered"
    loaded = spec_for(tmp_path, '"tensorflow"')
    profile = load_profile(gpu_profile(tmp_path, "sm_80"))
    said = refusals(loaded, "slurm", profile, home=home)
    assert f"its environment {prefix} (registered) holds a CPU build of tensorflow" in said
    assert f"`dlscale env create tensorflow --gpu --profile {profile.path}`" in said


def test_a_gpu_horovod_without_nccl_is_refused(horovod_env, tmp_path, home):
    """What `env create --gpu` records when the site's NCCL was not found at build time."""
    prefix = horovod_env.prefix
    home.mkdir(parents=True)
    (home / "envs.json").write_text(
        json.dumps(
            {
                "horovod-pytorch@cuda": {
                    "prefix": str(prefix),
                    "device": "cuda",
                    "gpu": {"cuda": "13.0", "nccl": False},
                }
            }
        )
    )
    loaded = spec_for(tmp_path, '"horovod-pytorch"')
    profile = load_profile(gpu_profile(tmp_path, None))
    said = refusals(loaded, "slurm", profile, home=home)
    assert "horovod-pytorch: partition gpu of" in said
    assert (
        "has a Horovod built without NCCL: its first broadcast of a CUDA tensor would "
        "fail; build one with NCCL with `dlscale env create horovod-pytorch --gpu" in said
    )


@pytest.mark.parametrize(
    "framework,arch,refused",
    [
        ("mxnet", "sm_90", True),
        ("mxnet", "sm_100", True),
        ("mxnet", "sm_89", False),
        ("mxnet", "sm_70", False),
        ("horovod-pytorch", "sm_70", True),
        ("deepspeed", "sm_60", True),
        ("deepspeed", "sm_75", False),
        ("tensorflow", "sm_90", False),
    ],
)
def test_a_framework_whose_gpu_build_has_no_kernels_for_the_site_is_refused(
    tmp_path, home, framework, arch, refused
):
    loaded = spec_for(tmp_path, f'"{framework}"')
    profile = load_profile(gpu_profile(tmp_path, arch))
    problems = gpu_checks.check_gpus(loaded, plan(loaded).runs, profile, None, home)
    line = 1 + profile.text.splitlines().index(f'gpu_arch = "{arch}"')
    expected = (
        f"{loaded.path}:3: experiment.frameworks: {framework} cannot run on partition "
        f"gpu's GPUs ({arch}, {profile.path}:{line}): "
    )
    assert any(p.startswith(expected) for p in problems) is refused, problems
    if refused and framework == "mxnet":
        assert "carry kernels for sm_50, sm_60, sm_70, sm_80 and sm_86 only" in problems[0]


@pytest.mark.parametrize(
    "framework,precision,arch,why",
    [
        ("pytorch-ddp", "bf16", "sm_70", "bf16 needs compute capability 8.0 or newer"),
        ("tensorflow", "tf32", "7.5", "tf32 needs compute capability 8.0 or newer"),
        ("mxnet", "bf16", "sm_80", "MXNet 1.9 has no bf16 kernels on GPUs"),
        ("mxnet", "fp16", "sm_70", None),
        ("tensorflow", "bf16", "sm_80", None),
    ],
)
def test_precisions_the_sites_gpus_lack_are_refused(
    tmp_path, home, framework, precision, arch, why
):
    loaded = spec_for(tmp_path, f'"{framework}"', precisions=f'"{precision}"')
    profile = load_profile(gpu_profile(tmp_path, arch))
    problems = [
        p
        for p in gpu_checks.check_gpus(loaded, plan(loaded).runs, profile, None, home)
        if "experiment.precisions" in p
    ]
    if why is None:
        assert problems == []
        return
    line = 1 + loaded.text.splitlines().index(f'precisions = ["{precision}"]')
    (problem,) = problems
    assert problem.startswith(
        f"{loaded.path}:{line}: experiment.precisions: {framework}: "
        f"precision {precision} on partition gpu's GPUs ("
    )
    assert why in problem


def test_cpu_runs_are_not_held_to_gpu_rules(tmp_path, home):
    loaded = spec_for(tmp_path, '"mxnet"', precisions='"bf16"')
    profile = load_profile(gpu_profile(tmp_path, "sm_90"))
    assert gpu_checks.check_gpus(loaded, plan(loaded).runs, profile, "cpu", home) == []
    assert gpu_checks.check_gpus(loaded, plan(loaded).runs, None, None, home) == []  # no GPU here


def test_the_local_backend_refuses_more_ranks_than_gpus_and_a_cpu_build(tmp_path, home):
    """The command line, on a machine that shows two H100s: no traceback, exit 2, nothing
    recorded. Hiding the GPUs (CUDA_VISIBLE_DEVICES=) plans the same study for the CPU."""
    if envs.resolve("pytorch-ddp", home, device="cuda").cuda:
        pytest.skip("dlscale's own torch is a CUDA build")
    stub = fake_smi(tmp_path / "smi")
    spec = write_spec(tmp_path / "s.toml", scales='"1x2", "1x3", "1x4"')
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "DLSCALE_HOME": str(home)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for command in ("plan", "run"):
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "dlscale"), command, str(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2, proc.stderr
        for ranks in (3, 4):
            assert (
                f"{spec}:6: experiment.scales: scale 1x{ranks} runs {ranks} ranks on this "
                "machine, which shows 2 NVIDIA GPU(s): each rank needs a GPU of its own"
            ) in proc.stderr
        assert "scale 1x2 runs" not in proc.stderr
        assert (
            "this machine shows 2 NVIDIA GPU(s) (set CUDA_VISIBLE_DEVICES= to measure its "
            "CPU instead), and its environment" in proc.stderr
        )
        assert "`dlscale env create pytorch-ddp --gpu`" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert Store(home).runs() == []
    one = write_spec(tmp_path / "one.toml", scales='"1x1"')
    for hidden, rc in ((None, 2), ("", 0)):
        if hidden is not None:
            env["CUDA_VISIBLE_DEVICES"] = hidden
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "dlscale"), "plan", str(one)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == rc, proc.stderr


def test_mxnet_bf16_is_refused_on_any_gpu_partition(tmp_path, home):
    """Whatever the GPUs are (the profile need not say): MXNet 1.9 has no bf16 on GPUs."""
    loaded = spec_for(tmp_path, '"mxnet"', precisions='"bf16"')
    profile = load_profile(gpu_profile(tmp_path, None))
    (problem,) = gpu_checks.check_gpus(loaded, plan(loaded).runs, profile, None, home)
    assert problem.endswith(
        "experiment.precisions: mxnet: precision bf16 on partition gpu's "
        "GPUs: MXNet 1.9 has no bf16 kernels on GPUs; use fp16 "
        "(multi-precision SGD) or fp32"
    )
