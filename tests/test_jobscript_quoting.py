"""Hostile names reaching a job script: the spec's and the profile's file names (newlines,
quotes, $(...), backticks, #SBATCH), profile values (its [env] and [nccl]) and a data
folder. The rendered script must parse, sbatch must read only dlscale's own #SBATCH lines,
and running it (with stub srun, scontrol and module on PATH) must run nothing the names
say."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import HANG_S, write_spec
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import PlanError
from dlscale.engine.launching import jobscript
from dlscale.engine.launching.plan import plan

# Each tries to touch a marker file when it is run by bash, or to add an sbatch option.
PAYLOADS = [
    "nl\ntouch pwned-nl\n#SBATCH --comment=pwned",
    "subst $(touch pwned-subst) '$(touch pwned-q)'",
    'tick `touch pwned-tick` "`touch pwned-dq`"',
    "semi; touch pwned-semi; #",
    "cr\r#SBATCH --chdir=pwned\r\n#PBS -N pwned",
]

PROFILE = """\
name = "hostile"
time_limit = "00:10:00"
modules = [{module}]

[[partitions]]
name = "debug"
nodes = 2
cpus_per_node = 2

[env]
DLSCALE_NOTE = {note}

[nccl]
NCCL_IB_HCA = {note}
"""


def toml_str(text: str) -> str:
    """A TOML basic string holding `text` exactly."""
    return (
        '"'
        + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in text)
        + '"'
    )


def sbatch_directives(script: str) -> list[str]:
    """The lines sbatch (22.05, opt.c) reads as options: lines that start with #SBATCH (or
    #PBS / #BSUB), up to the first line that is not blank and not a comment."""
    found = []
    for line in script.split("\n"):
        if line.startswith(("#SBATCH", "#PBS", "#BSUB")):
            found.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return found


def render(
    tmp_path: Path, name: str, module: str = "gcc", note: str = "x", data_dir: str = "/data"
) -> tuple[Path, str]:
    """job.sh of a 2x1 run, from a spec and a profile in folders called `name`."""
    spec_dir, prof_dir = tmp_path / f"spec {name}", tmp_path / f"profile {name}"
    spec_dir.mkdir()
    prof_dir.mkdir()
    spec = write_spec(
        spec_dir / f"{name}.toml", scales='"2x1"', training=f"data_dir = {toml_str(data_dir)}"
    )
    profile = prof_dir / f"{name}.toml"
    profile.write_text(PROFILE.format(module=toml_str(module), note=toml_str(note)))
    run = plan(load_spec(spec)).runs[0]
    run_dir = tmp_path / "runs" / run.run_id
    run_dir.mkdir(parents=True)
    return run_dir, jobscript.render(run, load_profile(profile), run_dir, str(spec))


STUBS = {
    "srun": 'printf "%s\\0" "$@" > "$STUB_OUT/srun.args"\n'
    'printf "%s" "$DLSCALE_NOTE" > "$STUB_OUT/note"\n'
    'printf "%s" "$NCCL_IB_HCA" > "$STUB_OUT/nccl"\n',
    "scontrol": 'case "$2" in hostnames) echo node1 ;; '
    'node) echo "NodeName=node1 NodeAddr=127.0.0.1 State=IDLE" ;; esac\n',
    "module": 'printf "%s\\0" "$@" >> "$STUB_OUT/module.args"\n',
}


def run_with_stubs(tmp_path: Path, script: str) -> Path:
    stubs, out, cwd = tmp_path / "stubs", tmp_path / "stub-out", tmp_path / "cwd"
    for d in (stubs, out, cwd):
        d.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (stubs / name).write_text("#!/bin/bash\n" + body)
        (stubs / name).chmod(0o755)
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_OUT": str(out),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_CPUS_PER_TASK": "1",
    }
    proc = subprocess.run(
        ["bash", str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize(
    "payload", PAYLOADS, ids=["newline", "subst", "backtick", "semicolon", "carriage-return"]
)
def test_hostile_names_are_text_never_commands_or_directives(tmp_path, payload):
    (tmp_path / "benign").mkdir()
    _, benign = render(tmp_path / "benign", "plain", module=payload, note=payload, data_dir=payload)
    benign = benign.replace(str(tmp_path / "benign"), str(tmp_path))
    run_dir, script = render(tmp_path, payload, module=payload, note=payload, data_dir=payload)
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    # sbatch reads exactly what it reads when the files have harmless names, and no line
    # break of a name got into the script
    assert sbatch_directives(script) == sbatch_directives(benign)
    assert script.count("\n") == benign.count("\n")
    (head,) = [ln for ln in script.split("\n") if ln.startswith("# rendered by dlscale")]
    if "'" not in payload:  # (quotes are shell-quoted in the comment too)
        assert payload.replace("\n", "\\n").replace("\r", "\\r") in head

    out = run_with_stubs(tmp_path, script)
    assert not [
        p for p in tmp_path.rglob("*pwned*") if "spec " not in str(p) and "profile " not in str(p)
    ], "a payload ran"
    # where user text is a value, it arrives whole, as data
    args = (out / "srun.args").read_bytes().decode().split("\0")[:-1]
    assert args[args.index("--data-dir") + 1] == payload
    assert (out / "module.args").read_bytes().decode().split("\0")[:-1] == ["load", payload]
    assert (out / "note").read_bytes().decode() == payload
    assert (out / "nccl").read_bytes().decode() == payload


def test_values_no_quoting_protects_are_refused_not_pasted(tmp_path):
    (tmp_path / "a").mkdir()
    run_dir, _ = render(tmp_path / "a", "fine")
    spec = load_spec(next((tmp_path / "a").glob("spec */*.toml")))
    run = plan(spec).runs[0]
    loaded = load_profile(next((tmp_path / "a").glob("profile */*.toml")))
    # a run folder with a newline: #SBATCH --output cannot carry it
    with pytest.raises(PlanError, match="run folder .* has characters a #SBATCH line cannot"):
        jobscript.render(run, loaded, tmp_path / "runs\n#SBATCH --chdir=x" / run.run_id, "s")
    # and should a value ever get past validation, the template refuses it too
    p = loaded.profile
    bad = p.model_copy(
        update={
            "partitions": [p.partitions[0].model_copy(update={"name": "debug\n#SBATCH --chdir=/"})]
        }
    )
    with pytest.raises(
        PlanError,
        match="partition 'debug\\\\n#SBATCH --chdir=/' cannot go into a job script's #SBATCH line",
    ):
        jobscript.render(run, loaded.model_copy(update={"profile": bad}), run_dir, "s")
    for table in ("env", "nccl"):
        bad = p.model_copy(update={table: {"NCCL_X=1; touch pwned; Y": "v"}})
        with pytest.raises(PlanError, match="is not an environment variable name"):
            jobscript.render(run, loaded.model_copy(update={"profile": bad}), run_dir, "s")


@pytest.mark.slurm
def test_a_hostile_script_submitted_to_slurm_carries_only_dlscales_options(slurm_cluster, tmp_path):
    """sbatch itself, not our reading of it: the job it queues (held, then cancelled)."""
    run_dir, script = render(tmp_path, PAYLOADS[0])
    path = run_dir / "job.sh"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    proc = subprocess.run(
        ["sbatch", "--hold", "--parsable", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=HANG_S
        ).stdout
    finally:
        subprocess.run(["scancel", job], timeout=HANG_S)
    assert "pwned" not in shown  # no --comment, no --chdir from the name
    assert f"StdOut={run_dir / 'run.log'}" in shown and "JobName=dlscale-" in shown
