"""Building a framework's environment: a venv from its recipe (recipes.py), compiled wheels
cached once per machine, a lock so two builds of one environment never collide, and the
record that lets planning find it (the package's __init__). GPU builds can run after a cluster
profile's `module load` (CUDA, NCCL), in a login shell where `module` exists."""

from __future__ import annotations

import contextlib
import errno
import fcntl
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
from dataclasses import replace
from pathlib import Path

from ...config.frameworks import FRAMEWORKS
from ...errors import DlscaleError, UserError
from ...io.outputs import OutputError
from ...io.reading import read_json
from .. import envs
from . import registry
from .recipes import GPU_RECIPES, RECIPES, Recipe, WheelBuild, recipe_for
from .steps import CXX_WRAPPER


class EnvBuildError(DlscaleError):
    """An environment could not be built; the message holds the key lines of the failure."""


_KEY_LINE = re.compile(
    r"(error|Error|ERROR|fatal|No matching distribution|conflict|"
    r"requires|Could not)",
    re.ASCII,
)


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


# `module` is a shell function a login shell defines (Lmod, Environment Modules). The module
# names and the command reach this script as arguments, never pasted into it.
_MODULE_SHELL = (
    'command -v module >/dev/null 2>&1 || { echo "dlscale: error: no module command in a '
    'login shell here, and the profile names modules to load first" >&2; exit 127; }; '
    'n=$1; shift; module load "${@:1:$n}" || exit; shift "$n"; exec "$@"'
)


def in_modules(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """argv, run after `module load MODULES` when there are any."""
    if not modules:
        return argv
    return ["bash", "-lc", _MODULE_SHELL, "dlscale-build", str(len(modules)), *modules, *argv]


def _run(
    argv: list[str], env: dict[str, str], log, what: str, modules: tuple[str, ...] = ()
) -> None:
    argv = in_modules(argv, modules)
    log.write(f"$ {' '.join(shlex.quote(a) for a in argv)}\n")
    log.flush()
    proc = subprocess.run(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    log.write(proc.stdout)
    log.flush()
    if proc.returncode != 0:
        raise EnvBuildError(
            f"{what} failed (exit {proc.returncode}); the key lines:\n  "
            + "\n  ".join(key_lines(proc.stdout))
            + f"\nthe whole output: {log.name}"
        )


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


def _cached_or_built_wheel(build: WheelBuild, folder: Path, env_python: Path, log, say) -> Path:
    found = sorted(folder.glob("*.whl"))
    if found:
        say(f"using the cached wheel {found[-1]}")
        return found[-1]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{build.folder}-", dir=folder.parent) as tmp:
        env = {**os.environ, **dict(build.site), **dict(build.env)}
        if build.cxx_std:
            cxx = Path(tmp) / "cxx"
            cxx.write_text(CXX_WRAPPER.format(std=build.cxx_std))
            cxx.chmod(0o755)
            env["CXX"] = str(cxx)
        say(f"building {build.requirement} into {folder} (once per machine; minutes)")
        started = time.time()
        # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone, so it would hand
        # back Horovod as built for another framework (seen: a torch-only build for TF).
        _run(
            [
                *_pip(env_python, "wheel"),
                "--no-cache-dir",
                "--no-deps",
                "--no-build-isolation",
                "--no-binary",
                ":all:",
                "-w",
                str(Path(tmp) / "out"),
                build.requirement,
            ],
            env,
            log,
            f"building {build.requirement}",
            build.modules,
        )
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
    """DLSCALE_ENV_CACHE/envs/FRAMEWORK[+EXTRA][-cuda]-RECIPE where a machine-wide cache is
    named (CI, a shared login node), else DLSCALE_HOME/envs/...: keyed by the recipe's
    digest, so a changed pin builds anew and an unchanged one is found again."""
    return cache_dir(home) / "envs" / f"{recipe.name}-{recipe.digest}"


STAMP = "dlscale-env.json"


def create(
    framework: str,
    home: Path,
    prefix: Path | None = None,
    python: str | None = None,
    say=print,
    extras: tuple[str, ...] = (),
    device: str = "cpu",
    modules: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
) -> envs.EnvStatus:
    """Build the framework's pinned environment for `device` at `prefix` (default
    DLSCALE_HOME/envs/...), check that it imports, and record it so planning finds it. An
    environment already built from the same recipe is checked and recorded again, not
    rebuilt. `modules` are loaded before each build step; `environ` adds site variables
    (a GPU architecture list) that key and reach compiled wheels."""
    if framework not in FRAMEWORKS:
        raise UserError(f"unknown framework {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    recipes = GPU_RECIPES if device == "cuda" else RECIPES
    if framework not in recipes:
        have = ", ".join(recipes)
        raise UserError(f"{framework}: no environment recipe yet (dlscale can build: {have})")
    recipe = recipe_for(framework, extras, device, modules)
    if environ:
        recipe = replace(
            recipe,
            steps=tuple(
                s.for_site(s.modules, {**os.environ, **environ}) if isinstance(s, WheelBuild) else s
                for s in recipe.steps
            ),
        )
    prefix = Path(prefix).expanduser().resolve() if prefix else default_prefix(recipe, home)
    lock = prefix.with_name(prefix.name + ".lock")
    made = not os.path.lexists(prefix) and not os.path.lexists(lock)
    try:
        with _exclusive(lock, str(prefix), say):
            return _create(framework, recipe, prefix, home, python or sys.executable, say)
    except BaseException as exc:
        if made:  # a build that never got anywhere leaves nothing (the one writer's rule)
            _remove_unfinished(prefix, lock)
        if isinstance(exc, OSError) and exc.errno in _DISK_FAULTS:
            raise OutputError.of("--prefix", prefix, exc) from None
        raise


_DISK_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


def _remove_unfinished(prefix: Path, lock: Path) -> None:
    """What a failed build made where nothing was: the venv, an empty log, the lock."""
    shutil.rmtree(prefix, ignore_errors=True)
    log = prefix.with_name(prefix.name + ".build.log")
    for path in (log, lock):
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:
                path.unlink()


def _build(framework: str, recipe: Recipe, prefix: Path, home: Path, python: str, say) -> None:
    env_python = prefix / "bin" / "python"
    if prefix.exists() and any(prefix.iterdir()) and not (prefix / "pyvenv.cfg").exists():
        raise UserError(
            f"--prefix {prefix} exists and is not a virtual environment; "
            "name an empty or new folder"
        )
    prefix.mkdir(parents=True, exist_ok=True)
    # Beside the folder, not in it: `venv --clear` empties the folder.
    log_path = prefix.with_name(prefix.name + ".build.log")
    mods = recipe.modules
    started = time.time()
    with open(log_path, "w") as log:
        say(
            f"{framework}: building {prefix} (log: {log_path})"
            + (f" after `module load {' '.join(mods)}`" if mods else "")
        )
        (prefix / STAMP).unlink(missing_ok=True)  # half-built until the stamp is back
        _run(
            [python, "-m", "venv", "--clear", str(prefix)],
            dict(os.environ),
            log,
            f"creating the venv {prefix}",
        )
        for step in recipe.steps:
            if isinstance(step, WheelBuild):
                wheel = _built_wheel(step, env_python, home, log, say)
                _run(
                    [*_pip(env_python, "install"), "--no-deps", str(wheel)],
                    dict(os.environ),
                    log,
                    f"installing {wheel.name}",
                )
                continue
            env = {**os.environ, **dict(step.env)}
            say(f"{framework}: pip install {' '.join(step.packages)}")
            _run(
                [
                    *_pip(env_python, "install"),
                    *step.pip_args,
                    *step.packages,
                ],
                env,
                log,
                f"installing {' '.join(step.packages)}",
                mods,
            )
        if recipe.warm:
            say(f"{framework}: building its CPU ops once, ahead of the first run")
            _run(
                [str(env_python), "-c", recipe.warm],
                dict(os.environ),
                log,
                "building the framework's ops",
            )
    (prefix / STAMP).write_text(
        json.dumps(
            {
                "framework": framework,
                "recipe": recipe.digest,
                "device": recipe.device,
                "created": time.time(),
                "build_s": round(time.time() - started, 1),
            },
            allow_nan=False,
        )
        + "\n"
    )


def _create(
    framework: str, recipe: Recipe, prefix: Path, home: Path, python: str, say
) -> envs.EnvStatus:
    stamp = prefix / STAMP
    env_python = prefix / "bin" / "python"
    try:
        same = read_json(stamp).get("recipe") == recipe.digest  # bounded; a FIFO is refused
    except (OSError, ValueError, AttributeError):
        same = False
    built = not (same and not envs.probe(str(env_python), recipe, full_import=False)[0])
    if built:
        _build(framework, recipe, prefix, home, python, say)
    else:
        say(f"{framework}: {prefix} already holds recipe {recipe.digest}; checking it")
    problem, versions, facts = envs.probe_facts(str(env_python), recipe, full_import=True)
    if problem:
        stamp.unlink(missing_ok=True)  # so the next `env create` builds it again
        raise EnvBuildError(
            f"{framework}: {prefix} was {'built' if built else 'found'} but "
            f"does not import: {problem}"
        )
    key = envs.registry_key(framework, recipe.device)
    before = envs.registered(home).get(key) or {}
    dropped = sorted(set(before.get("extras", [])) - set(recipe.extras))
    if dropped:
        again = envs.create_command(framework, home, tuple(before.get("extras", [])), recipe.device)
        say(
            f"{framework}: replaces {before.get('prefix')}, which had {', '.join(dropped)}; "
            f"runs with loader {', '.join(dropped)} need `{again}` again"
        )
    registry.register(
        home,
        key,
        {
            "prefix": str(prefix),
            "recipe": recipe.digest,
            "versions": versions,
            "registered": time.time(),
            "extras": list(recipe.extras),
            "device": recipe.device,
            "gpu": facts,
            "modules": list(recipe.modules),
        },
    )
    said = ", ".join(f"{k} {v}" for k, v in versions.items())
    if recipe.device == "cuda":
        said += "; " + envs.describe_build(facts)
    say(f"{framework}: ready: {prefix} ({said})")
    return envs.EnvStatus(
        framework,
        str(env_python),
        "registered",
        str(prefix),
        None,
        versions,
        recipe.extras,
        recipe.device,
        facts.get("cuda"),
        facts.get("nccl"),
    )


def _pip(python: Path, command: str) -> list[str]:
    """pip COMMAND run by the environment's own python, never asking and never nagging."""
    return [str(python), "-m", "pip", command, "--disable-pip-version-check", "--no-input"]
