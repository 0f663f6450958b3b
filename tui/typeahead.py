"""Keys typed ahead of a change of mode: each key is handled to its end before the next one
is given to anything, so a key that changes the mode (`/` opens the filter, `c` a question,
F3 another screen, ctrl+p the palette) has moved the focus before the keys typed after it
are handed to whatever has it then.

Textual gives a key to the focused widget and goes straight on to the next one; a binding
runs only once the key has come back up to the app, and the focus it moves moves later
still. On a busy machine `/cy` gave all three keys to the table before `/` opened the
filter: `c` asked to cancel the selected run and `y` said yes. Here the app holds every key
(and paste) that arrives while one is under way, and gives them on, in order, once that one
is done: its widget's handlers and any binding it set off have run, and what it opened is
mounted and has the focus. One place, for every key and every mode change; an action that
changes the mode does so before it returns (its content may come later).

A question whose answer does harm (cancel, resubmit) takes only keys typed once it is on
screen (`Question`): a key typed before it was drawn was meant for something else. What the
terminal gives is when a key was read, not when it was typed, and on a loaded machine the
app may draw the question before it reads the rest of a burst; so an answer must also come
after a pause (READ_S, the shortest time in which a question can be read) since the key
before it: typed in one go, `cy` never says yes. Under heavy load the app's reader may not
run for longer than that pause: what the terminal still holds unread when the question is
drawn was typed before it, and the keys that bring those bytes are dropped too (found by
scripts/rounds: a burst `cyse` cancelled a job, 1 round in 2)."""

from __future__ import annotations

import os
import struct
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable

from textual import events
from textual.app import App
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widget import Widget

# An answer to a Question comes at least this long after the key before it (people take a
# quarter of a second to react to what they see; a burst's keys come milliseconds apart).
READ_S = 0.25
# A key whose handling has not ended after this long is taken as done (a handler stuck on
# something): the keys after it are not held for ever (ctrl+q must still quit).
GIVE_UP_S = 5.0
# Focus moves and mounts that a key sets off take a few passes of the app's queue; a key
# that keeps changing the screen or the focus longer than this many passes is done.
MAX_PASSES = 8

Event = events.Key | events.Paste


class KeyHandled(Message, namespace="typeahead"):
    """Sent after a key to the widget the key was given to, it follows the key up to the
    app: when it arrives, every handler the key met on its way has run."""

    def __init__(self, serial: int) -> None:
        super().__init__()
        self.serial = serial


def unread_bytes(fd: int | None = None) -> int:
    """How many bytes the terminal holds that the app has not read yet (stdin's, where it is
    a terminal; 0 where there is none or the system cannot say)."""
    try:
        import fcntl
        import termios

        fd = sys.__stdin__.fileno() if fd is None and sys.__stdin__ is not None else fd
        if fd is None or not os.isatty(fd):
            return 0
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except (OSError, ValueError, ImportError):
        return 0


def _bytes_of(event: Event) -> int:
    """The bytes a key or paste came in, never more (an escape sequence counts as 1: a
    count too low drops more keys, never fewer)."""
    text = event.text if isinstance(event, events.Paste) else event.character
    return max(1, len((text or "").encode()))


class Question(ModalScreen[bool]):
    """A screen that takes only keys typed once it is on screen: the app drops the others
    (and calls `early_key`), as they were typed before the question could be read."""

    shown_at: float | None = None  # when it was first drawn
    unread = 0  # the bytes the terminal held unread then: typed before, dropped as they come

    def on_mount(self) -> None:
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        # The count first: a byte read in between is both counted and stamped before
        # shown_at, which drops one key too many, never one too few.
        self.unread = 0 if self.app.is_headless else unread_bytes()
        # Textual stamps each key with time.monotonic() when it is read from the terminal.
        self.shown_at = time.monotonic()

    def typed_before_shown(self, event: Event, previous: float) -> bool:
        """Whether `event` was typed before the question could be read: before it was
        drawn, held unread by the terminal when it was drawn, or in one go with the key
        before it (read at `previous`)."""
        if self.shown_at is None or event.time < self.shown_at:
            return True
        if self.unread > 0:
            self.unread -= _bytes_of(event)
            return True
        return event.time - previous < READ_S

    def early_key(self, event: Event) -> None:
        """A key typed before the question was on screen was dropped."""


class TypeAhead:
    """The app's keys, one at a time: `take` each key and paste as it arrives; the app
    sends every KeyHandled it gets to `handled`. `deliver` is Textual's own handling of an
    input event (priority bindings, then the focused widget)."""

    def __init__(self, app: App, deliver: Callable[[Event], Awaitable[None]]) -> None:
        self.app = app
        self.deliver = deliver
        self.held: deque[Event] = deque()
        self.under_way: int | None = None  # the serial of the key being handled
        self.serial = 0
        self.last_read = 0.0  # when the key before was read
        self.started = 0.0
        self.target: Widget | None = None  # where KeyHandled was sent, while it climbs
        self.watchdog: Timer | None = None

    def start(self) -> None:
        """Once the app runs: the watchdog for a key whose handling never ends."""
        self.watchdog = self.app.set_interval(0.1, self._watch, pause=True)

    @property
    def idle(self) -> bool:
        return self.under_way is None and not self.held

    async def take(self, event: Event) -> None:
        self.held.append(event)
        if self.under_way is None:
            await self._next()

    def handled(self, message: KeyHandled) -> None:
        if message.serial == self.under_way and self.target is not None:
            self.target = None
            self._climbed(message.serial)

    async def _next(self) -> None:
        while self.held and self.under_way is None:
            event = self.held.popleft()
            previous, self.last_read = self.last_read, event.time
            screen = self._screen()
            if isinstance(screen, Question) and screen.typed_before_shown(event, previous):
                screen.early_key(event)
                continue
            self.serial += 1
            serial = self.under_way = self.serial
            self.started = time.monotonic()
            if self.watchdog is not None:
                self.watchdog.resume()
            target = self.app.focused or screen
            await self.deliver(event)
            if serial == self.under_way:  # else given up on by the watchdog meanwhile
                self._pass(serial, target if event.is_forwarded else None, 0)

    def _screen(self) -> Screen | None:
        try:
            return self.app.screen
        except Exception:  # no screen yet, or the app is closing
            return None

    def _where_keys_go(self) -> tuple[object, object]:
        screen = self._screen()
        return screen, screen and self.app.focused

    # The key is done once a whole pass leaves the screen and the focus as they were. A
    # pass: KeyHandled climbs from the focused widget to the app (behind whatever the
    # key's binding posted on that way: Input.Submitted, Button.Pressed), then the app's
    # queue (focus moves are its callbacks), the screen's (a screen opened is mounted
    # before) and the app's again. The first pass follows the key itself; there are two
    # at least, as the key's binding runs when the key reaches the app, after the first
    # KeyHandled was sent.

    def _pass(self, serial: int, target: Widget | Screen | None, passes: int) -> None:
        self.passes, self.before = passes, self._where_keys_go()
        if target is not None and target.post_message(KeyHandled(serial)):
            self.target = target
        else:
            self._climbed(serial)

    def _climbed(self, serial: int) -> None:
        passes, before = self.passes, self.before

        def at_app() -> None:
            screen = self._screen()
            if screen is None or not screen.call_later(at_screen):
                at_screen()

        def at_screen() -> None:
            if not self.app.call_later(at_end):
                self._done(serial)

        async def at_end() -> None:
            if serial != self.under_way:
                return
            if passes == 0 or (self._where_keys_go() != before and passes < MAX_PASSES):
                self._pass(serial, self.app.focused or self._screen(), passes + 1)
                return
            self._done(serial)
            await self._next()

        if not self.app.call_later(at_app):
            self._done(serial)

    def _done(self, serial: int) -> None:
        if serial == self.under_way:
            self.under_way = None
            self.target = None
            if self.watchdog is not None:
                self.watchdog.pause()

    async def _watch(self) -> None:
        serial, target = self.under_way, self.target
        if serial is None:
            return
        if target is not None and _gone(target):
            self.target = None  # KeyHandled went with it (a dialog the key closed)
            self._climbed(serial)
        elif time.monotonic() - self.started > GIVE_UP_S:
            self._done(serial)
            await self._next()


def _gone(node: Widget | Screen) -> bool:
    """A widget that can pass nothing up to the app any more: removed, or in removal."""
    chain = node.ancestors_with_self  # up to the app, which has no parent
    return not node.is_attached or not all(n.is_parent_active for n in chain[:-1])
