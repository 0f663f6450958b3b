"""Checks on the command lines' own values, made while they are parsed, before any work: the
store's folder (--home, DLSCALE_HOME) can be made and written, a named experiment is in the
store, an MD5 looks like one, a path is one dlscale may read or write. `dlscale` and
`dlscale-tui` share them; numbers are bounded where each option is declared: a count by
click.IntRange, any other number by its quantity (engine/quantities.py: `Quantity.option`).

Every path a command takes is one of two types, so that a new one says which it is
(tests/test_outputs.py finds every output path in these definitions): `InputPath` (read:
engine/io/reading.py's rules) and `OutputPath` (written: a file or a folder, by the one writer's
rules, engine/io/outputs.py, checked here before any work). An output that is one of the
command's inputs (or another of its outputs, or part of the store) is refused, whichever
is named first (`_apart`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from ..errors import NotFoundError
from ..where import check_home, source_of

if TYPE_CHECKING:
    from ..tracking.store import Store


def _named(param: click.Parameter | None) -> str:
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name if param is not None else ""


class NamedPath(click.Path):
    """A path as a name: one holding a NUL character (which no argv carries, but a caller
    in this process can) is refused in a sentence, where click's own check would raise."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\0" in value:
            self.fail(f"{value!r} holds a NUL character: no file is named so", param, ctx)
        return super().convert(value, param, ctx)


def _apart(
    ctx: click.Context | None, param: click.Parameter | None, value: Any, out: bool, read: bool
) -> None:
    """Every path a command takes, kept in its context as it is parsed (in the order given,
    so either side may come first): an output that is one of the others, or part of the
    store, is refused by the one writer's rule (outputs.check_apart)."""
    if ctx is None or not isinstance(value, str) or "\0" in value:
        return
    from pathlib import Path

    from ..io import outputs

    seen = ctx.meta.setdefault("dlscale.paths", [])
    home = (ctx.find_root().obj or {}).get("home")
    if out:
        from ..tracking.store import default_home

        outputs.check_apart(
            value, _named(param), [(n, p, r) for n, p, r, _ in seen], Path(home or default_home())
        )
    for name, path, _, written in seen:  # an input named after an output
        if written and read:
            outputs.check_apart(path, name, [(_named(param), Path(value), True)], None)
    seen.append((_named(param), Path(value), read, out))


class InputPath(NamedPath):
    """A path a command reads: a spec, a profile, a bundle, a folder to check."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        _apart(ctx, param, value, out=False, read=True)
        return value


class InputName(click.ParamType):
    """A name, or the path of a file a command reads (`check --baseline`: an experiment
    or a bundle): where it names a file, an input like any InputPath."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import os

        if isinstance(value, str) and "\0" not in value and os.path.isfile(value):
            _apart(ctx, param, value, out=False, read=True)
        return value


class OutputPath(click.Path):
    """A file (or, with `folder`, a folder) a command writes through the one writer,
    checked before any work: absent, or a regular file (with `replace`) or a folder (never
    a link to one), where it can be written (unless not `writable`: a folder that may only
    be read, the data being there already); a link, a FIFO, a device or anything else there
    is refused."""

    def __init__(
        self, folder: bool = False, replace: bool = True, writable: bool = True, read: bool = False
    ) -> None:
        super().__init__()  # what may be there is the one writer's to say, not click's
        self.folder, self.replace, self.writable = folder, replace, writable
        self.read = read  # also read by its command (`check --history`): an input too

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from ..io import outputs  # the command line starts without it (dlscale --help)

        if self.folder:  # first: click's own stat would raise on a NUL in the name
            outputs.check_folder(value, _named(param), self.writable)
        else:
            outputs.check_file(value, _named(param), self.replace)
        value = super().convert(value, param, ctx)
        _apart(ctx, param, value, out=True, read=self.read)
        return value


def home_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    check_home(value, source_of(ctx, param))
    return value


def store_of(ctx: click.Context) -> Store:
    """The command's store, opened once (by the first check or the command itself)."""
    from ..tracking.store import Store

    root = ctx.find_root()
    obj = root.obj or {}
    if "store" not in obj:
        obj["store"] = Store(obj.get("home"))
        # closed with the command: its hold on the store (store_locks) goes with it, even
        # where the command ran in a process that goes on (a test, a script)
        root.call_on_close(obj["store"].close)
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
