"""Per-framework software environments: build them, record them, find them, check them.

Frameworks' pins conflict (TensorFlow, MXNet's numpy<1.24, Horovod built against one torch),
so each framework's trainer runs in an interpreter of its own. The engine never imports a
framework: it asks an environment's python in a subprocess.

Where a framework's interpreter comes from, first match wins:
- on Slurm, the cluster profile's `[environments.FRAMEWORK]` (a venv, modules, a container);
- an environment built by `dlscale env create FRAMEWORK`, recorded in DLSCALE_HOME/envs.json;
- the interpreter dlscale itself runs in, when it has the framework (pytorch-ddp in the
  default set-up).
Planning refuses a framework none of these provides, naming the command that fixes it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path

from ...trainers.common.entry import dlscale_version
from ..config.frameworks import FRAMEWORKS, taking
from ..errors import DlscaleError, UserError

REGISTRY = "envs.json"
TORCH = "torch==2.13.0"  # the CPU wheel on this site's disk; other pins pull multi-GB CUDA builds


@dataclass(frozen=True)
class Step:
    """One `pip install` into the environment."""

    packages: tuple[str, ...]
    pip_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


# The compiler of a WheelBuild with cxx_std. Last flag wins: our standard comes after the one
# the build system appends. -g0 drops the debug info of Horovod's RelWithDebInfo build: the
# cached wheel is never debugged, and on 2 cores debug info costs build time (see README).
CXX_WRAPPER = '#!/bin/sh\nexec g++ "$@" -std={std} -g0\n'


@dataclass(frozen=True)
class WheelBuild:
    """A package with no wheel for this framework, compiled once into a wheel kept in the
    cache under `key` (its version and the framework it was built against) and the digest of
    how it is built, and installed from there."""

    requirement: str
    key: str
    env: tuple[tuple[str, str], ...] = ()
    # CMake projects that append their own -std= last (Horovod 0.28 appends c++14, which
    # torch 2.13's headers refuse) get a compiler that puts this standard after it.
    cxx_std: str | None = None

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.requirement,)

    @property
    def digest(self) -> str:
        """Changes with anything that changes the compiled wheel: its variables, the compiler
        wrapper. A changed build then compiles anew instead of reusing a stale wheel."""
        text = repr(self) + (CXX_WRAPPER if self.cxx_std else "")
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    @property
    def folder(self) -> str:
        return f"{self.key}-{self.digest}"


@dataclass(frozen=True)
class Recipe:
    """A known-good, pinned set for one framework, and how to tell that it works."""

    framework: str
    steps: tuple[Step | WheelBuild, ...]
    imports: tuple[str, ...]        # modules that must import for the trainer to run
    versions: tuple[str, ...]       # distributions whose versions `doctor` shows
    # Python run in the new environment once installed, to build what would otherwise be
    # built by the first run (and counted in its time): DeepSpeed's CPU shared-memory op.
    warm: str = ""
    extras: tuple[str, ...] = ()    # opt-in additions (EXTRAS) this recipe was made with

    @property
    def digest(self) -> str:
        """Changes whenever a pin or a step changes, so a cached environment is rebuilt."""
        text = json.dumps([[s.packages, s.pip_args, s.env] if isinstance(s, Step) else s.digest
                           for s in self.steps] + [self.warm])
        return hashlib.sha256(text.encode()).hexdigest()[:10]


_DATA = ("numpy", "scikit-learn>=1.3")  # scikit-learn: the bundled digits dataset
# The PyTorch family's ImageNet reader decodes JPEGs with Pillow (torchvision is not used:
# its wheel pulls a CUDA torch). Not in _DATA: TensorFlow and MXNet read no JPEGs.
_IMAGES = ("pillow>=9.1",)
RECIPES: dict[str, Recipe] = {r.framework: r for r in (
    Recipe("pytorch-ddp", (Step((TORCH, *_DATA, *_IMAGES)),), ("torch",), ("torch", "numpy")),
    # DS_BUILD_OPS=0: no CUDA extension is compiled at install time (none is needed on CPU,
    # and on GPU DeepSpeed builds the few it uses just in time).
    Recipe("deepspeed", (Step((TORCH, "deepspeed==0.19.8", *_DATA, *_IMAGES),
                              env=(("DS_BUILD_OPS", "0"),)),),
           ("torch", "deepspeed"), ("deepspeed", "torch", "numpy"),
           # The trainer looks for built ops in sys.prefix/torch_extensions (see its init).
           warm="import os, sys; os.environ['DS_ACCELERATOR'] = 'cpu'; "
                "os.environ['TORCH_EXTENSIONS_DIR'] = os.path.join(sys.prefix, "
                "'torch_extensions'); from deepspeed.accelerator import get_accelerator; "
                "get_accelerator().create_op_builder('ShareMemCommBuilder').load()"),
    # Horovod has no wheels on PyPI: built from source against the torch beside it, with
    # gloo (no MPI needed: under Slurm the trainer runs the rendezvous itself).
    Recipe("horovod-pytorch", (
        Step((TORCH, *_DATA, *_IMAGES, "cloudpickle", "psutil", "pyyaml", "packaging",
              "setuptools<80", "wheel")),
        WheelBuild("horovod==0.28.1", "horovod-0.28.1-torch2.13.0", (
            ("HOROVOD_WITH_PYTORCH", "1"), ("HOROVOD_WITH_GLOO", "1"),
            ("HOROVOD_WITHOUT_MPI", "1"), ("HOROVOD_WITHOUT_TENSORFLOW", "1"),
            ("HOROVOD_WITHOUT_MXNET", "1"), ("MAKEFLAGS", "-j2")), cxx_std="c++17")),
        ("torch", "horovod.torch"), ("horovod", "torch", "numpy")),
    # Horovod 0.28.1 does not build against TensorFlow >= 2.16 (horovod#4290; the fix,
    # horovod#4302, is unmerged), so TensorFlow 2.15.1, the last it builds against: its
    # tf.keras is still Keras 2 (no tf_keras needed), and it needs numpy < 2.
    Recipe("horovod-tensorflow", (
        Step(("tensorflow-cpu==2.15.1", "numpy<2", *_DATA[1:], "cloudpickle", "psutil",
              "pyyaml", "packaging", "setuptools<80", "wheel")),
        WheelBuild("horovod==0.28.1", "horovod-0.28.1-tf2.15.1", (
            ("HOROVOD_WITH_TENSORFLOW", "1"), ("HOROVOD_WITH_GLOO", "1"),
            ("HOROVOD_WITHOUT_MPI", "1"), ("HOROVOD_WITHOUT_PYTORCH", "1"),
            ("HOROVOD_WITHOUT_MXNET", "1"), ("MAKEFLAGS", "-j2")), cxx_std="c++17")),
        ("tensorflow", "horovod.tensorflow"), ("horovod", "tensorflow-cpu", "numpy")),
    # tf_keras beside TensorFlow without its dependencies (they are TensorFlow's own): Keras
    # 3's model code fails under MultiWorkerMirroredStrategy (keras#20585).
    Recipe("tensorflow", (Step(("tensorflow-cpu==2.21.0", *_DATA)),
                          Step(("tf_keras==2.21.0",), ("--no-deps",))),
           ("tensorflow", "tf_keras"), ("tensorflow-cpu", "tf_keras", "numpy")),
    # MXNet 1.9.1's wheel is py3-none (a ctypes library), so it installs on Python 3.11; it
    # needs numpy<1.24 (np.bool and friends), and a scikit-learn that still takes that numpy.
    Recipe("mxnet", (Step(("mxnet==1.9.1", "numpy==1.23.5", "scikit-learn==1.5.2")),),
           ("mxnet",), ("mxnet", "numpy")),
)}


@dataclass(frozen=True)
class Extra:
    """An opt-in addition to a framework's environment, named after the loader it brings:
    too big for every environment (DALI's wheels are about 260 MB to download, 700 MB
    installed), so built only where asked (`dlscale env create FRAMEWORK --with NAME`)."""

    name: str
    step: Step
    imports: tuple[str, ...]
    versions: tuple[str, ...]

    def frameworks(self) -> list[str]:
        """The frameworks whose trainers use it."""
        return taking("loaders", self.name)

    @property
    def probe_recipe(self) -> Recipe:
        return Recipe(self.name, (), self.imports, self.versions)


# nvidia-dali-cuda130 runs CPU-only pipelines on machines without CUDA too; its wheel brings
# nvJPEG, nvImageCodec and nvCOMP wheels (used on GPUs only) but no CUDA runtime or torch.
EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("dali", Step(("nvidia-dali-cuda130==2.4.0",)), ("nvidia.dali",),
          ("nvidia-dali-cuda130",)),
)}


def recipe_for(framework: str, extras: tuple[str, ...] | list[str] = ()) -> Recipe:
    """The framework's recipe with the extras' steps after its own (so its digest, and the
    cache folder keyed by it, differ from the plain recipe's)."""
    base = RECIPES[framework]
    extras = tuple(sorted(set(extras)))
    for name in extras:
        if name not in EXTRAS:
            raise UserError(f"--with {name}: unknown; allowed: {', '.join(EXTRAS)}")
        if framework not in EXTRAS[name].frameworks():
            raise UserError(f"--with {name}: only for {', '.join(EXTRAS[name].frameworks())} "
                            f"(the trainers that use it), not {framework}")
    if not extras:
        return base
    added = [EXTRAS[n] for n in extras]
    return replace(base, steps=base.steps + tuple(e.step for e in added),
                   imports=base.imports + sum((e.imports for e in added), ()),
                   versions=base.versions + sum((e.versions for e in added), ()), extras=extras)


def _dlscale_command(home: Path, *words: str) -> str:
    """The exact command line for the user, naming --home only where it is not implied."""
    implied = Path(os.environ.get("DLSCALE_HOME") or Path.home() / ".dlscale")
    head = ["dlscale"] + ([] if Path(home) == implied else ["--home", str(home)])
    return " ".join(shlex.quote(w) for w in head + list(words))


def create_command(framework: str, home: Path, extras: tuple[str, ...] = ()) -> str:
    return _dlscale_command(home, "env", "create", framework,
                            *[w for e in sorted(extras) for w in ("--with", e)])


# --- the registry ----------------------------------------------------------------------

def _registry_path(home: Path) -> Path:
    return Path(home) / REGISTRY


def registered(home: Path) -> dict[str, dict]:
    path = _registry_path(home)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise DlscaleError(f"{path}: unreadable environment registry ({exc}); remove it and "
                           "run `dlscale env create` again") from None
    return data if isinstance(data, dict) else {}


def _register(home: Path, framework: str, entry: dict) -> None:
    path = _registry_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = registered(home)
    data[framework] = entry
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a planner reading it never sees half a file


# --- finding and checking --------------------------------------------------------------

@dataclass
class EnvStatus:
    framework: str
    python: str | None        # the interpreter that runs the trainer; None when there is none
    source: str               # "registered", "dlscale's own", "profile", "missing"
    prefix: str | None = None  # the venv folder, for `source PREFIX/bin/activate` in jobs
    problem: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    extras: tuple[str, ...] = ()  # what `env create --with` added (registered ones only)

    @property
    def ok(self) -> bool:
        return self.problem is None


_PROBE = r"""
import importlib, importlib.metadata as md, json, sys
mods, dists = sys.argv[1].split(","), sys.argv[2].split(",")
out = {"python": sys.version.split()[0], "failed": None, "versions": {}}
for m in mods:
    try:
        importlib.import_module(m) if sys.argv[3] == "import" else None
        if sys.argv[3] != "import" and importlib.util.find_spec(m) is None:
            raise ImportError("not installed")
    except BaseException as exc:
        out["failed"] = f"{m}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        break
for d in dists:
    try:
        out["versions"][d] = md.version(d)
    except md.PackageNotFoundError:
        out["versions"][d] = None
print("DLSCALE-PROBE " + json.dumps(out))
"""


def probe(python: str, recipe: Recipe, full_import: bool, timeout: float = 300) -> tuple[str | None, dict]:
    """Ask `python` whether the framework's modules are there (find_spec: milliseconds) or
    really import (seconds: TensorFlow and DeepSpeed load a lot). Returns (problem, versions)."""
    argv = [python, "-c", "import importlib.util\n" + _PROBE, ",".join(recipe.imports),
            ",".join(recipe.versions), "import" if full_import else "find"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return f"{python} does not exist", {}
    except subprocess.TimeoutExpired:
        return f"{python} took over {timeout:.0f} s to import {', '.join(recipe.imports)}", {}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DLSCALE-PROBE ")), None)
    if line is None:
        tail = " ".join(proc.stderr.split()[-30:])
        return f"{python} failed to start (exit {proc.returncode}): {tail}", {}
    out = json.loads(line.split(" ", 1)[1])
    versions = {"python": out["python"], **out["versions"]}
    return out["failed"], versions


def own_interpreter_has(recipe: Recipe) -> bool:
    # find_spec locates a module without importing it: the engine stays framework-free.
    try:
        return all(find_spec(m) is not None for m in recipe.imports)
    except ModuleNotFoundError:  # find_spec("horovod.torch") imports "horovod" to look
        return False


def resolve(framework: str, home: Path, check: bool = True) -> EnvStatus:
    """The environment a framework's trainer runs in on this machine (local backend, and
    Slurm when the profile names none). `check` asks its python whether the modules are
    there; a missing or broken one comes back with `problem` saying how to fix it."""
    recipe = RECIPES.get(framework)
    fix = create_command(framework, home)
    if recipe is None:
        return EnvStatus(framework, None, "missing", problem=(
            f"{framework}: dlscale has no environment recipe for it yet"))
    entry = registered(home).get(framework)
    if entry:
        prefix = entry["prefix"]
        python = str(Path(prefix) / "bin" / "python")
        extras = tuple(e for e in entry.get("extras", []) if e in EXTRAS)
        status = EnvStatus(framework, python, "registered", prefix, extras=extras)
        if check:
            problem, status.versions = probe(python, recipe_for(framework, extras),
                                             full_import=False)
            if problem:
                status.problem = (f"{framework}: its environment {prefix} is broken ({problem}); "
                                  f"rebuild it with `{create_command(framework, home, extras)}`")
        return status
    if own_interpreter_has(recipe):
        prefix = sys.prefix if sys.prefix != sys.base_prefix else None
        return EnvStatus(framework, sys.executable, "dlscale's own", prefix)
    return EnvStatus(framework, None, "missing", problem=(
        f"{framework}: no environment with {', '.join(recipe.imports)} was found; "
        f"create one with `{fix}`"))


def check_frameworks(frameworks: list[str], home: Path, profile=None) -> list[str]:
    """Planning's check: one problem line per framework that cannot run; [] when all can.
    A framework whose environment the cluster profile names (modules, container, venv) is
    taken as the site's word: those only exist on the cluster."""
    problems = []
    for fw in dict.fromkeys(frameworks):
        if FRAMEWORKS[fw].trainer_module is None:
            problems.append(f"{fw}: {FRAMEWORKS[fw].note}")
            continue
        if profile is not None and fw in profile.profile.environments:
            continue
        status = resolve(fw, home)
        if not status.ok:
            problems.append(status.problem or fw)
    return problems


def check_loaders(needs: dict[str, set[str]], home: Path, profile=None) -> list[str]:
    """Planning's check of loaders that need more than the framework (`needs`: framework ->
    loaders its runs use): one problem line per framework whose environment lacks one, with
    the command that builds an environment that has it. Frameworks without any working
    environment are check_frameworks' to report; a profile's environment is the site's word."""
    problems = []
    for fw, loaders in needs.items():
        wanted = sorted(set(loaders) & set(EXTRAS))
        if not wanted or (profile is not None and fw in profile.profile.environments):
            continue
        status = resolve(fw, home, check=False)
        if status.python is None:
            continue
        for loader in wanted:
            extra = EXTRAS[loader]
            problem, _ = probe(status.python, extra.probe_recipe, full_import=False)
            if problem:
                where = status.prefix or status.python
                problems.append(
                    f"{fw}: loader {loader} needs {', '.join(extra.imports)} in {fw}'s "
                    f"environment, and {where} ({status.source}) lacks it; build one with "
                    f"`{create_command(fw, home, (*status.extras, loader))}`")
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


# --- building --------------------------------------------------------------------------

class EnvBuildError(DlscaleError):
    """An environment could not be built; the message holds the key lines of the failure."""


_KEY_LINE = re.compile(r"(error|Error|ERROR|fatal|No matching distribution|conflict|"
                       r"requires|Could not)", re.ASCII)


def key_lines(text: str, most: int = 12) -> list[str]:
    """The lines of a failed build's output that say what went wrong: compiler errors,
    pip's resolution errors, last-resort the tail; never the whole wall."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    picked = [ln for ln in lines if _KEY_LINE.search(ln) and "warning" not in ln.lower()]
    seen: list[str] = []
    for ln in picked or lines[-most:]:
        if ln not in seen:
            seen.append(ln[:400])
    return seen[:most]


def _run(argv: list[str], env: dict[str, str], log, what: str) -> None:
    log.write(f"$ {' '.join(shlex.quote(a) for a in argv)}\n")
    log.flush()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, stdin=subprocess.DEVNULL)
    log.write(proc.stdout)
    log.flush()
    if proc.returncode != 0:
        raise EnvBuildError(f"{what} failed (exit {proc.returncode}); the key lines:\n  "
                            + "\n  ".join(key_lines(proc.stdout))
                            + f"\nthe whole output: {log.name}")


def cache_dir(home: Path) -> Path:
    return Path(os.environ.get("DLSCALE_ENV_CACHE") or home)


@contextmanager
def _exclusive(path: Path, what: str, say):
    """Hold an exclusive lock on `path` (a file beside what it guards), waiting for whoever
    holds it: two `env create` of one environment (CI building them in the background while
    a test asks for one, two users of a shared cache) must not build into the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another build of {what} to finish")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing, even if the process is killed


def _built_wheel(build: WheelBuild, env_python: Path, home: Path, log, say) -> Path:
    """The cached wheel for `build`, compiled first if the cache has none (minutes)."""
    folder = cache_dir(home) / "wheels" / build.folder
    with _exclusive(folder.with_name(build.folder + ".lock"), build.requirement, say):
        return _cached_or_built_wheel(build, folder, env_python, log, say)


def _cached_or_built_wheel(build: WheelBuild, folder: Path, env_python: Path, log,
                           say) -> Path:
    found = sorted(folder.glob("*.whl"))
    if found:
        say(f"using the cached wheel {found[-1]}")
        return found[-1]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{build.folder}-", dir=folder.parent) as tmp:
        env = {**os.environ, **dict(build.env)}
        if build.cxx_std:
            cxx = Path(tmp) / "cxx"
            cxx.write_text(CXX_WRAPPER.format(std=build.cxx_std))
            cxx.chmod(0o755)
            env["CXX"] = str(cxx)
        say(f"building {build.requirement} into {folder} (once per machine; minutes)")
        started = time.time()
        # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone, so it would hand
        # back Horovod as built for another framework (seen: a torch-only build for TF).
        _run([str(env_python), "-m", "pip", "wheel", "--disable-pip-version-check", "--no-input",
              "--no-cache-dir", "--no-deps", "--no-build-isolation", "--no-binary", ":all:", "-w",
              str(Path(tmp) / "out"), build.requirement], env, log,
             f"building {build.requirement}")
        wheels = sorted((Path(tmp) / "out").glob("*.whl"))
        if not wheels:
            raise EnvBuildError(f"building {build.requirement} made no wheel; see {log.name}")
        tmp_folder = Path(tmp) / "done"
        tmp_folder.mkdir()
        shutil.copy2(wheels[-1], tmp_folder / wheels[-1].name)
        # Appears whole or not at all, so a build that was killed is never taken as done.
        tmp_folder.replace(folder)
        say(f"built {wheels[-1].name} in {time.time() - started:.0f} s")
    return folder / wheels[-1].name


def default_prefix(recipe: Recipe, home: Path) -> Path:
    """DLSCALE_ENV_CACHE/envs/FRAMEWORK[+EXTRA]-RECIPE where a machine-wide cache is named
    (CI, a shared login node), else DLSCALE_HOME/envs/...: keyed by the recipe's digest, so
    a changed pin builds anew and an unchanged one is found again."""
    name = recipe.framework + "".join(f"+{e}" for e in recipe.extras)
    return cache_dir(home) / "envs" / f"{name}-{recipe.digest}"


STAMP = "dlscale-env.json"


def create(framework: str, home: Path, prefix: Path | None = None,
           python: str | None = None, say=print, extras: tuple[str, ...] = ()) -> EnvStatus:
    """Build the framework's pinned environment at `prefix` (default DLSCALE_HOME/envs/...),
    check that it imports, and record it so planning finds it. An environment already built
    from the same recipe is checked and recorded again, not rebuilt."""
    if framework not in FRAMEWORKS:
        raise UserError(f"unknown framework {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    if framework not in RECIPES:
        have = ", ".join(RECIPES)
        raise UserError(f"{framework}: no environment recipe yet (dlscale can build: {have})")
    recipe = recipe_for(framework, extras)
    prefix = Path(prefix).expanduser().resolve() if prefix else default_prefix(recipe, home)
    with _exclusive(prefix.with_name(prefix.name + ".lock"), str(prefix), say):
        return _create(framework, recipe, prefix, home, python or sys.executable, say)


def _create(framework: str, recipe: Recipe, prefix: Path, home: Path, python: str,
            say) -> EnvStatus:
    stamp = prefix / STAMP
    env_python = prefix / "bin" / "python"
    built = False
    try:
        same = json.loads(stamp.read_text()).get("recipe") == recipe.digest
    except (OSError, json.JSONDecodeError):
        same = False
    if same and not probe(str(env_python), recipe, full_import=False)[0]:
        say(f"{framework}: {prefix} already holds recipe {recipe.digest}; checking it")
    else:
        if prefix.exists() and any(prefix.iterdir()) and not (prefix / "pyvenv.cfg").exists():
            raise UserError(f"--prefix {prefix} exists and is not a virtual environment; "
                            "name an empty or new folder")
        prefix.mkdir(parents=True, exist_ok=True)
        # Beside the folder, not in it: `venv --clear` empties the folder.
        log_path = prefix.with_name(prefix.name + ".build.log")
        started = time.time()
        with open(log_path, "w") as log:
            say(f"{framework}: building {prefix} (log: {log_path})")
            stamp.unlink(missing_ok=True)  # half-built until the stamp is back
            _run([python, "-m", "venv", "--clear", str(prefix)], dict(os.environ), log,
                 f"creating the venv {prefix}")
            for step in recipe.steps:
                if isinstance(step, WheelBuild):
                    wheel = _built_wheel(step, env_python, home, log, say)
                    _run([str(env_python), "-m", "pip", "install", "--disable-pip-version-check",
                          "--no-input", "--no-deps", str(wheel)], dict(os.environ), log,
                         f"installing {wheel.name}")
                    continue
                env = {**os.environ, **dict(step.env)}
                say(f"{framework}: pip install {' '.join(step.packages)}")
                _run([str(env_python), "-m", "pip", "install", "--disable-pip-version-check",
                      "--no-input", *step.pip_args, *step.packages], env, log,
                     f"installing {' '.join(step.packages)}")
            if recipe.warm:
                say(f"{framework}: building its CPU ops once, ahead of the first run")
                _run([str(env_python), "-c", recipe.warm], dict(os.environ), log,
                     "building the framework's ops")
        built = True
        stamp.write_text(json.dumps({"framework": framework, "recipe": recipe.digest,
                                     "created": time.time(),
                                     "build_s": round(time.time() - started, 1)}) + "\n")
    problem, versions = probe(str(env_python), recipe, full_import=True)
    if problem:
        stamp.unlink(missing_ok=True)  # so the next `env create` builds it again
        raise EnvBuildError(f"{framework}: {prefix} was {'built' if built else 'found'} but "
                            f"does not import: {problem}")
    before = registered(home).get(framework) or {}
    dropped = sorted(set(before.get("extras", [])) - set(recipe.extras))
    if dropped:
        say(f"{framework}: replaces {before.get('prefix')}, which had {', '.join(dropped)}; "
            f"runs with loader {', '.join(dropped)} need "
            f"`{create_command(framework, home, tuple(before.get('extras', [])))}` again")
    _register(home, framework, {"prefix": str(prefix), "recipe": recipe.digest,
                                "versions": versions, "registered": time.time(),
                                "extras": list(recipe.extras)})
    say(f"{framework}: ready: {prefix} ("
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ")")
    return EnvStatus(framework, str(env_python), "registered", str(prefix), None, versions,
                     recipe.extras)


def remove(framework: str, home: Path) -> str | None:
    """Forget a framework's environment (the folder stays: it may be a shared cache)."""
    data = registered(home)
    entry = data.pop(framework, None)
    if entry is None:
        return None
    tmp = _registry_path(home).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(_registry_path(home))
    return entry["prefix"]


def smoke(framework: str, home: Path, status: EnvStatus, ranks: int = 2,
          timeout: float = 300) -> tuple[bool, str]:
    """Train two ranks for a few steps with the framework's own launcher; (ok, one line)."""
    from .launch import local_command_for
    assert status.python is not None
    with tempfile.TemporaryDirectory(prefix="dlscale-smoke-") as tmp:
        argv, extra = local_command_for(framework, ranks, status, home, Path(tmp), [
            "--model", "resnet20", "--dataset", "synthetic-cifar", "--per-device-batch", "8",
            "--steps", "3", "--warmup-steps", "1", "--log-every", "1",
            "--output", str(Path(tmp) / "metrics.jsonl")])
        env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
        try:
            proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return False, f"{ranks}-rank smoke run took over {timeout:.0f} s"
        summary = None
        metrics = Path(tmp) / "metrics.jsonl"
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("kind") == "summary":
                    summary = rec
        if proc.returncode != 0 or summary is None:
            lines = key_lines(proc.stderr + proc.stdout, most=3)
            return False, f"{ranks}-rank smoke run failed (exit {proc.returncode}): " + " | ".join(lines)
        digests = summary.get("weights_digest_per_rank") or []
        same = len(set(digests)) == 1 and len(digests) == ranks
        return same, (f"{ranks} ranks: {summary['throughput']:.0f} images/s, weights "
                      + ("identical on every rank" if same else f"DIFFER across ranks {digests}"))


def slurm_environment(framework: str, profile, home: Path):
    """How a job activates a framework: the profile's own `[environments.FRAMEWORK]`, else
    the environment `dlscale env create` recorded (its venv, on a file system the nodes
    share), else the profile's python when dlscale's own interpreter has the framework.
    Returns (Environment, extra variables for the job)."""
    from ..config.profile import Environment
    given = profile.environments.get(framework)
    if given is not None:
        return given, {}
    status = resolve(framework, home, check=False)
    if status.source == "registered":
        return Environment(venv=status.prefix), launch_env(status, home)
    return Environment(), {}
