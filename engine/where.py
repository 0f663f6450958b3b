"""Where a front end works, from its command line: the store's folder (--home, DLSCALE_HOME),
checked before any work, and the backend its options choose. `dlscale` and `dlscale-tui`
share these (the TUI through `Session.open`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from click.core import ParameterSource

from .errors import UserError


def given_as(ctx: click.Context, name: str) -> str:
    """How the user gave the value of parameter `name`: the option, or the environment
    variable behind it, or not at all."""
    return source_of(ctx, next(p for p in ctx.command.params if p.name == name))


def source_of(ctx: click.Context, param: click.Parameter) -> str:
    source = ctx.get_parameter_source(param.name or "")
    if source is ParameterSource.ENVIRONMENT and isinstance(param, click.Option):
        return str(param.envvar)
    if source is ParameterSource.DEFAULT:
        return "the default"
    return max(param.opts, key=len) if isinstance(param, click.Option) else str(param.name)


def check_home(home: str | Path | None, source: str = "--home") -> Path:
    """The store's folder, if it exists or can be made, and can be written; UserError (exit 2)
    naming the path and why not. Nothing is created: a probe file is made and removed."""
    from .tracking.store import default_home  # the command line starts without the store

    path = Path(home).expanduser() if home else default_home()
    where = f"home {path} ({source})"
    if "\0" in str(path):  # the OS takes no such name (a ValueError, were it asked)
        raise UserError(f"{where}: holds a NUL character; no folder is named so")
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        is_dir = existing.is_dir()
    except OSError as exc:
        raise UserError(f"{where}: cannot be checked ({exc.strerror})") from None
    made = "" if existing == path else f"cannot be made: {existing} "
    if not is_dir:
        raise UserError(f"{where}: {made or 'it '}is not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".dlscale-probe-"):
            pass
    except OSError as exc:
        raise UserError(f"{where}: {made or 'it '}is not writable ({exc.strerror})") from None
    return path


def backend_for(backend: str | None, profile_path: str | None, partition: str | None) -> str:
    """The backend a command runs on: slurm with a cluster profile, else local (as in
    dlscale-tui). An option the chosen backend would ignore is refused, not dropped."""
    from .backends.registry import takes_profile

    if backend and profile_path and not takes_profile(backend):
        raise UserError(
            f"--profile describes a Slurm cluster, and --backend {backend} runs on "
            "this machine; give --backend slurm, or leave --profile out"
        )
    if partition and not profile_path:
        raise UserError(
            f"--partition {partition}: a partition belongs to a cluster profile; "
            "give --profile CLUSTER.toml too"
        )
    return backend or ("slurm" if profile_path else "local")
