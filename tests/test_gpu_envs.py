"""GPU environments, built and found on a machine without a GPU: each framework's GPU
recipe and its cache keys (apart from the CPU one's, which stay as they were), builds that
load a profile's modules first, what the probe reads of a built environment (its CUDA,
Horovod's NCCL), `env list` showing it, and `env create` refusing a build the site's GPUs
could not run."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_gpu_plan import gpu_profile

from conftest import HANG_S, dlscale
from dlscale.engine.launching import envs
from dlscale.engine.launching.envs import builder as envbuild
from dlscale.engine.launching.envs import recipes
from test_frameworks import env_home, horovod_env, tf_env  # noqa: F401  (fixtures)


def test_every_framework_has_a_gpu_recipe_cached_apart_from_its_cpu_one(home):
    for fw, cpu in recipes.RECIPES.items():
        gpu = recipes.recipe_for(fw, device="cuda")
        packages = [p for s in gpu.steps for p in s.packages]
        assert gpu.device == "cuda" and gpu.digest != cpu.digest and gpu.cuda
        assert "nvidia-ml-py==13.580.82" in packages  # the energy meter reads NVML
        assert "nvidia-ml-py" in gpu.versions
        assert not {
            "torch==2.13.0",
            "tensorflow-cpu==2.21.0",
            "tensorflow-cpu==2.15.1",
            "mxnet==1.9.1",
        } & set(packages)  # no CPU build
        assert envbuild.default_prefix(gpu, home).name == f"{fw}-cuda-{gpu.digest}"
        assert gpu.imports == cpu.imports  # the same trainer runs in either
    # PyPI's CUDA torch, by its exact version string: never a +cpu wheel a site keeps
    assert "torch===2.13.0" in recipes.recipe_for("pytorch-ddp", device="cuda").steps[0].packages
    tf = recipes.recipe_for("tensorflow", device="cuda")
    assert tf.steps[0].packages[0] == "tensorflow[and-cuda]==2.21.0"
    assert tf.steps[1] == recipes.RECIPES["tensorflow"].steps[1]  # tf_keras --no-deps, as on CPU
    hvd_tf = recipes.recipe_for("horovod-tensorflow", device="cuda")
    assert hvd_tf.steps[0].packages[0] == "tensorflow[and-cuda]==2.15.1"
    assert recipes.recipe_for("mxnet", device="cuda").steps[0].packages[0] == "mxnet-cu117==1.9.1"


@pytest.mark.parametrize("framework", ["horovod-pytorch", "horovod-tensorflow"])
def test_horovod_for_gpus_is_built_with_nccl_and_keyed_by_the_sites_cuda(framework, monkeypatch):
    for name in recipes.HOROVOD_SITE_ENV:
        monkeypatch.delenv(name, raising=False)
    cpu_wheel = recipes.RECIPES[framework].steps[1]
    wheel = recipes.recipe_for(framework, device="cuda").steps[1]
    env = dict(wheel.env)
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_GPU"] == "CUDA"
    assert "HOROVOD_GPU_OPERATIONS" not in dict(cpu_wheel.env)
    assert wheel.folder != cpu_wheel.folder
    # another CUDA, NCCL or module set compiles another wheel; the CPU wheel's key stays
    monkeypatch.setenv("HOROVOD_NCCL_HOME", "/opt/nccl-2.18")
    other_nccl = recipes.recipe_for(framework, device="cuda").steps[1]
    with_modules = recipes.recipe_for(framework, device="cuda", modules=["CUDA/12.2"]).steps[1]
    assert len({wheel.folder, other_nccl.folder, with_modules.folder}) == 3
    assert dict(other_nccl.site) == {"HOROVOD_NCCL_HOME": "/opt/nccl-2.18"}
    assert cpu_wheel.for_site().folder == cpu_wheel.folder  # CPU builds read no site


def test_the_cpu_recipes_keep_the_cache_keys_they_had():
    """The GPU variants change nothing for CPU builds: their folders (and compiled Horovod
    wheels, minutes each) are found again, not rebuilt."""
    for fw in recipes.RECIPES:
        assert recipes.recipe_for(fw).name == fw
        assert all(
            not s.site_env for s in recipes.RECIPES[fw].steps if isinstance(s, recipes.WheelBuild)
        )
    hvd = recipes.RECIPES["horovod-pytorch"].steps[1]
    assert hvd.digest == recipes.WheelBuild(hvd.requirement, hvd.key, hvd.env, hvd.cxx_std).digest


def test_a_build_loads_the_profiles_modules_first_without_pasting_their_names(tmp_path):
    """`module` as a login shell defines it (here by ~/.bash_profile, as Lmod's init does):
    it gets each name whole, and the command runs after it."""
    (tmp_path / ".bash_profile").write_text(
        'module() { printf "%s\\n" "$@" > "$HOME/module.args"; }\n'
    )
    hostile = "NCCL/2.18; touch pwned"
    argv = envbuild.in_modules(["sh", "-c", 'echo "built with $0"', "x y"], ("CUDA/12.2", hostile))
    proc = subprocess.run(
        argv,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "built with x y"
    assert (tmp_path / "module.args").read_text().splitlines() == ["load", "CUDA/12.2", hostile]
    assert not (tmp_path / "pwned").exists()
    assert envbuild.in_modules(["true"], ()) == ["true"]
    # where there is no module command, the build stops and says why
    (tmp_path / ".bash_profile").write_text("unset -f module 2>/dev/null; true\n")
    proc = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 127 and "no module command" in proc.stderr


def test_env_create_refuses_a_gpu_build_the_sites_gpus_cannot_run(tmp_path, home):
    """Before its downloads (the MXNet CUDA wheel alone is 509 MB), with exit 2."""
    profile = gpu_profile(tmp_path, "sm_90")
    proc = dlscale("env", "create", "mxnet", "--gpu", "--profile", str(profile), check=2)
    assert (
        f"mxnet --gpu: it cannot run on partition gpu's GPUs (sm_90, {profile}): MXNet "
        "1.9.1's CUDA wheels"
        in proc.stderr
        and "Traceback" not in proc.stderr
    )
    proc = dlscale("env", "create", "mxnet", "--gpu", "--partition", "gpu", check=2)
    assert "--partition needs --profile CLUSTER.toml" in proc.stderr
    assert not (home / "envs").exists() and not (home / "envs.json").exists()


def test_env_list_shows_each_gpu_environments_build(horovod_env, home):
    """A recorded GPU environment gets its own row: which CUDA, Horovod's NCCL, and why it
    cannot run GPU jobs when it cannot."""
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
    out = dlscale("env", "list", home=home, check=0).stdout
    rows = {
        tuple(cell.strip() for cell in line.split("│")[1:3]): line
        for line in out.splitlines()
        if line.startswith("│")
    }
    gpu_row = rows[("horovod-pytorch", "cuda")]
    assert "CUDA 13.0, Horovod" in gpu_row and "registered" in gpu_row
    assert ("tensorflow", "cuda") not in rows  # GPU rows only where recorded, on this machine
    assert "missing" in rows[("horovod-pytorch", "cpu")]


FIXTURE_OF = {"horovod-pytorch": "horovod_env", "tensorflow": "tf_env"}


@pytest.mark.parametrize("framework,nccl", [("horovod-pytorch", False), ("tensorflow", None)])
def test_the_probe_reads_how_a_built_environment_was_built(request, env_home, framework, nccl):
    """From the real cached CPU builds (built first where they are not cached yet): no
    CUDA, and Horovod's own nccl_built() (False for the gloo-only build); the quick look
    reads CUDA from the wheels' files without importing."""
    built = request.getfixturevalue(FIXTURE_OF[framework])
    python = str(Path(built.prefix) / "bin" / "python")
    problem, _, facts = envs.probe_facts(python, recipes.recipe_for(framework), full_import=True)
    assert problem is None and facts == {"cuda": None, "nccl": nccl}
    assert envs.probe_facts(python, recipes.recipe_for(framework), full_import=False)[2] == {
        "cuda": None,
        "nccl": None,
    }
    assert envs.describe_build(facts) == (
        "CPU build, Horovod without NCCL" if nccl is False else "CPU build"
    )
