"""Widgets every screen shares: the banner that says the controller is not answering, the
text field that applies keys in the order they were typed, and literal text."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingsMap
from textual.content import Content
from textual.strip import Strip
from textual.visual import VisualType
from textual.widgets import Input, SelectionList, Static
from textual.widgets.option_list import OptionDoesNotExist

from ..engine.io.text import signs


def literal(text: object) -> Content:
    """Text from a user, a file or the engine, for a place Textual reads as markup (border
    titles, selection prompts): shown as written, `[/]` and `[b]` included, control
    characters as visible signs."""
    return Content(signs(str(text), newlines=True))


def shown_path(path: str | Path | None) -> str:
    """A path as a user types it: ~ for their home folder."""
    if not path:
        return ""
    try:
        return "~/" + str(Path(path).relative_to(Path.home()))
    except ValueError:
        return str(path)


def literal_cell(text: object, style: str = "") -> Text:
    """The same for a DataTable cell, which reads a str as markup."""
    return Text(signs(str(text)), style=style)


class Plain(Static):
    """A Static for text from users, files and the engine: never read as markup, control
    characters shown as signs."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(literal(text), **kwargs)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        super().update(literal(content) if isinstance(content, str) else content, layout=layout)


class Banner(Plain):
    """Hidden while the scheduler answers; a line saying what the app waits on and for how
    long (`sacct: no answer for 23 s`), and in red what is wrong when it does not answer."""

    def on_mount(self) -> None:
        self.watch(self.app, "warning", self._show, init=True)
        self.watch(self.app, "waiting", self._show, init=False)

    def _show(self, _: str | None = None) -> None:
        warning, waiting = self.app.warning, self.app.waiting  # type: ignore[attr-defined]
        self.set_class(bool(warning or waiting), "shown")
        self.set_class(bool(warning), "failed")
        self.update("; ".join(t for t in (waiting, warning) if t))


class StatusLine(Plain):
    """The app's last message (what was done, what went wrong), one line, cut at the
    screen's edge; hidden until something is said."""

    def on_mount(self) -> None:
        self.watch(self.app, "messages", self._show, init=True)

    def _show(self, messages: list[tuple[str, str]]) -> None:
        self.display = bool(messages)
        if messages:
            severity, text = messages[-1]
            self.set_class(severity == "error", "error")
            self.set_class(severity == "warning", "warning")
            self.update(" ".join(text.split()))


@cache
def _editing_keys(cls: type[Input]) -> dict[str, str]:
    """key -> action of the field's own (non-priority) bindings, Input's included."""
    bindings: list[Binding | tuple[str, str] | tuple[str, str, str]] = []
    for klass in reversed(cls.__mro__):
        bindings += klass.__dict__.get("BINDINGS", [])
    keys: dict[str, str] = {}
    for key, found in BindingsMap(bindings).key_to_bindings.items():
        for binding in found:
            if not binding.priority:
                keys[key] = binding.action
    return keys


class TextField(Input):
    """An Input whose editing keys (backspace, arrows, ctrl+k...) act where they arrive.

    Textual 8 inserts a typed character in the field at once but sends a bound key up
    through the screen and the app before its action runs, so on a busy machine the
    characters typed after a backspace could land before it (`2x2` + 3 backspaces + `1x4`
    read `21x`; Textual issue 6605). Here the field runs its own bindings itself, in order
    with the characters; keys bound with priority (F-keys, ctrl+r) still go first to the
    app, as before."""

    async def on_key(self, event: events.Key) -> None:
        action = _editing_keys(type(self)).get(event.key)
        if action is None:
            return
        event.stop()
        event.prevent_default()
        await self.run_action(action)


class Choices(SelectionList[str]):
    """A SelectionList whose ticks read without colour: `[x]` chosen, `[ ]` not. Textual
    draws both as an `X` whose colour alone tells them apart, lost on a monochrome
    terminal or to a colour-blind user."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        segments = list(line)
        try:
            option = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return line
        if len(segments) < 3:
            return line
        tick = "[x]" if option.value in self.selected else "[ ]"
        return Strip([Segment(tick, segments[1].style), *segments[3:]], line.cell_length)
