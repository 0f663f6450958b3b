"""Per-framework software environments: record them, find them, check them (building them
is engine/launching/envs/builder.py, what they hold engine/launching/envs/recipes.py).

Frameworks' pins conflict (TensorFlow, MXNet's numpy<1.24, Horovod built against one torch),
so each framework's trainer runs in an interpreter of its own. The engine never imports a
framework: it asks an environment's python in a subprocess.

Each framework has a CPU environment and, for NVIDIA GPUs, a CUDA one (`env create --gpu`),
recorded apart. Where a framework's interpreter comes from, first match wins:
- on Slurm, the cluster profile's `[environments.FRAMEWORK]` (a venv, modules, a container);
- an environment built by `dlscale env create FRAMEWORK [--gpu]`, recorded in
  DLSCALE_HOME/envs.json (for a GPU run the CPU one is found too, and refused as such);
- the interpreter dlscale itself runs in, when it has the framework (pytorch-ddp in the
  default set-up).
Planning refuses a framework none of these provides, naming the command that fixes it; for
a GPU run also one whose environment has no CUDA build (or a Horovod without NCCL).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from ....trainers.common.entry import dlscale_version
from ...config.software import Environment
from .. import gpus
from .recipes import EXTRAS, GPU_RECIPES, RECIPES, Recipe, recipe_for
from .registry import create_command, registered, registry_key

# --- the registry ----------------------------------------------------------------------


# --- finding and checking --------------------------------------------------------------


@dataclass
class EnvStatus:
    framework: str
    python: str | None  # the interpreter that runs the trainer; None when there is none
    source: str  # "registered", "dlscale's own", "profile", "missing"
    prefix: str | None = None  # the venv folder, for `source PREFIX/bin/activate` in jobs
    problem: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    extras: tuple[str, ...] = ()  # what `env create --with` added (registered ones only)
    device: str = "cpu"  # what it was built for: cpu, or cuda (`env create --gpu`)
    cuda: str | None = None  # the CUDA its framework was built with; None: a CPU build
    nccl: bool | None = None  # Horovod's NCCL operations built in (None: no Horovod, unknown)

    @property
    def ok(self) -> bool:
        return self.problem is None


# The probe also reports how the framework was built: with which CUDA (None: a CPU build),
# and whether Horovod has NCCL. Importing answers exactly; without importing (planning's
# quick look) CUDA is read from the files the wheels ship, and Horovod's NCCL stays unknown.
_PROBE = r"""
import importlib, importlib.metadata as md, importlib.util, json, os, re, sys
mods, dists = sys.argv[1].split(","), sys.argv[2].split(",")
full = sys.argv[3] == "import"
out = {"python": sys.version.split()[0], "failed": None, "versions": {},
       "facts": {"cuda": None, "nccl": None}}
for m in mods:
    try:
        importlib.import_module(m) if full else None
        if not full and importlib.util.find_spec(m) is None:
            raise ImportError("not installed")
    except BaseException as exc:
        out["failed"] = f"{m}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        break
for d in dists:
    try:
        out["versions"][d] = md.version(d)
    except md.PackageNotFoundError:
        out["versions"][d] = None
def text(mod, *rel):
    spec = importlib.util.find_spec(mod)
    try:
        return open(os.path.join(list(spec.submodule_search_locations)[0], *rel)).read()
    except (AttributeError, TypeError, OSError):
        return ""
facts = out["facts"]
if out["failed"] is None:
    if "torch" in mods:
        if full:
            import torch
            facts["cuda"] = torch.version.cuda
        else:
            m = re.search(r"^cuda\b[^=\n]*=\s*'([^']+)'", text("torch", "version.py"), re.M)
            facts["cuda"] = m[1] if m else None
    if "tensorflow" in mods:
        info = text("tensorflow", "python", "platform", "build_info.py")
        if "'is_cuda_build', True" in info:
            m = re.search(r"'cuda_version', '([^']+)'", info)
            facts["cuda"] = m[1] if m else "unknown"
    if "mxnet" in mods:
        for dist in md.distributions():
            m = re.fullmatch(r"mxnet-cu(\d+)(\d)", (dist.metadata["Name"] or "").lower())
            facts["cuda"] = f"{m[1]}.{m[2]}" if m else facts["cuda"]
        if full and facts["cuda"]:
            import mxnet
            facts["cuda"] = facts["cuda"] if mxnet.runtime.Features().is_enabled("CUDA") else None
    for hvd in ("horovod.torch", "horovod.tensorflow"):
        if hvd in mods and full:
            facts["nccl"] = bool(importlib.import_module(hvd).nccl_built())
print("DLSCALE-PROBE " + json.dumps(out, allow_nan=False))
"""


def probe_facts(
    python: str, recipe: Recipe, full_import: bool, timeout: float = 300
) -> tuple[str | None, dict, dict]:
    """Ask `python` whether the framework's modules are there (find_spec: milliseconds) or
    really import (seconds: TensorFlow and DeepSpeed load a lot). Returns (problem,
    versions, build facts: {"cuda": ..., "nccl": ...})."""
    argv = [
        python,
        "-c",
        _PROBE,
        ",".join(recipe.imports),
        ",".join(recipe.versions),
        "import" if full_import else "find",
    ]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        return f"{python} does not exist", {}, {}
    except subprocess.TimeoutExpired:
        return f"{python} took over {timeout:.0f} s to import {', '.join(recipe.imports)}", {}, {}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DLSCALE-PROBE ")), None)
    if line is None:
        tail = " ".join(proc.stderr.split()[-30:])
        return f"{python} failed to start (exit {proc.returncode}): {tail}", {}, {}
    out = json.loads(line.split(" ", 1)[1])
    return out["failed"], {"python": out["python"], **out["versions"]}, out["facts"]


def probe(
    python: str, recipe: Recipe, full_import: bool, timeout: float = 300
) -> tuple[str | None, dict]:
    """(problem, versions): probe_facts without the build facts."""
    problem, versions, _ = probe_facts(python, recipe, full_import, timeout)
    return problem, versions


def describe_build(facts: dict) -> str:
    """`CUDA 13.0`, `CUDA 12.2, Horovod with NCCL`, `CPU build` for lists and doctor."""
    words = [f"CUDA {facts['cuda']}" if facts.get("cuda") else "CPU build"]
    if facts.get("nccl") is not None:
        words.append("Horovod with NCCL" if facts["nccl"] else "Horovod without NCCL")
    return ", ".join(words)


def own_interpreter_has(recipe: Recipe) -> bool:
    # find_spec locates a module without importing it: the engine stays framework-free.
    try:
        return all(find_spec(m) is not None for m in recipe.imports)
    except ModuleNotFoundError:  # find_spec("horovod.torch") imports "horovod" to look
        return False


def _own_torch_cuda(recipe: Recipe) -> str | None:
    """Which CUDA dlscale's own torch was built with, read from its version.py: in this
    process, without importing torch (planning runs on every keystroke in the TUI)."""
    spec = find_spec("torch") if "torch" in recipe.imports else None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return None
    m = re.search(r"^cuda\b[^=\n]*=\s*'([^']+)'", text, re.M)
    return m[1] if m else None


def _from_entry(
    framework: str, entry: dict, home: Path, check: bool, device: str, profile: str | None
) -> EnvStatus:
    prefix = entry["prefix"]
    built_for = entry.get("device", "cpu")
    extras = tuple(e for e in entry.get("extras", []) if e in EXTRAS)
    facts = entry.get("gpu") or {}
    status = EnvStatus(
        framework,
        str(Path(prefix) / "bin" / "python"),
        "registered",
        prefix,
        extras=extras,
        device=built_for,
        cuda=facts.get("cuda"),
        nccl=facts.get("nccl"),
    )
    if check:
        assert status.python is not None
        problem, status.versions, found = probe_facts(
            status.python, recipe_for(framework, extras, built_for), full_import=False
        )
        if problem:
            status.problem = (
                f"{framework}: its environment {prefix} is broken ({problem}); "
                f"rebuild it with "
                f"`{create_command(framework, home, extras, device, profile)}`"
            )
        elif not facts:  # recorded before builds were: what its files say
            status.cuda = found.get("cuda")
    return status


def resolve(
    framework: str,
    home: Path,
    check: bool = True,
    device: str | None = None,
    profile: str | None = None,
) -> EnvStatus:
    """The environment a framework's trainer runs in for `device` ("cpu" or "cuda"; None:
    what the local backend uses on this machine, cuda where it shows NVIDIA GPUs). `check`
    asks its python whether the modules are there; a missing or broken one comes back with
    `problem` saying how to fix it. For cuda, a CPU environment is returned where no GPU one
    was built: gpu_problem() then says why it cannot run. `profile`: the cluster profile a
    GPU build would load its modules from, named in the fix."""
    device = device or gpus.local_device()
    recipe = (GPU_RECIPES if device == "cuda" else RECIPES).get(framework)
    fix = create_command(framework, home, device=device, profile=profile)
    if recipe is None:
        return EnvStatus(
            framework,
            None,
            "missing",
            problem=(f"{framework}: dlscale has no environment recipe for it yet"),
        )
    entries = registered(home)
    entry = entries.get(registry_key(framework, device)) or entries.get(framework)
    if entry:
        return _from_entry(framework, entry, home, check, device, profile)
    if own_interpreter_has(recipe):
        prefix = sys.prefix if sys.prefix != sys.base_prefix else None
        status = EnvStatus(framework, sys.executable, "dlscale's own", prefix)
        status.cuda = _own_torch_cuda(recipe)
        if status.cuda is None and device == "cuda" and "torch" not in recipe.imports:
            _, _, facts = probe_facts(sys.executable, recipe, full_import=False)
            status.cuda = facts.get("cuda")
        return status
    return EnvStatus(
        framework,
        None,
        "missing",
        problem=(
            f"{framework}: no {'GPU ' if device == 'cuda' else ''}environment with "
            f"{', '.join(recipe.imports)} was found; create one with `{fix}`"
        ),
    )


def gpu_problem(status: EnvStatus, home: Path, why: str, profile: str | None = None) -> str | None:
    """Why an environment that imports cannot run a GPU run (`why`: what makes it one):
    a CPU build of the framework, or Horovod without NCCL operations."""
    fw = status.framework
    fix = create_command(fw, home, status.extras, "cuda", profile)
    where = f"its environment {status.prefix or status.python} ({status.source})"
    if not status.cuda:
        return (
            f"{fw}: {why}, and {where} holds a CPU build of {fw}: it would train on the "
            f"CPU; build a GPU one with `{fix}`"
        )
    if "horovod" in fw and status.nccl is False:
        return (
            f"{fw}: {why}, and {where} has a Horovod built without NCCL: its first "
            f"broadcast of a CUDA tensor would fail; build one with NCCL with `{fix}`"
        )
    return None


def check_frameworks(
    frameworks: list[str], home: Path, profile=None, partition: str | None = None
) -> list[str]:
    """Planning's check: one problem line per framework that cannot run; [] when all can.
    A framework whose environment the cluster profile names (modules, container, venv) is
    taken as the site's word: those only exist on the cluster. Runs on a GPU partition (or,
    without a profile, on a machine with NVIDIA GPUs) need a GPU environment."""
    device, why = gpus.plan_device(profile, partition)
    problems = []
    for fw in dict.fromkeys(frameworks):
        if profile is not None and fw in profile.profile.environments:
            continue
        path = profile.path if profile is not None else None
        status = resolve(fw, home, device=device, profile=path)
        problem = (
            status.problem
            if not status.ok
            else (gpu_problem(status, home, why, path) if device == "cuda" else None)
        )
        if problem:
            problems.append(problem)
    return problems


def check_loaders(
    needs: dict[str, set[str]], home: Path, profile=None, partition: str | None = None
) -> list[str]:
    """Planning's check of loaders that need more than the framework (`needs`: framework ->
    loaders its runs use): one problem line per framework whose environment lacks one, with
    the command that builds an environment that has it. Frameworks without any working
    environment are check_frameworks' to report; a profile's environment is the site's word."""
    device, _ = gpus.plan_device(profile, partition)
    problems = []
    for fw, loaders in needs.items():
        wanted = sorted(set(loaders) & set(EXTRAS))
        if not wanted or (profile is not None and fw in profile.profile.environments):
            continue
        status = resolve(fw, home, check=False, device=device)
        if status.python is None:
            continue
        for loader in wanted:
            extra = EXTRAS[loader]
            problem, _ = probe(status.python, extra.probe_recipe, full_import=False)
            if problem:
                where = status.prefix or status.python
                fix = create_command(
                    fw,
                    home,
                    (*status.extras, loader),
                    device,
                    profile.path if profile is not None else None,
                )
                problems.append(
                    f"{fw}: loader {loader} needs {', '.join(extra.imports)} in {fw}'s "
                    f"environment, and {where} ({status.source}) lacks it; build one with "
                    f"`{fix}`"
                )
    return problems


def trainer_path(home: Path) -> str:
    """A folder to put on PYTHONPATH so a framework's own environment finds
    `dlscale.trainers` (and nothing else of dlscale) from this installation.

    Environments hold only their framework; the trainers come from the dlscale that runs the
    study, so one cached environment serves every checkout and a change to a trainer needs
    no rebuild."""
    spec = find_spec("dlscale.trainers")
    assert spec is not None and spec.submodule_search_locations
    source = Path(list(spec.submodule_search_locations)[0]).resolve()
    root = Path(home) / "pythonpath"
    link = root / "dlscale" / "trainers"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and Path(os.readlink(link)) == source):
        tmp = link.with_name(f".trainers-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(source, target_is_directory=True)
        tmp.replace(link)  # atomic: a job starting now sees the old link or the new one
    return str(root)


def launch_env(status: EnvStatus, home: Path) -> dict[str, str]:
    """Variables a trainer needs in a framework's own environment."""
    if status.source == "dlscale's own":
        return {}  # dlscale is installed there: its trainers import as they are
    return {"PYTHONPATH": trainer_path(home), "DLSCALE_VERSION": dlscale_version()}


def slurm_environment(framework: str, profile, home: Path, device: str = "cpu"):
    """How a job activates a framework: the profile's own `[environments.FRAMEWORK]`, else
    the environment `dlscale env create` recorded for `device` (its venv, on a file system
    the nodes share), else the profile's python when dlscale's own interpreter has the
    framework. Returns (Environment, extra variables for the job)."""
    given = profile.environments.get(framework)
    if given is not None:
        return given, {}
    status = resolve(framework, home, check=False, device=device)
    if status.source == "registered":
        return Environment(venv=status.prefix), launch_env(status, home)
    return Environment(), {}
