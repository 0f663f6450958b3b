"""Render a run's Slurm batch script from the templates in dlscale.jobscripts.

Templates are chosen by launcher (launcher_for): `srun` (one task per device), `torchrun`
(one task per node) and `mpirun` (declared frameworks' MPI scripts). Each extends
base.sh.j2 and fills its blocks: tasks, environment, rendezvous, launch.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import jinja2

from ...trainers.common.entry import dlscale_version
from ..config.custom import script_path
from ..config.frameworks import FRAMEWORKS
from ..config.profile import LoadedProfile, Partition
from ..config.software import Environment
from ..config.times import time_to_seconds
from ..errors import PlanError
from ..paths import RunPaths
from . import custom_launch
from .envs import slurm_environment, trainer_path
from .launch import local_env, trainer_args
from .plan import Run

# #SBATCH lines are read by sbatch, not by a shell: quoting does not apply there, so every
# value that goes into one must be made of harmless characters only.
_SAFE_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_./,:=@+-]+")
# In a comment only a line break is dangerous (the rest of the text would be a command, or
# an #SBATCH line sbatch reads); other control characters are escaped so it reads plainly.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def sbatch_value(value: object, what: str) -> str:
    """A value for a place no quoting protects (#SBATCH lines), or refused."""
    text = str(value)
    if not _SAFE_SBATCH_VALUE.fullmatch(text):
        raise PlanError(
            f"{what} {text!r} cannot go into a job script's #SBATCH line: only "
            "letters, digits and ./,:=@+_- are allowed there"
        )
    return text


def _comment(value: object) -> str:
    """Text for a comment line: on one line, whatever it holds."""
    return _CONTROL.sub(
        lambda m: _ESCAPES.get(
            m[0], f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}"
        ),
        str(value),
    )


def _name(value: object) -> str:
    """An environment variable's name (export NAME=...), or refused."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(value)):
        raise PlanError(f"{value!r} is not an environment variable name")
    return str(value)


@jinja2.pass_context
def _map(context, seq, *args, **kwargs):
    """Jinja's map, with `map('q')` (a trainer's 40-odd arguments, in every script) made a
    plain loop over our own filter: Jinja's looks the filter up and checks it for every
    item, a fifth of rendering a study's scripts."""
    if len(args) == 1 and not kwargs and args[0] in _OWN:
        return map(_OWN[args[0]], seq)
    return jinja2.filters.sync_do_map(context, seq, *args, **kwargs)


_OWN = {
    "q": lambda v: shlex.quote(str(v)),
    "plain": sbatch_value,
    "comment": _comment,
    "name": _name,
}
# auto_reload off: the templates are the installed package's, not edited while it runs.
_env = jinja2.Environment(
    loader=jinja2.PackageLoader("dlscale.jobscripts", "."),
    auto_reload=False,
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
)
_env.filters.update(_OWN, map=_map)


# Asked of the package's metadata once per process: parsing it again for every script was
# most of rendering a study's 10,000 scripts.
_version = functools.cache(dlscale_version)


def shorter(limit: str, other: str | None) -> str:
    """The shorter of two Slurm times (UNLIMITED the longest)."""
    if other is None:
        return limit
    seconds = [time_to_seconds(t) for t in (limit, other)]
    if seconds[1] is None or (seconds[0] is not None and seconds[0] <= seconds[1]):
        return limit
    return other


def launcher_for(run: Run, env: Environment) -> str:
    if custom_launch.is_declared(run):
        return run.training["custom"]["launcher"]
    allowed = FRAMEWORKS[run.framework].slurm_launchers
    if env.launcher and env.launcher not in allowed:
        raise PlanError(
            f"{run.framework} cannot be launched by {env.launcher}; it can by {', '.join(allowed)}"
        )
    return env.launcher or allowed[0]


def check_run_folder(run_dir: Path) -> None:
    """A run folder whose path a #SBATCH line can carry (its log's); PlanError if not.
    Checked for the home before any run is stored, and again as each script renders."""
    if not _SAFE_SBATCH_VALUE.fullmatch(str(RunPaths(run_dir).log)):
        raise PlanError(
            f"run folder {str(run_dir)!r} has characters a #SBATCH line cannot carry; "
            "set DLSCALE_HOME to a path of letters, digits and ./_-"
        )


def check_fits(run: Run, partition: Partition, profile_path: str) -> None:
    """Refuse, before anything is submitted, a run the partition cannot hold."""
    threads = run.training["threads_per_rank"]
    where = f"{profile_path}: partition {partition.name}"
    if run.nodes > partition.nodes:
        raise PlanError(
            f"{where} has {partition.nodes} node(s); scale {run.scale} asks for {run.nodes}"
        )
    if partition.gpus_per_node and run.ranks_per_node > partition.gpus_per_node:
        raise PlanError(
            f"{where} has {partition.gpus_per_node} GPU(s) per node; scale "
            f"{run.scale} asks for {run.ranks_per_node} (one GPU per rank)"
        )
    if run.ranks_per_node * threads > partition.cpus_per_node:
        raise PlanError(
            f"{where} has {partition.cpus_per_node} CPU(s) per node; scale "
            f"{run.scale} x {threads} thread(s) asks for "
            f"{run.ranks_per_node * threads}"
        )
    workers = run.training.get("loader_workers") or 0
    if run.ranks_per_node * workers > partition.cpus_per_node:
        raise PlanError(
            f"{where} has {partition.cpus_per_node} CPU(s) per node; scale {run.scale} x "
            f"{workers} loader worker(s) (training.loader_workers) asks for "
            f"{run.ranks_per_node * workers}"
        )


def cpus_per_rank(run: Run, partition: Partition) -> int:
    """Cores for each rank's task: its threads; on a GPU partition, its GPU's share of the
    node's cores if that is more (room for loader workers, the cores beside its GPU)."""
    threads = run.training["threads_per_rank"]
    if partition.gpus_per_node:
        return max(threads, partition.cpus_per_node // partition.gpus_per_node)
    return threads


def render(
    run: Run,
    loaded: LoadedProfile,
    run_dir: Path,
    spec_path: str,
    partition_name: str | None = None,
    home: Path | None = None,
    time_limit: str | None = None,
) -> str:
    """The job script; with `home`, a framework the profile does not set up runs in the
    environment `dlscale env create` recorded there; `time_limit`: the spec's, the job's
    when shorter than the profile's."""
    profile = loaded.profile
    partition = profile.partition(partition_name)
    check_fits(run, partition, loaded.path)
    device = "cuda" if partition.gpus_per_node else "cpu"
    folder = str(Path(spec_path).absolute().parent)
    declared = custom_launch.is_declared(run)
    if declared:  # the user's own script: its declaration's software (config/custom.py)
        software = dict(run.training["custom"].get("software") or {})
        if software.get("venv"):  # taken from the spec's folder, as the script is
            software["venv"] = str(script_path(software["venv"], folder))
        env = Environment.model_validate(software)
        env_vars = custom_launch.job_env(run, run_dir, device)
        if home is not None:
            env_vars["PYTHONPATH"] = trainer_path(home)
    elif home is not None:
        env, env_vars = slurm_environment(run.framework, profile, home, device)
    else:
        env, env_vars = profile.environments.get(run.framework, Environment()), {}
    log_path = RunPaths(run_dir).log
    check_run_folder(run_dir)
    python = profile.python
    if env.venv:
        python = str(Path(env.venv) / "bin" / "python")
    prefix = ""
    if env.container:
        c = env.container
        words = (
            [c.runtime, "exec"]
            + (["--nv"] if c.nv else [])
            + sum((["-B", b] for b in c.binds), [])
            + [c.image]
        )
        prefix = " ".join(shlex.quote(w) for w in words) + " "
    launcher = launcher_for(run, env)
    # A declared framework's tasks run under dlscale's energy meter (on the host, outside a
    # container): one a node under torchrun, one a device under srun and mpirun.
    meter_prefix = ""
    if declared and home is not None:  # the meter imports from the job's PYTHONPATH
        asked = custom_launch.interpreter(run, folder, python)
        per_task = launcher != "torchrun"
        meter = custom_launch.metered(profile.python, run, run_dir, device, per_task, asked)
        meter_prefix = " ".join(shlex.quote(w) for w in meter) + " "
    if declared:
        rank_argv = custom_launch.rank_command(
            run, run_dir, device, custom_launch.software_python(run, folder, python), folder
        )
        target = ["--no-python", *rank_argv]
    else:
        module = FRAMEWORKS[run.framework].trainer_module
        target = ["-m", module, *trainer_args(run, run_dir, device)]
        rank_argv = [python, *target]
    template = _env.get_template(f"{launcher}.sh.j2")
    return template.render(
        run=run,
        label=f"{run.experiment}: {run.label()}",
        version=_version(),
        spec_path=spec_path,
        profile_path=loaded.path,
        profile=profile,
        partition=partition,
        env=env,
        job_env={**local_env(run), **env_vars},
        run_dir=str(run_dir),
        log_path=str(log_path),
        job_name=f"dlscale-{run.experiment}-{run.run_id[:8]}",
        time_limit=shorter(profile.time_limit, time_limit),
        threads=run.training["threads_per_rank"],
        cpus_per_rank=cpus_per_rank(run, partition),
        gpus=partition.gpus_per_node > 0,
        python=python,
        container_prefix=prefix,
        meter_prefix=meter_prefix,
        rank_argv=rank_argv,
        torchrun_target=target,
    )
