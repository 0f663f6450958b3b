"""Issue 21's done-when, as a user meets it over SSH: a walk at 80x24 in tmux through
build -> submit -> queue (sort, filter, detail, cancel) -> results on the local backend,
each step's screen holding what the user needs whole: the footer's keys, the question
asked, the selected run's state, the speedup table."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from conftest import BIN, write_spec
from tui_terminal import Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),  # a wait of HANG_S beside the jobs' own 240 s
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

FOOTERS = {
    "build": ["^r Submit", "^s Save", "^o Open", "f1 Help", "f2 Build", "f3 Queue", "f4 Results"],
    "queue": ["⏎ Detail", "c Cancel", "s Resubmit", "o Sort", "/ Find", "f4 Results"],
    "results": ["⏎ Detail", "m Metric", "o Model", "b Batch", "f1 Help", "f4 Results"],
}


def _footer(screen: str) -> str:
    return screen.rstrip("\n").splitlines()[-1]


def _has_footer(screen: str, which: str) -> None:
    footer = _footer(screen)
    missing = [k for k in FOOTERS[which] if k not in footer]
    assert not missing, (which, missing, screen)


def _flat(text: str) -> str:
    """The text with no spaces and no dialog borders: what a wrapped line says whole."""
    return "".join(text.replace("│", " ").split())


def _rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if line.lstrip().startswith("local-")]


def _sorted_by_state(screen: str) -> bool:
    order = ("RUNNING", "SUBMITTING", "PENDING", "WAITING", "PLANNED", "COMPLETED")
    states = [r.split()[1] for r in _rows(screen)]
    return len(states) == 4 and states == sorted(states, key=order.index)


def test_a_walk_at_80x24_shows_whole_what_the_user_needs(home, tmp_path):
    # Four runs of 4 steps (the tmux tests' cheap study): 1x1 and 1x2, twice each; the
    # local backend runs one job at a time, so the last is still PENDING to be cancelled.
    spec = write_spec(tmp_path / "walk.toml", name="walk", scales='"1x1", "1x2"', steps=4)
    spec.write_text(spec.read_text().replace("repetitions = 1", "repetitions = 2"))
    env = {
        "DLSCALE_HOME": str(home),
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "PATH": os.environ["PATH"],
    }
    term = Terminal([str(BIN / "dlscale-tui"), str(spec)], env, size=(80, 24))
    started = time.monotonic()
    try:
        # Build: the count before submitting, every footer key.
        screen = term.wait_for("4 runs: 4 to run", also=("ctrl+r submits",))
        _has_footer(screen, "build")
        assert "ctrl+r submits" in screen
        term.keys("C-r")

        # Queue: four jobs, sorted by state (running first) from the start.
        screen = term.wait_until(lambda s: len(_rows(s)) == 4, "the four jobs")
        _has_footer(screen, "queue")
        assert " state▾ " in screen, screen
        # each capture is one frame: a job may change state between two of them
        term.wait_until(_sorted_by_state, "the jobs sorted by state")

        # Filter: / then text that is typed into the filter, never taken as commands
        # (c, s and o are all keys here).
        term.keys("/")
        term.wait_for("filter: words, -word")
        term.type("1x2")
        term.keys("Enter")
        screen = term.wait_until(
            lambda s: (
                "2 shown matching '1x2'" in s
                and [r.split()[2] for r in _rows(s)] == ["1x2", "1x2"]
                and "⏎ Detail" in _footer(s)  # the table has the keys again
            ),
            "the 1x2 runs alone",
        )
        _has_footer(screen, "queue")

        # Detail of the job the local backend has not started yet (enter, as in k9s).
        screen = term.wait_until(lambda s: "local-4" in s, "local-4")
        at = next(i for i, r in enumerate(_rows(screen)) if "local-4" in r)
        term.keys("Home", *["Down"] * at)
        term.keys("Enter")
        screen = term.wait_for("escape: close")
        term.wait_until(
            lambda s: all(
                part in _flat(s)
                for part in (
                    "pytorch-ddpresnet201x2batch8#1",
                    "statePENDING",
                    "joblocal-4(local)",
                )
            ),
            "the detail of run 1x2 #1",
        )
        term.keys("Escape")
        # closed before the next key (tmux could join a quick escape and c into alt+c)
        term.wait_until(lambda s: "escape: close" not in s, "the detail closed")

        # Cancel it: the whole question, then the run CANCELLED.
        term.keys("c")
        screen = term.wait_for("Yes (y)", also=("Cancel run", "No (n)"))
        question = "(job local-4: pytorch-ddp resnet20 1x2 batch 8 #1 (PENDING))?"
        assert _flat(question) in _flat(screen), screen
        assert "Cancel run" in screen and "No (n)" in screen
        term.keys("y")
        screen = term.wait_until(
            lambda s: any("local-4" in r and "CANCELLED" in r for r in _rows(s)),
            "local-4 CANCELLED",
        )
        _has_footer(screen, "queue")
        term.keys("Escape")  # the filter goes: every job again
        screen = term.wait_until(lambda s: "3 completed" in s, "three runs completed", 240)
        assert "1 cancelled" in screen and len(_rows(screen)) == 4, screen

        # Results: the speedup table and its chart, the footer whole.
        term.keys("F4")
        # the chart can be on screen a frame before the table: wait for both
        screen = term.wait_until(
            lambda s: "speedup (vs best 1-device run)" in s and "± CI95" in s and " 1x2 " in s,
            "the speedup table and its chart",
        )
        _has_footer(screen, "results")
        head = next(line for line in screen.splitlines() if "images/s" in line)
        for column in ("scale", "images/s", "± CI95", "speedup", "eff."):
            assert column in head, screen
        one = [line for line in screen.splitlines() if " 1x1 " in line and "2/2" in line]
        assert len(one) == 1, screen
        (one,) = one
        two = [
            line for line in screen.splitlines() if " 1x2 " in line and "1/2" in line
        ]  # one cancelled
        assert len(two) == 1, screen
        (two,) = two
        assert "1.00" in one and len(two.split()) >= 6, screen
        assert term.quit_with("q"), term.screen()
    finally:
        term.close()
    print(f"the walk took {time.monotonic() - started:.0f} s")
