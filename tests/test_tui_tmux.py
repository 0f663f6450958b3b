"""End to end in a real terminal: `dlscale-tui` runs in tmux, keystrokes go in with
send-keys, the screen comes back with capture-pane, as a user over SSH would see it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import BIN, write_spec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], size=(100, 30)) -> None:
        self.name = f"dlscale-test-{uuid.uuid4().hex[:8]}"
        # tmux starts the command through a shell: pass it one quoted word per argument.
        import shlex

        command = " ".join(shlex.quote(a) for a in argv)
        env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        subprocess.run(
            [
                "tmux",
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
            ["tmux", "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys], check=True
        )
        time.sleep(0.3)

    def type(self, text: str) -> None:
        self.keys(text, literal=True)

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
        ).stdout

    def wait_for(self, text: str, timeout: float = 60) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def alive(self) -> bool:
        return (
            subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode
            == 0
        )

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def terminal_env(home):
    return {
        "DLSCALE_HOME": str(home),
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "PATH": os.environ["PATH"],
    }


def test_keystrokes_build_submit_watch_results_quit(home, tmp_path, terminal_env):
    spec = write_spec(tmp_path / "tmux.toml", name="tmux-study", scales='"1x1", "1x2"', steps=4)
    term = Terminal([str(BIN / "dlscale-tui"), str(spec)], terminal_env)
    try:
        screen = term.wait_for("2 runs (2 to run", 60)
        assert "Experiment name" in screen and "Submit" in screen
        # A bad value is refused at its field, with the reason, before anything is sent.
        term.keys("Home", "C-k")
        term.type("no spaces allowed")
        screen = term.wait_for("String should match pattern")
        assert "Cannot submit yet" in screen
        term.keys("Home", "C-k")
        term.type("tmux-study")
        term.wait_for("ctrl+r submits")
        term.keys("C-r")
        term.wait_for("local-1", 60)
        term.keys("Enter")  # the first job's log
        term.wait_for("dlscale: local job local-1", 120)
        screen = term.wait_for("2 completed", 300)
        term.keys("F4")
        screen = term.wait_for("speedup (vs best 1-device run)", 30)
        assert "pytorch-ddp" in screen and "ideal" in screen
        term.keys("m")
        term.wait_for("scaling efficiency")
        term.keys("F1")
        term.wait_for("this help")
        term.keys("Escape")
        term.keys("q")
        end = time.monotonic() + 15
        while term.alive() and time.monotonic() < end:
            time.sleep(0.2)
        assert not term.alive(), term.screen()
    finally:
        term.close()
    left = subprocess.run(["pgrep", "-f", "dlscale-tui"], capture_output=True, text=True)
    assert (
        str(spec)
        not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    ), left.stdout
