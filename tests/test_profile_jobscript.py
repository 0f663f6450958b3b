"""Cluster profiles and rendered job scripts, without a cluster: validation, refusals
before submission, quoting, and `bash -n`."""

import subprocess
from pathlib import Path

import pytest

from conftest import REPO, write_spec
from dlscale.engine.config.profile import RESERVED, load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.config.times import time_to_seconds
from dlscale.engine.errors import PlanError, SpecError
from dlscale.engine.launching import jobscript
from dlscale.engine.launching.plan import plan

TEST_PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "clusters").glob("*.toml")))
def test_shipped_profiles_validate(path):
    assert load_profile(path).profile.partitions


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30", 1800),
        ("30:00", 1800),
        ("01:00:00", 3600),
        ("2-00:00:00", 172800),
        ("1-12", 129600),
        ("UNLIMITED", None),
    ],
)
def test_slurm_time_formats(text, seconds):
    assert time_to_seconds(text) == seconds


@pytest.mark.parametrize(
    "change,fragments",
    [
        (
            ('time_limit = "00:10:00"', 'time_limit = "ten minutes"'),
            ["test.toml:6: time_limit", "not a Slurm time"],
        ),
        (
            ('max_time = "30:00"', 'max_time = "30:00:00:00"'),
            ["test.toml:12: partitions[0].max_time", "not a Slurm time"],
        ),
        (
            ('cpus_per_node = 2\nmax_time = "1"', 'cpus_per_node = 0\nmax_time = "1"'),
            ["test.toml:18: partitions[1].cpus_per_node"],
        ),
        (("[environments.pytorch-ddp]", "[environments.pytorch-dpp]"), ["unknown framework"]),
        (
            ('name = "debug"', 'name = "de bug"'),
            ["partitions[0].name", "should be letters, digits, '.', '_' or '-' (no spaces)"],
        ),
    ],
)
def test_bad_profiles_name_file_line_and_field(tmp_path, change, fragments):
    path = tmp_path / "test.toml"
    path.write_text(TEST_PROFILE.read_text().replace(*change))
    with pytest.raises(SpecError) as info:
        load_profile(path)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_unsafe_sbatch_options_are_refused(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        TEST_PROFILE.read_text().replace(
            'time_limit = "00:10:00"',
            'time_limit = "00:10:00"\nsbatch_extra = ["--mail-user=$(reboot)"]',
        )
    )
    with pytest.raises(SpecError, match="sbatch_extra.*must look like --name"):
        load_profile(path)


def _runs(tmp_path, scales='"1x1", "2x1"', training=""):
    spec = write_spec(tmp_path / "s.toml", training=training, scales=scales)
    return load_spec(spec), plan(load_spec(spec)).runs


@pytest.mark.parametrize(
    "scales,message",
    [
        ('"3x1"', "partition debug has 2 node(s); scale 3x1 asks for 3"),
        ('"1x3"', "partition debug has 2 CPU(s) per node; scale 1x3 x 1 thread(s) asks for 3"),
    ],
)
def test_runs_larger_than_the_partition_are_refused(tmp_path, scales, message):
    _, runs = _runs(tmp_path, scales)
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        jobscript.render(runs[0], load_profile(TEST_PROFILE), tmp_path, "s.toml")


def test_unknown_partition_is_refused(tmp_path):
    _, runs = _runs(tmp_path)
    with pytest.raises(PlanError, match="unknown partition 'gpu'; it has debug, short"):
        jobscript.render(runs[0], load_profile(TEST_PROFILE), tmp_path, "s.toml", "gpu")


def test_gpu_runs_larger_than_the_node_are_refused(tmp_path):
    _, runs = _runs(tmp_path, '"1x8"')
    iris = load_profile(REPO / "examples" / "clusters" / "ulhpc-iris.toml")
    with pytest.raises(PlanError, match="4 GPU"):
        jobscript.render(runs[0], iris, tmp_path, "s.toml")


def render(tmp_path, profile_text=None, launcher=None, scales='"2x1"', training=""):
    profile_path = tmp_path / "p.toml"
    text = profile_text or TEST_PROFILE.read_text()
    text = text.replace('venv = "../../.venv"', f'venv = "{REPO / ".venv"}"')
    if launcher:
        text += f'launcher = "{launcher}"\n'
    profile_path.write_text(text)
    _, runs = _runs(tmp_path, scales, training)
    run_dir = tmp_path / "runs" / runs[0].run_id
    return runs[0], jobscript.render(runs[0], load_profile(profile_path), run_dir, "s.toml")


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_rendered_scripts_parse_and_launch_right(tmp_path, launcher):
    run, script = render(tmp_path, launcher=launcher, scales='"2x2"')
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --partition=debug\n" in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in script
    assert "MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in script
    if launcher == "srun":  # one task per device
        assert "#SBATCH --ntasks-per-node=2\n" in script
        assert "srun --kill-on-bad-exit=1 --ntasks=4 --ntasks-per-node=2" in script
    else:  # one torchrun per node, never one per device
        assert "#SBATCH --ntasks-per-node=1\n" in script and "--cpus-per-task=2" in script
        assert "--ntasks=2 --ntasks-per-node=1" in script and "--nproc-per-node=2" in script
        assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in script


def test_user_values_are_quoted_never_executed(tmp_path):
    # a TOML basic string with a real newline (\n), quotes, $() and backticks
    text = TEST_PROFILE.read_text().replace(
        'time_limit = "00:10:00"',
        'time_limit = "00:10:00"\nmodules = ["mod; rm -rf /tmp/x"]\n'
        "[env]\nDLSCALE_NOTE = \"x'; touch /tmp/dlscale-pwned; echo '$(id)`id`\\nline2\"",
    )
    run, script = render(
        tmp_path, profile_text=text, training='data_dir = "/data/a b;$(touch /tmp/dlscale-pwned)"'
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert "module load 'mod; rm -rf /tmp/x'" in script
    # run the export line alone: the variable holds the text, and nothing ran
    start = script.index("export DLSCALE_NOTE=")
    export = script[start : script.index("\nexport ", start)]
    probe = tmp_path / "probe.sh"
    probe.write_text(export + '\nprintf %s "$DLSCALE_NOTE"\n')
    out = subprocess.run(["bash", str(probe)], capture_output=True, text=True).stdout
    assert out == "x'; touch /tmp/dlscale-pwned; echo '$(id)`id`\nline2"
    assert not Path("/tmp/dlscale-pwned").exists()
    assert (
        "'--data-dir' '/data/a b;$(touch /tmp/dlscale-pwned)'" in script
        or "--data-dir '/data/a b;$(touch /tmp/dlscale-pwned)'" in script
    )


# --- sbatch_extra: never over a directive dlscale sets itself ------------------------------


def profile_with_extra(tmp_path: Path, *options: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(
        TEST_PROFILE.read_text().replace(
            'time_limit = "00:10:00"',
            'time_limit = "00:10:00"\nsbatch_extra = ['
            + ", ".join(f'"{o}"' for o in options)
            + "]",
        )
    )
    return path


@pytest.mark.parametrize(
    "option,named,where",
    [
        ("--output=/tmp/elsewhere.log", "--output", "where dlscale reads it"),
        ("--chdir=/tmp", "--chdir", "runs in its run folder"),
        ("--export=NONE", "--export", "profile's [env]"),
        ("--time=2:00:00", "--time", "profile's time_limit"),
        ("--partition=gpu", "--partition", "--partition or the profile's [[partitions]]"),
        ("--nodes=4", "--nodes", "spec's scales"),
        ("--ntasks-per-node=8", "--ntasks-per-node", "spec's scales"),
        ("--cpus-per-task=4", "--cpus-per-task", "threads_per_rank"),
        ("--job-name=mine", "--job-name", "named after its run"),
        ("--open-mode=truncate", "--open-mode", "appends"),
        ("--gpus-per-node=2", "--gpus-per-node", "gpus_per_node"),
        ("--account=other", "--account", "profile's account"),
        ("--qos=high", "--qos", "profile's qos"),
        ("--dependency=afterok:1", "--dependency", "singleton"),
        ("--array=0-9", "--array", "one job per run"),
        ("--error=/tmp/err", "--error", "where dlscale reads it"),
        ("--out=/tmp/x", "--out (sbatch may read it as --output)", "where dlscale reads it"),
        ("--chd=/tmp", "--chd (sbatch may read it as --chdir)", "run folder"),
        ("-o", "-o (sbatch may read it as --output)", "where dlscale reads it"),
        ("-D/tmp", "-D (sbatch may read it as --chdir)", "run folder"),
        ("-J", "-J (sbatch may read it as --job-name)", "named after its run"),
        ("-p", "-p (sbatch may read it as --partition)", "--partition"),
        ("-N", "-N (sbatch may read it as --nodes)", "scales"),
        ("-t", "-t (sbatch may read it as --time)", "time_limit"),
    ],
)
def test_sbatch_extra_may_not_override_dlscales_own_directives(tmp_path, option, named, where):
    path = profile_with_extra(tmp_path, "--constraint=v100", option)
    with pytest.raises(SpecError) as info:
        load_profile(path)
    (problem,) = info.value.problems
    line = 1 + path.read_text().splitlines().index(
        next(ln for ln in path.read_text().splitlines() if ln.startswith("sbatch_extra"))
    )
    assert problem.startswith(f"{path}:{line}: sbatch_extra[1]: {named} is set by dlscale itself")
    assert where in problem


def test_sbatch_extra_keeps_options_dlscale_does_not_set(tmp_path):
    ok = [
        "--constraint=v100",
        "--gres=nvme:1",
        "--gres-flags=enforce-binding",
        "--time-min=10",
        "--no-kill",
        "--mem=0",
        "--exclude=node3",
        "--mail-type=END",
    ]
    assert load_profile(profile_with_extra(tmp_path, *ok)).profile.sbatch_extra == ok


@pytest.mark.parametrize(
    "option,says",
    [
        ("--clusters=other", "--clusters cannot be used in sbatch_extra: dlscale follows"),
        ("--cluster=other", "--cluster (sbatch may read it as --cluster-constraint or --clusters)"),
        ("-Mother", "-M (sbatch may read it as --clusters)"),
        ("--container=/oci/bundle", "--container cannot be used"),
        ("--gpus=2", "--gpus cannot be used"),
        ("--gpus-per-task=1", "the plan puts one rank on each"),
        ("-G2", "-G (sbatch may read it as --gpus)"),
        ("--gres=gpu:1", "GPUs cannot be asked for in sbatch_extra"),
        ("--gres=gpu:a100:4", "GPUs cannot be asked for"),
        ("--gres=nvme:1,gpu:2", "GPUs cannot be asked for"),
        ("--gres=gres/gpu:1", "GPUs cannot be asked for"),
        ("--gre=gpu:1", "GPUs cannot be asked for"),
        ("--tres-per-task=gres/gpu:1", "--tres-per-task cannot be used"),
        ("--signal=B:USR1@60", "--signal cannot be used in sbatch_extra: the job script ends"),
        ("--test-only", "it makes no job"),
        ("--test", "--test (sbatch may read it as --test-only)"),
        ("--wait", "sbatch would not return until the job ends"),
        ("--comment=mine", "dlscale tags each job in its comment"),
        ("--parsable", "dlscale passes it"),
        ("--wrap=true", "its own job script"),
        ("--version", "makes no job"),
    ],
)
def test_sbatch_extra_that_would_break_following_or_the_plan_is_refused(tmp_path, option, says):
    """Issue 22, item 11: `--clusters=X` was accepted, and dlscale then could not follow or
    cancel the job (no -M); GPUs asked for beside the partition's, a signal before the time
    limit's, a submission that makes no job: each refused naming the file and field."""
    path = profile_with_extra(tmp_path, "--constraint=v100", option)
    with pytest.raises(SpecError) as info:
        load_profile(path)
    (problem,) = info.value.problems
    assert f"{path}:" in problem and "sbatch_extra[1]: " in problem and says in problem


def test_a_refused_sbatch_extra_is_exit_2_before_anything_is_stored(tmp_path, home):
    from conftest import dlscale, write_spec

    profile = profile_with_extra(tmp_path, "--clusters=other")
    spec = write_spec(tmp_path / "s.toml")
    proc = dlscale("run", str(spec), "--backend", "slurm", "--profile", str(profile), check=2)
    assert "sbatch_extra[0]: --clusters cannot be used" in proc.stderr
    assert "Traceback" not in proc.stderr and not (home / "runs").exists()


def test_every_directive_of_the_templates_is_reserved():
    own = set()
    for t in (REPO / "jobscripts").glob("*.j2"):
        own |= {
            line.split()[1].split("=")[0]
            for line in t.read_text().splitlines()
            if line.startswith("#SBATCH --")
        }
    assert own and own <= set(RESERVED)
    assert {"--chdir", "--export", "--array", "--output"} <= set(RESERVED)
