"""The one printer, as a class (engine/cli/console.py over engine/text.py): every text that
reaches the terminal from outside dlscale's own code (file names, paths, keys, values,
records, logs, click's own words about a value given) has its control characters shown as
visible escapes. Every command of the CLI (walked from its click tree, so a new one is
covered) runs with hostile arguments, and the ones that read stored data run over a store
whose records, logs and names are hostile, with NO_COLOR and output to a file: no ESC and
no C1 character reaches stdout or stderr. The source is checked too: no module of the
command line writes to the terminal but the printer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import click
import pytest
from test_bad_input import COMMANDS, invoke

from conftest import BIN, HANG_S, REPO
from dlscale.engine.cli.options import InputPath, OutputPath
from dlscale.engine.io.text import printable
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(600)

# A window title (OSC 0), the clipboard (OSC 52), a cleared screen (CSI 2J), C1's CSI and
# NEL, a bell, a carriage return and a bidi override.
HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;aGk=\x07\x1b[2J\x9b31m\x85\r\u202e"


def leaks(text: str) -> list[str]:
    """What in `text` could act on a terminal: ESC and the C1 controls."""
    return sorted({c for c in text if c == "\x1b" or 0x80 <= ord(c) <= 0x9F})


def test_printable_shows_every_control_and_a_name_that_is_not_utf8():
    assert leaks(printable(HOSTILE)) == []
    assert printable(os.fsdecode(b"a\xffb")) == "a\\xffb"
    assert printable("tab\tand\nline", newlines=True) == "tab\tand\nline"


def test_no_module_of_the_command_line_writes_but_the_printer():
    """stdout and stderr are the printer's (console.py) alone: a new print is refused here."""
    writes = re.compile(
        r"\bclick\.(echo|secho)\(|(?<![.\w])print\(|\bsys\.(stdout|stderr)\.write|\bConsole\("
    )
    found = [
        f"{p.name}:{n}: {line.strip()}"
        for p in sorted((REPO / "engine" / "cli").glob("*.py"))
        if p.name != "console.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if writes.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A store whose records, log lines and spec file name hold escape sequences, and
    files and folders named with them."""
    base = tmp_path_factory.mktemp("printer")
    home = base / "home"

    def edit(run_id: str, lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            rec = json.loads(line)
            if rec["kind"] in ("env", "summary"):
                rec["energy_unavailable"] = f"no meter {HOSTILE}"
            out.append(json.dumps(rec) + "\n")
        return out

    name = recorded_study(home, edit)
    run_dir = next((home / "runs").iterdir())
    with open(run_dir / "run.log", "a") as fh:
        fh.write(f"a trainer says {HOSTILE}\n")
    spec = base / f"spec{HOSTILE}.toml"
    spec.write_text(
        (REPO / "tests" / "fixtures" / "tui-quickstart" / "spec.toml").read_text()
        + f'\n[options]\n"key{HOSTILE}" = 1\n'
    )
    named = base / f"named{HOSTILE}.toml"
    named.write_text((REPO / "tests" / "fixtures" / "tui-quickstart" / "spec.toml").read_text())
    afile = base / f"file{HOSTILE}"
    afile.write_text("the user's\n")
    folder = base / f"folder{HOSTILE}"
    folder.mkdir()
    return {
        "home": home,
        "experiment": name,
        "run": run_dir.name,
        "spec": spec,
        "named": named,
        "file": afile,
        "folder": folder,
        "missing": base / f"missing{HOSTILE}",
    }


def hostile_arguments(cmd: click.Command, h: dict) -> list[str]:
    """Hostile values for a command's arguments: paths named with escapes (a file that is
    there where one is read, one in the way where one is written), words with them."""
    args = []
    for p in cmd.params:
        if not isinstance(p, click.Argument):
            continue
        if isinstance(p.type, InputPath):
            args.append(str(h["missing"]))
        elif isinstance(p.type, OutputPath):
            args.append(str(h["file"]))  # a file where a folder goes: refused, named
        else:
            args.append(f"word{HOSTILE}")
    return args


def stored(h: dict) -> list[list[str]]:
    """Commands over the hostile store and files, each as a user would type it."""
    e, run = h["experiment"], h["run"]
    return [
        ["plan", str(h["spec"])],
        ["plan", str(h["named"])],
        ["plan", str(h["missing"])],
        ["status", "--all"],
        ["results"],
        ["results", "--format", "csv"],
        ["results", "--format", "json"],
        ["chart"],
        ["logs", run],
        ["report", "-e", e, "--out", str(h["folder"] / "report")],
        ["report", "-e", e, "--out", str(h["file"])],
        ["export", "mllog", run, "--out", str(h["folder"] / "mllog")],
        ["export", "mllog", run, "--out", str(h["file"])],
        ["export", "bundle", "-e", e, "--out", str(h["file"])],
        ["check", str(h["spec"]), "--baseline", e],
        ["check", str(h["named"]), "--baseline", str(h["missing"])],
        ["check", str(h["named"]), "--baseline", str(h["file"])],
        ["import", str(h["file"])],
        ["import", str(h["missing"])],
        ["data", "check", "imagenet", str(h["folder"])],
        ["data", "sample", "imagenet", str(h["file"])],
        ["doctor", "--profile", str(h["missing"])],
        ["--home", str(h["file"]), "status"],
        ["store", "rebuild"],
        [f"command{HOSTILE}"],
        ["compare", e, f"other{HOSTILE}"],
    ]


@pytest.mark.torch  # plans the quickstart's pytorch-ddp
def test_nothing_printed_holds_an_escape(hostile, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # what a command writes by default (report-NAME) goes here
    monkeypatch.setenv("DLSCALE_HOME", str(hostile["home"]))
    monkeypatch.setenv("NO_COLOR", "1")
    walked = [[*path, *hostile_arguments(cmd, hostile)] for path, cmd in COMMANDS]
    for argv in walked + stored(hostile):
        code, out, err = invoke(capsys, *argv)
        assert leaks(out + err) == [], (argv, out[-2000:], err[-2000:])
        assert "internal error" not in err and "Traceback" not in err, (argv, err)
    # the escapes were there to be shown, and are, made visible: a file name, a record
    code, out, err = invoke(capsys, "plan", str(hostile["named"]))
    assert code == 0 and "\\x1b]0;pwned\\x07" in out, out
    code, out, err = invoke(capsys, "results")
    assert "no meter \\x1b]0;pwned\\x07" in out + err, out


@pytest.mark.torch
def test_real_commands_into_a_file_hold_no_escape(hostile, tmp_path):
    """The binary itself, its output going to a file: what a CI log or `> out.txt` gets."""
    env = {**os.environ, "DLSCALE_HOME": str(hostile["home"]), "NO_COLOR": "1"}
    for argv in (["plan", str(hostile["named"])], ["results"], ["logs", hostile["run"]]):
        with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
            proc = subprocess.run(
                [str(BIN / "dlscale"), *argv], stdout=out, stderr=err, env=env, timeout=HANG_S
            )
        text = Path(tmp_path / "out").read_text() + Path(tmp_path / "err").read_text()
        assert proc.returncode == 0 and leaks(text) == [], (argv, text[-2000:])


def _on_a_terminal(home: Path, env: dict, *args: str) -> bytes:
    """What `dlscale ARGS` writes to a terminal (a pseudo-terminal of 40 x 120)."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "DLSCALE_HOME": str(home), "COLUMNS": "120", "TERM": "xterm", **env}
    proc = subprocess.Popen(
        [str(BIN / "dlscale"), *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    # The follower stays open here until the command has ended and its output is read:
    # closed early, Linux may answer EIO to the leader before the last output is read.
    chunks = []
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if select.select([leader], [], [], 0.2)[0]:
            chunks.append(os.read(leader, 65536))
        elif proc.poll() is not None:
            break
    proc.wait(timeout=5)
    os.close(follower)
    os.close(leader)
    return b"".join(chunks)


def test_no_color_writes_no_escape_at_all_on_a_terminal(tmp_path):
    """NO_COLOR (no-color.org) means plain text: not only no colour, no bold nor italic
    either, as docs/running.md says; without it the terminal gets its styles (the test can
    fail)."""
    recorded_study(tmp_path)
    for args in (("results",), ("status", "--all"), ("chart",)):
        styled = _on_a_terminal(tmp_path, {"NO_COLOR": ""}, *args)
        plain = _on_a_terminal(tmp_path, {"NO_COLOR": "1"}, *args)
        assert b"resnet20" in plain or b"speedup" in plain, (args, plain[-500:])
        assert b"\x1b[" not in plain, (args, plain[:500])
        if args == ("results",):
            assert b"\x1b[" in styled  # the header's bold: what NO_COLOR takes away
