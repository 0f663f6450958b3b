"""Checks on the command lines' own values, made while they are parsed, before any work: the
store's folder (--home, DLSCALE_HOME) can be made and written, a named experiment is in the
store, an MD5 looks like one. `dlscale` and `dlscale-tui` share them; numbers are bounded
where each option is declared (click.IntRange says its range itself)."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from ..errors import NotFoundError, UserError

if TYPE_CHECKING:
    from ..tracking.store import Store


def given_as(ctx: click.Context, name: str) -> str:
    """How the user gave the value of parameter `name`: the option, or the environment
    variable behind it, or not at all."""
    return _source(ctx, next(p for p in ctx.command.params if p.name == name))


def _source(ctx: click.Context, param: click.Parameter) -> str:
    source = ctx.get_parameter_source(param.name or "")
    if source is ParameterSource.ENVIRONMENT and isinstance(param, click.Option):
        return str(param.envvar)
    if source is ParameterSource.DEFAULT:
        return "the default"
    return max(param.opts, key=len) if isinstance(param, click.Option) else str(param.name)


def folder_or_new(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A callback for an option naming a folder to write in (--out, --prefix): absent, or a
    folder; anything else there (a file, /dev/null, a FIFO, a link to nowhere or to itself)
    is exit 2 naming what it is, before any work (click's file_okay=False lets devices and
    FIFOs through)."""
    if value is None or not os.path.lexists(value):
        return value
    if os.path.isdir(value):
        return value
    try:
        mode = os.stat(value).st_mode
        what = "a file" if stat.S_ISREG(mode) else "a device, FIFO or socket"
    except OSError as exc:
        what = f"a link that leads nowhere ({exc.strerror})"
    raise click.BadParameter(f"{value} is {what}, not a folder", ctx, param)


def check_home(home: str | Path | None, source: str = "--home") -> Path:
    """The store's folder, if it exists or can be made, and can be written; UserError (exit 2)
    naming the path and why not. Nothing is created: a probe file is made and removed."""
    from ..tracking.store import default_home

    path = Path(home).expanduser() if home else default_home()
    where = f"home {path} ({source})"
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


def home_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    check_home(value, _source(ctx, param))
    return value


def store_of(ctx: click.Context) -> Store:
    """The command's store, opened once (by the first check or the command itself)."""
    from ..tracking.store import Store

    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        obj["store"] = Store(obj.get("home"))
    return obj["store"]


def known_experiment(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    store = store_of(ctx)
    known = store.experiment_names()
    if value not in known:
        raise NotFoundError(
            f"no experiment {value!r} in the store ({store.home}); it has: "
            f"{', '.join(known) or 'none yet'}"
        )
    return value


def experiment_option(help: str | None = None):  # noqa: A002  (click's own word)
    """--experiment/-e, checked against the store before the command does anything."""
    return click.option("--experiment", "-e", default=None, callback=known_experiment, help=help)


def md5_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-fA-F]{32}", value):
        raise click.BadParameter(
            f"{value!r} (from {_source(ctx, param)}) is not an MD5: give 32 hex digits", ctx, param
        )
    return value


def backend_for(backend: str | None, profile_path: str | None, partition: str | None) -> str:
    """The backend a command runs on: slurm with a cluster profile, else local (as in
    dlscale-tui). An option the chosen backend would ignore is refused, not dropped."""
    from ..backends.registry import takes_profile

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
