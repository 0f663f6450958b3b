"""A click group whose commands are imported when they run, not when the group is built."""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """`lazy` maps a command's name to (module, attribute, short help). The help listing is
    written from the short helps, so `--help` imports no command's module; a test checks
    that they match the commands' own."""

    def __init__(self, *args, lazy: dict[str, tuple[str, str, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, attr, _ = self.lazy[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.lazy[name][2]) for name in self.list_commands(ctx)]
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    (name, click.utils.make_default_short_help(text, limit))  # type: ignore[operator]
                    for name, text in rows
                ]
            )
