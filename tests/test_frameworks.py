"""Frameworks beyond PyTorch DDP, each in its own environment: building and finding those
environments, planning's refusals, and the real trainers at 1 and 2 ranks, locally and on
the two-node Slurm test cluster.

Environments are built once per machine into DLSCALE_ENV_CACHE (scripts/test sets it to
/var/cache/dlscale), so only a machine's first run pays for the installs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, dlscale, write_spec
from dlscale.engine import envs, jobscript, study
from dlscale.engine.errors import PlanError
from dlscale.engine.launch import local_command_for
from dlscale.engine.plan import plan
from dlscale.engine.profile import load_profile
from dlscale.engine.spec import load_spec
from dlscale.engine.store import Store

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"
SMALL = ["--model", "resnet20", "--dataset", "synthetic-cifar", "--per-device-batch", "8",
         "--steps", "4", "--warmup-steps", "1", "--log-every", "2"]
TORCH_RESNET20_PARAMETERS = 269_722  # the reference: trainers/torch_ddp/models.py


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture(scope="session")
def env_home(tmp_path_factory):
    """A store home whose envs.json records the frameworks' cached environments."""
    if not os.environ.get("DLSCALE_ENV_CACHE"):
        cache = Path("/var/cache/dlscale")
        if not os.access(cache if cache.exists() else cache.parent, os.W_OK):
            pytest.skip("no DLSCALE_ENV_CACHE and /var/cache/dlscale is not writable")
        os.environ["DLSCALE_ENV_CACHE"] = str(cache)
    return tmp_path_factory.mktemp("env-home")


def framework_env(env_home, framework):
    """Create (or find, from the cache) a framework's environment, as `dlscale env create`."""
    proc = dlscale("env", "create", framework, home=env_home, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return envs.resolve(framework, env_home)


# --- environments and planning, no framework needed ------------------------------------

def spec_for(tmp_path, framework, scales='"1x1", "1x2"', name="fw"):
    path = write_spec(tmp_path / f"{name}.toml", name=name, scales=scales)
    path.write_text(path.read_text().replace('"pytorch-ddp"', f'"{framework}"'))
    return path


def test_planning_refuses_a_missing_environment_with_the_command_that_builds_it(tmp_path, home):
    assert envs.resolve("deepspeed", home).source == "missing" or pytest.skip(
        "dlscale's own interpreter has deepspeed")
    spec = spec_for(tmp_path, "deepspeed")
    proc = dlscale("run", str(spec), check=2)
    assert f"{spec}: experiment.frameworks: deepspeed: no environment with torch, deepspeed " \
           "was found; create one with `dlscale env create deepspeed`" in proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing was submitted, nothing even recorded
    assert Store(home).runs() == []
    # `plan` refuses alike, so a dry run tells the same story
    assert "dlscale env create deepspeed" in dlscale("plan", str(spec), check=2).stderr


def test_a_broken_environment_is_refused_and_named(tmp_path, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "envs.json").write_text(json.dumps({"deepspeed": {"prefix": str(tmp_path / "gone")}}))
    status = envs.resolve("deepspeed", home)
    assert not status.ok and "is broken" in status.problem
    assert status.problem.endswith("rebuild it with `dlscale env create deepspeed`")
    loaded = load_spec(spec_for(tmp_path, "deepspeed"))
    with pytest.raises(PlanError, match="gone/bin/python does not exist"):
        study.check_plan(loaded, plan(loaded), "local", home=home)


def test_a_framework_without_a_trainer_is_refused_at_planning_not_validation(tmp_path, home):
    spec = spec_for(tmp_path, "mxnet")
    loaded = load_spec(spec)  # a valid spec: some other installation may run it
    proc = dlscale("run", str(spec), check=2)
    assert "experiment.frameworks: mxnet: trainer not written yet" in proc.stderr
    assert loaded.spec.experiment.frameworks == ["mxnet"]


def test_the_fix_command_names_a_home_that_is_not_implied(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCALE_HOME", str(tmp_path / "a"))
    assert envs.create_command("deepspeed", tmp_path / "a") == "dlscale env create deepspeed"
    assert envs.create_command("deepspeed", tmp_path / "b w") == (
        f"dlscale --home '{tmp_path}/b w' env create deepspeed")


def test_a_profile_that_sets_up_the_framework_is_trusted_on_slurm(tmp_path, home):
    loaded = load_spec(spec_for(tmp_path, "deepspeed", scales='"2x1"'))
    text = PROFILE.read_text() + '\n[environments.deepspeed]\nmodules = ["deepspeed/0.19"]\n'
    (tmp_path / "p.toml").write_text(text)
    profile = load_profile(tmp_path / "p.toml")
    study.check_plan(loaded, plan(loaded), "slurm", profile, home=home)  # no refusal
    script = jobscript.render(plan(loaded).runs[0], profile, tmp_path / "r", "s.toml", home=home)
    assert "module load deepspeed/0.19" in script
    assert "-m dlscale.trainers.deepspeed_zero" in script


def test_build_failures_show_their_key_lines_not_a_wall():
    wall = "\n".join([f"-- building object {i}" for i in range(400)] + [
        "/tmp/x/horovod/common/ops.cc:42:10: error: 'optional' in namespace 'std' does not "
        "name a template type", "compilation terminated.", "make[2]: *** Error 1"])
    lines = envs.key_lines(wall)
    assert lines[0].endswith("does not name a template type") and len(lines) <= 12
    assert not any("building object" in ln for ln in lines)


def test_env_create_refuses_what_it_cannot_build(home, tmp_path):
    proc = dlscale("env", "create", "mxnet", check=2)
    assert "mxnet: no environment recipe yet" in proc.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious.txt").write_text("keep me")
    proc = dlscale("env", "create", "deepspeed", "--prefix", str(tmp_path / "full"), check=2)
    assert "is not a virtual environment" in proc.stderr
    assert (tmp_path / "full" / "precious.txt").read_text() == "keep me"


# --- DeepSpeed --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def deepspeed_env(env_home):
    return framework_env(env_home, "deepspeed")


def run_trainer(status, home, framework, tmp_path, *args, nproc=2):
    """The framework's trainer at `nproc` ranks, started as the local backend starts it."""
    out = tmp_path / "metrics.jsonl"
    argv, extra = local_command_for(framework, nproc, status, home, tmp_path,
                                          [*args, "--output", str(out)])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **extra})
    return proc, out


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 2])
def test_deepspeed_two_ranks_end_with_identical_weights(deepspeed_env, env_home, tmp_path, stage):
    proc, out = run_trainer(deepspeed_env, env_home, "deepspeed", tmp_path, *SMALL,
                            "--zero-stage", str(stage))
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["framework"] == "deepspeed" and params["zero_stage"] == stage
    assert params["parameters"] == TORCH_RESNET20_PARAMETERS  # the same model as DDP
    assert env["world_size"] == 2 and env["backend"] == "gloo"
    assert env["framework_versions"]["deepspeed"] == "0.19.8"
    assert env["dlscale_version"] != "unknown"
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert summary["timed_steps"] == 4 and summary["throughput"] > 0


@pytest.mark.slow
def test_deepspeed_from_the_command_line_at_one_and_two_ranks(deepspeed_env, env_home, tmp_path):
    home = env_home  # the store that knows the environment
    spec = spec_for(tmp_path, "deepspeed", name="ds-local")
    dlscale("run", str(spec), "--wait", home=home, check=0)
    rows = json.loads(dlscale("results", "-e", "ds-local", "--format", "json", home=home,
                              check=0).stdout)
    assert [(r["framework"], r["ranks"], r["state"]) for r in rows] == [
        ("deepspeed", 1, "COMPLETED"), ("deepspeed", 2, "COMPLETED")]
    assert rows[1]["speedup"] is not None
    doctor = dlscale("doctor", "deepspeed", "--smoke", home=home, timeout=600)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "deepspeed 0.19.8" in doctor.stdout and "identical on every rank" in doctor.stdout


@pytest.mark.slow
@pytest.mark.slurm
def test_deepspeed_on_two_slurm_nodes(slurm_cluster, deepspeed_env, env_home, tmp_path):
    text = PROFILE.read_text().replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    (tmp_path / "cluster.toml").write_text(text)
    spec = spec_for(tmp_path, "deepspeed", scales='"2x1"', name="ds-slurm")
    dlscale("run", str(spec), "--profile", str(tmp_path / "cluster.toml"), "--backend", "slurm",
            "--wait", home=env_home, check=0)
    store = Store(env_home)
    run = store.runs("ds-slurm")[0]
    script = (Path(run["run_dir"]) / "job.sh").read_text()
    assert f"source {deepspeed_env.prefix}/bin/activate" in script
    env = store.records(run["run_id"], "env")[0]
    assert sorted(env["hostnames"]) == ["node1", "node2"] and env["launcher"] == "srun"
    summary = store.records(run["run_id"], "summary")[0]
    assert len(set(summary["weights_digest_per_rank"])) == 1
