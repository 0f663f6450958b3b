"""A real terminal for the TUI's end-to-end tests: `dlscale-tui` in tmux, keys in with
send-keys, the screen back with capture-pane, as a user over SSH would see it."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
import uuid

from conftest import HANG_S

# tmux's names of keys (send-keys without -l): anything else in a burst is literal text.
KEY_NAME = re.compile(
    r"F\d{1,2}|[CM]-.|BSpace|BTab|Tab|Home|End|Left|Right|Up|Down|PPage|NPage|Enter|Escape|Space"
)


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], size=(100, 30)) -> None:
        self.name = f"dlscale-test-{uuid.uuid4().hex[:8]}"
        # A tmux server of its own (-L): on the shared default server, a session started
        # while another test's last session ends meets the server on its way out ("server
        # exited unexpectedly"), as CI saw with tests side by side.
        self.tmux = ["tmux", "-L", self.name]
        # tmux starts the command through a shell: pass it one quoted word per argument.
        command = " ".join(shlex.quote(a) for a in argv)
        env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        subprocess.run(
            [
                *self.tmux,
                "new-session",
                "-d",
                "-s",
                self.name,
                "-x",
                str(size[0]),
                "-y",
                str(size[1]),
                *env_args,
                command,
            ],
            check=True,
        )

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(
            [*self.tmux, "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys],
            check=True,
        )
        time.sleep(0.3)

    def burst(self, *segments: str) -> None:
        """Keys with no pause between them, as a fast typist's: a segment is a key name
        (BSpace, Home) or, when it is not one, literal text."""
        for seg in segments:
            key = KEY_NAME.fullmatch(seg) is not None
            subprocess.run(
                [*self.tmux, "send-keys", "-t", self.name, *([] if key else ["-l"]), seg],
                check=True,
            )

    def press(self, key: str) -> None:
        """One key, at once (keys() waits a little after sending)."""
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, key], check=True)

    def pid(self) -> int:
        """The process the terminal runs (its pane's)."""
        return int(
            subprocess.run(
                [*self.tmux, "list-panes", "-t", self.name, "-F", "#{pane_pid}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()[0]
        )

    def type(self, text: str) -> None:
        self.keys(text, literal=True)

    def screen(self) -> str:
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
        ).stdout

    def wait_for(self, text: str, timeout: float = HANG_S, *, also: tuple[str, ...] = ()) -> str:
        """The first screen that shows `text` and every one of `also`: a screen is drawn a
        part at a time, so what a test reads next is waited for with what it waited for."""
        return self.wait_until(
            lambda screen: all(t in screen for t in (text, *also)), repr([text, *also]), timeout
        )

    def wait_until(self, check, what: str, timeout: float = HANG_S) -> str:
        """The first screen for which `check(screen)` holds. A screen that holds returns at
        once; the timeout only calls a wait hung."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{what} never shown; the screen:\n{self.screen()}")

    def alive(self) -> bool:
        return (
            subprocess.run(
                [*self.tmux, "has-session", "-t", self.name], capture_output=True
            ).returncode
            == 0
        )

    def quit_with(self, key: str, timeout: float = HANG_S) -> bool:
        """Press `key`; whether the app has ended within `timeout` seconds."""
        self.keys(key)
        end = time.monotonic() + timeout
        while self.alive() and time.monotonic() < end:
            time.sleep(0.2)
        return not self.alive()

    def close(self) -> None:
        # The server is this terminal's alone: ending it ends the session and its socket.
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
