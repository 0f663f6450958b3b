"""`dlscale env` and `dlscale doctor`: each framework's software environment (their pins
conflict, so each has its own), for CPUs and for NVIDIA GPUs (`--gpu`): built, listed,
forgotten and checked."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from ..config.frameworks import FRAMEWORKS
from ..config.gpu_arch import parse_arch
from ..config.profile import load_profile
from ..errors import UserError
from ..launching import envs, gpus
from ..launching.envs import builder, recipes, registry, smoke_test
from ..tracking.store import default_home
from .console import err, out
from .options import InputPath, OutputPath


def _home(ctx: click.Context) -> Path:
    return Path(ctx.obj["home"]) if ctx.obj["home"] else default_home()


def _site(
    framework: str, profile_path: str | None, partition: str | None, gpu: bool
) -> tuple[tuple, dict]:
    """What a build takes from a cluster profile: the modules it loads first (CUDA, NCCL),
    and the partition's GPU architecture for the kernels Horovod compiles. A GPU build that
    could not run on that partition's GPUs is refused before its downloads."""
    if profile_path is None:
        if partition:
            raise UserError("--partition needs --profile CLUSTER.toml")
        return (), {}
    loaded = load_profile(profile_path)
    part = loaded.profile.partition(partition)
    environ = {}
    if gpu and part.gpu_arch:
        limit = gpus.GPU_BUILD_ARCHS.get(framework)
        if limit is not None and not limit.runs_on(parse_arch(part.gpu_arch)):
            raise UserError(
                f"{framework} --gpu: it cannot run on partition {part.name}'s "
                f"GPUs ({part.gpu_arch}, {profile_path}): {limit.why}"
            )
        environ["HOROVOD_BUILD_CUDA_CC_LIST"] = str(part.gpu_arch).removeprefix("sm_")
    return tuple(loaded.profile.modules), environ


@click.group()
def env() -> None:
    """Per-framework software environments (their pins conflict, so each has its own)."""


@env.command("create")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.option(
    "--gpu",
    is_flag=True,
    help="the NVIDIA GPU variant: CUDA builds of the "
    "framework (and Horovod with NCCL), nvidia-ml-py; cached apart from the CPU one",
)
@click.option(
    "--profile",
    "profile_path",
    type=InputPath(dir_okay=False),
    default=None,
    help="a cluster profile whose modules (CUDA, NCCL) are loaded before building "
    "(in a login shell), and whose partition's gpu_arch Horovod's kernels are built for",
)
@click.option("--partition", default=None, help="the profile's partition (default: its default)")
@click.option(
    "--prefix",
    type=OutputPath(folder=True),
    default=None,
    help="where to build the venv (default: DLSCALE_ENV_CACHE or DLSCALE_HOME, "
    "then envs/FRAMEWORK-RECIPE)",
)
@click.option(
    "--with",
    "extras",
    multiple=True,
    type=click.Choice(list(recipes.EXTRAS)),
    help="add an opt-in loader: dali (NVIDIA DALI, ~700 MB; pytorch-ddp, deepspeed, "
    "horovod-pytorch)",
)
@click.pass_context
def env_create(
    ctx: click.Context,
    framework: str,
    gpu: bool,
    profile_path: str | None,
    partition: str | None,
    prefix: str | None,
    extras: tuple[str, ...],
) -> None:
    """Build FRAMEWORK's pinned environment and record it, so planning finds it."""
    modules, environ = _site(framework, profile_path, partition, gpu)
    builder.create(
        framework,
        _home(ctx),
        Path(prefix) if prefix else None,
        say=lambda line: err.print(line, soft_wrap=True),
        extras=extras,
        device="cuda" if gpu else "cpu",
        modules=modules,
        environ=environ,
    )


def _variants(home: Path) -> list[tuple[str, str]]:
    """(framework, device) rows to show: every CPU one; GPU ones that are recorded, or all
    of them on a machine that shows NVIDIA GPUs."""
    recorded = envs.registered(home)
    on_gpus = gpus.local_device() == "cuda"
    rows = []
    for fw in FRAMEWORKS:
        rows.append((fw, "cpu"))
        if fw in recipes.GPU_RECIPES and (on_gpus or envs.registry_key(fw, "cuda") in recorded):
            rows.append((fw, "cuda"))
    return rows


@env.command("list")
@click.pass_context
def env_list(ctx: click.Context) -> None:
    """Where each framework's trainer would run now (no imports: quick), for the CPU and,
    where recorded or on a machine with NVIDIA GPUs, for GPUs."""
    home = _home(ctx)
    t = Table(title="Framework environments", title_justify="left")
    for col in ("framework", "device", "source", "python", "build", "state"):
        t.add_column(col)
    for fw, device in _variants(home):
        st = envs.resolve(fw, home, device=device)
        source = st.source + "".join(f" +{e}" for e in st.extras)
        build = envs.describe_build({"cuda": st.cuda, "nccl": st.nccl}) if st.python else "-"
        state = "ok" if st.ok else st.problem or ""
        if st.ok and device == "cuda":
            state = envs.gpu_problem(st, home, "a GPU run needs a CUDA build") or "ok"
        t.add_row(fw, device, source, st.python or "-", build, state)
    out.print(t)


@env.command("remove")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.option("--gpu", is_flag=True, help="forget the GPU variant instead of the CPU one")
@click.pass_context
def env_remove(ctx: click.Context, framework: str, gpu: bool) -> None:
    """Forget FRAMEWORK's recorded environment (its folder is left: it may be shared)."""
    prefix = registry.remove(framework, _home(ctx), "cuda" if gpu else "cpu")
    out.print(f"{framework}: forgot {prefix}" if prefix else f"{framework}: none recorded")


@click.command()
@click.option(
    "--smoke/--no-smoke",
    default=False,
    help="also train 2 ranks for a few steps in each working environment (tens of seconds each)",
)
@click.option(
    "--profile",
    "profile_path",
    type=InputPath(dir_okay=False),
    default=None,
    help="cluster profile TOML: say which way --backend slurm talks to Slurm with it",
)
@click.argument("frameworks", nargs=-1, type=click.Choice(list(FRAMEWORKS)))
@click.pass_context
def doctor(
    ctx: click.Context, smoke: bool, profile_path: str | None, frameworks: tuple[str, ...]
) -> None:
    """Per framework: does its environment import, which versions and build (CUDA, Horovod's
    NCCL), and (--smoke) does a 2-rank run train; and which way the Slurm backend talks to
    Slurm here. Exits 1 when a framework with a trainer cannot run."""
    from ..backends.registry import pyslurm_status

    home = _home(ctx)
    out.print(pyslurm_status(load_profile(profile_path) if profile_path else None), soft_wrap=True)
    broken = 0
    shown = len(gpus.local_gpus())
    # One plain line per framework and device: long paths and versions stay whole and greppable.
    for fw, device in _variants(home):
        if frameworks and fw not in frameworks:
            continue
        name = fw if device == "cpu" else f"{fw} (GPU)"
        st = envs.resolve(fw, home, check=False, device=device)
        facts: dict = {}
        versions: dict[str, str]
        if st.python is None:
            problem, versions = st.problem, {}
        else:
            problem, versions, facts = envs.probe_facts(
                st.python, recipes.recipe_for(fw, st.extras, st.device), full_import=True
            )
            if problem:
                problem += f"; rebuild with `{envs.create_command(fw, home, st.extras, device)}`"
            elif device == "cuda":
                st.cuda, st.nccl = facts.get("cuda"), facts.get("nccl")
                problem = envs.gpu_problem(st, home, "a GPU run needs a CUDA build")
        line = f"{name}: " + (
            f"imports ok ({st.source}: {st.prefix or st.python}); "
            + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
            + f"; {envs.describe_build(facts)}"
            if not problem
            else f"NO: {problem}"
        )
        if smoke and not problem and (device == "cpu" or shown):
            ok, said = smoke_test.smoke(fw, home, st, ranks=2 if device == "cpu" else min(2, shown))
            line += f"; smoke: {said}"
            problem = None if ok else said
        broken += problem is not None
        out.print(line, soft_wrap=True)
    sys.exit(1 if broken else 0)
