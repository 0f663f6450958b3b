"""Job output reaches neither the store nor the terminal unfiltered (issue 22, item 4): a
log that is a link out of its run folder is not read; every control character a job wrote
(OSC window titles and clipboard writes, bidi overrides, a bare \\r) is shown as its escape
by `status` and `logs`; a dangling dlscale.db link is refused, its target never made."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hostile_records import finished_run

from conftest import HANG_S, dlscale
from dlscale.engine.io.text import printable
from dlscale.engine.tracking.store import Store

HOSTILE_LINES = [
    "\x1b]0;owned\x07",  # window title
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # clipboard
    "\x1b[2J\x1b[H",  # clear screen
    "evil\u202etxt.exe",  # bidi override
    "progress\rdlscale-torch: error: \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
    "c1 \x9b31m csi",
]


def _failed_run(home: Path, log: bytes) -> str:
    store, run_id = finished_run(
        home, state="FAILED", place=lambda d: (d / "run.log").write_bytes(log)
    )
    store.close()
    return run_id


@pytest.mark.parametrize("text", HOSTILE_LINES)
def test_printable_leaves_no_control_character(text):
    shown = printable(text)
    assert shown.isprintable(), repr(shown)
    assert printable("tab\tstays") == "tab\tstays"
    assert printable("two\nlines", newlines=True) == "two\nlines"


def test_status_and_logs_show_escape_sequences_as_text(tmp_path):
    home = tmp_path / "home"
    run_id = _failed_run(home, ("\n".join(HOSTILE_LINES) + "\n").encode())
    for argv in (["status", "--all"], ["logs", run_id]):
        proc = dlscale(*argv, home=home, check=0, timeout=HANG_S)
        shown = proc.stdout + proc.stderr
        assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown, shown
        assert "\u202e" not in shown and "\r" not in shown, shown
    assert "\\x1b]0;owned\\x07" in dlscale("logs", run_id, home=home).stdout
    stored = Store(home).run(run_id)["reason"]
    assert "\x1b" not in stored, stored


def test_a_log_linked_out_of_its_run_folder_is_never_read(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    home = tmp_path / "home"
    store, run_id = finished_run(
        home, state="FAILED", place=lambda d: (d / "run.log").symlink_to(secret)
    )
    assert "secret-hash" not in store.run(run_id)["reason"]
    proc = dlscale("logs", run_id, home=home, timeout=HANG_S)
    assert proc.returncode == 1 and "secret-hash" not in proc.stdout + proc.stderr
    assert "is a link, not a regular file" in proc.stderr, proc.stderr
    status = dlscale("status", "--all", home=home, check=0, timeout=HANG_S)
    assert "secret-hash" not in status.stdout


def test_a_dangling_store_link_is_refused_and_its_target_never_made(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    target = tmp_path / "elsewhere" / "x.db"
    target.parent.mkdir()
    (home / "dlscale.db").symlink_to(target)
    proc = dlscale("status", home=home, timeout=HANG_S)
    assert proc.returncode == 1 and "does not exist" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr
    assert not target.exists() and list(target.parent.iterdir()) == []
