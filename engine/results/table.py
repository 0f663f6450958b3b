"""The one table model: a title, columns, rows of cells as text, and the notes that explain
them. Every table dlscale shows is built once as a `Table` and rendered for its reader: the
terminal (rich, fitted to the width: the least important columns go first and a line says
which), Markdown and HTML (the report's templates), CSV, and the TUI (its columns by the same
priorities).

A column's `keep` is its importance: 0 is never left out; higher numbers go first when the
terminal is narrow. `short` is the heading where room is scarce (a terminal, the TUI)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table as RichTable

from ..io.text import printable


@dataclass(frozen=True)
class Column:
    heading: str  # as the report and CSV name it
    right: bool = False  # a column of numbers: aligned right
    keep: int = 0  # 0: always shown; higher: left out sooner on a narrow terminal
    short: str | None = None  # the heading where room is scarce

    @property
    def narrow(self) -> str:
        return self.short or self.heading


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    right: set[int] = field(default_factory=set)  # columns of numbers, aligned right
    alerts: list[str] = field(default_factory=list)  # notes shown in red (a failed check)
    keep: list[int] = field(default_factory=list)  # per column, Column.keep (0 if absent)
    short: list[str | None] = field(default_factory=list)  # per column, Column.short

    @classmethod
    def of(
        cls,
        title: str,
        columns: Sequence[Column],
        rows: list[list[str]],
        notes: list[str] | None = None,
    ) -> Table:
        return cls(
            title,
            [c.heading for c in columns],
            rows,
            list(notes or []),
            {i for i, c in enumerate(columns) if c.right},
            keep=[c.keep for c in columns],
            short=[c.short for c in columns],
        )

    @property
    def columns(self) -> list[Column]:
        keep = self.keep or [0] * len(self.headers)
        short = self.short or [None] * len(self.headers)
        return [Column(h, i in self.right, keep[i], short[i]) for i, h in enumerate(self.headers)]

    def column(self, heading: str) -> list[str]:
        """One column's cells, by its heading."""
        i = self.headers.index(heading)
        return [r[i] for r in self.rows]


def fitting(table: Table, width: int, wanted: Sequence[str] | None = None) -> list[int]:
    """The indices of the columns shown at `width`: all of `wanted` (headings, in their
    order) when given, else the most important that fit whole, dropping the highest `keep`
    first (the last such column first, so related columns leave together)."""
    cols = table.columns
    if wanted is not None:
        names = [c.heading for c in cols] + [c.narrow for c in cols]
        return [names.index(w) % len(cols) for w in wanted]
    shown = list(range(len(cols)))
    while len(shown) > 1 and _width(table, shown) > width:
        droppable = [i for i in shown if cols[i].keep > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (cols[i].keep, i))
        shown.remove(worst)
    return shown


def _width(table: Table, shown: list[int]) -> int:
    return measured(_rich(table, shown))


def measured(table: RichTable) -> int:
    """The width a rich table takes with every cell whole."""
    return Measurement.get(_CONSOLE, _CONSOLE.options, table).maximum


_CONSOLE = Console(width=10_000, color_system=None, force_terminal=False)


def _rich(
    table: Table, shown: list[int], title: str | None = None, full: bool = False
) -> RichTable:
    cols = table.columns
    t = RichTable(title=title, title_justify="left")
    for i in shown:
        heading = cols[i].heading if full else cols[i].narrow
        t.add_column(printable(heading), justify="right" if cols[i].right else "left", no_wrap=True)
    for row in table.rows:
        t.add_row(*[printable(row[i]) for i in shown])
    return t


def for_terminal(
    table: Table, width: int, wanted: Sequence[str] | None = None, wide: bool = False
) -> tuple[RichTable, str | None]:
    """The table as rich renders it at `width`, and a line naming the columns left out (None
    when all are shown). Numbers are never cut: a column is shown whole or not at all.
    `wide`: every column, under its full heading."""
    if wide:
        return _rich(table, list(range(len(table.headers))), printable(table.title), True), None
    shown = fitting(table, width, wanted)
    left = [table.columns[i].narrow for i in range(len(table.headers)) if i not in shown]
    said = None
    if left and wanted is None:
        said = f"left out at {width} columns: {', '.join(left)} (--wide shows every column)"
    return _rich(table, shown, printable(table.title)), said
