"""The lines of a log, drawn as they scroll into view: wrapped to the panel's width or not
(`w`), search matches marked. Textual's Log does neither; RichLog wraps only what is written
after, and draws every line as it arrives. Here a line is made into a strip only when it is
on screen, so a panel holding KEEP_LINES lines scrolls, wraps and marks in milliseconds.

Lines are job output (made printable by the engine, control characters shown as signs):
each is a rich Text built from the plain string, never read as markup; matches are marked
with Text.stylize."""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from . import keys

STAMP = len("12:03:41 ")  # the cells a line's time takes, with the space after it
# Reverse video reads without colour (issue 21, item 8); the current match is bold and
# underlined too.
MATCH = Style(reverse=True)
CURRENT = Style(reverse=True, bold=True, underline=True)


class LogView(ScrollView, can_focus=True):
    """A log's lines, the newest at the bottom, followed while at the end."""

    BINDINGS = [*keys.LOG_MOVES]

    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow-y: scroll; overflow-x: auto; }
    LogView.wrapped { overflow-x: hidden; }
    """

    def __init__(self, max_lines: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.auto_scroll = True
        self._texts: list[str] = []
        self._cells: list[int] = []  # each line's width in cells
        self._widest = 0
        self.wrap = False
        self._starts: list[int] = []  # wrapped: the first row of each line, and the end
        self._wrapped_at = 0  # the width _starts was counted for
        self.needle = ""  # what is searched, marked in any case
        self._pattern: re.Pattern[str] | None = None
        self.current: int | None = None  # the line of the current match
        self._drawn: LRUCache[int, Strip] = LRUCache(1024)  # by line, whole
        self._times: list[str] = []  # when each line was read, HH:MM:SS
        self.stamps = False  # each line shown after the time it was read (t)

    @property
    def lines(self) -> Sequence[str]:
        return self._texts

    @property
    def line_count(self) -> int:
        return len(self._texts)

    # --- writing ---------------------------------------------------------------------

    def clear(self) -> None:
        self._texts, self._cells, self._widest, self._times = [], [], 0, []
        self._drawn.clear()
        self.current = None
        self._resize()

    def write_lines(self, lines: Iterable[str]) -> None:
        at_end = self.is_vertical_scroll_end
        new = [part for line in lines for part in line.splitlines() or [""]]
        if not new:
            return
        cells = [cell_len(line) for line in new]
        self._texts += new
        self._cells += cells
        self._times += [time.strftime("%H:%M:%S")] * len(new)
        self._widest = max(self._widest, *cells)
        drop = len(self._texts) - self.max_lines
        if drop > 0:  # older lines go; the cache is by index
            del self._texts[:drop], self._cells[:drop], self._times[:drop]
            self._drawn.clear()
            if self.current is not None:
                self.current = self.current - drop if self.current >= drop else None
        self._resize(appended=not drop)
        if self.auto_scroll and at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.refresh()

    # --- wrapping ----------------------------------------------------------------------

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines at the panel's width (or not), the line at the top staying at
        the top, the end followed if it was."""
        if wrap == self.wrap:
            return
        top, at_end = self.line_at(round(self.scroll_y)), self.is_vertical_scroll_end
        self.wrap = wrap
        self.set_class(wrap, "wrapped")
        self._resize()
        self.scroll_to(x=0, y=self.row_of(top), animate=False, immediate=True)
        if at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def set_stamps(self, stamps: bool) -> None:
        """Show when each line was read before it (or not), the line at the top staying,
        the end followed if it was."""
        top, at_end = self.line_at(round(self.scroll_y)), self.is_vertical_scroll_end
        self.stamps = stamps
        self._drawn.clear()
        self._resize()
        self.scroll_to(y=self.row_of(top), animate=False, immediate=True)
        if at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    @property
    def _stamp(self) -> int:
        """The cells the time takes before each line (`12:03:41 `)."""
        return STAMP if self.stamps else 0

    def _room(self) -> int:
        return max(1, self.scrollable_content_region.width)

    def _resize(self, appended: bool = False) -> None:
        extra = self._stamp
        if not self.wrap:
            self.virtual_size = Size(self._widest + extra, len(self._texts))
            return
        width = self._room()
        if appended and width == self._wrapped_at and len(self._starts) > 1:
            new = self._cells[len(self._starts) - 1 :]  # count only the lines added
            rows = (max(1, -(-(c + extra) // width)) for c in new)
            self._starts += list(accumulate(rows, initial=self._starts[-1]))[1:]
        else:
            rows = (max(1, -(-(c + extra) // width)) for c in self._cells)
            self._starts = list(accumulate(rows, initial=0))
            self._wrapped_at = width
        self.virtual_size = Size(width, self._starts[-1])

    def on_resize(self) -> None:
        if self.wrap and self._room() != self._wrapped_at:
            top = self.line_at(round(self.scroll_y))
            self._resize()
            self.scroll_to(y=self.row_of(top), animate=False, immediate=True)

    def line_at(self, row: int) -> int:
        """The line drawn on this row of the whole log."""
        if not self.wrap:
            return row
        return max(0, bisect_right(self._starts, row) - 1)

    def row_of(self, line: int) -> int:
        """The first row of this line."""
        if not self.wrap:
            return line
        return self._starts[min(line, len(self._starts) - 1)] if self._starts else 0

    # --- search ------------------------------------------------------------------------

    def mark(self, needle: str, current: int | None = None) -> None:
        """Mark every match of `needle` (any case; "" marks none), `current`'s the most."""
        if needle != self.needle or current != self.current:
            self.needle, self.current = needle, current
            self._pattern = re.compile(re.escape(needle), re.IGNORECASE) if needle else None
            self._drawn.clear()
            self.refresh()

    def find_lines(self, needle: str) -> list[int]:
        """The lines that hold `needle`, any case."""
        if not needle:
            return []
        pattern = re.compile(re.escape(needle), re.IGNORECASE)
        return [i for i, line in enumerate(self._texts) if pattern.search(line)]

    def show_line(self, line: int) -> None:
        """Scroll so the line is in view, two lines below the top, its first match too."""
        y = self.row_of(max(0, line - 2))
        x = 0
        if not self.wrap and self._pattern is not None:
            found = self._pattern.search(self._texts[line])
            start = cell_len(self._texts[line][: found.start()]) + self._stamp if found else 0
            if start >= self._room():  # the match is off to the right
                x = start - self._room() // 3
        self.scroll_to(x=x, y=y, animate=False, immediate=True)

    # --- drawing -----------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn.clear()

    def _strip(self, index: int) -> Strip:
        strip = self._drawn.get(index)
        if strip is None:
            line, at = self._texts[index], 0
            text = Text(line, style=self.rich_style, no_wrap=True, end="")
            if self.stamps:  # the time dim, before the line
                text = Text.assemble((f"{self._times[index]} ", "dim"), text, no_wrap=True, end="")
                at = len(self._times[index]) + 1
            if self._pattern is not None:
                style = CURRENT if index == self.current else MATCH
                for found in self._pattern.finditer(line):
                    text.stylize(style, at + found.start(), at + found.end())
            strip = Strip(text.render(self.app.console), self._cells[index] + self._stamp)
            self._drawn[index] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self._room()
        row = scroll_y + y
        style = self.rich_style
        if self.wrap:
            if row >= (self._starts[-1] if self._starts else 0):
                return Strip.blank(width, style)
            index = self.line_at(row)
            left = (row - self._starts[index]) * self._wrapped_at
            return self._strip(index).crop_extend(left, left + width, style)
        if row >= len(self._texts):
            return Strip.blank(width, style)
        return self._strip(row).crop_extend(scroll_x, scroll_x + width, style)
