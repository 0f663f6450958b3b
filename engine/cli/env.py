"""`dlscale env` and `dlscale doctor`: each framework's software environment (their pins
conflict, so each has its own), built, listed, forgotten and checked."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..config.frameworks import FRAMEWORKS
from ..launching import envs
from ..results import tables
from ..tracking.store import default_home
from .console import err, out


def _home(ctx: click.Context) -> Path:
    return Path(ctx.obj["home"]) if ctx.obj["home"] else default_home()


@click.group()
def env() -> None:
    """Per-framework software environments (their pins conflict, so each has its own)."""


@env.command("create")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.option("--prefix", type=click.Path(file_okay=False), default=None,
              help="where to build the venv (default: DLSCALE_ENV_CACHE or DLSCALE_HOME, "
              "then envs/FRAMEWORK-RECIPE)")
@click.option("--with", "extras", multiple=True, type=click.Choice(list(envs.EXTRAS)),
              help="add an opt-in loader: dali (NVIDIA DALI, ~700 MB; pytorch-ddp, deepspeed, "
              "horovod-pytorch)")
@click.pass_context
def env_create(ctx: click.Context, framework: str, prefix: str | None,
               extras: tuple[str, ...]) -> None:
    """Build FRAMEWORK's pinned environment and record it, so planning finds it."""
    envs.create(framework, _home(ctx), Path(prefix) if prefix else None,
                say=lambda line: err.print(line, soft_wrap=True), extras=extras)


@env.command("list")
@click.pass_context
def env_list(ctx: click.Context) -> None:
    """Where each framework's trainer would run now (no imports: quick)."""
    home = _home(ctx)
    t = tables.Table(title="Framework environments", title_justify="left")
    for col in ("framework", "source", "python", "state"):
        t.add_column(col)
    for fw in FRAMEWORKS:
        st = envs.resolve(fw, home)
        source = st.source + "".join(f" +{e}" for e in st.extras)
        t.add_row(fw, source, st.python or "-", "ok" if st.ok else st.problem or "")
    out.print(t)


@env.command("remove")
@click.argument("framework", type=click.Choice(list(FRAMEWORKS)))
@click.pass_context
def env_remove(ctx: click.Context, framework: str) -> None:
    """Forget FRAMEWORK's recorded environment (its folder is left: it may be shared)."""
    prefix = envs.remove(framework, _home(ctx))
    out.print(f"{framework}: forgot {prefix}" if prefix else f"{framework}: none recorded")


@click.command()
@click.option("--smoke/--no-smoke", default=False, help="also train 2 ranks for a few "
              "steps in each working environment (tens of seconds each)")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="cluster profile TOML: say which way --backend slurm talks to Slurm with it")
@click.argument("frameworks", nargs=-1, type=click.Choice(list(FRAMEWORKS)))
@click.pass_context
def doctor(ctx: click.Context, smoke: bool, profile_path: str | None,
           frameworks: tuple[str, ...]) -> None:
    """Per framework: does its environment import, which versions, and (--smoke) does a
    2-rank run train; and which way the Slurm backend talks to Slurm here. Exits 1 when a
    framework with a trainer cannot run."""
    from ..backends.registry import pyslurm_status
    from ..config.profile import load_profile
    home = _home(ctx)
    out.print(pyslurm_status(load_profile(profile_path) if profile_path else None),
              soft_wrap=True)
    broken = 0
    # One plain line per framework: long paths and version lists stay whole and greppable.
    for fw in frameworks or tuple(FRAMEWORKS):
        if FRAMEWORKS[fw].trainer_module is None:
            out.print(f"{fw}: -- {FRAMEWORKS[fw].note}", soft_wrap=True)
            continue
        st = envs.resolve(fw, home, check=False)
        if st.python is None:
            problem, versions = st.problem, {}
        else:
            problem, versions = envs.probe(st.python, envs.recipe_for(fw, st.extras),
                                           full_import=True)
            if problem:
                problem += f"; rebuild with `{envs.create_command(fw, home, st.extras)}`"
        line = f"{fw}: " + (f"imports ok ({st.source}: {st.prefix or st.python}); "
                            + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
                            if not problem else f"NO: {problem}")
        if smoke and not problem:
            ok, said = envs.smoke(fw, home, st)
            line += f"; smoke: {said}"
            problem = None if ok else said
        broken += problem is not None
        out.print(line, soft_wrap=True)
    sys.exit(1 if broken else 0)
