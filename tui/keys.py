"""Every key the app answers, made from the key bindings themselves: the help (F1) and the
command palette (ctrl+p) both come from here, so neither can drift from what the keys do.
Each binding carries what it does in its tooltip (the words shown here); a test fails where
one does not."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from textual.binding import Binding, BindingsMap

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen


def enter_shows(what: str) -> Binding:
    """DataTable's own enter, shown in the footer as `⏎ Detail`: a table's screen shows
    `what` on it (a run, a point), as k9s users expect."""
    return Binding("enter", "select_cursor", "Detail", key_display="⏎", tooltip=what)


def moves(what: str, first: str = "scroll_top", last: str = "scroll_bottom") -> list[Binding]:
    """k9s's (and vim's) keys to move in a table: j and k a row, g and G the first and the
    last `what`, ctrl+d and ctrl+u a page (the arrows, home, end and the page keys as well)."""
    return [
        Binding("j", "cursor_down", show=False, tooltip=f"the next {what}"),
        Binding("k", "cursor_up", show=False, tooltip=f"the {what} before"),
        Binding("g", first, show=False, tooltip=f"the first {what}"),
        Binding("G", last, show=False, tooltip=f"the last {what}"),
        Binding("ctrl+d", "page_down", show=False, tooltip="a page down"),
        Binding("ctrl+u", "page_up", show=False, tooltip="a page up"),
    ]


# The same in a log: its lines scroll.
LOG_MOVES = [
    Binding("j", "scroll_down", show=False, tooltip="a line down"),
    Binding("k", "scroll_up", show=False, tooltip="a line up"),
    Binding("g", "scroll_home", show=False, tooltip="the first line"),
    Binding("G", "scroll_end", show=False, tooltip="the last line"),
    Binding("ctrl+d", "page_down", show=False, tooltip="a page down"),
    Binding("ctrl+u", "page_up", show=False, tooltip="a page up"),
]

# e on the Queue and Results screens: one app action (tests/test_tui_conventions.py).
NEXT_EXPERIMENT = Binding(
    "e", "app.next_experiment", "Next exp.", show=False, tooltip="the next experiment in the store"
)

# How a key is written in the help, where Textual's name is not what is on the key.
_NAMES = {
    "slash": "/",
    "question_mark": "?",
}


def key_name(key: str) -> str:
    if re.fullmatch(r"f\d+", key):
        return key.upper()
    return _NAMES.get(key, key)


def bindings_of(classes: Iterable[type]) -> list[Binding]:
    """The bindings the classes declare, in order, each key of an "a,b" binding apart."""
    found: list[Binding] = []
    for cls in classes:
        for bindings in BindingsMap(cls.__dict__.get("BINDINGS", [])).key_to_bindings.values():
            found += bindings
    return found


class _Fill(dict):
    """A tooltip's {placeholders}, `...` for any not given."""

    def __missing__(self, key: str) -> str:
        return "..."


def words_of(b: Binding, fill: dict[str, str]) -> str:
    return b.tooltip.format_map(_Fill(fill))


def lines(bindings: list[Binding], fill: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(keys, what they do), the keys that do one thing joined: `F2 or 2`. A
    binding without words of its own is left out (one that only moves the footer's label,
    as `o` beside the log)."""
    keys: dict[str, list[str]] = {}  # by what they do: two actions that do the same, once
    for b in bindings:
        if b.tooltip:
            keys.setdefault(words_of(b, fill), []).append(key_name(b.key))
    for words, names in keys.items():
        *first, last = list(dict.fromkeys(names))
        yield (f"{', '.join(first)} or {last}" if first else last), words


def help_text(
    sections: list[tuple[str, list[type], list[tuple[str, str]]]], width: int = 76, **fill
) -> str:
    """The help: a section per screen, its keys as their bindings say, then any keys a
    widget answers itself (a list's space), given as (keys, words); each line wrapped to
    `width` under its own words, never back to the edge."""
    out = [
        *textwrap.wrap(
            "dlscale-tui: build a scaling study, watch its jobs, read its results. Escape "
            "closes this help, and every panel, dialog, filter and search.",
            width,
        )
    ]
    for title, classes, extra in sections:
        out += ["", *textwrap.wrap(title, width)]
        for keys, words in [*lines(bindings_of(classes), fill), *extra]:
            out += textwrap.wrap(
                f"  {keys:<15} {words}", width, subsequent_indent=" " * 18, break_on_hyphens=False
            )
    out += [
        "",
        *textwrap.wrap(
            "States and numbers come from the store (~/.dlscale or --home); the queue is "
            "refreshed by one scheduler query per tick for all live jobs. Quitting leaves "
            "submitted jobs running; reopening dlscale-tui shows the same study.",
            width,
        ),
    ]
    return "\n".join(out)


def commands(app: App, screen: Screen, **fill) -> Iterator[tuple[str, str, object]]:
    """The palette's entries for what the screen's keys do now: (title, help, callback),
    each running the action where its binding is, as the key would. The title is what it
    is called and what it does (the palette matches titles: "chart" finds Metric)."""
    seen = set()
    for key, active in screen.active_bindings.items():
        binding = active.binding
        if not binding.tooltip or (active.node, binding.action) in seen:
            continue
        seen.add((active.node, binding.action))
        title = f"{binding.description or binding.action}: {words_of(binding, fill)}"
        yield (
            title,
            key_name(key),
            lambda node=active.node, action=binding.action: app.call_later(node.run_action, action),
        )


def elsewhere(
    app: App, places: list[tuple[str, str, list[type]]], **fill
) -> Iterator[tuple[str, str, object]]:
    """The palette's entries for the other screens' keys, (mode, its name, the classes
    whose bindings are its keys) each: the entry shows that screen and runs the action
    there, on the widget whose binding it is."""
    for mode, name, classes in places:
        if mode == app.current_mode:
            continue
        seen = set()
        for cls in classes:
            for b in bindings_of([cls]):
                if not b.tooltip or b.action in seen:
                    continue
                seen.add(b.action)
                title = f"{name}: {b.description or b.action}: {words_of(b, fill)}"
                yield (
                    title,
                    f"{key_name(b.key)} on the {name} screen",
                    lambda m=mode, c=cls, a=b.action: app.call_later(_run_in, app, m, c, a),
                )


async def _run_in(app: App, mode: str, cls: type, action: str) -> None:
    await app.switch_mode(mode)
    screen = app.screen
    node = screen if isinstance(screen, cls) else screen.query_one(cls)
    await node.run_action(action)
