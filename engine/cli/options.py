"""Checks on the command lines' own values, made while they are parsed, before any work: the
store's folder (--home, DLSCALE_HOME) can be made and written, a named experiment is in the
store, an MD5 looks like one. `dlscale` and `dlscale-tui` share them; numbers are bounded
where each option is declared (click.IntRange says its range itself)."""

from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING

import click

from ..errors import NotFoundError
from ..where import check_home, source_of

if TYPE_CHECKING:
    from ..tracking.store import Store


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


def home_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    check_home(value, source_of(ctx, param))
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
            f"{value!r} (from {source_of(ctx, param)}) is not an MD5: give 32 hex digits",
            ctx,
            param,
        )
    return value


def stored(field: str):
    """A callback for an option filtering by a model, dataset or framework: a name the
    store's runs have (a declared framework's own words as well as the built-in ones), else
    exit 2 naming those it has."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None or ctx.resilient_parsing:
            return value
        store = store_of(ctx)
        known = store.names(field)
        if value not in known:
            raise click.BadParameter(
                f"no {field} {value!r} among the runs in the store ({store.home}); it has: "
                f"{', '.join(known) or 'none yet'}",
                ctx,
                param,
            )
        return value

    # the field it filters by: how a test finds every filter among the options
    check.stored = field  # type: ignore[attr-defined]
    return check
