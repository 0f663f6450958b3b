"""The README is the front door (issue 37, item 6): short enough to read at one sitting,
the details a link away, and every link to this repository's files leading somewhere."""

from __future__ import annotations

import re

from conftest import REPO

FRONT_DOOR = 12_000  # characters


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text) < FRONT_DOOR, f"README.md is {len(text)} characters"
    for command in ("scripts/quickstart", "scripts/test"):
        assert f"\n{command} " in text  # the two commands, shown as typed
    targets = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text)
    assert "docs/development.md" in targets
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, missing


# What each command of the first hour may answer besides 0 (check: regressed, not judged).
EXIT_ALLOWED = {"check": {0, 1, 3}}


def test_the_first_hour_works_on_the_quickstarts_own_data(tmp_path):
    """Issue 49, item 5: the README's first-hour commands, in order and as written, on the
    quickstart's own store (recorded from a real run of examples/quickstart.toml, its
    communication benchmark included): none errors, none answers nothing."""
    import os
    import shlex
    import subprocess

    from conftest import BIN, HANG_S
    from dlscale.engine.tracking.store import Store
    from tui_text import recorded_study

    text = (REPO / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"## A first hour\n.*?```sh\n(.*?)```", text, re.S)
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    assert len(commands) >= 8 and all(c[0] == "dlscale" for c in commands), commands
    home = tmp_path / "home"
    recorded_study(home, comm=True)
    run_id = Store(home).runs("quickstart")[0]["run_id"]
    work = tmp_path / "work"  # the README's relative paths: the repository's examples, and
    work.mkdir()  # what the commands write, here
    (work / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    for argv in commands:
        args = [run_id[:8] if a == "RUN" else a for a in argv[1:]]
        proc = subprocess.run(
            [str(BIN / "dlscale"), *args],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        said = f"{shlex.join(argv)}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr}"
        assert proc.returncode in EXIT_ALLOWED.get(args[0], {0}), said
        assert proc.stdout.strip() and "Traceback" not in proc.stderr, said
        if args[0] == "project":  # the quickstart's data projects: its link was measured
            assert (
                "projected (stated link)" in proc.stdout and "not projected" not in proc.stdout
            ), said
        if args[0] == "check" and proc.returncode == 3:
            assert "\nnext: dlscale check " in proc.stdout, said
