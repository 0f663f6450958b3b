"""End to end in a real terminal: `dlscale-tui` runs in tmux, keystrokes go in with
send-keys, the screen comes back with capture-pane, as a user over SSH would see it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import fake_slurm
import pytest
from test_slurm_calls import slurm_runs

from conftest import BIN, write_spec
from tui_terminal import Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


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
        screen = term.wait_for("2 runs: 2 to run", also=("Experiment name", "Submit"))
        assert "Experiment name" in screen and "Submit" in screen
        # A bad value is refused at its field, with the reason, before anything is sent.
        term.keys("BTab")  # the app opens on the frameworks list: the name is before it
        term.keys("Home", "C-k")
        term.type("no spaces allowed")
        # in words, not a pattern
        screen = term.wait_for("should be 1 to 64 letters", also=("Cannot submit yet",))
        assert "Cannot submit yet" in screen
        term.keys("Home", "C-k")
        term.type("tmux-study")
        term.wait_for("ctrl+r submits")
        term.keys("C-r")
        term.wait_for("local-1")
        term.keys("l")  # the first job's log
        term.wait_for("dlscale: local job local-1")
        screen = term.wait_for("2 completed", 300)
        term.keys("F4")
        screen = term.wait_for("speedup (vs best 1-device run)", also=("pytorch-ddp", "ideal"))
        term.keys("m")
        term.wait_for("scaling efficiency")
        term.keys("F1")
        term.wait_for("this help")
        term.keys("Escape")
        assert term.quit_with("q"), term.screen()
    finally:
        term.close()
    left = subprocess.run(["pgrep", "-f", "dlscale-tui"], capture_output=True, text=True)
    assert (
        str(spec)
        not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    ), left.stdout


def _spin(stop) -> None:
    while not stop.is_set():
        pass


FIELDS = ("name", "scales", "batch", "repetitions", "steps", "path")
TAB_ORDER = (
    "name",
    "frameworks",
    "models",
    "datasets",
    "scales",
    "batch",
    "precisions",
    "loaders",
    "repetitions",
    "steps",
    "path",
    "profile",
    "preview-scroll",  # the panel on the right: its list of errors scrolls
)  # (Submit is not among them: the first round's text makes the form invalid)


def _burst_with_edits(rng, marker: str) -> tuple[list[str], str]:
    """Segments to send and the text they leave: words typed, some backspaced, a word
    put in front with Home and the marker at the end."""
    segments, want = [], ""
    while len(want) < 14:
        # No letter the app binds (q quits where no field has the focus).
        word = rng.choice(["4x4", "16x8", "x", "56", ", ", "0"])
        segments.append(word)
        want += word
        cut = rng.randint(0, min(3, len(want)))
        segments += ["BSpace"] * cut
        want = want[: len(want) - cut]
    segments += ["Home", "0", "End", marker]
    return segments, "0" + want + marker


def test_keys_typed_under_cpu_load_land_in_order(home, terminal_env):
    """Issue 21, item 2: with both cores busy (two spinning processes, as on a login node),
    20 bursts of typing with backspaces and cursor moves, into each text field of the
    Build screen in turn, each leave exactly the text typed. Before the fix (Textual's
    Input, and the form checked on every key) bursts like these came out wrong 3 times
    in 4."""
    import multiprocessing
    import random

    rng = random.Random(21)
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    # Tall enough that every field is on screen at once: each round reads its field back.
    term = Terminal([str(BIN / "dlscale-tui")], terminal_env, size=(100, 50))
    try:
        term.wait_for("ctrl+r submits")
        for p in load:
            p.start()
        term.keys("BTab")  # from the frameworks list, where the app opens, to the name
        at = 0
        wrong = []
        for round_ in range(20):
            target = TAB_ORDER.index(FIELDS[round_ % len(FIELDS)])
            term.burst(*["Tab"] * ((target - at) % len(TAB_ORDER)))
            at = target
            time.sleep(0.5)
            term.burst("End", "C-u")
            segments, want = _burst_with_edits(rng, f"{round_:02d}")
            term.burst(*segments)
            end = time.monotonic() + 10
            while want not in (screen := term.screen()) and time.monotonic() < end:
                time.sleep(0.3)
            if want not in screen:
                wrong.append((FIELDS[round_ % len(FIELDS)], want, screen))
        assert not wrong, f"{len(wrong)} of 20 wrong; the first: {wrong[0]}"
    finally:
        stop.set()
        for p in load:
            p.join(timeout=5)
        term.close()


def test_text_that_looks_like_markup_typed_in_a_real_terminal_is_shown_as_typed(home, terminal_env):
    """Issue 21, item 1, as a user meets it: typing `1x1 [/]` into Scales, or opening
    `nope[/]x.toml` with ctrl+o, ended the app with MarkupError (and exit 0). Now each is
    shown as typed and the app goes on."""
    term = Terminal([str(BIN / "dlscale-tui")], terminal_env, size=(80, 24))
    try:
        term.wait_for("ctrl+r submits")
        term.burst(*["Tab"] * 3)  # from the frameworks list to Scales
        time.sleep(0.5)
        term.burst("End", "C-u", "1x1 [/] [b]")
        term.wait_for("'[/]' is not NODESxRANKS", also=("1x1 [/] [b]",))
        term.keys("C-o")
        term.type("nope[/]x.toml")
        term.keys("Enter")
        term.wait_for("nope[/]x.toml: no such file")
        assert term.alive()
        assert term.quit_with("C-q")
    finally:
        term.close()


def _ended(pid: int) -> bool:
    """Gone, or a zombie its parent (tmux) has not collected yet: it runs no more."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def _with_env(name: str, value: str) -> list[int]:
    """The processes whose environment holds name=value (this test's fake Slurm's)."""
    found = []
    for proc in os.listdir("/proc"):
        if not proc.isdigit():
            continue
        try:
            with open(f"/proc/{proc}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if f"{name}={value}".encode() in env and not _ended(int(proc)):
            found.append(int(proc))
    return found


def test_quit_within_a_second_while_slurm_hangs(home, tmp_path, terminal_env):
    """Issue 36, item 1: on a cluster whose sacct, squeue, sacctmgr, scontrol and sinfo
    never answer, the app says what it waits on and for how long, its header names the
    backend it polls (a store of Slurm runs opened without a profile), and q gives the
    shell back within a second, with no Slurm command of its left running. Before, the
    process went on for 113 s after the screen closed, and started a new squeue."""
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    slurm_runs(home)
    argv = [
        "env",
        f"PATH={bin_dir}{os.pathsep}{os.environ['PATH']}",
        f"FAKE_SLURM_DIR={state}",
        "FAKE_SLURM_HANG=sacct,squeue,sacctmgr,sinfo,scontrol",
        str(BIN / "dlscale-tui"),
    ]
    term = Terminal(argv, terminal_env, size=(80, 24))
    try:
        screen = term.wait_for("no answer for", also=("following slurm jobs",))
        assert re.search(r"sacct: no answer for \d+ s", screen), screen
        assert "following slurm jobs" in screen.splitlines()[0], screen
        assert _with_env("FAKE_SLURM_DIR", str(state)), "no Slurm command in flight"
        pid = term.pid()
        t = time.monotonic()
        term.press("q")
        while not _ended(pid) and time.monotonic() - t < 30:
            time.sleep(0.01)
        took = time.monotonic() - t
    finally:
        term.close()
    assert took < 1.0, f"the shell came back after {took:.2f} s"
    assert _with_env("FAKE_SLURM_DIR", str(state)) == []
