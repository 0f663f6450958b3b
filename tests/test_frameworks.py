"""Frameworks beyond PyTorch DDP, each in its own environment: building and finding those
environments, planning's refusals, and the real trainers at 1 and 2 ranks, locally and on
the two-node Slurm test cluster.

Environments are built once per machine into DLSCALE_ENV_CACHE (scripts/test sets it to
/var/cache/dlscale), so only a machine's first run pays for the installs."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, REPO, dlscale, write_spec
from dlscale.engine import study
from dlscale.engine.backends.registry import make_backend
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import PlanError
from dlscale.engine.launching import envs, jobscript
from dlscale.engine.launching.envs import builder as envbuild
from dlscale.engine.launching.launch import local_command_for
from dlscale.engine.launching.plan import plan
from dlscale.engine.tracking.store import Store

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"
SMALL = [
    "--model",
    "resnet20",
    "--dataset",
    "synthetic-cifar",
    "--per-device-batch",
    "8",
    "--steps",
    "4",
    "--warmup-steps",
    "1",
    "--log-every",
    "2",
]
TORCH_RESNET20_PARAMETERS = 269_722  # the reference: trainers/torch_ddp/models.py


def free_port_pair():
    """A port whose successor is free too (Horovod's rendezvous takes MASTER_PORT + 1)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two adjacent free ports")


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
        "dlscale's own interpreter has deepspeed"
    )
    spec = spec_for(tmp_path, "deepspeed")
    proc = dlscale("run", str(spec), check=2)
    assert (
        f"{spec}: experiment.frameworks: deepspeed: no environment with torch, deepspeed "
        "was found; create one with `dlscale env create deepspeed`" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    # nothing was submitted, nothing even recorded
    assert Store(home).runs() == []
    # `plan` refuses alike, so a dry run tells the same story
    assert "dlscale env create deepspeed" in dlscale("plan", str(spec), check=2).stderr


def test_every_framework_without_an_environment_is_refused_in_one_plan(tmp_path, home):
    """Dotted imports (horovod.torch) whose package is missing are a missing environment,
    not a crash; every problem is listed at once."""
    spec = spec_for(tmp_path, "horovod-pytorch")
    spec.write_text(spec.read_text().replace('"horovod-pytorch"', '"horovod-pytorch", "mxnet"'))
    proc = dlscale("plan", str(spec), check=2)
    assert (
        "horovod-pytorch: no environment with torch, horovod.torch was found; create one "
        "with `dlscale env create horovod-pytorch`" in proc.stderr
    )
    assert "`dlscale env create mxnet`" in proc.stderr and "internal error" not in proc.stderr


def test_a_broken_environment_is_refused_and_named(tmp_path, home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "envs.json").write_text(json.dumps({"deepspeed": {"prefix": str(tmp_path / "gone")}}))
    status = envs.resolve("deepspeed", home)
    assert not status.ok and "is broken" in status.problem
    assert status.problem.endswith("rebuild it with `dlscale env create deepspeed`")
    loaded = load_spec(spec_for(tmp_path, "deepspeed"))
    with pytest.raises(PlanError, match="gone/bin/python does not exist"):
        study.check_plan(loaded, plan(loaded), make_backend("local", Store(home)), home)


def test_the_fix_command_names_a_home_that_is_not_implied(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCALE_HOME", str(tmp_path / "a"))
    assert envs.create_command("deepspeed", tmp_path / "a") == "dlscale env create deepspeed"
    assert envs.create_command("deepspeed", tmp_path / "b w") == (
        f"dlscale --home '{tmp_path}/b w' env create deepspeed"
    )


def test_a_profile_that_sets_up_the_framework_is_trusted_on_slurm(tmp_path, home):
    loaded = load_spec(spec_for(tmp_path, "deepspeed", scales='"2x1"'))
    text = PROFILE.read_text() + '\n[environments.deepspeed]\nmodules = ["deepspeed/0.19"]\n'
    (tmp_path / "p.toml").write_text(text)
    profile = load_profile(tmp_path / "p.toml")
    study.check_plan(
        loaded, plan(loaded), make_backend("slurm", Store(home), profile), home
    )  # no refusal
    script = jobscript.render(plan(loaded).runs[0], profile, tmp_path / "r", "s.toml", home=home)
    assert "module load deepspeed/0.19" in script
    assert "-m dlscale.trainers.deepspeed_zero" in script


def test_a_recorded_environment_is_activated_inside_the_job(tmp_path, home):
    home.mkdir(parents=True, exist_ok=True)
    prefix = tmp_path / "envs" / "deepspeed env"  # a space: everything must stay quoted
    (home / "envs.json").write_text(json.dumps({"deepspeed": {"prefix": str(prefix)}}))
    loaded = load_spec(spec_for(tmp_path, "deepspeed", scales='"2x1"'))
    run = plan(loaded).runs[0]
    script = jobscript.render(run, load_profile(PROFILE), tmp_path / "r", "s.toml", home=home)
    assert f"source '{prefix}/bin/activate'" in script
    assert f"'{prefix}/bin/python' -m dlscale.trainers.deepspeed_zero" in script
    assert f"export PYTHONPATH={home}/pythonpath" in script
    # the trainers that folder exposes are this installation's own
    assert (home / "pythonpath" / "dlscale" / "trainers" / "deepspeed_zero" / "train.py").exists()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_build_failures_show_their_key_lines_not_a_wall():
    wall = "\n".join(
        [f"-- building object {i}" for i in range(400)]
        + [
            "/tmp/x/horovod/common/ops.cc:42:10: error: 'optional' in namespace 'std' does not "
            "name a template type",
            "compilation terminated.",
            "make[2]: *** Error 1",
        ]
    )
    lines = envbuild.key_lines(wall)
    assert lines[0].endswith("does not name a template type") and len(lines) <= 12
    assert not any("building object" in ln for ln in lines)


def test_env_create_refuses_a_prefix_that_is_not_a_venv(home, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious.txt").write_text("keep me")
    proc = dlscale("env", "create", "deepspeed", "--prefix", str(tmp_path / "full"), check=2)
    assert "is not a virtual environment" in proc.stderr
    assert (tmp_path / "full" / "precious.txt").read_text() == "keep me"


def local_and_two_slurm_nodes(framework, env_home, tmp_path, options=""):
    """The framework from the command line at 1 and 2 local ranks and on 2 Slurm nodes,
    with the spec's `options` tables; returns the Slurm run after checking both experiments
    completed."""
    name = framework.replace("-", "")
    spec = spec_for(tmp_path, framework, name=f"{name}-local")
    spec.write_text(spec.read_text() + options)
    dlscale("run", str(spec), "--wait", home=env_home, check=0)
    text = PROFILE.read_text().replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    (tmp_path / "cluster.toml").write_text(text)
    spec = spec_for(tmp_path, framework, scales='"2x1"', name=f"{name}-slurm")
    spec.write_text(spec.read_text() + options)
    dlscale(
        "run",
        str(spec),
        "--profile",
        str(tmp_path / "cluster.toml"),
        "--backend",
        "slurm",
        "--wait",
        home=env_home,
        check=0,
    )
    store = Store(env_home)
    local = store.runs(f"{name}-local")
    assert {r["state"] for r in local} == {"COMPLETED"} and len(local) == 2
    run = store.runs(f"{name}-slurm")[0]
    env = store.records.of(run["run_id"], "env")[0]
    assert sorted(env["hostnames"]) == ["node1", "node2"] and env["launcher"] == "srun"
    assert len(set(store.records.of(run["run_id"], "summary")[0]["weights_digest_per_rank"])) == 1
    return run


def assert_every_run_recorded(env_home, local_experiment, slurm_run, **params):
    """The spec's framework options reached every trainer: its params record says so."""
    store = Store(env_home)
    for run in store.runs(local_experiment) + [slurm_run]:
        recorded = store.records.of(run["run_id"], "params")[0]
        assert {k: recorded[k] for k in params} == params


# --- DeepSpeed --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def deepspeed_env(env_home):
    return framework_env(env_home, "deepspeed")


def run_trainer(status, home, framework, tmp_path, *args, nproc=2):
    """The framework's trainer at `nproc` ranks, started as the local backend starts it."""
    out = tmp_path / "metrics.jsonl"
    argv, extra = local_command_for(
        framework, nproc, status, home, tmp_path, [*args, "--output", str(out)]
    )
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", **extra},
    )
    return proc, out


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 2])
def test_deepspeed_two_ranks_end_with_identical_weights(deepspeed_env, env_home, tmp_path, stage):
    proc, out = run_trainer(
        deepspeed_env, env_home, "deepspeed", tmp_path, *SMALL, "--zero-stage", str(stage)
    )
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
def test_doctor_smoke_runs_deepspeed_on_two_ranks(deepspeed_env, env_home):
    doctor = dlscale("doctor", "deepspeed", "--smoke", home=env_home, timeout=600)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "deepspeed 0.19.8" in doctor.stdout and "identical on every rank" in doctor.stdout


@pytest.mark.slow
@pytest.mark.slurm
def test_deepspeed_on_two_slurm_nodes(slurm_cluster, deepspeed_env, env_home, tmp_path):
    run = local_and_two_slurm_nodes(
        "deepspeed", env_home, tmp_path, "\n[options.deepspeed]\nzero_stage = 2\n"
    )
    script = (Path(run["run_dir"]) / "job.sh").read_text()
    assert f"source {deepspeed_env.prefix}/bin/activate" in script
    assert "--zero-stage 2" in script
    assert_every_run_recorded(env_home, "deepspeed-local", run, zero_stage=2)  # not 1


# --- Horovod + PyTorch ------------------------------------------------------------------


def test_horovod_variables_follow_slurms_block_layout():
    from dlscale.trainers.common.horovod_rendezvous import horovod_variables
    from dlscale.trainers.common.launch_env import LaunchEnv, LaunchError

    slurm = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "2"}
    v = horovod_variables(LaunchEnv(3, 4, 1, "10.0.0.1", 21000, "srun"), slurm)
    assert (
        v["HOROVOD_RANK"],
        v["HOROVOD_LOCAL_RANK"],
        v["HOROVOD_CROSS_RANK"],
        v["HOROVOD_CROSS_SIZE"],
        v["HOROVOD_LOCAL_SIZE"],
    ) == ("3", "1", "1", "2", "2")
    assert v["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "10.0.0.1"
    assert v["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "21001"  # beside the job's MASTER_PORT
    with pytest.raises(LaunchError, match="block distribution"):  # cyclic: rank 1 on node 1
        horovod_variables(LaunchEnv(1, 4, 0, "10.0.0.1", 21000, "srun"), slurm)
    with pytest.raises(LaunchError, match="same number of ranks on every node"):
        horovod_variables(LaunchEnv(0, 3, 0, "h", 1, "srun"), {**slurm, "SLURM_NODEID": "0"})


@pytest.fixture(scope="session")
def horovod_env(env_home):
    return framework_env(env_home, "horovod-pytorch")


@pytest.fixture(scope="session")
def horovod_tf_env(env_home):
    return framework_env(env_home, "horovod-tensorflow")


# framework -> (its environment's fixture, its trainer)
HOROVOD = {
    "horovod-pytorch": ("horovod_env", "dlscale.trainers.horovod_torch"),
    "horovod-tensorflow": ("horovod_tf_env", "dlscale.trainers.horovod_tf"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("framework", sorted(HOROVOD))
def test_horovod_two_ranks_under_horovodrun_end_with_identical_weights(
    request, env_home, tmp_path, framework, fp16
):
    status = request.getfixturevalue(HOROVOD[framework][0])
    proc, out = run_trainer(
        status, env_home, framework, tmp_path, *SMALL, *(["--fp16-allreduce"] if fp16 else [])
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["framework"] == framework and params["fp16_allreduce"] is fp16
    assert params["parameters"] == TORCH_RESNET20_PARAMETERS
    assert env["world_size"] == 2 and env["launcher"] == "horovodrun"
    assert env["backend"] == "horovod-gloo"
    assert env["framework_versions"]["horovod"] == "0.28.1"
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert summary["timed_steps"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(HOROVOD))
def test_horovod_under_srun_variables_runs_its_own_rendezvous(
    request, env_home, tmp_path, framework
):
    """What srun gives each task, and nothing of horovodrun's: rank 0 serves the gloo
    rendezvous itself and both ranks train together."""
    fixture, module = HOROVOD[framework]
    status = request.getfixturevalue(fixture)
    out = tmp_path / "metrics.jsonl"
    port = free_port_pair()
    extra = envs.launch_env(status, env_home)
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "RANK"))}
        env.update(
            extra,
            OMP_NUM_THREADS="1",
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURM_NODEID="0",
            SLURM_NNODES="1",
            SLURM_NTASKS_PER_NODE="2",
            SLURMD_NODENAME="node1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [status.python, "-m", module, *SMALL, "--output", str(out)],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-3000:]
    recs = records(out)
    env = recs[1]
    assert env["launcher"] == "srun" and env["world_size"] == 2
    digests = recs[-1]["weights_digest_per_rank"]
    assert digests[0] == digests[1]


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.parametrize("framework", sorted(HOROVOD))
def test_horovod_from_the_command_line_and_on_two_slurm_nodes(
    request, slurm_cluster, env_home, tmp_path, framework
):
    status = request.getfixturevalue(HOROVOD[framework][0])
    run = local_and_two_slurm_nodes(
        framework, env_home, tmp_path, f"\n[options.{framework}]\nfp16_allreduce = true\n"
    )
    script = (Path(run["run_dir"]) / "job.sh").read_text()
    assert f"source {status.prefix}/bin/activate" in script
    assert "--fp16-allreduce" in script
    assert_every_run_recorded(
        env_home, framework.replace("-", "") + "-local", run, fp16_allreduce=True
    )


# --- TensorFlow (MultiWorkerMirroredStrategy + tf_keras) ---------------------------------


def test_tf_config_from_slurm_variables_and_on_one_machine():
    from dlscale.trainers.common.launch_env import LaunchEnv, LaunchError
    from dlscale.trainers.common.tf_cluster import tf_config

    env = {"DLSCALE_NODE_ADDRS": "10.0.0.1 10.0.0.2", "SLURM_NTASKS_PER_NODE": "2"}
    cfg = tf_config(LaunchEnv(2, 4, 0, "10.0.0.1", 21000, "srun"), env)
    assert cfg == {
        "cluster": {
            "worker": ["10.0.0.1:21002", "10.0.0.1:21003", "10.0.0.2:21004", "10.0.0.2:21005"]
        },
        "task": {"type": "worker", "index": 2},
    }
    one = tf_config(LaunchEnv(1, 2, 1, "127.0.0.1", 3000, "spawn"), {})
    assert one["cluster"]["worker"] == ["127.0.0.1:3002", "127.0.0.1:3003"]
    with pytest.raises(LaunchError, match="DLSCALE_NODE_ADDRS names 1 node"):
        tf_config(LaunchEnv(0, 4, 0, "h", 1, "srun"), {**env, "DLSCALE_NODE_ADDRS": "h"})


def test_spawn_gives_its_ranks_ports_no_outgoing_connection_can_take():
    """MASTER_PORT and the ports after it that ranks bind (Horovod's +1, TensorFlow's one a
    rank from +2) are free when chosen, and below the kernel's ephemeral range, from which
    any outgoing connection may take one before a rank binds it."""
    import socket

    from dlscale.trainers.common import spawn

    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(5):
        base = spawn._free_ports(2 + spawn.EXTRA_PORTS)
        assert 10000 <= base and (base + 4 <= low or low < 10100)
        for port in range(base, base + 4):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))  # free: no OSError
    with socket.socket() as held:  # a port held is never handed out
        held.bind(("127.0.0.1", 0))
        assert not spawn._free(held.getsockname()[1])


def test_spawn_stops_every_rank_when_one_fails(tmp_path):
    code = (
        "import os, sys, time; r = int(os.environ['RANK']);"
        "sys.exit(3) if r == 1 else time.sleep(60)"
    )
    start = __import__("time").monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.trainers.common.spawn",
            "--ranks",
            "2",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        timeout=30,
    )
    assert proc.returncode == 3 and __import__("time").monotonic() - start < 20


@pytest.fixture(scope="session")
def tf_env(env_home):
    return framework_env(env_home, "tensorflow")


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["tf_env", "horovod_tf_env"])
def test_tensorflow_model_has_the_torch_parameter_count(request, env_home, fixture):
    """The one Keras model file, under tf_keras (TensorFlow 2.21) and under TensorFlow
    2.15's own tf.keras (the Horovod environment)."""
    status = request.getfixturevalue(fixture)
    code = (
        "from dlscale.trainers.tf_keras.models import build, keras, parameter_count;"
        "print(parameter_count(build('resnet20', 10)), parameter_count(build('resnet50', 1000)),"
        " keras.__name__.split('.')[0])"
    )
    proc = subprocess.run(
        [status.python, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **envs.launch_env(status, env_home)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from dlscale.trainers.torch_ddp.models import build, parameter_count

    assert proc.stdout.split() == [
        str(TORCH_RESNET20_PARAMETERS),
        str(parameter_count(build("resnet50", 1000))),
        "tf_keras" if fixture == "tf_env" else "keras",
    ]


@pytest.mark.slow
def test_tensorflow_two_ranks_end_with_identical_weights(tf_env, env_home, tmp_path):
    proc, out = run_trainer(tf_env, env_home, "tensorflow", tmp_path, *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["framework"] == "tensorflow" and params["world_size"] == 2
    assert params["parameters"] == TORCH_RESNET20_PARAMETERS
    assert params["strategy"] == "MultiWorkerMirroredStrategy"
    assert env["launcher"] == "spawn" and env["framework_versions"]["tensorflow"] == "2.21.0"
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert summary["timed_steps"] == 4 and summary["throughput"] > 0


@pytest.mark.slow
@pytest.mark.slurm
def test_tensorflow_from_the_command_line_and_on_two_slurm_nodes(
    slurm_cluster, tf_env, env_home, tmp_path
):
    local_and_two_slurm_nodes("tensorflow", env_home, tmp_path)


# --- MXNet Gluon (dist_sync kvstore) -----------------------------------------------------


def _cwd(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # gone meanwhile
        return None


@pytest.fixture(scope="session")
def mxnet_env(env_home):
    return framework_env(env_home, "mxnet")


@pytest.mark.slow
def test_mxnet_two_workers_with_their_own_scheduler_and_server(mxnet_env, env_home, tmp_path):
    proc, out = run_trainer(mxnet_env, env_home, "mxnet", tmp_path, *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)
    params, env, summary = recs[0], recs[1], recs[-1]
    assert params["framework"] == "mxnet" and params["kvstore"] == "dist_sync"
    assert params["parameters"] == TORCH_RESNET20_PARAMETERS  # the same model again
    assert env["world_size"] == 2 and env["framework_versions"]["mxnet"] == "1.9.1"
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]
    # the scheduler and server it started are gone with it (its own: they run in its
    # folder; another test's MXNet job may be running meanwhile)
    found = subprocess.run(
        ["pgrep", "-f", f"{mxnet_env.prefix}/bin/python -c import mxnet"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert [pid for pid in found if _cwd(pid) == str(tmp_path)] == []


@pytest.mark.slow
@pytest.mark.slurm
def test_mxnet_from_the_command_line_and_on_two_slurm_nodes(
    slurm_cluster, mxnet_env, env_home, tmp_path
):
    local_and_two_slurm_nodes("mxnet", env_home, tmp_path)


def test_env_create_waits_for_a_build_of_the_same_environment_in_progress(mxnet_env, env_home):
    """scripts/test builds the environments in the background while tests ask for them: a
    second `env create` must wait for the first, never build into the same folder."""
    import fcntl  # noqa: PLC0415

    prefix = Path(mxnet_env.prefix)
    with open(prefix.with_name(prefix.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a build in progress holds it
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "dlscale"), "env", "create", "mxnet"],
            env={**os.environ, "DLSCALE_HOME": str(env_home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        first = proc.stdout.readline()
        assert "waiting for another build of" in first and str(prefix) in first
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # still waiting while the lock is held
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "already holds recipe" in out and "ready:" in out  # found, not built again


@pytest.mark.slow
def test_mxnet_workers_stop_when_the_scheduler_cannot_start(mxnet_env, env_home, tmp_path):
    """The scheduler's port is taken, so it dies at start: the workers must end with an
    error naming it, not wait on the parameter server until a time limit."""
    from dlscale.trainers.mxnet_gluon.train import ROLE_PORT_OFFSET

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] - ROLE_PORT_OFFSET
        procs = []
        for rank in range(2):
            env = {
                **os.environ,
                **envs.launch_env(mxnet_env, env_home),
                "OMP_NUM_THREADS": "1",
                "SLURM_PROCID": str(rank),
                "SLURM_NTASKS": "2",
                "SLURM_LOCALID": str(rank),
                "SLURM_NODEID": "0",
                "SLURM_NNODES": "1",
                "SLURM_NTASKS_PER_NODE": "2",
                "SLURMD_NODENAME": "node1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
            procs.append(
                subprocess.Popen(
                    [
                        mxnet_env.python,
                        "-m",
                        "dlscale.trainers.mxnet_gluon",
                        *SMALL,
                        "--output",
                        str(tmp_path / "metrics.jsonl"),
                    ],
                    env=env,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        rank0 = procs[0]
        err = rank0.communicate(timeout=HANG_S)[1]
    assert rank0.returncode == 1, err[-3000:]
    assert "MXNet's scheduler" in err and "before training finished" in err
    procs[1].kill()  # srun or spawn stops the others once one rank fails
    procs[1].wait(timeout=HANG_S)
