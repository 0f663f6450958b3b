"""Launch recipes: the trainer's command line for a run, and how each launcher starts it.

Everything is built as argv lists; nothing here is pasted into a shell line.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...trainers.common import slowdown
from ...trainers.common.flags import flags_for
from ..config.frameworks import FRAMEWORKS, option_flags
from ..paths import METRICS_NAME, RunPaths
from .envs import EnvStatus, launch_env
from .gpus import local_device
from .launchers import local_prefix
from .plan import Run


def trainer_args(run: Run, run_dir: Path | None = None, device: str = "cpu") -> list[str]:
    """The flags every trainer takes (trainers/common/args.py), for this run on `device`
    (cpu, or cuda on a GPU partition or a machine with NVIDIA GPUs): always explicit, so a
    trainer never picks its device by what its environment happens to import."""
    t = run.training
    # The run's own axes, then every training knob from the one table the trainer's parser
    # and the spec's model are made from (trainers/common/flags.py).
    args = [
        "--model",
        run.model,
        "--dataset",
        run.dataset,
        "--per-device-batch",
        str(run.per_device_batch),
        "--precision",
        run.precision,
        "--loader",
        run.loader,
        "--run-id",
        run.run_id,
        "--device",
        device,
        "--output",
        str(RunPaths(run_dir).metrics if run_dir else METRICS_NAME),
        *flags_for(t),
    ]
    if run.comm_benchmark:  # a communication benchmark run (plan.py), not a training run
        args.append("--comm-benchmark")
    return args + option_flags(run.framework, t.get("options") or {})


def local_command_for(
    framework: str, ranks: int, env: EnvStatus, home: Path, run_dir: Path, args: list[str]
) -> tuple[list[str], dict[str, str]]:
    """argv and extra variables to start `ranks` ranks of a framework's trainer on this
    machine, with the python of the framework's own environment."""
    fw = FRAMEWORKS[framework]
    if env.python is None:
        raise NotImplementedError(f"{framework} has no environment to launch on this machine")
    python = env.python
    extra = launch_env(env, home)
    prefix = local_prefix(fw.launcher, python, ranks)
    return [*prefix, python, "-m", fw.trainer_module, *args], extra


def local_command(
    run: Run, run_dir: Path, env: EnvStatus, home: Path
) -> tuple[list[str], dict[str, str]]:
    """argv and environment to run `run` on this machine: on its NVIDIA GPUs where it shows
    any (planning has checked that there is one per rank and a GPU build to use them)."""
    argv, extra = local_command_for(
        run.framework,
        run.ranks_per_node,
        env,
        home,
        run_dir,
        trainer_args(run, run_dir, local_device()),
    )
    return argv, {**local_env(run), **extra}


def local_env(run: Run) -> dict[str, str]:
    threads = str(run.training["threads_per_rank"])
    # Libraries that size their own thread pools would otherwise take every core per rank.
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}
    # The test-only slowdown is the job's, recorded with it when it is submitted (the local
    # worker passes no value of its own): a check that re-runs a baseline's jobs beside
    # the slowed study's never slows the baseline's too.
    if asked := os.environ.get(slowdown.VARIABLE, "").strip():
        env[slowdown.VARIABLE] = asked
    return env
