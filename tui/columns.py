"""Which columns a table shows in the room it has: at 80 columns the ones a user reads first
stay whole and the least important go first, so no number is ever cut to meaningless digits
at the screen's edge. The Queue and the Results screens choose theirs here.

Every table gives each column its width when it adds it (`widest`): Textual measures an
auto-width column's cells only in the table's idle pass, and a frame drawn before that (on
a loaded machine) is cached at the headings' widths, its cells cut ("gpt2-", "PLANN"), until
the table changes again; in CI one stayed so for 240 s."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from rich.cells import cell_len

Name = TypeVar("Name", bound=Hashable)  # a column's name: a heading, or an index
GAP = 2  # DataTable's cell padding: one cell each side of every column


def widest(heading: str, values: Iterable[str]) -> int:
    """A column's width, as DataTable.add_column's `width`: its heading or its widest value."""
    return max([cell_len(heading), *(cell_len(v) for v in values)])


def fit(
    widths: Mapping[Name, int],
    priority: Sequence[Name],
    room: int,
    stretch: Name | None = None,
    least: int = 12,
) -> list[Name]:
    """The columns of `priority` (most important first) that fit whole in `room` cells,
    each `widths[name]` wide plus the gap. `stretch` (a reason), where it is in `priority`,
    is kept if at least `least` cells are left for it then, and takes whatever is left in
    the end (stretch_width); every column after it in `priority` must leave it that."""
    chosen: list[Name] = []
    used = 0
    reserved = 0  # what the stretching column needs, once it is in
    for name in priority:
        if name not in widths:
            continue
        if name == stretch:
            need = min(widths[name], least) + GAP
            if used + need <= room:
                chosen.append(name)
                reserved = need
            continue
        need = widths[name] + GAP
        if used + reserved + need <= room:
            chosen.append(name)
            used += need
    return chosen


def stretch_width(widths: Mapping[str, int], chosen: Sequence[str], stretch: str, room: int) -> int:
    """The width the stretching column gets among `chosen`: what the others leave of `room`,
    at most its own widest value."""
    others = sum(widths[n] + GAP for n in chosen if n != stretch)
    return max(1, min(widths[stretch], room - others - GAP))
