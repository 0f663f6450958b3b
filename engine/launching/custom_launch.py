"""A declared framework's command for a run (engine/config/custom.py): its placeholders
filled, element by element, and how each launcher starts it here or in a Slurm job.

Each argv element is filled with str.format_map over a mapping that refuses any name it
lacks, so no user text ever meets a shell or becomes a placeholder of its own (a value
holding "{x}" stays that text).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from ...trainers.common.entry import dlscale_version
from ..config.custom import fields_in, script_path
from ..config.tomlfile import line_of
from ..errors import PlanError
from ..paths import RunPaths
from .launchers import local_prefix
from .plan import Run

# The variables every declared framework's ranks get: the run's facts as JSON (what the
# records' params record holds) and where its records go (trainers/report.py reads both).
RUN_VAR = "DLSCALE_RUN"
METRICS_VAR = "DLSCALE_METRICS"


def is_declared(run: Run) -> bool:
    return isinstance(run.training.get("custom"), dict)


class _Strict(dict):
    def __missing__(self, key: str) -> Any:
        raise PlanError(f"placeholder {{{key}}} has no value for this run")


def precision_on(precision: str, device: str) -> str:
    """`auto` as the built-in trainers take it: bf16 on a GPU, fp32 on a CPU."""
    if precision != "auto":
        return precision
    return "bf16" if device == "cuda" else "fp32"


def values(run: Run, run_dir: Path, device: str, python: str, folder: str | None) -> dict[str, Any]:
    """What each placeholder stands for in this run."""
    t, decl = run.training, run.training["custom"]
    out: dict[str, Any] = {
        "nodes": run.nodes,
        "ranks_per_node": run.ranks_per_node,
        "devices": run.devices,
        "per_device_batch": run.per_device_batch,
        "global_batch": run.global_batch,
        "precision": precision_on(run.precision, device),
        "model": run.model,
        "dataset": run.dataset,
        "warmup_steps": t.get("warmup_steps"),
        "lr": t.get("lr"),
        "seed": t.get("seed"),
        "threads": t.get("threads_per_rank"),
        "repetition": run.repetition,
        "run_id": run.run_id,
        "run_dir": str(run_dir),
        "metrics": str(RunPaths(run_dir).metrics),
        "device": device,
        "python": python,
        **(t.get("axes") or {}),
    }
    for name in ("steps", "epochs"):  # the one the spec gives; the other has no value
        if t.get(name) is not None:
            out[name] = t[name]
    if decl.get("script"):
        out["script"] = str(script_path(decl["script"], folder))
    return out


def fill(texts: list[str], mapping: dict[str, Any]) -> list[str]:
    strict = _Strict(mapping)
    return [text.format_map(strict) for text in texts]


def rank_command(
    run: Run, run_dir: Path, device: str, python: str, folder: str | None
) -> list[str]:
    """One rank's argv (what srun or mpirun start once per device, torchrun once per rank)."""
    return fill(run.training["custom"]["command"], values(run, run_dir, device, python, folder))


def software_python(run: Run, folder: str | None, default: str) -> str:
    """{python}: the declared venv's, a container's own python3, else `default`."""
    sw = run.training["custom"].get("software") or {}
    if sw.get("venv"):
        return str(script_path(sw["venv"], folder) / "bin" / "python")
    if sw.get("container"):
        return "python3"
    return default


def container_words(sw: dict[str, Any]) -> list[str]:
    c = sw.get("container")
    if not c:
        return []
    return (
        [c["runtime"], "exec"]
        + (["--nv"] if c.get("nv") else [])
        + sum((["-B", b] for b in c.get("binds", [])), [])
        + [c["image"]]
    )


def job_env(run: Run, run_dir: Path, device: str) -> dict[str, str]:
    """The variables of a declared framework's job: the run's facts and its records' path."""
    facts = {
        "run_id": run.run_id,
        "framework": run.framework,
        "model": run.model,
        "dataset": run.dataset,
        "per_device_batch": run.per_device_batch,
        "global_batch": run.global_batch,
        "world_size": run.devices,
        "precision": precision_on(run.precision, device),
        "steps": run.training.get("steps"),
        "epochs": run.training.get("epochs"),
        "warmup_steps": run.training.get("warmup_steps"),
        "unit": run.training["custom"].get("unit"),
        "axes": run.training.get("axes") or {},
        "dlscale_version": dlscale_version(),
    }
    return {
        RUN_VAR: json.dumps(facts, sort_keys=True, allow_nan=False),
        METRICS_VAR: str(RunPaths(run_dir).metrics),
        "PYTHONUNBUFFERED": "1",
    }


METER_MODULE = "dlscale.trainers.common.metered"


def interpreter(run: Run, folder: str | None, default: str) -> list[str] | None:
    """The Python a declared framework's command runs in, as words (a container's before its
    python3): what its software is asked of. None where the command names no {python}."""
    decl = run.training["custom"]
    if not any("python" in fields_in(text) for text in decl["command"]):
        return None
    words = container_words(decl.get("software") or {})
    return [*words, software_python(run, folder, default)]


def metered(
    python: str,
    run: Run,
    run_dir: Path,
    device: str,
    per_task: bool,
    asked: list[str] | None = None,
) -> list[str]:
    """The words that run a declared framework's command under dlscale's energy meter
    (trainers/common/metered.py): the GPUs of a node's task (`per_task`: one task a device,
    one GPU each; else the node's ranks' GPUs), or the node's CPU packages; and, after it,
    the versions `asked` (the command's interpreter) holds."""
    paths = RunPaths(run_dir)
    words = [python, "-m", METER_MODULE, "--out", str(paths.energy), "--log", str(paths.log)]
    if device == "cuda":
        words += ["--task-gpu"] if per_task else ["--devices", str(run.ranks_per_node)]
    if asked:
        words += [
            "--software",
            str(paths.software),
            "--interpreter",
            json.dumps(asked, allow_nan=False),
        ]
    return [*words, "--"]


def local_command(
    run: Run, run_dir: Path, folder: str | None, device: str, pythonpath: str
) -> tuple[list[str], dict[str, str]]:
    """argv and variables to start a declared framework's ranks on this machine."""
    decl = run.training["custom"]
    sw = decl.get("software") or {}
    python = software_python(run, folder, sys.executable)
    argv = container_words(sw) + rank_command(run, run_dir, device, python, folder)
    launcher = decl["launcher"]
    # torchrun from the script's own python where it has one (a venv), else dlscale's; the
    # trainers' spawner (srun's stand-in) is dlscale's
    launcher_python = python if launcher == "torchrun" and sw.get("venv") else sys.executable
    argv = [*local_prefix(launcher, launcher_python, run.ranks_per_node), *argv]
    asked = interpreter(run, folder, sys.executable)
    argv = metered(sys.executable, run, run_dir, device, per_task=False, asked=asked) + argv
    return argv, {**job_env(run, run_dir, device), "PYTHONPATH": pythonpath}


def local_problems(loaded: Any, runs: list[Run]) -> list[str]:
    """What this machine cannot start of the spec's declared frameworks."""
    problems = []
    folder = str(Path(loaded.path).absolute().parent)
    for name, decl in loaded.spec.frameworks.items():
        if not any(r.framework == name for r in runs):
            continue
        sw = decl.software

        def at(*field: str, name: str = name) -> str:
            line = line_of(loaded.text, ("frameworks", name, *field))
            where = f"{loaded.path}:{line}" if line else loaded.path
            return f"{where}: frameworks.{name}.{'.'.join(field)}"

        if sw.modules:
            problems.append(
                f"{at('software', 'modules')}: modules are loaded in Slurm jobs only; on "
                "this machine give a venv or run it with --backend slurm"
            )
        if sw.venv and not (script_path(sw.venv, folder) / "bin" / "python").exists():
            problems.append(f"{at('software', 'venv')}: {sw.venv} has no bin/python here")
        if sw.container and shutil.which(sw.container.runtime) is None:
            problems.append(
                f"{at('software', 'container')}: {sw.container.runtime} is not on PATH here"
            )
        if decl.launcher == "mpirun" and shutil.which("mpirun") is None:
            problems.append(f"{at('launcher')}: mpirun is not on PATH here")
    return problems
